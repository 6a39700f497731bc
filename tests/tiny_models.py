"""Tiny randomly initialised Hugging Face causal LMs for the tests, built from a config (no download).

One builder for every test file (study, decode, scale-out, fault injection), the library's own
(:mod:`mdsd_ot.tiny`, also behind ``mdsd-ot tiny-models``); each caller keeps the sizes and seeds its
expected values were written for. torch and transformers are imported on first use.
"""

from __future__ import annotations

from mdsd_ot.tiny import save_tiny_lm, tiny_lm

__all__ = ["tiny_lm", "save_tiny_lm"]

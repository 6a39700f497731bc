"""Tiny randomly initialised Hugging Face causal LMs for the tests, built from a config (no download).

One builder for every test file (study, decode, scale-out, fault injection); each caller keeps the sizes
and seeds its expected values were written for. torch and transformers are imported on first use.
"""

from __future__ import annotations

import contextlib
import os


def tiny_lm(
    vocab: int,
    *,
    seed: int | None = 0,
    kind: str = "qwen2",
    hidden: int = 16,
    intermediate: int = 32,
    layers: int = 1,
    heads: int = 2,
    kv_heads: int = 1,
    max_positions: int = 64,
    spread: float | None = None,
):
    """A tiny causal LM in eval mode.

    ``seed``: ``torch.manual_seed(seed)`` first (None: continue torch's current random state).
    ``kind``: ``"qwen2"`` or ``"llama"``. ``spread``: multiply the output layer's weights by it, so that
    the next-token distributions are far from uniform (None: the initialisation as drawn).
    """
    import torch
    import transformers

    if seed is not None:
        torch.manual_seed(seed)
    Config = {"qwen2": transformers.Qwen2Config, "llama": transformers.LlamaConfig}[kind]
    cfg = Config(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=intermediate,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        max_position_embeddings=max_positions,
    )
    model = transformers.AutoModelForCausalLM.from_config(cfg)
    if spread is not None:
        with torch.no_grad():
            model.lm_head.weight.mul_(spread)
    return model.eval()


def save_tiny_lm(model, folder) -> None:
    """``model.save_pretrained(folder)`` without transformers' messages on stderr."""
    with open(os.devnull, "w") as devnull, contextlib.redirect_stderr(devnull):
        model.save_pretrained(folder)

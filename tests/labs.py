"""One tiny-model lab for the run scenarios: the study, its storage faults, the decoder and their
Ray/Slurm scale-out (tests/test_study_store.py, test_scale.py, test_scale_decode.py).

A lab is a folder with saved tiny random models (:mod:`tiny_models`), a prompts file and the command
line of one run kind (``study`` or ``decode``); each test file keeps the sizes, seeds and options its
checks were written for, and adds its own reference run and comparisons. torch and transformers are
imported on first use (the tests skip without them).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mdsd_ot import _store


def save_models(root: Path, vocab: int, models, *, spread: float, hidden: int = 16) -> None:
    """Save ``models`` (``(folder name, seed, kind)``) as tiny LMs of ``vocab`` tokens under ``root``."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from tiny_models import save_tiny_lm, tiny_lm

    for name, seed, kind in models:
        # spread the logits so that the distributions are far from uniform
        save_tiny_lm(tiny_lm(vocab, seed=seed, kind=kind, hidden=hidden, spread=spread), root / name)


def write_prompts(path: Path, records) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


class RunLab:
    """Saved tiny models (``target``, ``draft``, ...), a prompts file, and the command line of a run.

    ``command`` is ``"study"`` or ``"decode"``; ``options`` the run's options after ``--out``.
    """

    def __init__(self, root: Path, *, command, vocab, records, options, spread, models=None, hidden=16):
        self.root = root
        self.command, self.options = command, list(options)
        models = models or (("target", 1, "qwen2"), ("draft", 2, "qwen2"))
        save_models(root, vocab, models, spread=spread, hidden=hidden)
        self.prompts = write_prompts(root / "prompts.jsonl", records)
        self._n = 0

    def argv(self, out, *extra, target=None, prompts=None):
        return [
            self.command,
            "--target",
            str(target or self.root / "target"),
            "--draft",
            str(self.root / "draft"),
            "--prompts",
            str(prompts or self.prompts),
            "--out",
            str(out),
            *self.options,
            *extra,
        ]

    def fresh(self, name="run") -> Path:
        self._n += 1
        return self.root / f"{name}{self._n}"


def no_duplicates(shard_dir: Path, key) -> None:
    """Each record's done line and each row (``key(row)``) appear once in a shard folder's files."""
    done = [json.loads(line)["id"] for line in (shard_dir / _store.DONE).read_text().splitlines()]
    assert len(done) == len(set(done))
    rows = [json.loads(line) for line in (shard_dir / _store.ROWS).read_text().splitlines()]
    keys = [key(r) for r in rows]
    assert len(keys) == len(set(keys))

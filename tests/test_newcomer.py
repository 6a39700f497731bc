"""A newcomer's first hour, round 2 (issue #24): what a new user runs into, run as a new user would.

Every CLI case checks the exit status, that the message is one line, and that no traceback is shown.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from mdsd_ot.cli import main

ROOT = Path(__file__).resolve().parents[1]


def _cli(capsys, argv):
    code = main([str(a) for a in argv])
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def _one_line_error(capsys, argv, *fragments, code=2):
    got, out, err = _cli(capsys, argv)
    assert got == code, (got, out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err and "error" in lines[0], err
    for f in fragments:
        assert f in lines[0], (f, lines[0])
    return lines[0]


# ------------------------------------------------------------------ a failed study, then the fixed one

V = 10


@pytest.fixture(scope="module")
def tiny_pair(tmp_path_factory):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from tiny_models import save_tiny_lm, tiny_lm

    root = tmp_path_factory.mktemp("pair")
    for name, seed in (("target", 1), ("draft", 2)):
        save_tiny_lm(tiny_lm(V, seed=seed, spread=20.0), root / name)
    rng = np.random.default_rng(3)
    recs = [
        {
            "id": f"r{i}",
            "prompt_ids": rng.integers(0, V, 3).tolist(),
            "completion_ids": rng.integers(0, V, 3).tolist(),
        }
        for i in range(2)
    ]
    (root / "prompts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    return root


def _study_argv(root, out, target):
    return [
        "study", "--target", target, "--draft", root / "draft", "--prompts", root / "prompts.jsonl",
        "--out", out, "--temperatures", "1", "--n", "2", "--schemes", "with_replacement",
        "--verifiers", "naive", "--device", "cpu", "--no-progress",
    ]  # fmt: skip


def test_a_failed_study_does_not_refuse_the_corrected_rerun(tiny_pair, tmp_path, capsys):
    """A hub-style name that cannot be fetched fails after the folder was set up; the fixed rerun works."""
    out = tmp_path / "study"
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH=str(ROOT))
    argv = _study_argv(tiny_pair, out, "nosuchorg/nosuchmodel")
    done = subprocess.run(
        [sys.executable, "-m", "mdsd_ot", *map(str, argv)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert "target 'nosuchorg/nosuchmodel' is not a local folder" in line and "Traceback" not in line
    assert (out / "config.json").exists() and (out / "positions.jsonl").stat().st_size == 0
    code, stdout, err = _cli(capsys, _study_argv(tiny_pair, out, tiny_pair / "target"))
    assert code == 0, err
    assert "holds no results; setting it up again" in err
    rows = [json.loads(x) for x in (out / "positions.jsonl").read_text().splitlines()]
    assert len(rows) == 2 * 3
    assert json.loads((out / "config.json").read_text())["identity"]["target"]["path"] == str(
        (tiny_pair / "target").resolve()
    )


def test_a_study_that_failed_to_load_models_is_taken_over(tiny_pair, tmp_path, capsys, monkeypatch):
    """torch missing (or any failure) at model loading: the folder holds no rows, the rerun proceeds."""
    from mdsd_ot.study import job

    out = tmp_path / "study"

    def broken(*a, **k):
        raise ImportError("torch is required for this feature (simulated)")

    job._MODELS.clear()
    monkeypatch.setattr(job, "load_models", broken)
    _one_line_error(capsys, _study_argv(tiny_pair, out, tiny_pair / "target"), "simulated")
    monkeypatch.undo()
    assert (out / "done.txt").stat().st_size == 0
    # the rerun with other parameters still takes the empty folder (nothing to mix)
    argv = _study_argv(tiny_pair, out, tiny_pair / "target")
    argv[argv.index("--temperatures") + 1] = "0.5"
    code, stdout, err = _cli(capsys, argv)
    assert code == 0, err
    assert "temperatures: [0.5] now, [1.0] before" in err and "holds no results" in err
    assert {json.loads(x)["T"] for x in (out / "positions.jsonl").read_text().splitlines()} == {0.5}


def test_a_folder_with_rows_is_still_refused(tiny_pair, tmp_path, capsys):
    out = tmp_path / "study"
    assert _cli(capsys, _study_argv(tiny_pair, out, tiny_pair / "target"))[0] == 0
    argv = _study_argv(tiny_pair, out, tiny_pair / "target")
    argv[argv.index("--temperatures") + 1] = "0.5"
    _one_line_error(
        capsys, argv, "holds results of a different study", "temperatures: [0.5] now, [1.0] before"
    )


def test_torch_missing_is_said_before_any_folder_is_made(tmp_path, capsys, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a)
    )
    out = tmp_path / "study"
    line = _one_line_error(
        capsys,
        ["study", "--target", "t", "--draft", "d", "--out", out],
        "needs torch",
        'pip install -e ".[torch]"',
    )
    assert "mdsd_ot[torch]" not in line and not out.exists()


def test_a_mistyped_local_path_is_not_read_as_a_hub_name(tmp_path, capsys, monkeypatch):
    (tmp_path / "models").mkdir()
    (tmp_path / "p.jsonl").write_text('{"id": "a", "prompt_ids": [1], "completion_ids": [2]}\n')
    monkeypatch.chdir(tmp_path)
    _one_line_error(
        capsys,
        ["study", "--target", "models/Qwen-05B", "--draft", "models/x", "--prompts", "p.jsonl"],
        "target models/Qwen-05B: no such file or folder in models/",
    )

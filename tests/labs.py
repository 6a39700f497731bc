"""One tiny-model lab for the run scenarios: the study, its storage faults, the decoder and their
Ray/Slurm scale-out (tests/test_study_store.py, test_scale.py, test_scale_decode.py).

A lab is a folder with saved tiny random models (:mod:`tiny_models`), a prompts file and the command
line of one run kind (``study`` or ``decode``); each test file keeps the sizes, seeds and options its
checks were written for, and adds its own reference run and comparisons. The scale-out scenarios
(a worker killed mid-write, an interrupted run resumed, a Slurm array recipe) are written once below
and run for both kinds. torch and transformers are imported on first use (the tests skip without
them).
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


# ------------------------------------------------------------ scale-out scenarios, one per fault
# Written once for every run kind: ``lab`` is a RunLab subclass with ``job()`` (the run's job object
# for mdsd_ot.scale.run_sharded), ``row_key(row)`` and ``assert_same_as_reference(out)``.


def worker_killed(lab, plan, *, compare=None) -> None:
    """A worker dies mid-write (``plan``: a fault of ``run_sharded``'s ``_fault``, shards of 3): its
    shard is retried once, no row or done line is duplicated, and the merged result is the reference's
    (``compare(out)``, by default ``lab.assert_same_as_reference``)."""
    from mdsd_ot import scale

    out = lab.fresh()
    marker = out.parent / f"{out.name}.fault"
    plan = dict(plan, marker=str(marker))
    scale.run_sharded(lab.command, lab.job(), out, shards=3, max_retries=2, progress=False, _fault=plan)
    assert marker.exists()  # the fault fired
    i = int(plan["shard"].split("/")[0])
    folders = [scale.shard_folder(out, k, 3) for k in range(3)]
    assert [scale.attempts(f) for f in folders] == [2 if k == i else 1 for k in range(3)]
    for f in folders:
        no_duplicates(f, lab.row_key)
    (compare or lab.assert_same_as_reference)(out)


def interrupted_then_resumed(lab, main) -> None:
    """A run without retries stops with shard 0 of 3 half done (its worker killed while writing the
    second done line); the same command (``main``, the CLI with ``--ray``) resumes it: the torn done
    line is dropped, that prompt recomputed once, nothing duplicated, the reference's result."""
    from mdsd_ot import scale

    out = lab.fresh()
    marker = out.parent / f"{out.name}.fault"
    plan = dict(shard="0/3", step="done", count=2, torn=0.3, marker=str(marker))
    # no retries: the run stops with shard 0 half done; the other shards run to the end
    with pytest.raises(
        scale.ShardsFailed, match=r"1 of 3 shards did not finish; shard 0/3: its worker died"
    ) as info:
        scale.run_sharded(lab.command, lab.job(), out, shards=3, max_retries=0, progress=False, _fault=plan)
    assert set(info.value.failures) == {"0/3"}
    assert "rerun the same command to resume" in str(info.value)
    first = scale.shard_folder(out, 0, 3)
    assert len(_store.scan_folder(first).valid) == 1  # one prompt finished before the kill
    assert not (out / "summary.md").exists()
    assert main(lab.argv(out, "--ray")) == 0
    for k in range(3):
        no_duplicates(scale.shard_folder(out, k, 3), lab.row_key)
    assert scale.attempts(first) == 2
    lab.assert_same_as_reference(out)


def slurm_array(array_script: Path, merge_script: Path, env: dict, *, tasks: int = 2, merge_env=None):
    """Run a Slurm array recipe as its tasks would run (in parallel, one process each, with
    ``SLURM_ARRAY_TASK_ID`` / ``SLURM_ARRAY_TASK_COUNT``), then its merge script; each must exit 0 and
    the merge print no warning."""
    import shutil
    import subprocess

    if shutil.which("bash") is None:
        pytest.skip("needs bash")
    env = dict(env, SLURM_ARRAY_TASK_COUNT=str(tasks))
    procs = [
        subprocess.Popen(
            ["bash", str(array_script)],
            env=dict(env, SLURM_ARRAY_TASK_ID=str(i)),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(tasks)
    ]
    for t in procs:
        _, stderr = t.communicate(timeout=300)
        assert t.returncode == 0, stderr[-2000:]
    merge_env = dict(env, **(merge_env or {}))
    merged = subprocess.run(
        ["bash", str(merge_script)], env=merge_env, capture_output=True, text=True, timeout=300
    )
    assert merged.returncode == 0, merged.stderr[-2000:]
    assert "warning" not in merged.stderr.lower()

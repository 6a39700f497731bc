"""The tree decoder scaled out (``mdsd-ot decode --ray``, ``mdsd_ot.scale.run_sharded("decode", ...)``
and a Slurm-style array of processes): the merged result is that of one process, also when workers
are killed in the middle of a write and when a whole run is interrupted and started again.

The oracle of every comparison is an uninterrupted single-process ``mdsd-ot decode`` (no ``--ray``,
no ``--shard``) of the same run in a fresh folder. Rows are compared as a multiset with their three
stopwatch fields (``t_draft``, ``t_target``, ``t_exact``) left out; every other field (tokens
emitted, each verifier's exact expectation, the bound estimate) must be equal, with no (record, T,
tree, scheme, call) twice. The summary files must be byte-identical when the speedup model's cost
ratio is given (``--cost-ratio``); the measured one is a ratio of stopwatch times, so without it
the summary tables are compared with ``cost_ratio`` and ``speedup`` left out.
One Ray cluster (2 CPUs) serves the module; the Ray tests are skipped without ``ray``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from labs import RunLab, interrupted_then_resumed, save_models, slurm_array, worker_killed

from mdsd_ot import _store, scale
from mdsd_ot.cli import main

ROOT = Path(__file__).resolve().parents[1]
V = 16
SUMMARIES = ("summary.md", "summary.csv", "summary.json")
COST = 0.25
TEMPERATURES = (1.0, 0.5)
TREES = ("2x2", "1x3")
SCHEMES = ("with_replacement", "top_n")
MAX_NEW = 5
OPTIONS = [
    "--trees",
    " ".join(TREES),
    "--sampling",
    ",".join(SCHEMES),
    "--temperatures",
    ",".join(map(str, TEMPERATURES)),
    "--verifiers",
    "naive,rrs,spectr",
    "--max-new-tokens",
    str(MAX_NEW),
    "--device",
    "cpu",
    "--threads",
    "1",
    "--per-cell",  # every cell its own continuation: the per-cell reference this scenario checks
    "--cost-ratio",
    str(COST),
    "--no-progress",
]
PROMPTS = 5  # three shards get 2, 2 and 1 prompts
TIMINGS = ("t_draft", "t_target", "t_exact")
MODELS = (("target", 1, "qwen2"), ("draft", 2, "llama"))


def _records(n=PROMPTS):
    rng = np.random.default_rng(7)
    return [{"id": f"r{i}", "prompt_ids": rng.integers(0, V, 2 + i % 3).tolist()} for i in range(n)]


def _save_models(root: Path) -> None:
    save_models(root, V, MODELS, spread=20.0)


def _key(r):
    return (r["record"], r["T"], r["tree"], r["scheme"], r["call"])


def _rows(folder):
    """The rows of a folder without their stopwatch fields, sorted; asserts no duplicate call."""
    rows = _store.read_rows(folder)
    keys = [_key(r) for r in rows]
    assert len(keys) == len(set(keys)), "duplicate rows"
    return sorted(json.dumps({k: v for k, v in r.items() if k not in TIMINGS}, sort_keys=True) for r in rows)


def _table(folder):
    drop = ("cost_ratio", "cost_ratio_source", "speedup")
    table = json.loads((folder / "summary.json").read_text())
    assert all(isinstance(t["cost_ratio"], float) and t["cost_ratio"] > 0 for t in table)
    return [{k: v for k, v in t.items() if k not in drop} for t in table]


class Lab(RunLab):
    """The shared tiny-model lab (:mod:`labs`) for a decode run, and the single-process reference run."""

    def __init__(self, root: Path):
        super().__init__(
            root, command="decode", vocab=V, records=_records(), options=OPTIONS, spread=20.0, models=MODELS
        )
        self.reference = root / "reference"
        assert main(self.argv(self.reference)) == 0
        rows = _store.read_rows(self.reference)
        # the reference decoded every prompt in every cell, to MAX_NEW tokens or to one EOS token
        made, last = {}, {}
        for r in sorted(rows, key=lambda r: r["call"]):
            cell = (r["record"], r["T"], r["tree"], r["scheme"])
            made[cell] = made.get(cell, 0) + r["emitted"]
            last[cell] = r["tokens"][-1]
        assert len(made) == PROMPTS * len(TEMPERATURES) * len(TREES) * len(SCHEMES)
        assert len({last[c] for c in made if made[c] < MAX_NEW}) <= 1
        assert sum(made.values()) >= len(made) * MAX_NEW // 2

    row_key = staticmethod(_key)

    def job(self):
        from mdsd_ot.decode import DecodeConfig

        return DecodeConfig(
            target=str(self.root / "target"),
            draft=str(self.root / "draft"),
            prompts=str(self.prompts),
            trees=list(TREES),
            schemes=list(SCHEMES),
            temperatures=list(TEMPERATURES),
            verifiers=["naive", "rrs", "spectr"],
            max_new_tokens=MAX_NEW,
            device="cpu",
            threads=1,
            union=False,
        )

    def assert_same_as_reference(self, out: Path, cost_given: bool = True) -> None:
        assert _rows(out) == _rows(self.reference)
        if not cost_given:  # measured cost ratio: everything else equal, then the same bytes at COST
            from mdsd_ot.decode import write_report

            assert _table(out) == _table(self.reference)
            write_report(out, cost_ratio=COST, plots=False)
        for name in SUMMARIES:
            assert (out / name).read_bytes() == (self.reference / name).read_bytes(), name


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    return Lab(tmp_path_factory.mktemp("scale_decode"))


# ------------------------------------------------------------------ no Ray needed (fast lane)


def test_decode_kind_is_registered_and_light():
    code = (
        "import sys, mdsd_ot, mdsd_ot.scale as s, mdsd_ot.cli\n"
        "k = s.JOB_KINDS['decode']\n"
        "print([k.entry(w).__name__ for w in ('run_shard', 'merge', 'count')])\n"
        "mdsd_ot.cli.build_parser()\n"
        "print(sorted(m for m in ('ray', 'torch', 'transformers') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split("\n")[:2] == ["['shard_task', 'merge_shards', 'count_records']", "[]"]


def test_count_and_refusals(tmp_path, capsys):
    from mdsd_ot.decode import DecodeConfig
    from mdsd_ot.decode.job import count_records, shard_task

    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(json.dumps(r) + "\n" for r in _records(7)))
    assert count_records(DecodeConfig(prompts=str(prompts))) == 7
    assert count_records({"prompts": str(prompts), "max_records": 3}) == 3
    with pytest.raises(TypeError, match="a decode job is a DecodeConfig"):
        count_records(str(prompts))
    with pytest.raises(ValueError, match="needs target and draft"):
        shard_task(DecodeConfig(prompts=str(prompts)), "0/2", tmp_path / "s")
    # an output folder holding an unsharded decode run is not replaced by a sharded one
    single = tmp_path / "single"
    single.mkdir()
    cfg = {"format": 2, "kind": "decode", "shard": "0/1", "identity": {}}
    (single / _store.CONFIG).write_text(json.dumps(cfg))
    job = DecodeConfig(target="t", draft="d", prompts=str(prompts))
    with pytest.raises(_store.StoreError, match="unsharded run"):
        scale.run_sharded("decode", job, single)
    base = ["decode", "--target", "t", "--draft", "d", "--prompts", str(prompts)]
    assert main(base + ["--shards", "2"]) == 2
    assert "--shards goes with --ray" in capsys.readouterr().err
    assert main(base + ["--ray", "--shard", "0/2"]) == 2
    assert "--shard and --ray exclude each other" in capsys.readouterr().err


def test_worker_loads_the_models_once_and_hashes_them_once(tmp_path, monkeypatch):
    """Two shards run by one process (as one Ray worker runs them): one model load, the model
    files hashed for the first shard folder only (the merged result: the Ray tests below)."""
    from mdsd_ot.decode import DecodeConfig
    from mdsd_ot.decode import job as decode_job
    from mdsd_ot.runs import inputs as run_inputs

    _save_models(tmp_path)
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(json.dumps(r) + "\n" for r in _records(3)))
    config = DecodeConfig(
        target=str(tmp_path / "target"),
        draft=str(tmp_path / "draft"),
        prompts=str(prompts),
        trees=["2x2"],
        temperatures=[0.7],
        verifiers=["rrs"],
        max_new_tokens=3,
        device="cpu",
        threads=1,
    )
    loads, hashed = [], []
    load, sha = run_inputs.load_models, _store._sha256_file
    monkeypatch.setattr(run_inputs, "_MODELS", {})
    monkeypatch.setattr(decode_job, "_IDENTITY", {})
    monkeypatch.setattr(run_inputs, "load_models", lambda *a, **k: loads.append(a) or load(*a, **k))
    monkeypatch.setattr(_store, "_sha256_file", lambda f: hashed.append(f) or sha(f))
    decode_job.shard_task(config, "0/2", tmp_path / "s0")
    first = len(hashed)
    assert len(loads) == 1 and first > 0
    decode_job.shard_task(config, "1/2", tmp_path / "s1")
    assert len(loads) == 1 and len(hashed) == first
    assert [len(_store.scan_folder(tmp_path / f"s{i}").valid) for i in range(2)] == [2, 1]


# ---------------------------------------------------------------------------- on a Ray cluster


@pytest.mark.slow
def test_ray_decode_equals_single_process(lab, cluster, capsys, monkeypatch):
    out = lab.fresh()
    monkeypatch.chdir(lab.root)  # relative paths: the driver makes them absolute for the workers
    argv = [a.replace(str(lab.root) + os.sep, "") for a in lab.argv(out, "--ray", "--shards", "3")]
    assert "target" in argv and out.name in argv
    assert main(argv) == 0
    lab.assert_same_as_reference(out)
    folders = [scale.shard_folder(out, i, 3) for i in range(3)]
    assert [len(_store.scan_folder(f).valid) for f in folders] == [2, 2, 1]
    assert [scale.attempts(f) for f in folders] == [1, 1, 1]  # one task per shard, no retry
    assert _store.read_config(out)["shard"] == "merged"
    # the same command again: a finished run is merged again, nothing recomputed or duplicated
    before = {f: (f / _store.ROWS).read_bytes() for f in folders}
    assert main(lab.argv(out, "--ray")) == 0  # the split of 3 is found in the folder
    assert {f: (f / _store.ROWS).read_bytes() for f in folders} == before
    lab.assert_same_as_reference(out)
    # another run in the same folder: every shard refuses it (not retried), nothing changes
    capsys.readouterr()
    assert main(lab.argv(out, "--ray", "--max-new-tokens", "4")) == 2
    err = capsys.readouterr().err
    assert "3 of 3 shards did not finish; shard 0/3: IdentityMismatch" in err
    assert "max_new_tokens: 4 now, 5 before" in err
    assert [scale.attempts(f) for f in folders] == [3, 3, 3]
    lab.assert_same_as_reference(out)
    # the Python equivalent, default number of shards (4 per slot, at most one per prompt),
    # measured cost ratio
    out2 = scale.run_sharded("decode", lab.job(), lab.fresh(), progress=False)
    assert len(list((out2 / scale.SHARDS).glob("shard-*"))) == PROMPTS
    lab.assert_same_as_reference(out2, cost_given=False)


@pytest.mark.slow
@pytest.mark.parametrize(
    "plan",
    [
        # os._exit half-way through writing the rows of the shard's second prompt
        dict(shard="0/3", step="rows", count=2, torn=0.5),
        # SIGKILL half-way through writing the done line of the shard's first prompt
        dict(shard="1/3", step="done", count=1, torn=0.5, signal=int(signal.SIGKILL)),
    ],
    ids=["exit-torn-rows", "sigkill-torn-done"],
)
def test_worker_killed_mid_decode_gives_identical_result(lab, cluster, plan):
    worker_killed(lab, plan, compare=lambda out: lab.assert_same_as_reference(out, cost_given=False))


@pytest.mark.slow
def test_interrupted_decode_resumes_without_duplicates(lab, cluster):
    interrupted_then_resumed(lab, main)


# ------------------------------------------------------------------------- a Slurm job array


@pytest.mark.slow
def test_slurm_decode_recipe_as_local_processes(lab):
    """examples/slurm/decode_array.sh run as the array's tasks would be (in parallel, one process
    each, SLURM_ARRAY_TASK_ID / SLURM_ARRAY_TASK_COUNT set), then examples/slurm/decode_merge.sh."""
    out = lab.fresh("slurm")
    bindir = str(Path(sys.executable).parent)  # where mdsd-ot and python of this environment are
    options = OPTIONS[2:-3]  # all but --trees (TREES=...), --cost-ratio and --no-progress
    env = dict(
        os.environ,
        PATH=bindir + os.pathsep + os.environ.get("PATH", ""),
        PYTHON=sys.executable,
        TARGET=str(lab.root / "target"),
        DRAFT=str(lab.root / "draft"),
        OUT=str(out),
        TREES=" ".join(TREES),
        DECODE_ARGS=" ".join(["--prompts", str(lab.prompts), *options]),
        MDSD_OT_QUIET="1",
    )
    slurm_array(
        ROOT / "examples/slurm/decode_array.sh",
        ROOT / "examples/slurm/decode_merge.sh",
        env,
        merge_env={"COST_RATIO": str(COST)},
    )
    lab.assert_same_as_reference(out / "merged")
    assert sorted(_store.read_config(out / "merged")["shards"]) == ["0/2", "1/2"]

"""Scaling out (mdsd_ot.scale): a study on a local Ray cluster and as a Slurm-style array of
processes gives exactly the rows and summary files of one process, also when workers are killed
in the middle of a write and when a whole run is interrupted and started again.

The oracle of every comparison is an uninterrupted single-process run of the same study
(``mdsd-ot study`` without ``--ray`` or ``--shard``) in a fresh folder: the summary files must be
byte-identical and the rows equal as a multiset with no (record, position, temperature) twice.
One Ray cluster (2 CPUs) serves the whole module; Ray tests are skipped without ``ray``.
"""

from __future__ import annotations

import json
import os
import pickle
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
from labs import RunLab, interrupted_then_resumed, no_duplicates, slurm_array, worker_killed

from mdsd_ot import _store, scale
from mdsd_ot.cli import main

ROOT = Path(__file__).resolve().parents[1]
V = 12
SUMMARIES = ("summary.md", "summary.csv", "summary.json")
OPTIONS = [
    "--temperatures",
    "1,0.5",
    "--n",
    "2",
    "--sampling",
    "with_replacement,greedy",
    "--verifiers",
    "naive",
    "--device",
    "cpu",
    "--threads",
    "1",
    "--no-progress",
]
# five prompts (one with an empty continuation): three shards get 2, 2 and 1 of them
LENGTHS = (3, 0, 4, 2, 3)


def _records():
    rng = np.random.default_rng(11)
    return [
        {
            "id": f"r{i}",
            "prompt_ids": rng.integers(0, V, 3).tolist(),
            "completion_ids": rng.integers(0, V, m).tolist(),
        }
        for i, m in enumerate(LENGTHS)
    ]


class Lab(RunLab):
    """The shared tiny-model lab (:mod:`labs`) for a study, and the single-process reference run."""

    def __init__(self, root: Path):
        super().__init__(root, command="study", vocab=V, records=_records(), options=OPTIONS, spread=40.0)
        self.reference = root / "reference"
        assert main(self.argv(self.reference)) == 0

    @staticmethod
    def row_key(r):
        return (r["record"], r["pos"], r["T"])

    def job(self):
        from mdsd_ot.study import StudyConfig
        from mdsd_ot.study.job import StudyJob

        config = StudyConfig(
            temperatures=[1.0, 0.5], ns=[2], schemes=["with_replacement", "greedy"], verifiers=["naive"]
        )
        return StudyJob(
            target=str(self.root / "target"),
            draft=str(self.root / "draft"),
            config=config,
            prompts=str(self.prompts),
            device="cpu",
            threads=1,
        )

    def assert_same_as_reference(self, out: Path) -> None:
        from mdsd_ot import study

        for name in SUMMARIES:
            assert (out / name).read_bytes() == (self.reference / name).read_bytes(), name
        rows = study.read_rows(out)
        keys = [(r["record"], r["pos"], r["T"]) for r in rows]
        assert len(keys) == len(set(keys)), "duplicate rows"
        ref = sorted(json.dumps(r, sort_keys=True) for r in study.read_rows(self.reference))
        assert sorted(json.dumps(r, sort_keys=True) for r in rows) == ref
        assert len(ref) == sum(LENGTHS) * 2


def _no_duplicates(shard_dir: Path) -> None:
    """Each record's done line and rows appear once in a shard folder's files (no stray copies)."""
    no_duplicates(shard_dir, Lab.row_key)


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    return Lab(tmp_path_factory.mktemp("scale"))


# ------------------------------------------------------------------ refusals (no Ray needed)


def test_refusals_before_any_work(tmp_path):
    from mdsd_ot.study import StudyConfig
    from mdsd_ot.study.job import StudyJob

    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(json.dumps(r) + "\n" for r in _records()))
    job = StudyJob(target="t", draft="d", config=StudyConfig(), prompts=str(prompts))
    # an output folder holding an unsharded run
    single = tmp_path / "single"
    single.mkdir()
    cfg = {"format": 2, "kind": "study", "shard": "0/1", "identity": {}}
    (single / _store.CONFIG).write_text(json.dumps(cfg))
    with pytest.raises(_store.StoreError, match="unsharded run"):
        scale.run_sharded("study", job, single)
    # a split of 3 shards resumed with another count
    split = tmp_path / "split"
    scale.shard_folder(split, 0, 3).mkdir(parents=True)
    with pytest.raises(ValueError, match=r"split into 3 shards; resume it with shards=3 \(--shards 3\)"):
        scale.run_sharded("study", job, split, shards=4)
    scale.shard_folder(split, 0, 5).mkdir(parents=True)
    with pytest.raises(_store.StoreError, match="several splits"):
        scale.run_sharded("study", job, split)
    # a second driver on the same output folder
    busy = tmp_path / "busy"
    (busy / scale.SHARDS).mkdir(parents=True)
    lock = _store.FolderLock(busy / scale.SHARDS).acquire()
    try:
        with pytest.raises(_store.FolderBusy):
            scale.run_sharded("study", job, busy)
    finally:
        lock.release()
    for bad, match in (
        (dict(shards=0), "shards must be a positive integer"),
        (dict(max_retries=-1), "max_retries"),
        (dict(num_cpus=0), "num_cpus > 0 or num_gpus > 0"),
        (dict(memory="lots"), "memory must look like"),
    ):
        with pytest.raises(ValueError, match=match):
            scale.run_sharded("study", job, tmp_path / "x", **bad)
    with pytest.raises(ValueError, match="unknown job kind 'train'; registered: decode, study"):
        scale.run_sharded("train", job, tmp_path / "x")
    with pytest.raises(ValueError, match="module:function"):
        scale.register(scale.JobKind("bad", run_shard="nothing", merge="m:f"))
    assert scale.parse_memory("1.5G") == 3 * 2**29 and scale.parse_memory(4096) == 4096


def test_unschedulable_request_is_named():
    nodes = [{"Alive": True, "Resources": {"CPU": 2.0, "memory": 8 * 2**30}}, {"Alive": False}]
    with pytest.warns(scale.ScaleWarning, match=r"\(1 CPU, 1 GPU; nodes now: 2 CPU, 0 GPU, 8.0 GiB\)"):
        scale._check_feasible(nodes, 1, 1, None)
    with pytest.warns(scale.ScaleWarning, match="16.0 GiB of memory"):
        scale._check_feasible(nodes, 1, 0, 16 * 2**30)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        scale._check_feasible(nodes, 2, 0, 4 * 2**30)  # fits: no warning


def test_imports_stay_light():
    code = (
        "import sys, mdsd_ot, mdsd_ot.scale, mdsd_ot.study.job, mdsd_ot.cli\n"
        "mdsd_ot.cli.build_parser()\n"
        "print(sorted(m for m in ('ray', 'torch', 'transformers') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_cli_ray_flags_are_checked(tmp_path, capsys):
    base = ["study", "--target", "t", "--draft", "d", "--prompts", str(tmp_path / "none.jsonl")]
    (tmp_path / "none.jsonl").write_text(json.dumps({"prompt_ids": [1], "completion_ids": [2]}) + "\n")
    assert main(base + ["--shards", "2"]) == 2
    assert "--shards goes with --ray" in capsys.readouterr().err
    assert main(base + ["--ray", "--shard", "0/2"]) == 2
    assert "--shard and --ray exclude each other" in capsys.readouterr().err


# ---------------------------------------------------------------------------- on a Ray cluster


@pytest.mark.slow
def test_ray_run_equals_single_process(lab, cluster, capsys, monkeypatch):
    out = lab.fresh()
    monkeypatch.chdir(lab.root)  # relative paths: the driver makes them absolute for the workers
    argv = [a.replace(str(lab.root) + os.sep, "") for a in lab.argv(out, "--ray", "--shards", "3")]
    assert "target" in argv and out.name in argv
    assert main(argv) == 0
    lab.assert_same_as_reference(out)
    provenance = _store.read_config(scale.shard_folder(out, 0, 3))["provenance"]
    assert provenance["target"] == str(lab.root / "target") and provenance["prompts"] == str(lab.prompts)
    folders = [scale.shard_folder(out, i, 3) for i in range(3)]
    assert [len(_store.scan_folder(f).valid) for f in folders] == [2, 2, 1]
    assert [scale.attempts(f) for f in folders] == [1, 1, 1]  # one task per shard, no retry
    assert _store.read_config(out)["shard"] == "merged"
    # the same command again: a finished run is merged again, nothing is recomputed or duplicated
    before = {f: (f / _store.ROWS).read_bytes() for f in folders}
    assert main(lab.argv(out, "--ray")) == 0  # the split of 3 is found in the folder
    assert {f: (f / _store.ROWS).read_bytes() for f in folders} == before
    lab.assert_same_as_reference(out)
    # another study in the same folder: every shard refuses it (not retried), nothing changes
    capsys.readouterr()
    assert main(lab.argv(out, "--ray", "--temperatures", "0.7")) == 2
    err = capsys.readouterr().err
    assert "3 of 3 shards did not finish; shard 0/3: IdentityMismatch" in err
    assert "temperatures: [0.7] now, [0.5, 1.0] before" in err
    assert [scale.attempts(f) for f in folders] == [3, 3, 3]
    lab.assert_same_as_reference(out)
    # the Python equivalent, with the default number of shards (4 per slot, at most one per prompt)
    out2 = scale.run_sharded("study", lab.job(), lab.fresh(), progress=False)
    lab.assert_same_as_reference(out2)
    assert len(list((out2 / scale.SHARDS).glob("shard-*"))) == len(LENGTHS)


@pytest.mark.slow
@pytest.mark.parametrize(
    "plan",
    [
        # os._exit half-way through writing the rows of the shard's second prompt
        dict(shard="0/3", step="rows", count=2, torn=0.5),
        # SIGKILL half-way through writing the done line of the shard's first prompt
        dict(shard="1/3", step="done", count=1, torn=0.5, signal=int(signal.SIGKILL)),
        # SIGKILL after the rows of the first prompt were written, before they were fsync'd
        dict(shard="2/3", step="rows:written", count=1, signal=int(signal.SIGKILL)),
    ],
    ids=["exit-torn-rows", "sigkill-torn-done", "sigkill-unclaimed-rows"],
)
def test_worker_killed_mid_run_gives_identical_result(lab, cluster, plan):
    worker_killed(lab, plan)


@pytest.mark.slow
def test_interrupted_run_resumes_without_duplicates(lab, cluster):
    interrupted_then_resumed(lab, main)


@pytest.mark.slow
def test_driver_killed_then_same_command_resumes(lab, cluster, tmp_path):
    """The driver process itself is SIGKILLed mid-run (Ray then ends its tasks); the command run
    again completes the study without duplicates. The first driver is a new process connecting to
    the module's cluster by address; its shards pause 1 s before each done line, so that the kill
    lands while most of them are unfinished."""
    out = lab.fresh()
    address = cluster.get_runtime_context().gcs_address
    (tmp_path / "job.pkl").write_bytes(pickle.dumps(lab.job()))
    script = (
        "import pickle, sys\n"
        "from mdsd_ot import scale\n"
        "job = pickle.load(open(sys.argv[1], 'rb'))\n"
        "scale.run_sharded('study', job, sys.argv[2], shards=5, address=sys.argv[3], progress=False,\n"
        "                  _fault={'shard': '*', 'step': 'done', 'sleep': 1.0})\n"
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen(
        [sys.executable, "-c", script, str(tmp_path / "job.pkl"), str(out), address],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    folders = [scale.shard_folder(out, k, 5) for k in range(5)]
    try:
        deadline = time.time() + 180
        while time.time() < deadline and proc.poll() is None:
            if any((f / _store.DONE).exists() and (f / _store.DONE).stat().st_size for f in folders):
                break
            time.sleep(0.02)
        assert proc.poll() is None, proc.stderr.read().decode()[-3000:]
        proc.kill()
    finally:
        proc.wait(30)
    assert not (out / "summary.md").exists()
    done = sum(len(_store.scan_folder(f).valid) for f in folders if f.exists())
    assert 1 <= done < len(LENGTHS)
    assert main(lab.argv(out, "--ray")) == 0  # finds the split of 5 and resumes it
    for f in folders:
        _no_duplicates(f)
    lab.assert_same_as_reference(out)


# ------------------------------------------------------------------------- a Slurm job array


@pytest.mark.slow
def test_slurm_array_recipe_as_local_processes(lab):
    """examples/slurm/study_array.sh run as the array's tasks would be, then the merge script."""
    out = lab.fresh("slurm")
    bindir = str(Path(sys.executable).parent)  # where the mdsd-ot script of this environment is
    env = dict(
        os.environ,
        PATH=bindir + os.pathsep + os.environ.get("PATH", ""),
        TARGET=str(lab.root / "target"),
        DRAFT=str(lab.root / "draft"),
        OUT=str(out),
        STUDY_ARGS=" ".join(["--prompts", str(lab.prompts), *OPTIONS[:-3]]),
        MDSD_OT_QUIET="1",
    )
    slurm_array(ROOT / "examples/slurm/study_array.sh", ROOT / "examples/slurm/merge.sh", env)
    lab.assert_same_as_reference(out / "merged")
    assert sorted(_store.read_config(out / "merged")["shards"]) == ["0/2", "1/2"]

"""Study folders that never lose or mix results (mdsd_ot._store): fault injection on tiny models.

Every scenario is compared with an independent expectation: the bytes of the summary files and the
rows of an uninterrupted run of the same command in a fresh folder. Real processes are killed
(SIGKILL, SIGINT) at every write step and at random moments; they are forked from a warm fork
server (``_fault_preload``) so that each run costs a fraction of a second instead of the 5 s of
importing torch and transformers (see ``_fault_child`` for the kill plans).
"""

from __future__ import annotations

import collections
import contextlib
import errno
import json
import multiprocessing
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.slow  # fault injection / fuzzing / statistics: the full lane only

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from labs import RunLab, write_prompts  # noqa: E402

from mdsd_ot import _store, study  # noqa: E402
from mdsd_ot.cli import main  # noqa: E402

TESTS = Path(__file__).resolve().parent
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
    "--no-progress",
]


def _records():
    """Four prompts: 3, 0 (an empty continuation), 4 and 2 positions."""
    rng = np.random.default_rng(7)
    return [
        {
            "id": f"r{i}",
            "prompt_ids": rng.integers(0, V, 3).tolist(),
            "completion_ids": rng.integers(0, V, m).tolist(),
        }
        for i, m in enumerate((3, 0, 4, 2))
    ]


_write_prompts = write_prompts


class Lab(RunLab):
    """The shared tiny-model lab (:mod:`labs`, plus an ``other`` target) and forked children."""

    def __init__(self, root: Path):
        models = (("target", 1, "qwen2"), ("draft", 2, "qwen2"), ("other", 3, "qwen2"))
        super().__init__(
            root, command="study", vocab=V, records=_records(), options=OPTIONS, spread=40.0, models=models
        )
        self.ctx = None

    # -- children
    def start(self, argv, plan=None, events=None):
        self._n += 1
        log = self.root / f"log{self._n}"
        p = self.ctx.Process(
            target=_fault_child().run_cli, args=(argv, dict(plan or {}), f"{log}.out", f"{log}.err", events)
        )
        p.start()
        p.log = log
        return p

    def finish(self, p, timeout=60):
        p.join(timeout)
        if p.is_alive():  # pragma: no cover - a hang is a failure, not a wait
            p.kill()
            p.join()
            pytest.fail(f"child {p.pid} hung: " + Path(f"{p.log}.err").read_text(errors="replace"))
        return (
            p.exitcode,
            Path(f"{p.log}.out").read_text(errors="replace"),
            Path(f"{p.log}.err").read_text(errors="replace"),
        )

    def run(self, argv, plan=None):
        return self.finish(self.start(argv, plan))


def _fault_child():
    """The child-side module (tests/ is on sys.path under pytest; made sure of here)."""
    if str(TESTS) not in sys.path:
        sys.path.insert(0, str(TESTS))
    import _fault_child as mod

    return mod


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """A warm fork server, the models, and the reference run (plots off, checkpoints recorded)."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        pytest.skip("the fault-injection tests fork their runs from a fork server (POSIX)")
    root = tmp_path_factory.mktemp("store")
    lab = Lab(root)
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["_fault_preload"])
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join([str(TESTS)] + ([old] if old else []))
    try:
        lab.ctx = ctx
        ref = root / "reference"
        code, out, err = lab.run(lab.argv(ref), {"record": str(root / "steps.json"), "plots": False})
    finally:
        if old is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = old
    assert code == 0, err
    lab.ref = ref
    lab.steps = json.loads((root / "steps.json").read_text())
    lab.ref_summary = {f: (ref / f).read_bytes() for f in SUMMARIES}
    lab.ref_rows = _rows_by_key(ref)
    assert len(lab.ref_rows) == (3 + 0 + 4 + 2) * 2
    yield lab
    with contextlib.suppress(Exception):
        from multiprocessing import forkserver

        forkserver._forkserver._stop()


def _rows_by_key(folder):
    rows = study.read_rows(folder)
    keys = [(r["record"], r["pos"], r["T"]) for r in rows]
    dup = [k for k, c in collections.Counter(keys).items() if c > 1]
    assert not dup, f"duplicated rows {dup[:3]}"
    return dict(zip(keys, rows))


def _assert_same_as_reference(lab, folder):
    """No lost, duplicated or altered row; the summary files byte-identical; done list complete."""
    assert _rows_by_key(folder) == lab.ref_rows
    for f in SUMMARIES:
        assert (folder / f).read_bytes() == lab.ref_summary[f], f
    done = [json.loads(line)["id"] for line in (folder / "done.txt").read_text().splitlines()]
    assert sorted(done) == ["r0", "r1", "r2", "r3"]
    assert not [p.name for p in folder.iterdir() if ".tmp-" in p.name]


# ------------------------------------------------------------------------- killed at each step


def test_reference_run_reaches_every_write_step(lab):
    """The checkpoints cover lock, config, each record's rows and done line, each summary file."""
    counts = collections.Counter(lab.steps)
    assert counts["lock:acquired"] == 1
    assert counts["rows"] == counts["done"] == counts["done:written"] == 4
    for name in ("config", *SUMMARIES):
        for phase in ("temp", "written", "synced", "renamed"):
            assert counts[f"{name}:{phase}"] == 1, (name, phase)


@pytest.mark.slow
def test_sigkill_at_every_write_step_then_resume(lab):
    """SIGKILL at each checkpoint (mid-write for rows and done lines), then the same command."""
    for k in range(1, len(lab.steps) + 1):
        out = lab.fresh("kill")
        code, _, err = lab.run(lab.argv(out), {"kill_at": k, "torn": 0.5, "plots": False})
        assert code == -signal.SIGKILL, (k, lab.steps[k - 1], err)
        code, _, err = lab.run(lab.argv(out), {"plots": False})
        assert code == 0, (k, lab.steps[k - 1], err)
        assert "Traceback" not in err
        _assert_same_as_reference(lab, out)


def test_sigkill_at_random_moments_until_done(lab):
    """Killed again and again at random moments (seeded), resumed each time: same result."""
    rng = np.random.default_rng(20240611)
    out = lab.fresh("random")
    kills = 0
    for _ in range(8):
        code, _, err = lab.run(lab.argv(out), {"kill_after": float(rng.uniform(0.0, 0.15)), "plots": False})
        assert code in (0, -signal.SIGKILL), err
        kills += code != 0
    code, _, err = lab.run(lab.argv(out), {"plots": False})
    assert code == 0, err
    assert kills >= 1
    _assert_same_as_reference(lab, out)


def _first_of_each_step(steps):
    """The first checkpoint of each kind (the three summary files share one code path)."""
    seen = {}
    for k, s in enumerate(steps, 1):
        if not s.startswith(("summary.json", "summary.md")):
            seen.setdefault(s, k)
    return sorted(seen.values())


def test_ctrl_c_at_each_kind_of_write_step(lab):
    """SIGINT at the first occurrence of every step: exit 130 with one line, then a resume."""
    for k in _first_of_each_step(lab.steps):
        out = lab.fresh("sigint")
        code, _, err = lab.run(lab.argv(out), {"kill_at": k, "signal": signal.SIGINT, "plots": False})
        assert code == 130, (lab.steps[k - 1], err)
        assert err.splitlines()[-1] == "mdsd-ot study: interrupted", err
        assert "Traceback" not in err
        code, _, err = lab.run(lab.argv(out), {"plots": False})
        assert code == 0, err
        _assert_same_as_reference(lab, out)


# ------------------------------------------------------------------------------ two writers


def _snapshot(folder):
    return {p.name: p.read_bytes() for p in sorted(Path(folder).iterdir()) if p.is_file()}


def test_second_writer_is_refused_naming_the_holder_and_nothing_is_lost(lab, capsys, monkeypatch):
    out = lab.fresh("busy")
    ready, go = lab.ctx.Event(), lab.ctx.Event()
    a = lab.start(lab.argv(out), {"pause_at": "rows", "plots": False}, events=(ready, go))
    try:
        assert ready.wait(120), "the first writer never reached its first record"
        before = _snapshot(out)
        monkeypatch.setattr(study, "load_models", _no_models)
        code = main(lab.argv(out, "--shard", "0/2"))  # e.g. a forgotten --shard on the same --out
        err = capsys.readouterr().err
        after = _snapshot(out)
    finally:
        go.set()
    assert code == 2
    (line,) = err.strip().splitlines()
    assert f"is in use by pid {a.pid} on " in line and str(out) in line
    assert after == before
    code, _, err = lab.finish(a)
    assert code == 0, err
    _assert_same_as_reference(lab, out)


def _no_models(*args, **kwargs):
    raise AssertionError("the models were loaded although the run had to be refused first")


def test_lock_of_a_killed_run_is_taken_over(lab):
    """flock dies with its holder: the next run gets the folder and says who stopped."""
    second_rows = [k for k, s in enumerate(lab.steps, 1) if s == "rows"][1]
    out = lab.fresh("stale")
    p = lab.start(lab.argv(out), {"kill_at": second_rows, "plots": False})
    code, _, _ = lab.finish(p)
    assert code == -signal.SIGKILL
    assert json.loads((out / ".lock").read_text())["pid"] == p.pid
    code, _, err = lab.run(lab.argv(out), {"plots": False})
    assert code == 0, err
    assert f"previous run (pid {p.pid} on" in err and "stopped without finishing" in err
    assert (out / ".lock").read_text() == ""  # released: names nobody
    _assert_same_as_reference(lab, out)


# ------------------------------------------------------------------------------ disk full (tmpfs)


@pytest.fixture
def tmpfs(tmp_path):
    """A 512 KiB tmpfs mounted for the test (root and mount rights needed, else skipped)."""
    mnt = tmp_path / "fs"
    mnt.mkdir()
    if os.name != "posix" or os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root")
    r = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=512k,mode=755", "tmpfs", str(mnt)],
        capture_output=True,
        text=True,
    )
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def _fill(mnt, leave_pages):
    """Fill the file system but ``leave_pages`` blocks; return the filler file."""
    st = os.statvfs(mnt)
    filler = mnt / "filler"
    size = (st.f_bavail - leave_pages) * st.f_bsize
    with open(filler, "wb") as fh:
        fh.write(b"\0" * max(0, size))
    return filler


def test_disk_full_on_a_real_tmpfs_is_one_line_and_resumable(lab, tmpfs):
    """For every amount of free space from none up to enough: exit 2 with one line naming the file
    and ENOSPC, then (space freed) the same command completes the identical study."""
    named = set()
    for free in range(0, 40):
        for p in tmpfs.iterdir():
            shutil.rmtree(p) if p.is_dir() else p.unlink()
        out = tmpfs / "study"
        filler = _fill(tmpfs, free)
        code, _, err = lab.run(lab.argv(out), {"plots": False})
        if code == 0:
            break
        assert code == 2, err
        (line,) = err.strip().splitlines()[-1:]
        assert line.startswith("mdsd-ot study: error: ") and "No space left on device" in line
        assert str(out) in line, line
        assert "Traceback" not in err
        named.add(Path(line.rsplit(": No space", 1)[0].split("error: ", 1)[1]).name)
        filler.unlink()
        code, _, err = lab.run(lab.argv(out), {"plots": False})
        assert code == 0, (free, err)
        _assert_same_as_reference(lab, out)
    else:  # pragma: no cover
        pytest.fail("the study never fit")
    # the disk filled up while writing each kind of file in turn
    assert {"config.json", "positions.jsonl", "done.txt", "summary.csv"} <= named, named
    _assert_same_as_reference(lab, out)


def test_read_only_mount_one_line_errors_and_reading_still_works(lab, tmpfs, tmp_path, capsys, monkeypatch):
    src = tmpfs / "done"
    shutil.copytree(lab.ref, src)
    r = subprocess.run(["mount", "-o", "remount,ro", str(tmpfs)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot remount read-only: {r.stderr.strip()}")
    monkeypatch.setattr(study, "load_models", _no_models)
    monkeypatch.setattr(study.report, "plot_summary", lambda table, out, **kw: {})
    assert main(lab.argv(src)) == 2  # resuming needs the lock: refused in one line
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "Read-only file system" in line and str(src) in line
    assert main(["merge", str(lab.ref), "--out", str(tmpfs / "m")]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "Read-only file system" in line and str(tmpfs / "m") in line
    assert _rows_by_key(src) == lab.ref_rows  # reading needs no write access
    assert main(["merge", str(src), "--out", str(tmp_path / "m")]) == 0
    for f in ("summary.csv", "summary.json"):
        assert (tmp_path / "m" / f).read_bytes() == lab.ref_summary[f]


# ------------------------------------------------------------------------- in-process scenarios


@pytest.fixture
def quick(monkeypatch):
    """In-process runs without the PNG plots (half a second each); the summary files stay."""
    monkeypatch.setattr(study.report, "plot_summary", lambda table, out, **kw: {})


@pytest.fixture
def appended(monkeypatch):
    """The ids of the records computed (appended) by in-process runs."""
    ids = []
    original = _store.ResultsFolder.append

    def spy(self, record_id, lines):
        ids.append(record_id)
        return original(self, record_id, lines)

    monkeypatch.setattr(_store.ResultsFolder, "append", spy)
    return ids


def _error_line(err):
    """The one line of a command's error (model loading may have printed progress bars before)."""
    assert "Traceback" not in err
    ours = [
        line
        for line in err.splitlines()
        if line.startswith("mdsd-ot ")
        and not line.startswith(("mdsd-ot study: warning", "mdsd-ot merge: warning"))
    ]
    assert len(ours) == 1 and err.rstrip().endswith(ours[0]), err
    return ours[0]


def _cli(capsys, argv):
    code = main([str(a) for a in argv])
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def _copy_of_reference(lab, tmp_path, name="study"):
    dest = tmp_path / name
    shutil.copytree(lab.ref, dest)
    return dest


def _line_indices(folder, record):
    lines = (folder / "positions.jsonl").read_bytes().splitlines(keepends=True)
    return lines, [i for i, raw in enumerate(lines) if json.loads(raw)["record"] == record]


def _change_token(folder):
    lines, idx = _line_indices(folder, "r2")
    row = json.loads(lines[idx[1]])
    lines[idx[1]] = lines[idx[1]].replace(
        b'"token": %d' % row["token"], b'"token": %d' % ((row["token"] + 1) % V)
    )
    (folder / "positions.jsonl").write_bytes(b"".join(lines))
    return {"r2"}, r"record 'r2' is marked done but its rows differ from their recorded checksum"


def _garbage_middle_line(folder):
    lines = (folder / "positions.jsonl").read_bytes().splitlines(keepends=True)
    mid = len(lines) // 2
    rec = json.loads(lines[mid])["record"]
    n = sum(1 for raw in lines if json.loads(raw)["record"] == rec)
    lines[mid] = b'{"record": "' + rec.encode() + b'", "po\n'
    (folder / "positions.jsonl").write_bytes(b"".join(lines))
    return {rec}, rf"record '{rec}' is marked done but {n - 1} of its {n} rows present"


def _deleted_row(folder):
    lines, idx = _line_indices(folder, "r0")
    del lines[idx[-1]]
    (folder / "positions.jsonl").write_bytes(b"".join(lines))
    return {"r0"}, r"record 'r0' is marked done but 5 of its 6 rows present"


def _row_without_pos(folder):
    lines, idx = _line_indices(folder, "r3")
    row = json.loads(lines[idx[0]])
    del row["pos"]
    lines[idx[0]] = (json.dumps(row) + "\n").encode()
    (folder / "positions.jsonl").write_bytes(b"".join(lines))
    return {"r3"}, r"record 'r3' .*differ from their recorded checksum"


def _duplicated_rows(folder):
    lines, idx = _line_indices(folder, "r3")
    (folder / "positions.jsonl").write_bytes(b"".join(lines + [lines[i] for i in idx]))
    return {"r3"}, r"record 'r3' is marked done but 8 of its 4 rows present"


def _done_torn_mid_id(folder):
    raw = (folder / "done.txt").read_bytes()
    last = raw.rstrip(b"\n").rfind(b"\n") + 1
    (folder / "done.txt").write_bytes(raw[: last + 9])  # '{"id": "r' of the last record
    last_id = json.loads(raw[last:])["id"]
    return {last_id}, r"done.txt: 1 damaged line\(s\) ignored"


def _done_damaged_middle_line(folder):
    lines = (folder / "done.txt").read_bytes().splitlines(keepends=True)
    rec = json.loads(lines[1])["id"]
    lines[1] = b'{"id": "' + rec.encode() + b'", "rows": 0, "sha2\n'
    (folder / "done.txt").write_bytes(b"".join(lines))
    return {rec}, r"done.txt: 1 damaged line\(s\) ignored"


def _blank_line(folder):
    lines = (folder / "positions.jsonl").read_bytes().splitlines(keepends=True)
    lines.insert(3, b"\n")
    (folder / "positions.jsonl").write_bytes(b"".join(lines))
    return set(), None


DAMAGES = [
    _change_token,
    _garbage_middle_line,
    _deleted_row,
    _row_without_pos,
    _duplicated_rows,
    _done_torn_mid_id,
    _done_damaged_middle_line,
    _blank_line,
]


@pytest.mark.parametrize("damage", DAMAGES, ids=[d.__name__.strip("_") for d in DAMAGES])
def test_damage_is_never_silent_and_is_recomputed(lab, tmp_path, capsys, quick, appended, damage):
    folder = _copy_of_reference(lab, tmp_path)
    recomputed, warning = damage(folder)
    # reading: the damaged record is left out, with a warning naming it (never a silent gap)
    expected = {k: r for k, r in lab.ref_rows.items() if k[0] not in recomputed}
    if warning is None:
        assert _rows_by_key(folder) == expected
    else:
        with pytest.warns(study.StudyWarning, match=warning):
            assert _rows_by_key(folder) == expected
    # resuming recomputes exactly the damaged record and gives the uninterrupted result
    code, _, err = _cli(capsys, lab.argv(folder))
    assert code == 0, err
    assert set(appended) == recomputed and len(appended) == len(recomputed)
    if warning is not None:
        assert "mdsd-ot study: warning: " in err
    _assert_same_as_reference(lab, folder)
    assert (folder / "positions.jsonl").read_bytes().endswith(b"\n")


def test_resume_appends_after_a_torn_done_line_without_gluing(lab, tmp_path, capsys, quick):
    """done.txt ending mid-line: the next run's lines start on a line of their own."""
    folder = _copy_of_reference(lab, tmp_path)
    raw = (folder / "done.txt").read_bytes()
    (folder / "done.txt").write_bytes(raw[:-7])
    code, _, err = _cli(capsys, lab.argv(folder))
    assert code == 0, err
    entries = [json.loads(line) for line in (folder / "done.txt").read_text().splitlines()]
    assert sorted(e["id"] for e in entries) == ["r0", "r1", "r2", "r3"]
    _assert_same_as_reference(lab, folder)


def test_merge_leaves_out_damaged_records_with_a_warning(lab, tmp_path, capsys, quick):
    folder = _copy_of_reference(lab, tmp_path)
    _deleted_row(folder)
    code, _, err = _cli(capsys, ["merge", folder, "--out", tmp_path / "m"])
    assert code == 0
    assert "record 'r0' is marked done but 5 of its 6 rows present; left out" in err
    assert "1 of its 4 records" not in err and "3 of its 4 records finished" in err
    rows = _rows_by_key(tmp_path / "m")
    assert rows == {k: r for k, r in lab.ref_rows.items() if k[0] != "r0"}


# -------------------------------------------------------------------------------- record ids


@pytest.mark.parametrize(
    "bad_id,match", [("", "empty id"), ("a\nb", "spans several lines"), ("a\u2028b", "spans several lines")]
)
def test_bad_record_ids_are_refused_up_front(lab, tmp_path, capsys, bad_id, match):
    recs = _records()
    recs[2]["id"] = bad_id
    prompts = _write_prompts(tmp_path / "p.jsonl", recs)
    with pytest.raises(ValueError, match=rf"prompt record 2 .*{match}"):
        study.load_prompts(prompts)
    out = tmp_path / "out"
    code, _, err = _cli(capsys, lab.argv(out, prompts=prompts))
    assert code == 2 and len(err.strip().splitlines()) == 1 and match in err
    assert not out.exists()  # refused before anything was written
    with pytest.raises(ValueError, match=match):
        study.run_study(None, None, recs, out, study.StudyConfig(temperatures=[1.0], ns=[2]), progress=False)
    assert not out.exists()


# -------------------------------------------------------------------------------- identity


def _changed_prompts(lab, tmp_path):
    recs = _records()
    recs[1]["completion_ids"] = [1, 2]  # same ids, different content
    return ["--prompts", _write_prompts(tmp_path / "changed.jsonl", recs)]


IDENTITY_CHANGES = [
    (
        lambda lab, tmp: ["--target", lab.root / "other"],
        r"target: \S*other \(3 files.* now, "
        r"\S*target \(3 files.* before",
    ),
    (lambda lab, tmp: ["--draft", lab.root / "other"], r"draft: \S*other .* now, \S*draft .* before"),
    (lambda lab, tmp: ["--dtype", "bfloat16"], r'dtype: "bfloat16" now, "float32" before'),
    (
        _changed_prompts,
        r"prompts: 4 prompts from \S*changed.jsonl \(sha256 \w+\) now, 4 prompts "
        r"from \S*prompts.jsonl \(sha256 \w+\) before",
    ),
    (lambda lab, tmp: ["--temperatures", "0.7,1"], r"temperatures: \[0.7, 1.0\] now, \[0.5, 1.0\] before"),
    (lambda lab, tmp: ["--n", "2,3"], r"ns: \[2, 3\] now, \[2\] before"),
    (lambda lab, tmp: ["--top-k", "5"], r"top_k: 5 now, null before"),
    (lambda lab, tmp: ["--shard", "1/2"], r"shard: 1/2 now, 0/1 before"),
]


@pytest.mark.parametrize(
    "change,message",
    IDENTITY_CHANGES,
    ids=["target", "draft", "dtype", "prompts", "temperatures", "n", "top_k", "shard"],
)
def test_a_changed_identity_is_refused_before_the_models_load(
    lab, tmp_path, capsys, monkeypatch, change, message
):
    folder = _copy_of_reference(lab, tmp_path)
    before = _snapshot(folder)
    monkeypatch.setattr(study, "load_models", _no_models)
    code, _, err = _cli(capsys, lab.argv(folder) + change(lab, tmp_path))
    assert code == 2
    (line,) = err.strip().splitlines()
    assert "holds results of a different study" in line
    assert __import__("re").search(message, line), line
    assert _snapshot(folder) == before


def test_same_sets_in_another_order_and_a_moved_model_are_the_same_study(
    lab, tmp_path, capsys, monkeypatch, quick, appended
):
    """--temperatures 0.5,1 vs 1,0.5, repeated names, a copied model folder: nothing recomputed."""
    folder = _copy_of_reference(lab, tmp_path)
    moved = tmp_path / "moved_target"
    shutil.copytree(lab.root / "target", moved)
    monkeypatch.setattr(study, "load_models", _no_models)
    argv = lab.argv(folder, target=moved)
    argv[argv.index("1,0.5")] = "0.5,1"
    argv[argv.index("naive")] = "naive,naive"
    code, _, err = _cli(capsys, argv)
    assert code == 0, err
    assert appended == []
    _assert_same_as_reference(lab, folder)


def test_options_spelled_out_with_their_defaults_are_the_same_study(
    lab, tmp_path, capsys, monkeypatch, quick, appended
):
    """The identity stores what an option resolves to: ``--tokenizer`` naming the target and
    ``--mc-samples`` at the verifiers' default resume the reference folder with nothing recomputed
    (they were "a different study: tokenizer: ... now, null before"), and a shard run with them
    merges with one run without."""
    from mdsd_ot.verifiers import DEFAULT_SAMPLES

    folder = _copy_of_reference(lab, tmp_path)
    monkeypatch.setattr(study, "load_models", _no_models)
    spelled = ["--tokenizer", str(lab.root / "target"), "--mc-samples", str(DEFAULT_SAMPLES)]
    code, _, err = _cli(capsys, lab.argv(folder, *spelled))
    assert code == 0, err
    assert appended == []
    _assert_same_as_reference(lab, folder)
    code, _, err = _cli(capsys, lab.argv(folder, "--tokenizer", str(lab.root / "draft")))  # a real change
    assert code == 2 and "tokenizer: " in err and "null before" in err
    monkeypatch.undo()
    for i, extra in ((0, spelled), (1, [])):
        code, _, err = _cli(capsys, lab.argv(tmp_path / f"t{i}", "--shard", f"{i}/2", *extra))
        assert code == 0, err
    code, _, err = _cli(capsys, ["merge", tmp_path / "t0", tmp_path / "t1", "--out", tmp_path / "tm"])
    assert code == 0 and err == "", err
    assert _rows_by_key(tmp_path / "tm") == lab.ref_rows


def test_config_json_deleted_or_empty_with_results_is_refused_naming_it(lab, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(study, "load_models", _no_models)
    for damage in ("deleted", "empty", "garbage"):
        folder = _copy_of_reference(lab, tmp_path, damage)
        cfg = folder / "config.json"
        cfg.unlink() if damage == "deleted" else cfg.write_text("" if damage == "empty" else "{x")
        before = _snapshot(folder)
        code, _, err = _cli(capsys, lab.argv(folder))
        assert code == 2
        (line,) = err.strip().splitlines()
        assert str(folder) in line and "cannot be checked" in line and "restore" in line
        assert {
            "deleted": "no config.json",
            "empty": "config.json is empty",
            "garbage": "config.json is not valid JSON",
        }[damage] in line
        assert _snapshot(folder) == before


def test_an_empty_config_json_without_results_is_rewritten(lab, tmp_path, capsys, quick):
    """The stuck state of a run killed while creating config.json (older versions) heals itself."""
    folder = tmp_path / "stuck"
    folder.mkdir()
    (folder / "config.json").write_text("")
    code, _, err = _cli(capsys, lab.argv(folder))
    assert code == 0, err
    assert "config.json was empty and the folder holds no results yet; writing it again" in err
    _assert_same_as_reference(lab, folder)


def test_folder_of_an_older_version_is_read_but_not_resumed_or_merged(lab, tmp_path, capsys):
    folder = _copy_of_reference(lab, tmp_path)
    cfg = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({"study": cfg["config"], "shard": "0/1"}))
    ids = [json.loads(line)["id"] for line in (folder / "done.txt").read_text().splitlines()]
    (folder / "done.txt").write_text("".join(i + "\n" for i in ids))
    with pytest.warns(study.StudyWarning, match="read without verification"):
        assert _rows_by_key(folder) == lab.ref_rows
    code, _, err = _cli(capsys, lab.argv(folder))
    assert code == 2 and "older mdsd_ot" in err and len(err.strip().splitlines()) == 1
    code, _, err = _cli(capsys, ["merge", folder, "--out", tmp_path / "m"])
    assert code == 2 and "older mdsd_ot" in err and str(folder / "config.json") in err


# ------------------------------------------------------------------------------------ merge


@pytest.fixture
def shards(lab, tmp_path, capsys, quick):
    out = []
    for i in (0, 1):
        code, _, err = _cli(capsys, lab.argv(tmp_path / f"s{i}", "--shard", f"{i}/2"))
        assert code == 0, err
        out.append(tmp_path / f"s{i}")
    return out


def test_merge_into_a_source_is_refused_and_loses_nothing(lab, shards, capsys):
    """#8.4: ``merge s0 s1 --out s0`` used to truncate s0 before reading it."""
    s0, s1 = shards
    before = _snapshot(s0)
    code, _, err = _cli(capsys, ["merge", s0, s1, "--out", s0])
    assert code == 2 and "is also a source" in err and len(err.strip().splitlines()) == 1
    assert _snapshot(s0) == before


def test_merge_of_shards_equals_the_unsharded_run_and_can_be_redone(lab, shards, tmp_path, capsys):
    m = tmp_path / "m"
    for _ in range(2):  # merging again into a previous merge replaces it
        code, _, err = _cli(capsys, ["merge", *shards, "--out", m])
        assert code == 0 and err == ""
        assert _rows_by_key(m) == lab.ref_rows
        for f in ("summary.csv", "summary.json"):
            assert (m / f).read_bytes() == lab.ref_summary[f]
    code, _, err = _cli(capsys, ["merge", *shards, "--out", lab.ref])
    assert code == 2 and "holds the results of a run (shard 0/1)" in err


def test_merge_warns_about_missing_shards_and_running_or_unfinished_sources(lab, shards, tmp_path, capsys):
    s0, s1 = shards
    code, _, err = _cli(capsys, ["merge", s0, "--out", tmp_path / "m0"])
    assert code == 0
    assert "warning: shard(s) 1/2 of the split are not among the merged folders" in err
    lock = _store.FolderLock(s1).acquire()
    try:
        code, _, err = _cli(capsys, ["merge", s0, s1, "--out", tmp_path / "m1"])
    finally:
        lock.release()
    assert code == 0 and f"{s1} is still being written by pid {os.getpid()}" in err
    done = (s1 / "done.txt").read_text().splitlines()
    (s1 / "done.txt").write_text(done[0] + "\n")
    code, _, err = _cli(capsys, ["merge", s0, s1, "--out", tmp_path / "m2"])
    assert code == 0 and f"{s1} has 1 of its 2 records finished" in err


def test_merge_refuses_shards_of_different_models(lab, shards, tmp_path, capsys, quick):
    s0, _ = shards
    other = tmp_path / "other1"
    code, _, err = _cli(capsys, lab.argv(other, "--shard", "1/2", target=lab.root / "other"))
    assert code == 0, err
    code, _, err = _cli(capsys, ["merge", s0, other, "--out", tmp_path / "m"])
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "hold different study results (target: " in err and not (tmp_path / "m").exists()


def test_merge_of_a_config_without_identity_is_one_line(lab, shards, tmp_path, capsys):
    """#8.6: a config.json lacking its study keys used to raise KeyError."""
    s0, s1 = shards
    cfg = json.loads((s1 / "config.json").read_text())
    del cfg["identity"]
    (s1 / "config.json").write_text(json.dumps(cfg))
    code, _, err = _cli(capsys, ["merge", s0, s1, "--out", tmp_path / "m"])
    assert code == 2
    (line,) = err.strip().splitlines()
    assert str(s1 / "config.json") in line and "incomplete" in line


# ------------------------------------------------------------------------------ OS errors


def test_out_that_is_a_file_or_below_a_file_is_one_line(lab, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(study, "load_models", _no_models)
    f = tmp_path / "afile"
    f.write_text("x")
    for out in (f, f / "below"):
        code, _, err = _cli(capsys, lab.argv(out))
        assert code == 2
        (line,) = err.strip().splitlines()
        assert line.startswith(f"mdsd-ot study: error: {out}: ") and "Traceback" not in err
    assert f.read_text() == "x"


def _count_writes(monkeypatch):
    """Record the file (its name, where /proc tells it) of every write call of the store."""
    calls = []
    real = os.write

    def counting(fd, data):
        with contextlib.suppress(OSError):
            calls.append(Path(os.readlink(f"/proc/self/fd/{fd}")).name.split(".tmp-")[0])
            return real(fd, data)
        calls.append(str(len(calls)))
        return real(fd, data)

    monkeypatch.setattr(_store, "_os_write", counting)
    return calls


def test_simulated_disk_full_is_one_line_and_resumable(lab, tmp_path, capsys, monkeypatch, quick):
    """ENOSPC after a partial write, at the first write of each file and at the last write of a
    run, then the same command again (the real tmpfs test covers each file where it can run)."""
    calls = _count_writes(monkeypatch)
    code, _, err = _cli(capsys, lab.argv(tmp_path / "count"))
    assert code == 0, err
    assert len(calls) >= 10
    real = os.write
    firsts = [k for k, f in enumerate(calls, 1) if f not in calls[: k - 1]]  # first of each file
    for k in sorted(set(firsts) | {len(calls)}):
        state = {"n": 0}

        def failing(fd, data):
            state["n"] += 1
            if state["n"] == k and len(data) > 1:
                return real(fd, bytes(data[: len(data) // 2]))  # a partial write, then full
            if state["n"] >= k:
                raise OSError(errno.ENOSPC, "No space left on device")
            return real(fd, data)

        out = tmp_path / f"full{k}"
        monkeypatch.setattr(_store, "_os_write", failing)
        code, _, err = _cli(capsys, lab.argv(out))
        monkeypatch.setattr(_store, "_os_write", real)
        assert code == 2, (k, err)
        line = _error_line(err)
        assert line.startswith(f"mdsd-ot study: error: {out}{os.sep}") and line.endswith(
            ": No space left on device"
        ), line
        code, _, err = _cli(capsys, lab.argv(out))
        assert code == 0, (k, err)
        _assert_same_as_reference(lab, out)


@pytest.mark.parametrize("err_no", [errno.EACCES, errno.EROFS])
def test_simulated_unwritable_folder_is_one_line(lab, tmp_path, capsys, monkeypatch, err_no):
    """Tests run as root here, where chmod does not deny writes: the refusal is simulated."""
    folder = _copy_of_reference(lab, tmp_path)
    before = _snapshot(folder)
    monkeypatch.setattr(study, "load_models", _no_models)

    def denied(path, flags, mode=0o777):
        raise OSError(err_no, os.strerror(err_no))

    monkeypatch.setattr(_store, "_os_open", denied)
    code, _, err = _cli(capsys, lab.argv(folder))
    assert code == 2
    (line,) = err.strip().splitlines()
    assert line == f"mdsd-ot study: error: {folder / '.lock'}: {os.strerror(err_no)}"
    monkeypatch.setattr(
        _store, "_temp_file", lambda *a, **kw: (_ for _ in ()).throw(OSError(err_no, os.strerror(err_no)))
    )
    code, _, err = _cli(capsys, ["merge", folder, "--out", tmp_path / "m"])
    assert code == 2 and len(err.strip().splitlines()) == 1 and os.strerror(err_no) in err
    assert _snapshot(folder) == before


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc to name descriptors")
def test_every_replacement_is_fsynced_before_and_its_folder_after(lab, tmp_path, capsys, monkeypatch, quick):
    events = []

    def name(fd):
        return os.readlink(f"/proc/self/fd/{fd}")

    real_write, real_fsync, real_replace = os.write, os.fsync, os.replace

    def write(fd, data):
        events.append(("write", name(fd)))
        return real_write(fd, data)

    def fsync(fd):
        events.append(("fsync", name(fd)))
        return real_fsync(fd)

    def replace(a, b):
        events.append(("replace", str(a), str(b)))
        return real_replace(a, b)

    monkeypatch.setattr(_store, "_os_write", write)
    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    out = tmp_path / "sync"
    code, _, err = _cli(capsys, lab.argv(out))
    assert code == 0, err
    replaces = [i for i, e in enumerate(events) if e[0] == "replace"]
    assert len(replaces) == 4  # config.json and the three summaries
    for i in replaces:
        _, src, dst = events[i]
        last_write = max(j for j in range(i) if events[j] == ("write", src))
        assert ("fsync", src) in events[last_write:i], dst
        assert ("fsync", str(Path(dst).parent)) in events[i:], dst
    for f in ("positions.jsonl", "done.txt"):  # each append is fsync'd before the next step
        path = str(out / f)
        for j, e in enumerate(events):
            if e == ("write", path):
                assert events[j + 1] == ("fsync", path)
    # per record: its rows (none for the empty continuation of r1), then its done line
    appends = [e[1] for e in events if e[0] == "write" and e[1].endswith(("jsonl", "txt"))]
    rows, done = str(out / "positions.jsonl"), str(out / "done.txt")
    assert appends == [rows, done, done, rows, done, rows, done]


# ---------------------------------------------------------------------------------- progress


def test_progress_after_a_resume_counts_only_the_new_work(lab, tmp_path, capsys, monkeypatch, quick):
    bars = []

    class FakeBar:
        def __init__(self, **kw):
            self.kw, self.updates = kw, []
            bars.append(self)

        def update(self, k=1):
            self.updates.append(k)

        def set_postfix(self, **kw):
            self.postfix = kw

        def close(self):
            pass

    import types

    monkeypatch.setitem(sys.modules, "tqdm.auto", types.SimpleNamespace(tqdm=FakeBar))
    folder = _copy_of_reference(lab, tmp_path)
    lines = (folder / "done.txt").read_text().splitlines()
    (folder / "done.txt").write_text("\n".join(lines[:2]) + "\n")
    argv = [a for a in lab.argv(folder) if a != "--no-progress"]
    code, _, err = _cli(capsys, argv)
    assert code == 0, err
    assert "2 of 4 prompts already finished, 2 to compute" in err
    (bar,) = bars
    assert bar.kw["total"] == 4 and bar.kw["initial"] == 2  # starts at 2: not counted as work now
    assert bar.updates == [1, 1]
    assert bar.postfix["positions"] == 4 + 2  # the positions of r2 and r3 only
    _assert_same_as_reference(lab, folder)


# ------------------------------------------------------------------------- Ctrl-C at startup


_SITE_HOOK = '''
import os, signal, sys

class _CtrlC:
    """Deliver a real SIGINT while module {name!r} is being imported."""
    fired = False

    def find_spec(self, name, path=None, target=None):
        if name == {name!r} and not _CtrlC.fired:
            _CtrlC.fired = True
            os.kill(os.getpid(), signal.SIGINT)
        return None

sys.meta_path.insert(0, _CtrlC())
'''


def _sigint_default():
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.parametrize(
    "module,argv,message",
    [
        ("numba", ["bound", "p.json"], "mdsd-ot: interrupted"),  # while `import mdsd_ot` runs
        ("torch", ["study"], "mdsd-ot study: interrupted"),  # while the study loads torch
    ],
)
def test_ctrl_c_during_imports_is_one_line_and_status_130(lab, tmp_path, module, argv, message):
    script = Path(sys.executable).with_name("mdsd-ot")
    if not script.exists():
        pytest.skip("the mdsd-ot console script is not installed next to this python")
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(_SITE_HOOK.format(name=module))
    (tmp_path / "p.json").write_text('{"p": [0.5, 0.5], "q": [0.5, 0.5]}')
    if argv == ["study"]:
        argv = lab.argv(tmp_path / "out")
    env = dict(os.environ, PYTHONPATH=str(site))
    r = subprocess.run(
        [str(script), *argv],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        # a background job inherits SIGINT ignored, and Python then installs no KeyboardInterrupt
        # handler: give the child the default disposition, as an interactive shell would
        preexec_fn=_sigint_default,
    )
    assert r.returncode == 130, r.stderr
    assert r.stderr.strip().splitlines() == [message], r.stderr


def test_merge_ignores_the_fields_it_is_told_to(tmp_path):
    """``merge_folders(..., ignore_fields=...)``: two copies of a record whose rows differ only in
    those top-level fields (a decoder's wall-clock timings) merge without a warning; a difference
    anywhere else is still warned about, once per record, and the first copy is kept."""
    import warnings

    from mdsd_ot import _store

    def folder(name, shard, rows):
        with _store.ResultsFolder(tmp_path / name, kind="demo", identity={"x": 1}, shard=shard) as f:
            for rec, lines in rows.items():
                f.append(rec, [json.dumps(r) for r in lines])
        return tmp_path / name

    def rows(seconds, value):
        return {
            "a": [{"record": "a", "pos": 0, "T": 1.0, "v": 0.5, "seconds": seconds}],
            "b": [{"record": "b", "pos": 0, "T": 1.0, "v": value, "seconds": seconds}],
        }

    s0 = folder("s0", "0/2", rows(1.25, 0.75))
    s1 = folder("s1", "1/2", rows(9.5, 0.75))  # the same records, other timings
    s2 = folder("s2", "1/2", rows(9.5, 0.25))  # record b really differs
    for sources, ignore, conflicts in (
        ([s0, s1], ("seconds",), []),
        ([s0, s1], (), ["'a'", "'b'"]),
        ([s0, s2], ("seconds",), ["'b'"]),
    ):
        dest = tmp_path / f"m{len(list(tmp_path.iterdir()))}"
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            _store.merge_folders(sources, dest, kind="demo", ignore_fields=ignore)
        found = sorted(str(w.message).split()[1] for w in caught if "different rows" in str(w.message))
        assert found == conflicts, (ignore, [str(w.message) for w in caught])
        kept = {r["record"]: r for r in _store.read_rows(dest)}
        assert kept["a"]["seconds"] == 1.25 and kept["b"]["v"] == 0.75  # the first copy

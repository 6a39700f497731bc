"""Scaling out: the shards of a sharded job as Ray tasks, faults survived, one merged result.

A *sharded job kind* (the study, the tree decoder) is three functions named in a
:class:`JobKind`: ``run_shard(job, shard, out_dir) -> None`` runs shard ``"i/N"`` of ``job`` in
its own results folder and resumes from what that folder already holds; ``merge(sources, dest)``
combines the shard folders into the result a single process gives; ``count(job) -> int``
(optional) is the number of records of the whole job, for the progress bar. :func:`run_sharded`
runs every shard of a job as one Ray task and merges them (README, "Scaling out"); why the merged
result equals one process's, retries and resumes included: docs/math.md#sharded-runs.

Design (README, "Scaling out: Ray and Slurm"):

* **Records go to a shared folder, not back to the driver.** Shard ``i`` of ``N`` writes
  ``OUT/shards/shard-i-of-N/`` through :mod:`mdsd_ot._store` (lock, identity, checksummed rows,
  atomic replacement). A task killed at any instant (worker killed, out of memory, node lost)
  keeps every record it finished; Ray retries it (``max_retries``) and the retry resumes from the
  folder, dropping any torn or unclaimed rows, so no record is lost or duplicated. Results
  returned to the driver would be lost with the task (or with the driver) and would hold a whole
  shard's rows in memory; a folder also lets a whole interrupted run resume with the same command
  and is what a Slurm array writes too, so one merge serves both.
* **One task per shard, more shards than workers** (by default four per task slot, at most one per
  record): a retried shard repeats little, and fast workers take more shards.
* **Models are loaded once per worker process**: the job kind keeps them in a per-process cache
  (``mdsd_ot.study.job.cached_models``, shared by the decoder's tasks), and the tasks are declared
  with ``max_calls=0`` so that Ray reuses a worker for the next shard (its default for GPU tasks is
  a new process per task).
* **The driver** holds the lock of ``OUT/shards`` (a second driver on the same folder is refused),
  polls the shards' ``done.txt`` files for one progress bar over all shards, waits for every
  task (a failed shard does not stop the others: their records are kept), then merges with the job
  kind's own merge into ``OUT`` (the same summary files as a single-process run).
* **Application errors are not retried** (bad input, a folder of another run: they would fail
  again); worker deaths are, up to ``max_retries`` times each.

Plugging in a job kind (as the tree decoder does below)::

    register(JobKind("decode", run_shard="mdsd_ot.decode.job:shard_task",
                     merge="mdsd_ot.decode.job:merge_shards", count="mdsd_ot.decode.job:count_records"))

and its command takes the same ``--ray`` options through ``mdsd_ot.commands._ray``. The entry
points are named by import path, so that importing this module imports neither ray nor
the job's dependencies, and a kind registered at run time reaches workers that can import it.

>>> sorted(JOB_KINDS)
['decode', 'study']
>>> shard_folder("out", 3, 16).as_posix()
'out/shards/shard-03-of-16'
>>> parse_memory("8G")
8589934592
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import re
import socket
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

from . import _store
from ._config import SCALE_LOCK_WAIT_S, SCALE_POLL_S, SCALE_SHARDS_PER_SLOT
from .backends import install_hint

__all__ = [
    "JobKind",
    "JOB_KINDS",
    "register",
    "run_sharded",
    "shard_folder",
    "ShardsFailed",
    "ScaleWarning",
    "parse_memory",
]

#: Folder of the shard folders inside a run's output folder.
SHARDS = "shards"
#: One JSON line per task attempt in each shard folder (start time, pid, host): retries show here.
ATTEMPTS = "attempts.jsonl"
_SHARD_RE = re.compile(r"^shard-(\d+)-of-(\d+)$")


@dataclass(frozen=True)
class JobKind:
    """A sharded job kind: its entry points, as ``"module:function"`` import paths.

    Attributes
    ----------
    name : str
    run_shard : str
        ``f(job, shard: str, out_dir: Path) -> None``: run shard ``"i/N"`` of ``job`` in
        ``out_dir``, resuming from the records already there, without output (no progress bar).
        Idempotent: a finished shard returns at once.
    merge : str
        ``f(sources: list[Path], dest: Path) -> Path``: combine the shard folders.
    count : str or None
        ``f(job) -> int``: records in the whole job (the progress bar's total); None: summed from
        the ``expected`` counts the shard folders record as they open.

    The progress bar counts the lines of each shard folder's ``done.txt``: a kind that writes its
    folders with :class:`mdsd_ot._store.ResultsFolder` gets it for free.
    """

    name: str
    run_shard: str
    merge: str
    count: str | None = None

    def entry(self, which: str):
        """The function named by ``run_shard``, ``merge`` or ``count`` (imported now)."""
        path = getattr(self, which)
        module, _, function = path.partition(":")
        return getattr(importlib.import_module(module), function)


#: Registered job kinds by name.
JOB_KINDS: dict[str, JobKind] = {}


def register(kind: JobKind) -> JobKind:
    """Add (or replace) a job kind; returns it.

    Parameters
    ----------
    kind : JobKind
        ``TypeError`` for anything else; ``ValueError`` unless ``run_shard``, ``merge`` (and ``count``
        if set) are ``"module:function"``.

    Returns
    -------
    JobKind
    """
    if not isinstance(kind, JobKind):
        raise TypeError(f"register takes a JobKind, got {type(kind).__name__}")
    for which in ("run_shard", "merge") + (("count",) if kind.count else ()):
        if ":" not in getattr(kind, which):
            raise ValueError(f"JobKind.{which} must be 'module:function', got {getattr(kind, which)!r}")
    JOB_KINDS[kind.name] = kind
    return kind


register(
    JobKind(
        "study",
        run_shard="mdsd_ot.study.job:shard_task",
        merge="mdsd_ot.study.job:merge_shards",
        count="mdsd_ot.study.job:count_records",
    )
)
register(
    JobKind(
        "decode",
        run_shard="mdsd_ot.decode.job:shard_task",
        merge="mdsd_ot.decode.job:merge_shards",
        count="mdsd_ot.decode.job:count_records",
    )
)


class ScaleWarning(_store.StoreWarning):
    """A run on Ray may not go as asked (shown like the study folders' warnings)."""


def _check_feasible(nodes, num_cpus, num_gpus, memory) -> None:
    """Warn when no live node of the cluster has the resources one task asks for: Ray would keep
    the tasks waiting (for an autoscaler to add such a node) without a word."""
    alive = [n.get("Resources", {}) for n in nodes if n.get("Alive", True)]
    for r in alive:
        if r.get("CPU", 0) >= num_cpus and r.get("GPU", 0) >= num_gpus:
            if r.get("memory", 0) >= (memory or 0):
                return
    need = f"{num_cpus:g} CPU, {num_gpus:g} GPU" + (f", {memory / 2**30:.1f} GiB of memory" if memory else "")
    have = "; ".join(
        f"{r.get('CPU', 0):g} CPU, {r.get('GPU', 0):g} GPU, {r.get('memory', 0) / 2**30:.1f} GiB"
        for r in alive
    )
    warnings.warn(
        f"no node of the Ray cluster has what one task asks for ({need}; nodes now: {have or 'none'}); "
        f"the tasks wait until such a node joins. Lower --ray-cpus/--ray-gpus/--ray-memory, or "
        f"press Ctrl-C (finished records are kept)",
        ScaleWarning,
        stacklevel=3,
    )


class ShardsFailed(RuntimeError):
    """Some shards did not finish (retries exhausted or an application error).

    Every record they finished is kept in their folders: rerunning the same command resumes them.
    ``failures`` maps each failed shard (``"i/N"``) to a one-line reason.
    """

    def __init__(self, failures: dict, out: Path, n: int):
        self.failures, self.out = dict(failures), Path(out)
        shard, reason = next(iter(self.failures.items()))
        more = f" (and {len(self.failures) - 1} more)" if len(self.failures) > 1 else ""
        super().__init__(
            f"{len(self.failures)} of {n} shards did not finish; shard {shard}: {reason}{more}. "
            f"The records they finished are kept in {self.out / SHARDS}: fix the cause if there is "
            f"one and rerun the same command to resume"
        )


def shard_folder(out, i: int, n: int) -> Path:
    """``OUT/shards/shard-i-of-N`` (``i`` zero-padded to the width of ``N - 1``).

    Parameters
    ----------
    out : str or os.PathLike
        The run's folder.
    i, n : int
        Shard ``i`` of ``n``.

    Returns
    -------
    pathlib.Path
    """
    width = len(str(max(n - 1, 0)))
    return Path(out) / SHARDS / f"shard-{i:0{width}d}-of-{n}"


def parse_memory(text) -> int:
    """Bytes from ``"512M"``, ``"8G"``, ``"1.5T"`` (powers of 1024) or a plain number of bytes.

    Parameters
    ----------
    text : str, int or float
        A size such as ``"512M"``, ``"8GiB"`` (case-insensitive) or a number of bytes (``ValueError`` for
        another text or less than one byte).

    Returns
    -------
    int
        Bytes.
    """
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        value = float(text)
    else:
        m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([KMGT]?)i?B?\s*", str(text), flags=re.I)
        if m is None:
            raise ValueError(f"memory must look like 512M, 8G or a number of bytes, got {text!r}")
        value = float(m.group(1)) * 1024 ** "_KMGT".index(m.group(2).upper() or "_")
    if not value >= 1:
        raise ValueError(f"memory must be at least one byte, got {text!r}")
    return int(value)


def _reason(exc: BaseException, retries: int) -> str:
    """One line saying why a shard's task failed."""
    cause = getattr(exc, "cause", None)  # ray.exceptions.RayTaskError: the job itself raised
    if isinstance(cause, BaseException):
        text = f"{type(cause).__name__}: {' '.join(str(cause).split())}"
    else:  # its worker died (killed, out of memory, node lost) on every attempt
        first = " ".join(str(exc).split()).split(". ")[0]
        text = f"its worker died on each of {retries + 1} attempt(s) ({type(exc).__name__}: {first})"
    return text[:600]


def _existing_splits(root: Path) -> set:
    found = set()
    if root.is_dir():
        for p in root.iterdir():
            m = _SHARD_RE.match(p.name)
            if m and p.is_dir():
                found.add(int(m.group(2)))
    return found


# ------------------------------------------------------------------------------ the shard task


def _install_fault(plan: dict, shard: str):
    """Test hook: make this task fail or stall at a write step (:func:`mdsd_ot._store.checkpoint`).

    ``plan``: ``shard`` (``"i/N"``, or ``"*"`` for every shard), ``step`` (a checkpoint name:
    ``rows``, ``rows:written``, ``done``, ...) and either ``sleep`` (seconds to wait at every such
    step) or ``count`` (die at the count-th such step: ``os._exit``, or ``signal`` to send to itself
    after writing the fraction ``torn`` of that step's bytes, as a crash in the middle of a
    ``write`` would). A dying plan fires once: it first creates the file ``marker``, and a retry
    that finds it runs normally. Returns the hook to restore, or None.
    """
    if not plan or plan.get("shard") not in ("*", shard):
        return None
    if plan.get("sleep") is None:
        try:
            fd = os.open(plan["marker"], os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return None
        os.close(fd)
    previous, calls = _store.checkpoint, []

    def hook(step, **context):
        if step != plan["step"]:
            return
        if plan.get("sleep") is not None:
            time.sleep(plan["sleep"])
            return
        calls.append(step)
        if len(calls) == plan.get("count", 1):
            data, fd = context.get("data"), context.get("fd")
            if plan.get("torn") is not None and data and fd is not None:
                os.write(fd, data[: max(1, int(len(data) * plan["torn"]))])
            sys.stdout.flush()
            sys.stderr.flush()
            if plan.get("signal"):
                os.kill(os.getpid(), int(plan["signal"]))
            os._exit(137)

    _store.checkpoint = hook
    return previous


def _log_attempt(out_dir: Path, entry: dict) -> None:
    """Append one JSON line to the shard's attempts log (one ``write`` of a short line)."""
    fd = os.open(out_dir / ATTEMPTS, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(entry) + "\n").encode("utf-8"))
    finally:
        os.close(fd)


def _shard_task(kind: JobKind, job, shard: str, out_dir: str, fault=None) -> dict:
    """Run one shard (in a worker): log the attempt, run the kind's entry point, log the end."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    t0, c0 = time.time(), time.process_time()
    who = {"pid": os.getpid(), "host": socket.gethostname()}
    _log_attempt(out_dir, {"start": time.strftime("%Y-%m-%d %H:%M:%S %z"), **who})
    restore = _install_fault(fault, shard)
    try:
        run = kind.entry("run_shard")
        deadline = time.time() + SCALE_LOCK_WAIT_S
        while True:
            try:
                with _store.one_line_warnings(f"{kind.name} shard {shard}"):
                    run(job, shard, out_dir)
                break
            except _store.FolderBusy:
                # the previous attempt of this shard may still be alive on a node Ray declared
                # lost; its lock goes when it does
                if time.time() > deadline:
                    raise
                time.sleep(1.0)
    finally:
        if restore is not None:
            _store.checkpoint = restore
    # wall and CPU seconds of this attempt (imports and model loading of a new worker included)
    end = {"end": time.strftime("%Y-%m-%d %H:%M:%S %z"), **who}
    end.update(wall_s=round(time.time() - t0, 3), cpu_s=round(time.process_time() - c0, 3))
    _log_attempt(out_dir, end)
    return {"shard": shard, **end}


def shard_log(folder) -> list[dict]:
    """The attempts log of a shard folder: a ``start`` entry per task attempt, an ``end`` entry
    (with ``wall_s`` and ``cpu_s``) per attempt that finished."""
    try:
        raw = (Path(folder) / ATTEMPTS).read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    out = []
    for line in raw.splitlines():
        with contextlib.suppress(ValueError):
            out.append(json.loads(line))
    return out


def attempts(folder) -> int:
    """Number of task attempts recorded in a shard folder (0 when it never started)."""
    return sum(1 for e in shard_log(folder) if "start" in e)


# ------------------------------------------------------------------------------------ progress


class _Progress:
    """One bar over all shards, fed by their ``done.txt`` files (records finished so far)."""

    def __init__(self, folders, total, desc, show: bool):
        self.folders, self.total, self.desc = list(folders), total, desc
        self.expected, self.show, self.bar, self.t_print = {}, show, None, 0.0
        self.last = self.count()
        if show:
            with contextlib.suppress(ImportError):  # without tqdm: a line every few seconds
                from tqdm.auto import tqdm

                self.bar = tqdm(
                    total=self.total_now(), initial=self.last, desc=desc, unit="record", dynamic_ncols=True
                )

    def count(self) -> int:
        done = 0
        for f in self.folders:
            try:
                done += (f / _store.DONE).read_bytes().count(b"\n")
            except OSError:
                pass
            if f not in self.expected:
                cfg = _store.peek_config(f) if (f / _store.CONFIG).exists() else None
                if cfg and isinstance(cfg.get("expected"), int):
                    self.expected[f] = cfg["expected"]
        return done

    def total_now(self):
        if self.total is not None:
            return self.total
        return sum(self.expected.values()) if len(self.expected) == len(self.folders) else None

    def update(self, left: int) -> None:
        now = self.count()
        if self.bar is not None:
            total = self.total_now()
            if total is not None and self.bar.total != total:
                self.bar.total = total
            self.bar.update(now - self.last)
            self.bar.set_postfix(shards_left=left, refresh=False)
        elif self.show and (now != self.last) and time.time() - self.t_print > 5:
            self.t_print = time.time()
            total = self.total_now() or "?"
            print(f"{self.desc}: {now}/{total} records, {left} shards left", flush=True)
        self.last = now

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


# -------------------------------------------------------------------------------------- driver


def _ray():
    try:
        import ray
    except ImportError as exc:
        raise ImportError("running on Ray needs the ray extra; " + install_hint("ray")) from exc
    return ray


def _default_shards(ray, num_cpus, num_gpus, total) -> int:
    res = ray.cluster_resources()
    slots = int(res.get("GPU", 0) // num_gpus) if num_gpus else int(res.get("CPU", 1) // num_cpus)
    n = SCALE_SHARDS_PER_SLOT * max(1, slots)
    return max(1, min(n, total)) if total is not None else n


def run_sharded(
    kind,
    job,
    out,
    *,
    shards: int | None = None,
    address: str | None = None,
    num_cpus: float = 1,
    num_gpus: float = 0,
    memory=None,
    max_retries: int = 3,
    progress: bool = True,
    _fault: dict | None = None,
) -> Path:
    """Run every shard of ``job`` as a Ray task and merge them into ``out``.

    Parameters
    ----------
    kind : str or JobKind
        A name of :data:`JOB_KINDS` (``"study"``, ``"decode"``) or a :class:`JobKind`.
    job
        The job description its entry points take (``mdsd_ot.study.job.StudyJob``; for
        ``"decode"`` a ``mdsd_ot.decode.DecodeConfig`` with ``target`` and ``draft``); it is
        pickled to the workers, so it names files every worker can read.
    out : path
        Output folder, on a file system every worker and the driver share: shard ``i`` of ``N``
        writes ``out/shards/shard-i-of-N``, and the merged result (the summary files of a
        single-process run) goes to ``out``.
    shards : int or None
        Number of shards ``N``. Default: the split found in ``out/shards`` (a rerun resumes it;
        another ``N`` is refused), else four per task slot of the cluster, at most one per record.
    address : str or None
        ``ray.init(address=...)``: ``"auto"`` or ``"host:6379"`` for a running cluster,
        ``"ray://host:10001"`` for Ray Client; None: the session already initialised in this
        process, else Ray's default (a running local cluster, or a new one for this run, shut down
        at the end).
    num_cpus, num_gpus : float
        Resources of each task (``num_gpus=1``: one GPU per shard; with ``num_gpus=0`` torch uses
        ``num_cpus`` threads).
    memory : int or str or None
        Memory to reserve per task (``"16G"``), for Ray's scheduler.
    max_retries : int
        Retries of a task whose worker died (killed, out of memory, node lost); each retry resumes
        from the shard's folder. Errors raised by the job itself are not retried.
    progress : bool
        One progress bar (tqdm when installed) over the records of all shards.

    Returns
    -------
    Path
        ``out``.

    Raises
    ------
    ShardsFailed
        When shards did not finish (after the others ran to the end); rerun to resume.
    StoreError
        ``out`` holds the results of an unsharded run, or ``out/shards`` is used by another driver.
    """
    if isinstance(kind, str):
        if kind not in JOB_KINDS:
            raise ValueError(f"unknown job kind {kind!r}; registered: {', '.join(sorted(JOB_KINDS))}")
        kind = JOB_KINDS[kind]
    elif not isinstance(kind, JobKind):
        raise TypeError(f"kind must be a job kind name or a JobKind, got {type(kind).__name__}")
    if shards is not None and (isinstance(shards, bool) or not isinstance(shards, int) or shards < 1):
        raise ValueError(f"shards must be a positive integer, got {shards!r}")
    if not (isinstance(max_retries, int) and max_retries >= 0):
        raise ValueError(f"max_retries must be an integer >= 0, got {max_retries!r}")
    for name, value, low in (("num_cpus", num_cpus, 0), ("num_gpus", num_gpus, 0)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= low:
            raise ValueError(f"{name} must be a number >= 0, got {value!r}")
    if num_cpus == 0 and num_gpus == 0:
        raise ValueError("a task needs num_cpus > 0 or num_gpus > 0")
    memory = None if memory is None else parse_memory(memory)
    out = Path(os.path.abspath(os.path.expanduser(os.fspath(out))))  # workers may not share our cwd
    state, recorded, problem = _store._load_config(out) if out.is_dir() else ("missing", None, "")
    if state == "ok" and recorded.get("shard") != "merged":
        raise _store.StoreError(
            f"{out} holds the results of an unsharded run (shard {recorded.get('shard')}); a sharded "
            f"run would replace its summary: resume it without Ray, or choose a new output folder"
        )
    if state != "ok" and _store._holds_results(out):
        raise _store.StoreError(
            f"{out} holds results that are not a sharded run's ({_store.CONFIG} {problem}); choose a "
            f"new output folder"
        )
    root = out / SHARDS
    root.mkdir(parents=True, exist_ok=True)
    lock = _store.FolderLock(root).acquire()  # one driver per output folder
    try:
        resources = (num_cpus, num_gpus, memory, max_retries)
        return _drive(kind, job, out, root, shards, address, resources, progress, _fault)
    finally:
        lock.release()


def _drive(kind, job, out, root, shards, address, resources, progress, fault):
    num_cpus, num_gpus, memory, max_retries = resources
    splits = _existing_splits(root)
    if len(splits) > 1:
        raise _store.StoreError(
            f"{root} holds shard folders of several splits ({', '.join(map(str, sorted(splits)))} "
            f"shards); keep one split (move the others away) or choose a new output folder"
        )
    if splits and shards is not None and shards not in splits:
        (n_old,) = splits
        raise ValueError(
            f"{root} holds a run split into {n_old} shards; resume it with shards={n_old} "
            f"(--shards {n_old}), or choose a new output folder"
        )
    total = kind.entry("count")(job) if kind.count else None
    ray = _ray()
    started = False
    if not ray.is_initialized():
        ray.init(address=address, include_dashboard=False)
        started = True  # a cluster started here stops at the end; a remote one is disconnected
    elif address is not None:
        raise ValueError(f"Ray is already initialised in this process; address={address!r} cannot apply")
    try:
        _check_feasible(ray.nodes(), num_cpus, num_gpus, memory)
        n = shards or (next(iter(splits)) if splits else _default_shards(ray, num_cpus, num_gpus, total))
        folders = [shard_folder(out, i, n) for i in range(n)]
        options = dict(
            num_cpus=num_cpus,
            num_gpus=num_gpus,
            max_retries=max_retries,
            retry_exceptions=False,
            # keep the worker (and its cached models) for the next shard, GPU tasks included
            # (Ray's default for them is one task per process); .options() would drop max_calls
            max_calls=0,
        )
        if memory is not None:
            options["memory"] = memory
        task = ray.remote(**options)(_shard_task)
        refs = {}
        for i, folder in enumerate(folders):
            shard = f"{i}/{n}"
            ref = task.remote(kind, job, shard, str(folder), fault)
            refs[ref] = shard
        bar = _Progress(folders, total, f"{kind.name} on ray ({n} shards)", progress)
        failures, pending = {}, list(refs)
        try:
            while pending:
                ready, pending = ray.wait(pending, num_returns=len(pending), timeout=SCALE_POLL_S)
                for ref in ready:
                    try:
                        ray.get(ref)
                    except Exception as exc:  # noqa: BLE001 - reported per shard, the others go on
                        failures[refs[ref]] = _reason(exc, max_retries)
                bar.update(len(pending))
        except KeyboardInterrupt:
            for ref in pending:  # the shards resume from their folders on the next run
                with contextlib.suppress(Exception):
                    ray.cancel(ref, force=True)
            raise
        finally:
            bar.close()
        if failures:
            order = sorted(failures, key=lambda shard: int(shard.split("/")[0]))
            raise ShardsFailed({shard: failures[shard] for shard in order}, out, n)
        unseen = [f for f in folders if not (f / _store.CONFIG).is_file()]
        if unseen:
            raise _store.StoreError(
                f"the tasks finished but the driver does not see {len(unseen)} of the {n} shard "
                f"folders (e.g. {unseen[0]}): the output folder must be on a file system that the "
                f"driver and every worker share (NFS, Lustre, ...), at the same path"
            )
        kind.entry("merge")(folders, out)
    finally:
        if started:
            ray.shutdown()
    return out

"""One shard of a study made from files: the unit of work of ``mdsd-ot study``, of one task of a
Slurm array and of one Ray task (:mod:`mdsd_ot.scale`).

:class:`StudyJob` names everything a shard needs (model folders, prompts, parameters) and nothing
that lives in memory, so that it can be sent to another process or machine. :func:`run_shard`
opens (or resumes) the shard's folder, loads the models only if something is left to compute and
runs it; models are kept in a per-process cache (:func:`cached_models`), so that a worker running
several shards of one study loads them once.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from .. import _store
from ..runs import inputs as _inputs
from ..runs.inputs import load_models, load_prompts  # noqa: F401  (mdsd_ot.study.job.load_models)
from ..runs.shards import worker_setup, worker_threads
from .config import StudyConfig
from .runner import (
    _parse_shard,
    _shard_records,
    merge,
    open_study,
    remaining_records,
    run_study,
    study_identity,
)

#: Title of the report of an unsharded run; a sharded run merged by :func:`merge_shards` uses it
#: too, so that its summary files are byte-identical to those of one process.
TITLE = "mdsd_ot study"


@dataclass(frozen=True)
class StudyJob:
    """A study described by files and parameters only (picklable, sent to workers as is).

    Attributes
    ----------
    target, draft : str
        Model folders (or hub names) that every worker can read.
    config : StudyConfig
    prompts : str or list of dict
        As :func:`mdsd_ot.study.load_prompts` takes them (a file every worker can read, or the
        records themselves).
    tokenizer : str or None
        Tokenizer source (default: the target's folder).
    dtype, device, threads : str, str, int or None
        As :func:`mdsd_ot.study.load_models` takes them (``threads=None`` in a Ray task: the CPUs
        the task was given, from ``OMP_NUM_THREADS``).
    meta : dict
        Provenance written to each shard's ``config.json`` (never compared).
    """

    target: str
    draft: str
    config: StudyConfig = field(default_factory=StudyConfig)
    prompts: object = "humaneval"
    tokenizer: str | None = None
    dtype: str = "float32"
    device: str = "auto"
    threads: int | None = None
    meta: dict = field(default_factory=dict)


# per-process caches: the loaded models of the last run (the runs wing's, shared with the decoder's
# tasks: mdsd_ot.runs.inputs.cached_models) and the last identity of the study's model files
_MODELS = _inputs._MODELS
_IDENTITY: dict = {}


def cached_models(job: StudyJob):
    """``(target, draft, tokenizer)`` of ``job``, loaded once per process (the last pair kept;
    :func:`mdsd_ot.runs.inputs.cached_models`, which the decoder's tasks share)."""
    return _inputs.cached_models(job)


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def run_shard(job: StudyJob, shard, out, *, progress: bool = True, log=_stderr) -> Path:
    """Run (or resume) shard ``shard`` (``"i/N"`` or None for all) of ``job`` in folder ``out``.

    The identity (model files hashed), the lock and the integrity check of the folder all come
    before the models load; a folder of another study or shard is refused (``StoreError``) before
    any work. Models are loaded only when prompts are left, through :func:`cached_models`. An
    unsharded run writes its report; shards are combined by :func:`merge_shards`.
    ``log(message)`` receives the progress lines (resumption, model loading); None for none.
    """
    t0 = time.time()
    log = log or (lambda message: None)
    config = job.config.validate()
    records = load_prompts(job.prompts)
    recorded = _store.peek_config(out)
    key = (job.target, job.draft, job.tokenizer)
    previous = (recorded or {}).get("identity") or _IDENTITY.get(key)
    identity = study_identity(
        config,
        records,
        target=job.target,
        draft=job.draft,
        tokenizer=job.tokenizer,
        dtype=job.dtype,
        prompts=job.prompts if isinstance(job.prompts, (str, os.PathLike)) else None,
        previous=previous,
    )
    _IDENTITY.clear()  # a resume from the same files skips hashing them again (size, times, inode)
    _IDENTITY[key] = identity
    meta = {
        "target": job.target,
        "draft": job.draft,
        "tokenizer": job.tokenizer,
        "prompts": str(job.prompts) if isinstance(job.prompts, (str, os.PathLike)) else "records",
        "device": job.device,
        **job.meta,
    }
    with open_study(out, config, records, identity=identity, shard=shard, meta=meta) as folder:
        mine, todo = remaining_records(folder, records, config)
        if len(todo) < len(mine):
            log(
                f"resuming {folder.path}: {len(mine) - len(todo)} of {len(mine)} prompts "
                f"already finished, {len(todo)} to compute"
            )
        target = draft = tok = None
        if todo:
            target, draft, tok = cached_models(job)
            log(f"loaded models in {time.time() - t0:.1f} s")
        return run_study(target, draft, records, folder, config, tokenizer=tok, progress=progress)


def shard_task(job: StudyJob, shard: str, out) -> None:
    """The study's entry point for :mod:`mdsd_ot.scale`: one shard, quietly.

    With ``threads=None`` torch uses the CPUs the scheduler gave the task (``OMP_NUM_THREADS``,
    which Ray sets to the task's ``num_cpus``), so that shards sharing a node do not oversubscribe it.
    """
    worker_setup()  # no per-worker "Loading weights" bars: the driver shows the one bar over all shards
    if worker_threads(job.threads) != job.threads:
        from dataclasses import replace

        job = replace(job, threads=worker_threads(job.threads))
    run_shard(job, shard, out, progress=False, log=None)


def count_records(job: StudyJob) -> int:
    """Number of prompts the whole study covers (the total of a progress bar over its shards)."""
    records = load_prompts(job.prompts)
    return len(_shard_records(records, job.config.validate(), *_parse_shard(None)))


def merge_shards(sources, dest) -> Path:
    """Merge the shard folders of one study into ``dest``, titled as an unsharded run."""
    return merge(sources, dest, title=TITLE)

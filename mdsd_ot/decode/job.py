"""The tree decoder as a sharded job kind of :mod:`mdsd_ot.scale` (``mdsd-ot decode ... --ray``).

The job is the :class:`~mdsd_ot.decode.DecodeConfig` itself: it names the model folders, the
prompts and every parameter, and nothing that lives in memory, so it is pickled to the workers as
is. :func:`shard_task` runs one shard through :func:`mdsd_ot.decode.run_shard` with the models kept
in a per-process cache (a worker decoding several shards of one run loads the pair once) and the
identity of the model files remembered (a new shard folder does not hash them again);
:func:`merge_shards` merges the shard folders under the title of a single-process run, so that the
merged summary equals that run's (docs/math.md#sharded-runs); :func:`count_records` is the number
of prompts, the total of the progress bar.
"""

from __future__ import annotations

from dataclasses import asdict, replace
from pathlib import Path

from .. import _store
from ..runs import inputs as _inputs
from ..runs.shards import worker_setup, worker_threads
from .config import DecodeConfig

__all__ = ["TITLE", "shard_task", "merge_shards", "count_records", "cached_models"]

#: Title of the report of an unsharded run (:func:`mdsd_ot.decode.write_report`'s default); a run
#: merged by :func:`merge_shards` uses it too, so that its summary files are those of one process.
TITLE = "mdsd_ot tree decoding"

# per-process cache: the identity recorded for the last pair of model files (skips re-hashing them)
_IDENTITY: dict = {}


def _config(job) -> DecodeConfig:
    if isinstance(job, DecodeConfig):
        return DecodeConfig(**asdict(job)).validate()  # a copy: validate() normalises in place
    if isinstance(job, dict):
        return DecodeConfig(**job).validate()
    raise TypeError(f"a decode job is a DecodeConfig (or a dict of its fields), got {type(job).__name__}")


def cached_models(config: DecodeConfig):
    """``(target, draft, tokenizer)`` of ``config``, loaded once per process (the last pair kept).

    The cache is the runs wing's (:func:`mdsd_ot.runs.inputs.cached_models`, keyed by model folders,
    tokenizer, dtype, device and threads), shared with the study's tasks: a worker that ran a study
    shard of the same pair reuses it.

    Parameters
    ----------
    config : DecodeConfig

    Returns
    -------
    tuple
        ``(target_model, draft_model, tokenizer_or_None)``.
    """
    return _inputs.cached_models(config)


def shard_task(job, shard: str, out) -> None:
    """The decoder's entry point for :mod:`mdsd_ot.scale`: shard ``"i/N"`` of ``job`` in ``out``,
    quietly, resuming from the rows already there.

    With ``threads=None`` torch uses the CPUs the scheduler gave the task (``OMP_NUM_THREADS``,
    which Ray sets to the task's ``num_cpus``); ``threads`` is not part of the run's identity.

    Parameters
    ----------
    job : DecodeConfig or dict
        The run (or a dict of its fields); ``TypeError`` for anything else, ``ValueError`` without
        ``target`` and ``draft``.
    shard : str
        ``"i/N"``.
    out : str or os.PathLike
        The shard's results folder.
    """
    config = _config(job)
    if config.target is None or config.draft is None:
        raise ValueError("a decode job needs target and draft (model folders or hub names)")
    worker_setup()  # the driver shows the one bar
    if worker_threads(config.threads) != config.threads:
        config = replace(config, threads=worker_threads(config.threads))
    from .runner import run_shard

    key = (config.target, config.draft, config.tokenizer)
    run_shard(config, shard, out, progress=False, models=cached_models, previous=_IDENTITY.get(key))
    recorded = _store.peek_config(out)
    if recorded and recorded.get("identity"):
        _IDENTITY.clear()
        _IDENTITY[key] = recorded["identity"]


def count_records(job) -> int:
    """Number of prompts the whole run decodes (``max_records`` applied).

    Parameters
    ----------
    job : DecodeConfig or dict
        The run (or a dict of its fields).

    Returns
    -------
    int
    """
    config = _config(job)
    records = _inputs.load_prompts(config.prompts)
    return len(records[: config.max_records] if config.max_records else records)


def merge_shards(sources, dest) -> Path:
    """Merge the shard folders of one decoding run into ``dest``, titled as an unsharded run.

    Parameters
    ----------
    sources : iterable of path
        Shard folders of one run.
    dest : str or os.PathLike
        New folder to write.

    Returns
    -------
    pathlib.Path
        ``dest``.
    """
    from .runner import merge

    return merge(sources, dest, title=TITLE)

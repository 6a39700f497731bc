"""The ``--ray`` options of a sharded command (``study``; ``decode`` once it exists) and the call
that runs it on Ray (:func:`mdsd_ot.scale.run_sharded`).

A command plugs in with two calls: ``add_arguments(parser)`` in its ``add_arguments``, and, in its
``run``, ``if args.ray is not None: return run(kind, job, args, prefix)`` once it has built the
job description its :class:`mdsd_ot.scale.JobKind` takes.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path


def add_arguments(parser) -> None:
    """Add ``--ray [ADDRESS]``, ``--shards`` and ``--ray-cpus/-gpus/-memory/-retries``."""
    ray = parser.add_argument_group(
        'running on Ray (from the clone: pip install -e ".[ray]"; README: Scaling out)'
    )
    ray.add_argument(
        "--ray",
        nargs="?",
        const="",
        default=None,
        metavar="ADDRESS",
        help="run the shards as Ray tasks and merge them into --out; ADDRESS: 'auto', 'host:6379' or "
        "'ray://host:10001' (without: RAY_ADDRESS, a cluster started by 'ray start' here, else a "
        "local one for this run) (default: no Ray, one local process)",
    )
    ray.add_argument(
        "--shards",
        type=int,
        default=None,
        help="number of shards with --ray (default: the split already in --out, else 4 per task slot)",
    )
    ray.add_argument("--ray-cpus", type=float, default=1.0, help="CPUs per task")
    ray.add_argument("--ray-gpus", type=float, default=0.0, help="GPUs per task (1: one GPU per shard)")
    ray.add_argument(
        "--ray-memory", default=None, help="memory reserved per task, e.g. 16G (default: none reserved)"
    )
    ray.add_argument("--ray-retries", type=int, default=3, help="retries of a task whose worker died")


def absolute(path):
    """``path`` made absolute when it names an existing local file or folder (a Ray worker's
    current folder is not the driver's); anything else (a hub name, None) unchanged."""
    if isinstance(path, (str, os.PathLike)) and os.path.exists(os.path.expanduser(path)):
        return os.path.abspath(os.path.expanduser(path))
    return path


def check(args) -> None:
    """Refuse ``--shard`` with ``--ray`` and ``--shards`` without it."""
    if args.ray is not None and getattr(args, "shard", None) is not None:
        raise ValueError("--shard and --ray exclude each other: --ray splits the work into --shards N")
    if args.ray is None and args.shards is not None:
        raise ValueError("--shards goes with --ray; without Ray, run each shard with --shard i/N")


def run(kind: str, job, args, prefix: str) -> Path | None:
    """Run ``job`` of ``kind`` on Ray as the options say; the output folder, or None after a
    one-line error on stderr (some shards did not finish: exit status 2)."""
    from .. import _store
    from ..scale import ShardsFailed, run_sharded

    check(args)
    try:
        with _store.one_line_warnings(prefix):
            return run_sharded(
                kind,
                job,
                args.out,
                shards=args.shards,
                address=args.ray or None,
                num_cpus=args.ray_cpus,
                num_gpus=args.ray_gpus,
                memory=args.ray_memory,
                max_retries=args.ray_retries,
                progress=not args.no_progress,
            )
    except ShardsFailed as exc:
        print(f"{prefix}: error: {exc}", file=sys.stderr)
        return None

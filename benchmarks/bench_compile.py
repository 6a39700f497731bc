"""First-call compile time of every numba kernel family, on a fresh installation (empty numba cache).

Run: ``python benchmarks/bench_compile.py [FAMILY ...]`` (default: every family of
``mdsd_ot._compile.FAMILIES``; ``--in-order`` for :func:`mdsd_ot.warmup` in one process instead).
Each family is its :func:`mdsd_ot.warmup` calls (public calls on synthetic pairs at V = 32,000, and
2,000 for the sorted scans), timed in a new Python process with ``NUMBA_CACHE_DIR`` pointing at an
empty folder (``cold``: every kernel it needs is compiled) and again in a second process sharing that
cache (``warm``: loaded from disk). ``cold - warm`` is the compile cost a user waits for once.

Both wall-clock and CPU seconds of the process are reported: compiling is single-threaded, so on a
shared machine the CPU seconds are the stable measure (the wall time on an idle core); the estimates
of ``mdsd_ot._compile.FAMILIES`` are the CPU column, rounded (``seconds`` from this table,
``in_warmup`` from ``--in-order``). Families above 2 s print a notice before their first compile.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import header  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

CHILD = """
import json, sys
import mdsd_ot
from mdsd_ot.warmup import warmup
names = sys.argv[1].split(",") if len(sys.argv) > 1 else None
print(json.dumps([r._asdict() for r in warmup(names, file=None)]))
"""


def run(cache: str, names=None) -> list:
    """The warmup results of a fresh process (a list of dicts), with ``cache`` as numba's cache."""
    env = dict(os.environ, NUMBA_CACHE_DIR=cache, PYTHONPATH=str(ROOT))
    argv = [sys.executable, "-c", CHILD] + ([",".join(names)] if names else [])
    out = subprocess.run(argv, env=env, check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    sys.path.insert(0, str(ROOT))
    from mdsd_ot._compile import FAMILIES

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("families", nargs="*", help=f"families to time (default all: {', '.join(FAMILIES)})")
    parser.add_argument(
        "--in-order", action="store_true", help="every family in one process, in warmup order"
    )
    args = parser.parse_args(argv)
    names = args.families or list(FAMILIES)
    lines = [
        header("First-call compile time per kernel family (empty numba cache)"),
        "| family | cold wall (s) | cold CPU (s) | warm wall (s) | warm CPU (s) | compile CPU (s) |",
        "|---|---|---|---|---|---|",
    ]
    if args.in_order:
        with tempfile.TemporaryDirectory() as cache:
            cold = run(cache, names)
            warm = run(cache, names)
        pairs = list(zip(cold, warm))
    else:
        pairs = []
        for name in names:
            with tempfile.TemporaryDirectory() as cache:
                pairs.append((run(cache, [name])[0], run(cache, [name])[0]))
            print(pairs[-1][0]["family"], pairs[-1][0]["cpu_seconds"], file=sys.stderr, flush=True)
    for c, w in pairs:
        lines.append(
            f"| {c['family']} | {c['seconds']:.1f} | {c['cpu_seconds']:.1f} | {w['seconds']:.2f} | "
            f"{w['cpu_seconds']:.2f} | {c['cpu_seconds'] - w['cpu_seconds']:.1f} |"
        )
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())

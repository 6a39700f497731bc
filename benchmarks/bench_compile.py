"""First-call compile time of every numba kernel family, on a fresh installation (empty numba cache).

Run: ``python benchmarks/bench_compile.py [--v 32000] [FAMILY ...]``. Each family is one public call
at vocabulary size V (default 32,000: kernels are compiled only above the small-input threshold),
timed in a new Python process with ``NUMBA_CACHE_DIR`` pointing at an empty folder (``cold``: every
kernel it needs is compiled) and again in a second process sharing that cache (``warm``: loaded
from disk). ``cold - warm`` is the compile cost a user waits for once; families above 2 s get a
notice on stderr before their first compile (``mdsd_ot._compile``: its estimates come from this
table, rounded up). Baseline of the same run: the import alone.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import header  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

SETUP = """
import sys, time
import numpy as np
import mdsd_ot
rng = np.random.default_rng(0)
V = {V}
z = rng.standard_normal(V) * 2.5 - 1.1 * np.log(np.arange(1, V + 1))
p = np.exp(z - z.max()); p /= p.sum()
zq = z + rng.standard_normal(V)
q = np.exp(zq - zq.max()); q /= q.sum()
t0 = time.perf_counter()
"""

#: family -> the call that compiles it (the names are those of ``mdsd_ot._compile.FAMILIES``)
FAMILIES = {
    "with_replacement": "mdsd_ot.optimal_acceptance(p, q, 2)",
    "without_replacement_2": "mdsd_ot.optimal_acceptance(p, q, 2, sampling='without_replacement')",
    "sequential": "mdsd_ot.optimal_acceptance(p, q, 3, sampling='without_replacement')",
    "conditional_poisson": "mdsd_ot.optimal_acceptance(p, q, 3, sampling='conditional_poisson')",
    "greedy": "mdsd_ot.optimal_acceptance(p, q, 3, sampling='greedy')",
    "batch": "mdsd_ot.optimal_acceptance_batch(np.stack([p, q] * 2), np.stack([q, p] * 2), 2)",
    "batch_sequential": "mdsd_ot.optimal_acceptance_batch(np.stack([p, q] * 2), np.stack([q, p] * 2), 3, "
    "sampling='without_replacement')",
    "verifier:naive": "mdsd_ot.verifier_acceptance('naive', p, q, 3)",
    "verifier:rrs": "mdsd_ot.verifier_acceptance('rrs', p, q, 3)",
    "verifier:spectr": "mdsd_ot.verifier_acceptance('spectr', p, q, 3)",
    "verifier:rrs_without_replacement": "mdsd_ot.verifier_acceptance('rrs_without_replacement', p, q, 2)",
    "verifier:spechub": "mdsd_ot.verifier_acceptance('spechub', p, q, 2)",
    "verifier:greedy": "mdsd_ot.verifier_acceptance('greedy', p, q, 3)",
    "verifier:optimal": "mdsd_ot.verifier_acceptance('optimal', p, q, 3)",
    "plan": "from mdsd_ot.plan import evaluate_position; evaluate_position(p, q, [2])",
    "plan_sequential": "from mdsd_ot.plan import evaluate_position; evaluate_position(p, q, [2, 3])",
    # below the binned-scan threshold (V < 16,384) the sorted scans are other kernels
    "with_replacement@2000": "mdsd_ot.optimal_acceptance(p, q, 2)",
    "without_replacement_2@2000": "mdsd_ot.optimal_acceptance(p, q, 2, sampling='without_replacement')",
}


def run(code: str, cache: str) -> float:
    """Seconds of the timed call in a fresh process (printed by the child, imports excluded)."""
    env = dict(os.environ, NUMBA_CACHE_DIR=cache, MDSD_OT_QUIET="1", PYTHONPATH=str(ROOT))
    out = subprocess.run(
        [sys.executable, "-c", code + "\nprint(time.perf_counter() - t0)"],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    return float(out.stdout.split()[-1])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("families", nargs="*", help=f"families to time (default all: {', '.join(FAMILIES)})")
    parser.add_argument("--v", type=int, default=32_000, help="vocabulary size (default 32000)")
    args = parser.parse_args(argv)
    names = args.families or list(FAMILIES)
    lines = [
        header(f"First-call compile time per kernel family (V = {args.v:,}, empty numba cache)"),
        "| family | call | cold (s) | warm (s) | compile = cold - warm (s) |",
        "|---|---|---|---|---|",
    ]
    for name in names:
        V = int(name.split("@")[1]) if "@" in name else args.v
        code = SETUP.format(V=V) + FAMILIES[name]
        with tempfile.TemporaryDirectory() as cache:
            t_start = time.perf_counter()
            cold = run(code, cache)
            warm = run(code, cache)
        lines.append(f"| {name} | `{FAMILIES[name]}` | {cold:.1f} | {warm:.2f} | {cold - warm:.1f} |")
        print(lines[-1], f"({time.perf_counter() - t_start:.0f} s)", file=sys.stderr, flush=True)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())

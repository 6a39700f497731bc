"""Time of the README's ten-line snippet on a fresh installation (an empty numba cache).

Run: ``python benchmarks/bench_first_call.py``. Each measurement is a new Python process with
``NUMBA_CACHE_DIR`` pointing at an empty folder, so every kernel it needs is compiled; the second
process of each pair reuses that cache (the steady state). Baseline in the same run: the same
process doing only ``import numpy`` and the package import.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import header  # noqa: E402

SNIPPET = """
import numpy as np
from mdsd_ot import optimal_acceptance, optimal_acceptance_batch, compare
p = np.array([0.5, 0.3, 0.2, 0.0]); q = np.array([0.1, 0.2, 0.3, 0.4])
optimal_acceptance(p, q, n=2, sampling="without_replacement")
optimal_acceptance(p, q, 2, sampling="without_replacement", method="lp")
optimal_acceptance_batch(np.stack([p, q]), np.stack([q, p]), 3)
compare(p, q, 2)
"""
SEQUENTIAL = """
import numpy as np
from mdsd_ot import optimal_acceptance
rng = np.random.default_rng(0)
p, q = rng.dirichlet(np.ones(300)), rng.dirichlet(np.ones(300))
optimal_acceptance(p, q, 3, sampling="without_replacement")
"""


def run(code: str, cache: str) -> float:
    env = dict(os.environ, NUMBA_CACHE_DIR=cache, MDSD_OT_QUIET="1")
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], env=env, check=True)
    return time.perf_counter() - t0


def main():
    lines = [
        header("First call on a fresh installation (empty numba cache)"),
        "| script | fresh cache (s) | warm cache (s) | import only (s) |",
        "|---|---|---|---|",
    ]
    with tempfile.TemporaryDirectory() as empty:
        base = run("import numpy, mdsd_ot", empty)
    for name, code in (("README ten-line snippet", SNIPPET), ("sequential n = 3, V = 300", SEQUENTIAL)):
        with tempfile.TemporaryDirectory() as cache:
            cold = run(code, cache)
            warm = run(code, cache)
        lines.append(f"| {name} | {cold:.1f} | {warm:.1f} | {base:.1f} |")
    print("\n".join(lines))


if __name__ == "__main__":
    main()

"""Shared helpers for the benchmark scripts: timing, LLM-like distributions, the report header."""

from __future__ import annotations

import platform
import subprocess
import time

import numpy as np


def best_time(fn, *, repeat: int = 7, number: int = 1) -> float:
    """Best wall time of ``number`` calls over ``repeat`` runs (seconds per call)."""
    fn()  # warm-up (numba compilation, caches)
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        times.append((time.perf_counter() - t0) / number)
    return min(times)


def best_cpu_time(fn, *, repeat: int = 7) -> float:
    """Best CPU time (``time.process_time``, this process's threads) of one call over ``repeat`` runs:
    on a machine shared with other jobs, wall time mostly measures their load."""
    fn()  # warm-up
    best = float("inf")
    for _ in range(repeat):
        t0 = time.process_time()
        fn()
        best = min(best, time.process_time() - t0)
    return best


def llm_like_pair(V: int, rng: np.random.Generator, *, temperature: float = 1.0):
    """A target/draft pair shaped like LLM next-token distributions: heavy-tailed logits, the draft a
    noisy copy of the target."""
    z = rng.standard_normal(V) * 2.5 + np.log(np.arange(1, V + 1)) * -1.1
    zq = z + rng.standard_normal(V) * 1.0
    p = np.exp((z - z.max()) / temperature)
    q = np.exp((zq - zq.max()) / temperature)
    return p / p.sum(), q / q.sum()


def header(title: str) -> str:
    import numba

    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = "unknown"
    return (
        f"## {title}\n\nmachine: {platform.machine()} {platform.processor() or ''}, "
        f"{numba.config.NUMBA_NUM_THREADS} threads; Python {platform.python_version()}, "
        f"numpy {np.__version__}, numba {numba.__version__}; commit {commit}\n"
    )

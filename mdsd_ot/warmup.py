"""Compile every numba kernel family ahead of the first real call: :func:`warmup` (``mdsd-ot warmup``).

The kernels compile on their first call and are cached on disk by numba (:func:`cache_location`);
every later process of the same installation loads them from there in milliseconds. At a full LLM
vocabulary a first call can therefore take most of a minute (a first large batch: about 45 s of
one core, measured in :data:`mdsd_ot._compile.FAMILIES`). :func:`warmup` runs one public call per
family on synthetic distributions (V = 32,000, and V = 2,000 for the sorted scans), family by family
with a line of progress each, so that the wait happens once, when you choose: after installing, or
in a job's set-up step on a cluster. Families already in the cache take milliseconds.

>>> from mdsd_ot.warmup import warmup
>>> [r.family for r in warmup(["binned_scan"], dry_run=True, file=None)]
['binned_scan']
"""

from __future__ import annotations

import os
import sys
import time
from typing import NamedTuple

from ._compile import FAMILIES, cache_location, family_ready

__all__ = ["warmup", "WarmupResult", "cache_location", "FAMILIES"]

#: Vocabulary of the synthetic pairs: above the binned-scan threshold (16,384), like an LLM's.
LARGE_V = 32_000

#: Vocabulary of the sorted-scan family (256 < V < 4,096: the stable numpy sort and the sorted scans).
MID_V = 2_000


class WarmupResult(NamedTuple):
    """One family of :func:`warmup`."""

    family: str
    what: str
    cached: bool  #: already compiled (in this process or the on-disk cache) before the call
    seconds: float  #: wall-clock seconds of its calls (0 with ``dry_run``)
    cpu_seconds: float  #: CPU seconds of this process during its calls (compiling: one core)
    estimate: int  #: the measured CPU seconds of a cold compile (:data:`FAMILIES`' ``in_warmup``)


def _pair(V: int, seed: int = 0):
    """A target/draft pair shaped like an LLM's (heavy head, long tail), deterministic."""
    import numpy as np

    rng = np.random.default_rng(seed)
    z = rng.standard_normal(V) * 2.5 - 1.1 * np.log(np.arange(1, V + 1))
    p = np.exp(z - z.max())
    zq = z + rng.standard_normal(V)
    q = np.exp(zq - zq.max())
    return p / p.sum(), q / q.sum()


def _calls(family: str):
    """The calls that compile ``family`` (each a zero-argument function)."""
    import numpy as np

    import mdsd_ot

    p, q = _pair(LARGE_V)
    P, Q = np.stack([p, q] * 2), np.stack([q, p] * 2)  # 4 x 32,000: row-parallel (>= 65,536 entries)
    oa, batch = mdsd_ot.optimal_acceptance, mdsd_ot.optimal_acceptance_batch
    if family == "binned_scan":
        return [lambda: oa(p, q, 2), lambda: oa(p, q, 2, sampling="without_replacement")]
    if family == "sorted_scan":
        pm, qm = _pair(MID_V)
        wor = "without_replacement"
        return [  # the one-kernel default call, then the general path (normalize=True leaves it)
            lambda: oa(pm, qm, 2),
            lambda: oa(pm, qm, 2, sampling=wor),
            lambda: oa(pm, qm, 2, normalize=True),
            lambda: oa(pm, qm, 2, sampling=wor, normalize=True),
        ]
    if family == "sequential":
        return [lambda: oa(p, q, 3, sampling="without_replacement")]
    if family == "conditional_poisson":
        return [lambda: oa(p, q, 3, sampling="conditional_poisson")]
    if family == "batch":
        pm, qm = _pair(MID_V)
        Pm, Qm = np.stack([pm, qm] * 20), np.stack([qm, pm] * 20)  # 40 x 2,000: row-parallel too
        return [
            lambda: batch(P, Q, 2),
            lambda: batch(P, Q, 2, sampling="without_replacement"),
            lambda: batch(P, Q, 3, sampling="conditional_poisson"),
            lambda: batch(Pm, Qm, 2),
            lambda: batch(Pm, Qm, 2, sampling="without_replacement"),
        ]
    if family == "batch_sequential":
        return [lambda: batch(P, Q, 3, sampling="without_replacement")]
    if family == "rsd":
        return [lambda: mdsd_ot.verifier_acceptance("rrs_without_replacement", p, q, 2)]
    if family == "rsd_paths":
        return [lambda: mdsd_ot.verifier_acceptance("rrs_without_replacement", p, q, 3, samples=100)]
    if family == "optimal":
        return [lambda: mdsd_ot.verifier_acceptance("optimal", p, q, 3)]
    if family == "plan":
        from .plan import evaluate_position

        return [lambda: evaluate_position(p, q, [2, 3], mc_samples=100)]
    raise ValueError(f"unknown kernel family {family!r}; choose from {', '.join(FAMILIES)}")


def _families(families) -> list:
    if families is None:
        return list(FAMILIES)
    if isinstance(families, str):
        families = [f for f in families.split(",") if f.strip()]
    out = []
    for f in families:
        name = str(f).strip().replace("-", "_")
        if name not in FAMILIES:
            raise ValueError(f"unknown kernel family {f!r}; choose from {', '.join(FAMILIES)}")
        if name not in out:
            out.append(name)
    return out


def warmup(families=None, *, dry_run: bool = False, file=sys.stderr) -> list:
    """Compile the numba kernels of every family (or of ``families``) now, with a line of progress each.

    Parameters
    ----------
    families : iterable of str, str or None
        Names of :data:`mdsd_ot._compile.FAMILIES` (a comma-separated string too); None: all, in the
        table's order (shared kernels first).
    dry_run : bool
        Compile nothing: only say which families are cached and what each would cost.
    file : file-like or None
        Where the progress goes (None: nowhere).

    Returns
    -------
    list of WarmupResult
        One per family: whether it was cached already, the seconds (wall and CPU) its calls took.

    Notes
    -----
    The estimates are CPU seconds of one core measured on an otherwise idle 2-core machine with an
    empty cache (``benchmarks/bench_compile.py``); compiling is single-threaded, so a busy machine
    takes longer in wall time. The compiled kernels are cached where :func:`cache_location` says, for
    every later process of this installation (numba compiles again after the sources change, e.g.
    after an upgrade, or on another CPU model).
    """
    names = _families(families)

    def say(text, end="\n"):
        if file is not None:
            print(text, end=end, file=file, flush=True)

    where = cache_location()
    if where is None:
        say("mdsd_ot warmup: numba's JIT is off (NUMBA_DISABLE_JIT=1): nothing to compile")
    else:
        say(f"mdsd_ot warmup: the kernel cache is {where} (every later process of this installation uses it)")
    results = []
    total = time.perf_counter()
    previous = os.environ.get("MDSD_OT_QUIET")
    os.environ["MDSD_OT_QUIET"] = "1"  # this progress replaces the per-family notices
    try:
        for i, name in enumerate(names, 1):
            f = FAMILIES[name]
            cached = family_ready(name)
            head = f"[{i}/{len(names)}] {name}: {f.what} ({f.calls}): "
            if dry_run:
                state = "cached" if cached else f"not cached, about {f.in_warmup} s to compile"
                say(head + state)
                results.append(WarmupResult(name, f.what, cached, 0.0, 0.0, f.in_warmup))
                continue
            say(
                head + ("cached, loading ... " if cached else f"compiling, about {f.in_warmup} s ... "),
                end="",
            )
            t0, c0 = time.perf_counter(), time.process_time()
            for call in _calls(name):
                call()
            seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
            say(f"{seconds:.1f} s")
            results.append(WarmupResult(name, f.what, cached, seconds, cpu, f.in_warmup))
    finally:
        if previous is None:
            os.environ.pop("MDSD_OT_QUIET", None)
        else:
            os.environ["MDSD_OT_QUIET"] = previous
    if not dry_run:
        built = sum(not r.cached for r in results)
        say(
            f"mdsd_ot warmup: done in {time.perf_counter() - total:.1f} s ({built} of {len(results)} "
            f"families compiled, {len(results) - built} loaded from the cache)"
        )
    return results

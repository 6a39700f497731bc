"""The numba kernel families, their measured first-compile times, and one line on stderr before a long
first compile.

numba compiles a kernel on its first call and caches it on disk (``cache=True``); until then a call
can sit silent for a minute. The kernels are grouped in the families of :data:`FAMILIES`: what one
public call compiles. Every family whose first compile takes over 2 s gets a notice before it
compiles (:func:`notice`: once per process and family, only when the family's kernels are neither
compiled in this process nor in numba's on-disk cache for the present source; ``MDSD_OT_QUIET=1``
silences it), and :func:`mdsd_ot.warmup` (``mdsd-ot warmup``) compiles every family ahead.

The estimates are CPU seconds of one core measured by ``benchmarks/bench_compile.py`` on a 2-core AMD
EPYC with numba 0.68.1, each family in a new process with an empty cache (CPU time, not wall time:
compiling is single-threaded, and on a busy machine the wall time grows with the load while the CPU
time does not; on an idle core the two agree). ``seconds`` is what a notice says: the family's call
alone on an empty cache (for the plan, its own share: the sequential scan it also compiles has its
own notice); ``in_warmup`` is the family's share of :func:`mdsd_ot.warmup`, which compiles the
families in the order of :data:`FAMILIES` (kernels shared with an earlier family are loaded, not
compiled again). A faster core takes less. Inputs of at most ``PYTHON_MAX_V`` tokens run the kernels'
Python twins and compile nothing, so they get no notice (until the twin has run as long as the
compile would take: :func:`mdsd_ot._kernels.dispatch.small_or_jit`).
"""

from __future__ import annotations

import importlib
from typing import NamedTuple

from ._config import BINNED_MIN_V, PARALLEL_MIN_ENTRIES, PYTHON_MAX_V

__all__ = [
    "FAMILIES",
    "Family",
    "family_kernels",
    "family_of",
    "family_ready",
    "cache_location",
    "notice",
    "notice_for_bound",
    "notice_for_batch",
    "notice_for_plan",
]

#: A family's notice is printed only above this many measured seconds.
NOTICE_MIN_S = 2


class Family(NamedTuple):
    """One kernel family: what compiles on the first call of one kind of public call."""

    what: str  #: what the notice and ``mdsd-ot warmup`` name
    calls: str  #: the public calls that compile it
    seconds: int  #: measured CPU seconds of its first compile alone, on an empty cache
    in_warmup: int  #: measured CPU seconds of its share of :func:`mdsd_ot.warmup` (order of FAMILIES)
    kernels: tuple  #: ``"module.name"`` of ``mdsd_ot._kernels`` whose cached state stands for it


#: Every kernel family, in the order :func:`mdsd_ot.warmup` compiles them (shared kernels first).
FAMILIES = {
    "binned_scan": Family(
        "the binned prefix-scan kernels",
        "optimal_acceptance, with replacement or sequential n = 2, V >= 16,384",
        13,
        14,
        ("scans.bucketed_scan",),
    ),
    "sorted_scan": Family(
        "the sorted prefix-scan kernels",
        "optimal_acceptance, with replacement or sequential n = 2, 256 < V < 16,384",
        13,
        12,
        ("small.small_dual", "scans.scan_with_replacement", "dispatch._scan_without_replacement_2"),
    ),
    "sequential": Family(
        "the sequential-sampling kernels",
        "optimal_acceptance, without replacement, n >= 3, any V",
        31,
        26,
        ("sequential.scan_without_replacement_into",),
    ),
    "conditional_poisson": Family(
        "the conditional-Poisson kernels",
        "optimal_acceptance, conditional_poisson, n >= 2",
        11,
        5,
        ("scans.scan_conditional_poisson",),
    ),
    "batch": Family(
        "the row-parallel batch kernels",
        "optimal_acceptance_batch of >= 65,536 entries, but sequential n >= 3",
        46,
        23,
        ("dispatch._batch_binned", "dispatch._batch_with", "dispatch.normalized_rows"),
    ),
    "batch_sequential": Family(
        "the row-parallel sequential-sampling kernel",
        "optimal_acceptance_batch of >= 65,536 entries, without replacement, n >= 3",
        49,
        17,
        ("dispatch._batch_without",),
    ),
    "rsd": Family(
        "the RSD verifier kernels",
        "verifier_acceptance('rrs_without_replacement', n = 2), V > 256",
        4,
        4,
        ("verifiers.rsd2_rejection",),
    ),
    "rsd_paths": Family(
        "the RSD rejection-path kernels",
        "verifier_acceptance('rrs_without_replacement', n >= 3), Monte Carlo at large V",
        5,
        4,
        ("verifiers.rsd_path_mc",),
    ),
    "optimal": Family(
        "the optimal-verifier kernels",
        "verifier_acceptance('optimal'), V > 256",
        8,  # with the radix sort of the chain's order (2026-12-06, the machine busy: 6 and 7 before)
        10,
        ("optimal.chain_prepare",),
    ),
    "plan": Family(
        "the evaluation-plan kernels",
        "mdsd_ot.plan.evaluate_position: the rows of mdsd-ot study and demo, any V",
        12,
        12,
        ("plan.order_tables", "plan.prefix_scans"),
    ),
}


def family_kernels(name: str) -> list:
    """The numba dispatchers of family ``name`` (those of its ``kernels`` that exist)."""
    out = []
    for ref in FAMILIES[name].kernels:
        module, kernel = ref.split(".")
        found = getattr(importlib.import_module(f"mdsd_ot._kernels.{module}"), kernel, None)
        if found is not None:
            out.append(found)
    return out


def family_of(kernel) -> str | None:
    """The family whose ``kernels`` name ``kernel`` (a numba dispatcher of ``mdsd_ot._kernels``), or None."""
    func = getattr(kernel, "py_func", kernel)
    ref = f"{func.__module__.rsplit('.', 1)[-1]}.{func.__name__}"
    return next((name for name, f in FAMILIES.items() if ref in f.kernels), None)


def notice_for_kernel(kernel) -> None:
    """The notice of ``kernel``'s family, for ``kernel`` (nothing for a kernel outside the families)."""
    family = family_of(kernel)
    if family is not None:
        notice(family, kernel=kernel)


def family_ready(name: str) -> bool:
    """True when every kernel of family ``name`` is compiled in this process or in numba's on-disk
    cache for the present source (:func:`mdsd_ot._kernels.dispatch.compiled_ready`); under
    ``NUMBA_DISABLE_JIT=1`` there is nothing to compile: True."""
    from ._kernels.dispatch import compiled_ready, jit_enabled

    if not jit_enabled():
        return True
    return all(compiled_ready(k) for k in family_kernels(name))


def cache_location() -> str | None:
    """The folder where numba caches this installation's kernels (``NUMBA_CACHE_DIR``, else next to the
    package's sources, else a per-user cache folder when those are read-only); None when the JIT is
    off (``NUMBA_DISABLE_JIT=1``)."""
    from ._kernels import scans
    from ._kernels.dispatch import jit_enabled

    if not jit_enabled():
        return None
    try:
        return str(scans.bucketed_scan.stats.cache_path)
    except AttributeError:  # numba's internals changed
        return None


def notice(family: str, size: int | None = None, kernel=None) -> None:
    """The notice of ``family`` if it is about to compile (``size``: the vocabulary, when known;
    at most ``PYTHON_MAX_V`` means the Python twins run: no notice).

    The kernel checked is ``kernel``, or the family's first: one that the call about to run compiles
    for sure, so that a notice is never printed for a kernel that then stays uncompiled (it would be
    printed again by every later process: a family's other kernels are compiled only by some calls).
    """
    if size is not None and size <= PYTHON_MAX_V:
        return
    f = FAMILIES[family]
    if f.seconds < NOTICE_MIN_S:
        return
    from ._kernels import compile_notice

    if kernel is None:
        kernel = family_kernels(family)[0]
    compile_notice(kernel, f.what, f.seconds)


def notice_for_bound(scheme, n: int, size: int) -> None:
    """Before :func:`mdsd_ot.optimal_acceptance`'s dual solve of one pair."""
    code = scheme.kernel_code
    if code == 1 and n >= 3:  # compiled at any size (no Python twin for the sequential scan)
        notice("sequential")
    elif code is None or size <= PYTHON_MAX_V:
        return
    elif code == 2 and n >= 2:
        notice("conditional_poisson")
    elif size >= BINNED_MIN_V:
        notice("binned_scan")
    else:  # the scan that runs: with replacement (any scheme at n = 1), else sequential n = 2
        from ._kernels import dispatch

        plain = code == 0 or n == 1
        notice(
            "sorted_scan",
            kernel=dispatch.scan_with_replacement if plain else dispatch._scan_without_replacement_2,
        )


def notice_for_batch(scheme, n: int, shape) -> None:
    """Before :func:`mdsd_ot.optimal_acceptance_batch` of a ``(B, V)`` batch."""
    B, V = shape
    if scheme.kernel_code is None:
        return
    from ._kernels.dispatch import _batch_kernel, compiled_ready

    kernel = _batch_kernel(V, n, scheme.kernel_code)[0]
    if B * V < PARALLEL_MIN_ENTRIES:  # row by row on the single-row kernels, unless this one is ready
        if not compiled_ready(kernel):
            notice_for_bound(scheme, n, V)
        return
    notice("batch_sequential" if scheme.kernel_code == 1 and n >= 3 else "batch", kernel=kernel)


def notice_for_plan(schemes, verifiers, ns, size: int) -> None:
    """Before the evaluation plan's rows (``mdsd-ot study``, ``mdsd-ot demo``). The plan's kernels,
    the sequential scan and the conditional-Poisson sums compile at any size (``mdsd-ot demo``'s
    pairs have 33 tokens). The verifiers' kernels say so where they are called
    (:mod:`mdsd_ot.verifiers.rsd`, :mod:`mdsd_ot.verifiers.optimal`): which of them runs depends on
    n and V (RSD: the plan's tables for n = 2, rejection paths for n >= 3 at large V)."""
    from ._kernels import scans

    notice("plan")
    ns = list(ns)
    if "without_replacement" in schemes and any(n >= 3 for n in ns):
        notice("sequential")
    if "conditional_poisson" in schemes and any(n >= 2 for n in ns):
        notice("conditional_poisson", kernel=scans.scan_conditional_poisson_sums)  # the plan's own

"""One line on stderr before a kernel family's long first compile, with a measured estimate.

numba compiles a kernel on its first call and caches it on disk (``cache=True``); until then a call
can sit silent for a minute. Every family whose first compile takes over 2 s gets a notice,
through :func:`mdsd_ot._kernels.compile_notice` (once per process and family, only when the kernel is
neither compiled in this process nor in the on-disk cache; ``MDSD_OT_QUIET=1`` silences it). The
estimates are the compile times measured by ``benchmarks/bench_compile.py`` on 2 shared CPU cores
(cold minus warm first call, rounded up); faster machines take less. Inputs of at most
``PYTHON_MAX_V`` tokens run the kernels' Python twins and compile nothing, so they get no notice.
"""

from __future__ import annotations

from ._config import BINNED_MIN_V, PARALLEL_MIN_ENTRIES, PYTHON_MAX_V

__all__ = ["FAMILIES", "notice", "notice_for_bound", "notice_for_batch", "notice_for_plan"]

#: family -> (what the notice says is compiled, measured seconds, module and name of the kernel whose
#: compiled state stands for the family). Families sharing a description share one notice.
FAMILIES = {
    # optimal_acceptance at V >= BINNED_MIN_V (with replacement, sequential n = 2): 14.8 s, 10.5 s
    "binned_scan": ("the sorted-prefix scan kernels", 15, "scans", "bucketed_scan"),
    # sequential sampling, n >= 3 (optimal_acceptance 53.9 s; row-parallel batch 75.1 s)
    "sequential": ("the sequential-sampling kernels", 55, "sequential", "scan_without_replacement_into"),
    "batch_sequential": ("the sequential-sampling kernels", 75, "dispatch", "_batch_without"),
    "conditional_poisson": ("the conditional-Poisson kernels", 25, "scans", "scan_conditional_poisson"),
    # optimal_acceptance_batch of >= PARALLEL_MIN_ENTRIES entries: 34.5 s
    "batch": ("the row-parallel batch kernels", 35, "dispatch", "normalized_rows"),
    "rsd": ("the RSD verifier kernels", 6, "verifiers", "rsd2_rejection"),
    "optimal": ("the optimal-verifier kernels", 9, "optimal", "chain_prepare"),
    # mdsd_ot.plan.evaluate_position (the study's and the demo's rows), n = 2: 19.3 s
    "plan": ("the evaluation-plan kernels", 20, "plan", "order_tables"),
}


def notice(family: str, size: int | None = None) -> None:
    """The notice of ``family`` if it is about to compile (``size``: the vocabulary, when known;
    at most ``PYTHON_MAX_V`` means the Python twins run: no notice)."""
    if size is not None and size <= PYTHON_MAX_V:
        return
    import importlib

    what, seconds, module, name = FAMILIES[family]
    from ._kernels import compile_notice

    kernel = getattr(importlib.import_module(f"mdsd_ot._kernels.{module}"), name, None)
    if kernel is not None:
        compile_notice(kernel, what, seconds)


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


def notice_for_batch(scheme, n: int, shape) -> None:
    """Before :func:`mdsd_ot.optimal_acceptance_batch` of a ``(B, V)`` batch."""
    B, V = shape
    if scheme.kernel_code is None:
        return
    if B * V < PARALLEL_MIN_ENTRIES:  # row by row on the single-row kernels
        notice_for_bound(scheme, n, V)
    elif scheme.kernel_code == 1 and n >= 3:
        notice("batch_sequential")
    else:
        notice("batch")


def notice_for_plan(schemes, verifiers, ns, size: int) -> None:
    """Before the evaluation plan's rows (``mdsd-ot study``, ``mdsd-ot demo``). The plan's kernels,
    the sequential scan and the conditional-Poisson sums compile at any size (``mdsd-ot demo``'s
    pairs have 33 tokens); the verifiers' kernels only above ``PYTHON_MAX_V``."""
    notice("plan")
    ns = list(ns)
    if "without_replacement" in schemes and any(n >= 3 for n in ns):
        notice("sequential")
    if "conditional_poisson" in schemes and any(n >= 2 for n in ns):
        notice("conditional_poisson")
    if size <= PYTHON_MAX_V:
        return
    if "rrs_without_replacement" in verifiers:
        notice("rsd")
    if "optimal" in verifiers:
        notice("optimal")

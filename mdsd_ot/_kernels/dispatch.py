"""Which kernel runs: dispatch by scheme code in Python (a call compiles only what it uses), the
Python bodies for small inputs, row-parallel batches, and a notice before a long first compile."""

from __future__ import annotations

import os
import sys
import threading
import time
import types

import numba as nb
import numpy as np

from .._config import (
    BINNED_MIN_V,
    PARALLEL_MIN_ENTRIES,
    PLAN_BLOCK,
    PYTHON_MAX_V,
    PYTHON_TWIN_BUDGET_S,
    SEQUENTIAL_WORKSPACE_MAX_V,
)
from .common import neumaier_add, neumaier_add_nonneg
from .plan import ratio_order
from .scans import (
    bucketed_scan,
    complement_masses_kernel,
    complement_parts_kernel,
    order_keys,
    scan_conditional_poisson,
    scan_with_replacement,
    scan_without_replacement_2,
)
from .sequential import new_workspace, scan_without_replacement_into

_NOTICED = set()


def jit_enabled() -> bool:
    """False under ``NUMBA_DISABLE_JIT=1`` (the kernels are plain Python functions: nothing compiles)."""
    return not nb.config.DISABLE_JIT


def compile_notice(kernel, what: str, seconds: int) -> None:
    """One line on stderr before ``kernel`` is compiled for the first time with this numba cache.

    Compiling is silent and the larger kernels take many seconds on their first call; after it numba's
    on-disk cache makes them load in milliseconds. Said once per process and ``what``, only when
    neither this process nor the cache has the kernel for its present source
    (:func:`compiled_ready`); ``MDSD_OT_QUIET=1`` silences it. ``seconds``: the measured estimate
    (:data:`mdsd_ot._compile.FAMILIES`).
    """
    if what in _NOTICED or os.environ.get("MDSD_OT_QUIET"):
        return
    if not isinstance(kernel, nb.core.registry.CPUDispatcher) or compiled_ready(kernel):
        return  # (a plain function under NUMBA_DISABLE_JIT=1: nothing to compile)
    _NOTICED.add(what)
    sys.stderr.write(
        f"mdsd_ot: compiling {what} (not in the kernel cache yet: about {seconds} s, once; later "
        f"processes load them in milliseconds; 'mdsd-ot warmup' compiles every family ahead)\n"
    )


_TWINS: dict = {}
_TWIN_GLOBALS: dict = {}


def _twin_globals(namespace: dict) -> dict:
    """A copy of a kernel module's globals in which every numba kernel is its Python twin."""
    key = id(namespace)
    if key not in _TWIN_GLOBALS:
        twin = dict(namespace)
        _TWIN_GLOBALS[key] = twin  # registered first: kernels of a module call each other
        for name, value in namespace.items():
            if isinstance(value, nb.core.registry.CPUDispatcher):
                twin[name] = python_twin(value)
    return _TWIN_GLOBALS[key]


def python_twin(kernel):
    """The Python body of ``kernel`` calling the Python bodies of the kernels it calls, recursively, so
    that running it compiles nothing (a kernel's ``py_func`` alone still calls compiled kernels)."""
    if not isinstance(kernel, nb.core.registry.CPUDispatcher):
        return kernel  # NUMBA_DISABLE_JIT=1: already a plain function
    if kernel not in _TWINS:
        body = kernel.py_func
        _TWINS[kernel] = body  # placeholder while its globals are built (recursion)
        twin = types.FunctionType(
            body.__code__, _twin_globals(body.__globals__), body.__name__, body.__defaults__, body.__closure__
        )
        twin.__doc__ = body.__doc__
        _TWINS[kernel] = twin
    return _TWINS[kernel]


_READY: dict = {}


def compiled_ready(kernel) -> bool:
    """True when calling ``kernel`` compiles nothing: it was compiled (or loaded) in this process, or
    numba's on-disk cache holds it for the present source (its index, which numba discards when the
    source changed). Said once per kernel and process from the cache; a plain function (under
    ``NUMBA_DISABLE_JIT=1``) is never "compiled"."""
    ready = _READY.get(kernel)
    if ready:  # compiled or cached once: stays so for the process
        return True
    if not isinstance(kernel, nb.core.registry.CPUDispatcher):
        return False
    if kernel.overloads:  # compiled in this process
        _READY[kernel] = True
        return True
    if ready is None:
        try:
            ready = bool(kernel._cache._cache_file._load_index())
        except Exception:  # numba's cache internals changed, or no cache: the Python twin
            ready = False
        _READY[kernel] = ready
    return ready


_TWIN_SECONDS: dict = {}


def small_or_jit(kernel, size: int):
    """``kernel`` itself, or its Python twin (:func:`python_twin`) for inputs of at most
    ``PYTHON_MAX_V`` tokens when the kernel is not compiled yet (:func:`compiled_ready`).

    A small input on a fresh installation compiles nothing (the twin costs far less than a compile);
    once the kernel is compiled or cached, it runs compiled at every size (the twin costs hundreds of
    microseconds at V = 60). A kernel whose twin has run, in this process, as long as compiling it
    takes (its family's measured estimate, :data:`mdsd_ot._compile.FAMILIES`, else
    ``PYTHON_TWIN_BUDGET_S``) is compiled then (with its family's notice): a loop of small calls pays
    at most about twice the cheaper of the two. The two give the same bits: the kernels use no
    fast-math and the same libm (``tests/test_kernels.py::test_small_v_compiled_and_python_bodies_agree``).
    The Python body runs with numpy's overflow and underflow warnings off: compiled, the same
    arithmetic overflows to inf silently, and the kernels are written for that.
    """
    if size > PYTHON_MAX_V or compiled_ready(kernel):
        return kernel
    if isinstance(kernel, nb.core.registry.CPUDispatcher) and _TWIN_SECONDS.get(kernel, 0.0) >= _budget(
        kernel
    ):
        from .. import _compile

        _compile.notice_for_kernel(kernel)
        return kernel

    body = python_twin(kernel)

    def python_body(*args):
        t0 = time.perf_counter()
        try:
            with np.errstate(over="ignore", under="ignore"):
                return body(*args)
        finally:
            _TWIN_SECONDS[kernel] = _TWIN_SECONDS.get(kernel, 0.0) + time.perf_counter() - t0

    return python_body


def _budget(kernel) -> float:
    """Seconds of Python twin that ``kernel`` may run before it is compiled (:func:`small_or_jit`)."""
    from .. import _compile

    family = _compile.family_of(kernel)
    return float(_compile.FAMILIES[family].seconds) if family else PYTHON_TWIN_BUDGET_S


class _SequentialWorkspace(threading.local):
    """The work arrays of the sequential scan (n >= 3), kept between calls in each thread: fresh
    arrays are megabytes of page faults per call, as costly as a pass over them."""

    arrays = None


_SEQ_WORKSPACE = _SequentialWorkspace()


def sequential_workspace(V: int):
    """``(fwork, iwork, bwork)`` for :func:`scan_without_replacement_into` at ``V`` tokens: this thread's
    (kept) arrays up to ``SEQUENTIAL_WORKSPACE_MAX_V``, fresh ones above. A numba kernel never calls
    back into Python, so one call at a time uses them in a thread."""
    if V > SEQUENTIAL_WORKSPACE_MAX_V:
        return new_workspace(V)
    arrays = _SEQ_WORKSPACE.arrays
    if arrays is None or arrays[0].shape[1] < V + 1:
        arrays = _SEQ_WORKSPACE.arrays = new_workspace(V)
    return arrays


def solve_sorted(ps, qs, n, code, refine=0, sums=None):
    """Dispatch on a scheme's ``kernel_code`` (0: with replacement, 1: sequential without replacement,
    2: conditional Poisson); returns ``(D, k)``, alpha* = 1 - D.

    Dispatched in Python, not numba, so that a first call compiles only the kernel it needs (a numba
    dispatcher compiles every branch it could take). ``refine`` halves the quadrature step of
    sequential sampling with n >= 3 that many times; ``sums`` = ``(P, Q, R)``, the compensated prefix
    sums of ``ps``, ``qs`` and suffix sums of ``qs`` (:func:`prefix_sums`, :func:`suffix_sums`, or the
    plan's tables, summed alike), spares the sequential scan computing them again.
    """
    if code == 0 or n == 1:
        return small_or_jit(scan_with_replacement, ps.size)(ps, qs, n)
    if code == 1:
        if n == 2:
            if ps.size <= PYTHON_MAX_V:
                rest = small_or_jit(complement_masses_kernel, ps.size)(qs)
                return small_or_jit(scan_without_replacement_2, ps.size)(ps, qs, rest)
            return _scan_without_replacement_2(ps, qs, n)
        from .. import _compile

        _compile.notice("sequential")
        fwork, iwork, bwork = sequential_workspace(ps.size)
        if sums is None:
            V1 = ps.size + 1
            sums, have = (fwork[0][:V1], fwork[1][:V1], fwork[2][:V1]), False
        else:
            have = True
        return scan_without_replacement_into(ps, qs, n, refine, *sums, have, fwork, iwork, bwork)
    return small_or_jit(scan_conditional_poisson, ps.size)(ps, qs, n)


@nb.njit(cache=True)
def _scan_without_replacement_2(ps, qs, n):
    return scan_without_replacement_2(ps, qs, complement_masses_kernel(qs))


@nb.njit(cache=True, inline="always")
def _mark(H, b, order, k):
    for i in range(k):
        H[b, order[i]] = True


# Row-parallel batches, one kernel per scan so that a first call compiles only what it uses.
@nb.njit(cache=True, parallel=True)
def _batch_binned(P, Q, n, code):
    B = P.shape[0]
    out = np.empty(B)
    H = np.zeros(P.shape, dtype=np.bool_)
    for b in nb.prange(B):
        total, big, big_rest = complement_parts_kernel(Q[b]) if code == 1 else (0.0, -1, 1.0)
        d, mask = bucketed_scan(P[b], Q[b], n, code, total, big, big_rest)
        H[b] = mask
        out[b] = max(1.0 - d, 0.0)
    return out, H


@nb.njit(cache=True, parallel=True)
def _batch_with(P, Q, n):
    out = np.empty(P.shape[0])
    H = np.zeros(P.shape, dtype=np.bool_)
    for b in nb.prange(P.shape[0]):
        order, _, ps, qs = ratio_order(P[b], Q[b])  # the stable order by q/p, p and q along it
        d, k = scan_with_replacement(ps, qs, n)
        _mark(H, b, order, k)
        out[b] = max(1.0 - d, 0.0)
    return out, H


@nb.njit(cache=True, parallel=True)
def _batch_without_2(P, Q, n):
    out = np.empty(P.shape[0])
    H = np.zeros(P.shape, dtype=np.bool_)
    for b in nb.prange(P.shape[0]):
        order, _, ps, qs = ratio_order(P[b], Q[b])  # the stable order by q/p, p and q along it
        d, k = _scan_without_replacement_2(ps, qs, n)
        _mark(H, b, order, k)
        out[b] = max(1.0 - d, 0.0)
    return out, H


@nb.njit(cache=True, parallel=True)
def _batch_without(P, Q, n, refine, have_sums):
    # ``refine`` (0) and ``have_sums`` (False) come in as arguments, typed int64 and bool as in
    # solve_sorted's call: constants would be typed Literal[int](0) and Literal[bool](False), a second
    # signature of the whole sequential scan, compiled again (about 60 s) instead of loaded from the cache
    B, V = P.shape
    V1 = V + 1
    out = np.empty(B)
    H = np.zeros(P.shape, dtype=np.bool_)
    for b in nb.prange(B):
        order, _, ps, qs = ratio_order(P[b], Q[b])  # the stable order by q/p, p and q along it
        fwork, iwork, bwork = new_workspace(V)
        d, k = scan_without_replacement_into(
            ps, qs, n, refine, fwork[0][:V1], fwork[1][:V1], fwork[2][:V1], have_sums,
            fwork, iwork, bwork,
        )  # fmt: skip
        _mark(H, b, order, k)
        out[b] = max(1.0 - d, 0.0)
    return out, H


@nb.njit(cache=True, parallel=True)
def _batch_conditional_poisson(P, Q, n):
    out = np.empty(P.shape[0])
    H = np.zeros(P.shape, dtype=np.bool_)
    for b in nb.prange(P.shape[0]):
        order, _, ps, qs = ratio_order(P[b], Q[b])  # the stable order by q/p, p and q along it
        d, k = scan_conditional_poisson(ps, qs, n)
        _mark(H, b, order, k)
        out[b] = max(1.0 - d, 0.0)
    return out, H


def _batch_kernel(V, n, code):
    """The row-parallel kernel for ``(B, V)`` batches of scheme code ``code`` with ``n`` drafts, and
    its extra arguments."""
    if V >= BINNED_MIN_V and (n == 1 or code == 0):
        return _batch_binned, (n, 0)
    if V >= BINNED_MIN_V and code == 1 and n == 2:
        return _batch_binned, (n, 1)
    if code == 0 or n == 1:
        return _batch_with, (n,)
    if code == 1:
        return (_batch_without_2, (n,)) if n == 2 else (_batch_without, (n, 0, False))
    return _batch_conditional_poisson, (n,)


def solve_batch(P, Q, n, code):
    """Row-parallel batch solve of ``(B, V)`` arrays (binned scans where sums suffice).

    Returns ``(alpha, H)``: alpha* per row and a boolean mask of an optimal subset per row. Batches
    of fewer than ``PARALLEL_MIN_ENTRIES`` entries run row by row on the single-row kernels unless the
    row-parallel kernel is compiled already (:func:`compiled_ready`): compiling it takes seconds, far
    more than such a batch, but once it is there it is several times faster than the loop.
    """
    kernel, extra = _batch_kernel(P.shape[1], n, code)
    if P.size < PARALLEL_MIN_ENTRIES and not compiled_ready(kernel):
        out = np.empty(P.shape[0])
        H = np.zeros(P.shape, dtype=np.bool_)
        keys = small_or_jit(order_keys, P.shape[1])
        for b in range(P.shape[0]):
            order = np.argsort(keys(P[b], Q[b]), kind="stable")
            d, k = solve_sorted(np.ascontiguousarray(P[b][order]), np.ascontiguousarray(Q[b][order]), n, code)
            H[b, order[: int(k)]] = True
            out[b] = max(1.0 - d, 0.0)
        return out, H
    from .. import _compile

    _compile.notice("batch_sequential" if kernel is _batch_without else "batch", kernel=kernel)
    return kernel(P, Q, *extra)


@nb.njit(cache=True, fastmath={"reassoc"}, inline="always")
def _block_sum_min(x, a, e):
    s = 0.0
    mn = np.inf
    for i in range(a, e):
        s += x[i]
        mn = min(mn, x[i])
    return s, mn


@nb.njit(cache=True, parallel=True)
def normalized_rows(X, out):
    """Row-parallel validation and normalisation of a ``(B, V)`` float64 array in one read and one
    write: returns ``(sums, mins)`` per row (the sum compensated over blocks of ``PLAN_BLOCK``
    entries) and writes ``X / sum`` to ``out`` for the rows whose sum is finite and positive and whose
    entries are non-negative (a NaN or infinite entry makes the sum NaN or infinite)."""
    B, V = X.shape
    sums = np.empty(B)
    mins = np.empty(B)
    for b in nb.prange(B):
        s, c = 0.0, 0.0
        mn = np.inf
        for a in range(0, V, PLAN_BLOCK):
            bs, bm = _block_sum_min(X[b], a, min(a + PLAN_BLOCK, V))
            s, c = neumaier_add(s, c, bs)
            mn = min(mn, bm)
        total = s + c
        sums[b] = total
        mins[b] = mn
        if 0.0 < total < np.inf and mn >= 0.0:
            for i in range(V):
                out[b, i] = X[b, i] / total
    return sums, mins


@nb.njit(cache=True, parallel=True)
def masked_row_sums(X, H):
    """``(inside, outside)``: per row, the compensated sums of ``X`` over ``H`` and over its complement.

    Plain masked sums, row-parallel: the batch re-check of certificates (no prefix sums, no bins).
    ``X >= 0`` (validated probabilities): each entry is added to both sums, as itself on its side and
    as 0 on the other, which leaves a compensated sum of non-negative terms unchanged bit for bit
    (:func:`neumaier_add_nonneg`), so the sums are those of skipping it, without a branch per entry.
    """
    B = X.shape[0]
    inside = np.empty(B)
    outside = np.empty(B)
    for b in nb.prange(B):
        si, ci, so, co = 0.0, 0.0, 0.0, 0.0
        for i in range(X.shape[1]):
            x = X[b, i]
            h = H[b, i]
            si, ci = neumaier_add_nonneg(si, ci, x if h else 0.0)
            so, co = neumaier_add_nonneg(so, co, 0.0 if h else x)
        inside[b] = si + ci
        outside[b] = so + co
    return inside, outside

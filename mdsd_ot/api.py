"""Public entry points: :func:`optimal_acceptance` and :func:`optimal_acceptance_batch`."""

from __future__ import annotations

import threading

import numpy as np

from . import _compile, _kernels, dual, primal
from ._config import (
    BATCH_BUFFER_MAX_ENTRIES,
    BINNED_MIN_V,
    CERT_TOL,
    PARALLEL_MIN_ENTRIES,
    PYTHON_MAX_V,
    QUAD_MAX_REFINE,
    RECHECK_TOL,
)
from ._kernels import dispatch as _dispatch
from ._validate import (
    N_MAX,
    check_bool,
    check_choice,
    check_n,
    check_pair,
    check_totals,
    fingerprint,
    normalized_pair,
    renormalized_note,
)
from .drafts import get_scheme
from .result import AcceptanceResult

__all__ = ["optimal_acceptance", "optimal_acceptance_batch", "METHODS"]

METHODS = ("auto", "dual", "lp", "cvxpy", "bruteforce")

#: Other accepted method names (matched case-insensitively, as the canonical ones are): ``"highs"``
#: is the LP solved by HiGHS, which is what ``"lp"`` does.
METHOD_ALIASES = {"highs": "lp", "brute_force": "bruteforce"}


def _dual_objective(p, q, n, scheme, subset, refine: int = 0) -> float:
    """``p(H) + 1 - Q(H)``, recomputed from scratch for the subset (an upper bound on alpha*).

    ``Q(H)`` comes from :meth:`DraftScheme.mass`, which never calls the dual solver's kernels (for
    sequential sampling with n >= 3: enumeration or an independent quadrature on a finer grid).
    The empty set's objective is 1 for every scheme (no draft lies in it: ``Q = p = 0``).
    """
    if len(subset) == 0:
        return 1.0
    mask = np.zeros(p.size, dtype=bool)
    mask[subset] = True
    return (p * mask).sum() + 1.0 - scheme.mass(q, n, mask, refine=refine)


def _verdict(diff: float, tol: float) -> tuple[bool, str]:
    """Status of a value whose certificate objective, recomputed independently, differs by ``diff``."""
    if diff <= tol:
        return True, (
            f"certificate re-checked: p(H) + 1 - Q(H) recomputed independently agrees to "
            f"{diff:.1e} (this checks the value at H, not that H is optimal)"
        )
    return False, (
        f"certificate check failed: p(H) + 1 - Q(H) recomputed independently differs from the "
        f"solver's value by {diff:.3g} (tolerance {tol:g}); please report this input"
    )


def _solve_dual_checked(p, q, n, scheme):
    """The dual value, its subset and the independent re-check, with quadrature refinement.

    For sequential sampling with n >= 3 the solver and the re-check are two quadratures, the
    re-check on nodes half-way between the solver's (the trapezoid rule's leading error changes sign
    under that shift); a disagreement above ``RECHECK_TOL`` halves both
    steps again (at most ``QUAD_MAX_REFINE`` times), so the difference is the error estimate.
    """
    refine = 0
    while True:
        # the sequential scan leaves its sorted arrays in `seen`: its certificate is re-checked on
        # their slices (the independent evaluation, without gathering a mask; dual.sequential_objective)
        seen = {} if dual.is_sequential_scan(scheme, n) else None
        value, subset = dual.solve_dual(p, q, n, scheme, refine, seen)
        if seen:
            check = dual.sequential_objective(seen["ps"], seen["qs"], seen["k"], n, refine)
        else:
            check = _dual_objective(p, q, n, scheme, subset, refine)
        diff = abs(check - value)
        if diff <= RECHECK_TOL or not scheme.is_quadrature(n) or refine == QUAD_MAX_REFINE:
            return value, subset, diff
        refine += 1


def _lower_bound(p, q, n, scheme, prove: bool):
    """The exact acceptance of the verifier that attains alpha* for ``scheme`` (a proven lower bound),
    where affordable: closed-form verifiers always, the full-vocabulary construction for i.i.d. drafts
    with ``prove``; ``None`` where the scheme has none."""
    how = scheme.optimal_at_full_v
    if how is None or (how == "chain" and not prove):
        return None
    from .verifiers import VERIFIERS

    return float(VERIFIERS["optimal"].prepare(p, q, n, sampling=scheme.name).acceptance())


def _with_lower_bound(verdict, value, lower):
    """``(ok, message)`` with the lower bound's verdict appended (a lower bound above the value means
    that one of two independent computations is wrong: not a success)."""
    ok, message = verdict
    if lower is None:
        return ok, message
    gap = value - lower
    if gap < -RECHECK_TOL:
        return False, (
            f"internal error: a valid verifier attains {lower!r}, above the dual value {value!r} by "
            f"{-gap:.3g}; please report this input"
        )
    message = message.replace(" (this checks the value at H, not that H is optimal)", "")
    return ok, message + f"; optimality proven: a valid verifier attains the value to {max(gap, 0.0):.1e}"


#: The schemes of the one-kernel path at small V (:func:`_small_dual`) and their kernel codes.
_SMALL_CODES = {"with_replacement": 0, "without_replacement": 1}


def _small_dual(p, q, n, sampling):
    """:func:`optimal_acceptance` with its defaults for one float64 pair of fewer than ``BINNED_MIN_V``
    tokens (where the general path sorts), i.i.d. drafts or sequential n = 2, in one kernel
    (:func:`mdsd_ot._kernels.small_dual`: the validation, the scan and the independent re-check of the
    general path, in the same arithmetic): the same result, or None where the general path must run
    (another input, a failing check, whose message comes from there; the kernel not compiled yet at a
    size whose first call runs the Python twins)."""
    code = _SMALL_CODES.get(sampling) if type(sampling) is str else None
    if (
        code is None
        or p.ndim != 1
        or p.shape != q.shape
        or p.dtype != np.float64
        or q.dtype != np.float64
        or not 0 < p.size < BINNED_MIN_V
        or not 1 <= n <= N_MAX
        or (code == 1 and n != 2)
    ):
        return None
    kernel = _kernels.small_dual
    if not _dispatch.compiled_ready(kernel):
        if p.size <= PYTHON_MAX_V:
            return None
        _compile.notice("sorted_scan", kernel=kernel)  # a line before a long first compile
    status, value, subset, diff = kernel(np.ascontiguousarray(p), np.ascontiguousarray(q), n, code)
    if status:
        return None
    ok, message = _verdict(diff, RECHECK_TOL)
    return AcceptanceResult(value, subset, "dual", sampling, n, ok, message, lower_bound=None)


def optimal_acceptance(
    p,
    q,
    n,
    *,
    sampling: str = "with_replacement",
    method: str = "auto",
    normalize: bool = False,
    prove: bool = False,
) -> AcceptanceResult:
    """Optimal acceptance rate of multi-draft speculative decoding.

    .. math:: \\alpha^* = \\min_{H} \\; p(H) + 1 - Q(H)

    where ``Q(H)`` is the probability that all ``n`` drafts (drawn from ``q`` under ``sampling``)
    lie in ``H`` (docs/math.md#dual-and-sorting-theorem). This is the largest probability, over all valid
    verifiers, that
    the output token is one of the drafts.

    Parameters
    ----------
    p, q : array_like, shape (V,)
        Target and draft distributions (float64, float32, float16, or torch tensors, bfloat16 too;
        promoted to float64 exactly). Sums within ``SUM_TOL`` of one (float64 input), or within the
        rounding bound of a softmax in the input's dtype at this V (float32, bfloat16, float16:
        :func:`mdsd_ot._validate.sum_tolerance`; ``message`` then says so), are rescaled to one in
        float64, and alpha* is computed exactly for the rescaled distributions; larger deviations
        raise unless ``normalize=True``. Logits: :func:`mdsd_ot.to_distribution` first.
    n : int
        Number of drafts (>= 1).
    sampling : str
        ``"with_replacement"``, ``"without_replacement"`` (sequential), ``"greedy"``, ``"hub"``
        (n = 2) or ``"conditional_poisson"``; see :mod:`mdsd_ot.drafts`.
    method : str
        ``"auto"`` / ``"dual"`` (sorted-prefix scan or closed form; O(V log V)), ``"lp"`` (HiGHS,
        small V), ``"cvxpy"`` (the same LP through cvxpy) or ``"bruteforce"`` (all 2^V subsets).
    normalize : bool
        Rescale p and q to sum to one instead of rejecting unnormalised input.
    prove : bool
        Also compute ``lower_bound`` for i.i.d. drafts (the exact acceptance of the full-vocabulary
        optimal verifier; about twice the cost of the solve). For greedy, hub and top-n drafts it is
        always computed (O(V)); sequential and conditional-Poisson drafts have none.

    Returns
    -------
    AcceptanceResult
        ``value``, the optimal subset ``subset`` and ``success``: the certificate ``p(H) + 1 - Q(H)``
        was recomputed by independent code and agrees with ``value`` to ``RECHECK_TOL`` (so ``value``
        is an upper bound on alpha* to that tolerance); where ``lower_bound`` is computed (a valid
        verifier's exact acceptance) it does not exceed ``value``, and ``value - lower_bound`` bounds
        the distance to alpha*. Without a lower bound, optimality rests on the sorting theorem and the
        scan's bounds, proven in docs/math.md#pruning (not re-checked at run time). For the LP
        methods also the transport plan and rejection residual.

    Examples
    --------
    >>> from mdsd_ot import optimal_acceptance
    >>> r = optimal_acceptance([0.5, 0.3, 0.2, 0.0], [0.1, 0.2, 0.3, 0.4], 2)
    >>> round(r.value, 6), r.subset.tolist()
    (0.69, [1, 2, 3])
    """
    if (
        type(p) is np.ndarray
        and type(q) is np.ndarray
        and type(n) is int
        and method == "auto"
        and normalize is False
        and prove is False
    ):
        small = _small_dual(p, q, n, sampling)
        if small is not None:
            return small
    report = []  # inputs that came in float32, bfloat16 or float16: said in the message
    p, q = normalized_pair(p, q, normalize=normalize, report=report)
    note = renormalized_note(report)
    n = check_n(n)
    scheme = get_scheme(sampling)
    method = check_choice(method, "method", METHODS, METHOD_ALIASES)
    prove = check_bool(prove, "prove")
    scheme.check(q, n)
    extra = {}
    if scheme.q_dominates and np.array_equal(p, q) and method in ("auto", "dual"):
        # identical distributions: outputting the draft law unchanged is valid, so alpha* = 1
        # exactly for every scheme with Q(H) <= q(H) = p(H) for all H; certificate: the empty set
        value, subset = 1.0, np.empty(0, dtype=np.int64)
        method = "dual"
    elif method in ("auto", "dual"):
        _compile.notice_for_bound(scheme, n, p.size)  # a line before a long first compile
        value, subset, diff = _solve_dual_checked(p, q, n, scheme)
        lower = _lower_bound(p, q, n, scheme, prove)
        ok, message = _with_lower_bound(_verdict(diff, RECHECK_TOL), float(value), lower)
        message = f"{message}; {note}" if note else message
        return AcceptanceResult(float(value), subset, "dual", scheme.name, n, ok, message, lower_bound=lower)
    elif method == "bruteforce":
        value, subset = dual.solve_bruteforce(p, q, n, scheme)
    else:
        lp = primal.build_lp(p, q, n, scheme)
        sol = primal.solve_highs(lp) if method == "lp" else primal.solve_cvxpy(lp)
        if not sol.success:
            return AcceptanceResult(
                float("nan"),
                np.empty(0, dtype=np.int64),
                method,
                scheme.name,
                n,
                False,
                f"LP solver failed: {sol.message}",
            )
        # the cut read off a floating-point flow depends on the zero tolerance: keep the best cut
        cuts = [sol.min_cut_subset(tol) for tol in (1e-13, 1e-11, 1e-9, 1e-7)]
        subset = min(cuts, key=lambda h: _dual_objective(p, q, n, scheme, h))
        value = min(sol.value, 1.0)
        extra = dict(plan=sol.plan, draft_sets=lp.sets, residual=sol.residual)
    tol = RECHECK_TOL if method in ("dual", "bruteforce") else CERT_TOL
    ok, message = _verdict(abs(_dual_objective(p, q, n, scheme, subset) - value), tol)
    message = f"{message}; {note}" if note else message
    return AcceptanceResult(float(value), subset, method, scheme.name, n, ok, message, **extra)


class _RowBuffers(threading.local):
    """The normalised copies of a batch's p and q rows, kept per thread between calls up to
    ``BATCH_BUFFER_MAX_ENTRIES`` entries each: fresh ones are page faults of the whole batch at every
    call (at 256 x 1,000 about a third of the call). They never leave the call."""

    arrays = None


_ROW_BUFFERS = _RowBuffers()


def _row_buffer(i: int, shape) -> np.ndarray:
    """This thread's buffer ``i`` (0: p, 1: q) of ``shape``, or a fresh array above the cap."""
    size = shape[0] * shape[1]
    if size > BATCH_BUFFER_MAX_ENTRIES:
        return np.empty(shape)
    arrays = _ROW_BUFFERS.arrays
    if arrays is None:
        arrays = _ROW_BUFFERS.arrays = [np.empty(0), np.empty(0)]
    if arrays[i].size < size:
        arrays[i] = np.empty(size)
    return arrays[i][:size].reshape(shape)


def _normalized_rows(P, Q, normalize):
    """:func:`check_pair` for ``(B, V)`` batches, then every row divided by its sum, in fresh arrays.

    Large float64 arrays take one row-parallel pass each (:func:`_kernels.normalized_rows`: one read,
    one write, instead of numpy's copy, sum, min, sum and divide in one thread); its row sums and
    minima go through the same checks as :func:`check_pair`'s (:func:`check_totals`: same messages)."""
    normalize = check_bool(normalize, "normalize")
    fast = [
        isinstance(x, np.ndarray)
        and not isinstance(x, np.ma.MaskedArray)
        and x.dtype == np.float64
        and x.ndim == 2
        and x.flags.c_contiguous
        and x.size >= PARALLEL_MIN_ENTRIES
        for x in (P, Q)
    ]
    if not (all(fast) and P.shape == Q.shape):
        P, Q = check_pair(P, Q, ndim=2, normalize=normalize)
        P /= P.sum(axis=1, keepdims=True)  # check_pair returned fresh C-contiguous copies
        Q /= Q.sum(axis=1, keepdims=True)
        return P, Q
    out = []
    for i, (x, name) in enumerate(((P, "p"), (Q, "q"))):
        rows = _row_buffer(i, x.shape)
        with np.errstate(invalid="ignore", over="ignore"):  # (a NaN or inf entry: refused below)
            sums, mins = _kernels.normalized_rows(x, rows)
        check_totals(x, name, sums, float(mins.min()), normalize)  # rows written where these pass
        out.append(rows)
    return out[0], out[1]


def _check_rows(scheme, Q, n) -> None:
    """``scheme.check`` for every row of ``Q``, raising what it raises for the first row it refuses:
    the rows' supports are counted at once and only the first row with too few tokens (and the first
    row, for the scheme's own conditions on n) goes through the check."""
    scheme.check(Q[0], n)
    short = np.flatnonzero(np.count_nonzero(Q > 0, axis=1) < scheme._min_support(n))
    if short.size:
        scheme.check(Q[short[0]], n)


def optimal_acceptance_batch(
    P, Q, n, *, sampling: str = "with_replacement", normalize: bool = False
) -> np.ndarray:
    """Optimal acceptance for each row of ``(B, V)`` arrays, rows solved in parallel.

    Parameters
    ----------
    P, Q : array_like, shape (B, V)
        Target and draft distributions, one pair per row.
    n : int
        Number of drafts.
    sampling : str
        As in :func:`optimal_acceptance`.
    normalize : bool
        Rescale every row to sum to one.

    Returns
    -------
    ndarray, shape (B,)
        ``alpha*`` per row. Every row's certificate is re-checked independently, as in
        :func:`optimal_acceptance` (rows that fail are solved again with refinement); a row that
        still fails raises ``RuntimeError`` naming the row: no unchecked value is returned.
    """
    n = check_n(n)
    scheme = get_scheme(sampling)
    if np.ndim(P) == 2:  # a line before a long first compile (normalising large batches compiles too)
        _compile.notice_for_batch(scheme, n, np.shape(P))
    P, Q = _normalized_rows(P, Q, normalize)
    _check_rows(scheme, Q, n)
    if scheme.kernel_code is None:  # a closed-form dual, row by row
        solved = [scheme.closed_form_dual(p, q, n) for p, q in zip(P, Q)]
        out = np.array([value for value, _ in solved])
        masks = np.zeros(P.shape, dtype=bool)
        for b, (_, subset) in enumerate(solved):
            masks[b, subset] = True
    else:
        out, masks = _kernels.solve_batch(P, Q, n, scheme.kernel_code)
    same = (P == Q).all(axis=1) & scheme.q_dominates
    out[same] = 1.0  # identical rows: exactly 1, as in optimal_acceptance
    p_h = (P * masks).sum(axis=1) if P.size < PARALLEL_MIN_ENTRIES else _kernels.masked_row_sums(P, masks)[0]
    check = p_h + 1.0 - scheme.masses(Q, n, masks)
    for b in np.flatnonzero(~same & (np.abs(check - out) > RECHECK_TOL)):
        value, _, diff = _solve_dual_checked(P[b], Q[b], n, scheme)
        if diff > RECHECK_TOL:
            raise RuntimeError(
                f"internal error: row {b}'s value could not be certified (independent re-check differs "
                f"by {diff:.3g}); please report this input (fingerprint "
                f"{fingerprint(P[b], Q[b], n=n, sampling=scheme.name)})"
            )
        out[b] = value
    return out

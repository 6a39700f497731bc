"""Public entry points: :func:`optimal_acceptance` and :func:`optimal_acceptance_batch`."""
from __future__ import annotations

import numpy as np

from . import _kernels, dual, primal
from ._config import CERT_TOL
from ._validate import check_choice, check_n, check_pair
from .drafts import get_scheme
from .result import AcceptanceResult

__all__ = ["optimal_acceptance", "optimal_acceptance_batch", "METHODS"]

METHODS = ("auto", "dual", "lp", "cvxpy", "bruteforce")


def _dual_objective(p, q, n, scheme, subset) -> float:
    """``p(H) + 1 - Q(H)``, recomputed from scratch for the subset (an upper bound on alpha*)."""
    mask = np.zeros(p.size, dtype=bool)
    mask[subset] = True
    return p.sum(where=mask) + 1.0 - scheme.mass(q, n, mask)


def _recheck(p, q, n, scheme, value, subset) -> tuple[bool, str]:
    """Recompute the certificate's objective independently of the solver and compare."""
    check = _dual_objective(p, q, n, scheme, subset)
    if abs(check - value) <= CERT_TOL:
        return True, "optimal; certificate re-checked"
    return False, (
        f"certificate check failed: p(H) + 1 - Q(H) = {check:.12g} but the solver reported "
        f"{value:.12g}; please report this input"
    )


def optimal_acceptance(
    p, q, n, *, sampling: str = "with_replacement", method: str = "auto", normalize: bool = False
) -> AcceptanceResult:
    """Optimal acceptance rate of multi-draft speculative decoding.

    .. math:: \\alpha^* = \\min_{H} \\; p(H) + 1 - Q(H)

    where ``Q(H)`` is the probability that all ``n`` drafts (drawn from ``q`` under ``sampling``)
    lie in ``H`` (MATH.md section 3). This is the largest probability, over all valid verifiers, that
    the output token is one of the drafts.

    Parameters
    ----------
    p, q : array_like, shape (V,)
        Target and draft distributions (float16/32/64; promoted to float64). Sums within
        ``SUM_TOL`` of one are rescaled to one; larger deviations raise unless ``normalize=True``.
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

    Returns
    -------
    AcceptanceResult
        ``value``, the optimal subset ``subset`` (re-checked before ``success`` is set), and for the
        LP methods the transport plan and rejection residual.

    Examples
    --------
    >>> from mdsd_ot import optimal_acceptance
    >>> r = optimal_acceptance([0.5, 0.3, 0.2, 0.0], [0.1, 0.2, 0.3, 0.4], 2)
    >>> round(r.value, 6), r.subset.tolist()
    (0.69, [1, 2, 3])
    """
    p, q = check_pair(p, q, normalize=normalize)
    p = p / p.sum()
    q = q / q.sum()
    n = check_n(n)
    scheme = get_scheme(sampling)
    method = check_choice(method, "method", METHODS)
    scheme.check(q, n)
    extra = {}
    if np.array_equal(p, q) and method in ("auto", "dual"):
        # identical distributions: outputting the draft law unchanged is valid, so alpha* = 1
        # exactly for every scheme (Q(H) <= p(H) for all H); certificate: the empty set
        value, subset = 1.0, np.empty(0, dtype=np.int64)
        method = "dual"
    elif method in ("auto", "dual"):
        value, subset = dual.solve_dual(p, q, n, scheme)
        method = "dual"
    elif method == "bruteforce":
        value, subset = dual.solve_bruteforce(p, q, n, scheme)
    else:
        lp = primal.build_lp(p, q, n, scheme)
        sol = primal.solve_highs(lp) if method == "lp" else primal.solve_cvxpy(lp)
        if not sol.success:
            return AcceptanceResult(
                float("nan"), np.empty(0, dtype=np.int64), method, scheme.name, n, False,
                f"LP solver failed: {sol.message}",
            )
        # the cut read off a floating-point flow depends on the zero tolerance: keep the best cut
        cuts = [sol.min_cut_subset(tol) for tol in (1e-13, 1e-11, 1e-9, 1e-7)]
        subset = min(cuts, key=lambda h: _dual_objective(p, q, n, scheme, h))
        value = min(sol.value, 1.0)
        extra = dict(plan=sol.plan, draft_sets=lp.sets, residual=sol.residual)
    ok, message = _recheck(p, q, n, scheme, value, subset)
    return AcceptanceResult(float(value), subset, method, scheme.name, n, ok, message, **extra)


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
        ``alpha*`` per row (the dual value; use :func:`optimal_acceptance` for certificates).
    """
    P, Q = check_pair(P, Q, ndim=2, normalize=normalize)
    P = np.ascontiguousarray(P / P.sum(axis=1, keepdims=True))
    Q = np.ascontiguousarray(Q / Q.sum(axis=1, keepdims=True))
    n = check_n(n)
    scheme = get_scheme(sampling)
    for row in Q:
        scheme.check(row, n)
    if scheme.name in ("greedy", "hub"):
        out = np.array([dual.solve_greedy(p, q, n)[0] for p, q in zip(P, Q)])
    else:
        out = _kernels.solve_batch(P, Q, n, _kernels.SCHEME_CODES[scheme.name])
    out[(P == Q).all(axis=1)] = 1.0  # identical rows: exactly 1, as in optimal_acceptance
    return out

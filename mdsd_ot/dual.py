"""The dual of the optimal-transport LP: subset selection (docs/math.md#dual-and-sorting-theorem).

.. math:: \\alpha^* = \\min_{H \\subseteq \\Sigma} \\; p(H) + 1 - Q(H)

Two solvers:

* :func:`solve_bruteforce` enumerates all ``2^V`` subsets against the scheme's exact set law (the
  slow oracle; ``V <= BRUTEFORCE_MAX_V``).
* :func:`solve_sorted_prefix` scans the ``V + 1`` prefixes of the tokens sorted by ``q/p`` (high to
  low), which contain an optimal ``H`` for every scheme with ``prefix_optimal``. Greedy and hub drafts
  have an explicit optimal subset instead (:meth:`DraftScheme.closed_form_dual`), found in O(V).

Both return ``(value, subset)`` with ``subset`` the sorted token indices of an optimal ``H``.
"""

from __future__ import annotations

import numpy as np

from . import _kernels
from ._config import BINNED_MIN_V, BRUTEFORCE_MAX_V
from .drafts import DraftScheme, complement_parts
from .drafts.scheme import KERNEL_WITH, KERNEL_WITHOUT
from .drafts.without_replacement import sequential_mass_inside

__all__ = ["sorted_order", "solve_sorted_prefix", "solve_bruteforce", "solve_dual", "sequential_objective"]


#: Below this vocabulary size the order comes from numpy's stable sort alone (no tie-breaking kernel
#: to compile on a first call; the time difference is negligible there).
STABLE_SORT_MAX_V = 4096


def sorted_order(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Token order by ``q/p`` from high to low; ``p = 0 < q`` first, ``q = 0`` last, ties by index.

    numpy's default (introsort) argsort is about twice as fast as its stable sort; at large V runs of
    equal ratios are then put in index order, which makes the order deterministic.

    Parameters
    ----------
    p, q : numpy.ndarray
        Validated float64 target and draft distributions of one shape ``(V,)``, each summing to one.

    Returns
    -------
    numpy.ndarray
        int64 permutation of ``range(V)``.
    """
    keys = _kernels.small_or_jit(_kernels.order_keys, p.size)(p, q)
    if p.size <= STABLE_SORT_MAX_V:
        return np.argsort(keys, kind="stable")
    return _kernels.break_ties_by_index(keys, np.argsort(keys))


def solve_sorted_prefix(p, q, n: int, scheme: DraftScheme, refine: int = 0, seen: dict | None = None):
    """Optimal acceptance by the sorted-prefix scan.

    With replacement (and sequential sampling with n = 2) ``Q(H)`` depends on sums over ``H`` only,
    so tokens are binned by ``q/p`` instead of sorted and only the bins that may hold the optimum are
    sorted (:func:`mdsd_ot._kernels.bucketed_scan`, O(V)); other schemes sort once and scan (above
    ``STABLE_SORT_MAX_V`` tokens with the evaluation plan's bucket sort,
    :func:`mdsd_ot._kernels.plan.ratio_order`, which gathers p and q along the order as it decodes;
    the order is that of :func:`sorted_order`, which the tests use as its independent reference).

    Sequential sampling without replacement uses the closed form for n = 2; for n >= 3 it evaluates
    ``W_n`` by exponential-clock quadrature at a few prefixes and bounds the others away
    (:func:`mdsd_ot._kernels.scan_without_replacement`); ``refine`` halves its quadrature step that
    many times. When the tokens are sorted and ``seen`` is a dict, it receives ``ps``, ``qs`` (p and q
    in the order) and ``k`` (the optimal prefix's length) for a re-check on the slices.

    Parameters
    ----------
    p, q : numpy.ndarray
        Validated float64 target and draft distributions of one shape ``(V,)``, each summing to one.
    n : int
        Number of drafts (validated).
    scheme : DraftScheme
        A prefix-optimal scheme (``kernel_code`` not None).
    refine : int
        Halvings of the quadrature step (sequential n >= 3 only).
    seen : dict or None
        Receives ``ps``, ``qs`` and ``k`` when the tokens were sorted.

    Returns
    -------
    (float, numpy.ndarray)
        ``alpha*`` and the optimal subset ``H`` (sorted int64 token indices; empty when alpha* = 1).
    """
    code = scheme.kernel_code
    if scheme.sums_suffice(n) and p.size >= BINNED_MIN_V:  # bins instead of a full sort
        family = KERNEL_WITH if n == 1 else code  # n = 1: q(H) whatever the scheme (the i.i.d. family)
        parts = complement_parts(q) if family == KERNEL_WITHOUT else (0.0, -1, 1.0)
        excess, mask = _kernels.bucketed_scan(p, q, n, family, *parts)
    else:
        if p.size <= STABLE_SORT_MAX_V:
            order = sorted_order(p, q)
            ps, qs = p[order], q[order]
        else:  # the evaluation plan's order pass: the same order, p and q gathered along it
            from ._kernels import plan as _plan_kernels

            order, _, ps, qs = _plan_kernels.ratio_order(p, q)
        excess, k = _kernels.solve_sorted(ps, qs, n, code, refine)
        if seen is not None:
            seen.update(ps=ps, qs=qs, k=int(k))
        k = int(k)
        if 2 * k <= p.size:
            mask = np.zeros(p.size, dtype=bool)
            mask[order[:k]] = True
        else:  # the complement has fewer tokens to mark
            mask = np.ones(p.size, dtype=bool)
            mask[order[k:]] = False
    return max(1.0 - float(excess), 0.0), np.flatnonzero(mask)


def is_sequential_scan(scheme: DraftScheme, n: int) -> bool:
    """True when the dual is the sequential quadrature scan (sampling without replacement, n >= 3),
    whose certificate :func:`sequential_objective` re-checks.

    Parameters
    ----------
    scheme : DraftScheme
    n : int
        Number of drafts.

    Returns
    -------
    bool
    """
    return scheme.kernel_code == KERNEL_WITHOUT and scheme.is_quadrature(n)


def sequential_objective(ps, qs, k: int, n: int, refine: int = 0) -> float:
    """``p(H) + 1 - W_n(H)`` for ``H`` the first ``k`` tokens of a sorted order (``ps``, ``qs``: p and q
    along it), recomputed independently of the scan (docs/math.md#independent-check).

    The value of ``DraftScheme.mass`` for sequential sampling (n >= 3) without its gathers: the masses
    of ``H`` are the contiguous ``qs[:k]``, the sums ``p(H)`` and ``R = q(outside)`` are numpy's pairwise
    sums of the slices (the scan uses compensated running sums), and ``W_n(H)`` is enumerated or
    evaluated by :func:`mdsd_ot._kernels.sequential_mass_check` (tokens sorted by q, Newton's
    identities, nodes half-way between the scan's):
    :func:`mdsd_ot.drafts.without_replacement.sequential_mass_inside`, which the scheme's ``mass`` calls
    too.

    Parameters
    ----------
    ps, qs : numpy.ndarray
        p and q along the sorted order.
    k : int
        Length of the prefix ``H``.
    n : int
        Number of drafts (>= 3).
    refine : int
        Halvings of the check's quadrature step.

    Returns
    -------
    float
        The dual objective at ``H``.
    """
    w = sequential_mass_inside(qs[:k], float(np.sum(qs[k:])), n, refine)
    return float(np.sum(ps[:k])) + 1.0 - w


def solve_dual(p, q, n: int, scheme: DraftScheme, refine: int = 0, seen: dict | None = None):
    """The fast exact dual for ``scheme``: its closed form if it has one, sorted prefixes otherwise
    (``seen``: see :func:`solve_sorted_prefix`).

    Parameters
    ----------
    p, q : numpy.ndarray
        Validated float64 target and draft distributions of one shape ``(V,)``, each summing to one.
    n : int
        Number of drafts (validated).
    scheme : DraftScheme
    refine : int
        Halvings of the quadrature step (sequential n >= 3 only).
    seen : dict or None
        See :func:`solve_sorted_prefix`.

    Returns
    -------
    (float, numpy.ndarray)
        ``alpha*`` and an optimal subset (int64 token indices).
    """
    closed = scheme.closed_form_dual(p, q, n)
    if closed is not None:
        return closed
    return solve_sorted_prefix(p, q, n, scheme, refine, seen)


def solve_bruteforce(p, q, n: int, scheme: DraftScheme):
    """Exhaustive search over all ``2^V`` subsets using the scheme's enumerated set law.

    Parameters
    ----------
    p, q : numpy.ndarray
        Validated float64 target and draft distributions of one shape ``(V,)``, each summing to one.
    n : int
        Number of drafts.
    scheme : DraftScheme

    Returns
    -------
    (float, numpy.ndarray)
        ``alpha*`` and the first minimising subset (int64 token indices).

    Raises
    ------
    ValueError
        When ``V > BRUTEFORCE_MAX_V``.
    """
    V = p.size
    if V > BRUTEFORCE_MAX_V:
        raise ValueError(
            f"brute force enumerates 2^V subsets; V = {V} exceeds {BRUTEFORCE_MAX_V}. "
            f"Use method='dual' or 'lp'"
        )
    sets, masses = scheme.set_law(q, n)
    bits = 1 << np.arange(V, dtype=np.int64)
    set_bits = np.array([sum(1 << t for t in s) for s in sets], dtype=np.int64)
    best_value, best_h = np.inf, 0
    block = max(1, (1 << 22) // max(len(sets), V))  # subsets per block: bounded memory
    for start in range(0, 1 << V, block):
        subsets = np.arange(start, min(start + block, 1 << V), dtype=np.int64)
        members = (subsets[:, None] & bits[None, :]) != 0  # (block, V)
        inside = (set_bits[None, :] & ~subsets[:, None]) == 0  # draft set within H
        values = members.astype(float) @ p + 1.0 - inside.astype(float) @ masses
        i = int(np.argmin(values))
        if values[i] < best_value:
            best_value, best_h = float(values[i]), int(subsets[i])
    return min(max(best_value, 0.0), 1.0), np.flatnonzero(best_h & bits).astype(np.int64)

"""The one result type returned by every bound solver."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class AcceptanceResult:
    """Optimal acceptance rate of multi-draft speculative decoding, with its certificate.

    Attributes
    ----------
    value : float
        The optimal acceptance rate alpha* in [0, 1].
    subset : ndarray of int64
        Sorted token indices of an optimal dual subset H, with
        ``alpha* = p(H) + 1 - Q(H)`` (docs/math.md#dual-and-sorting-theorem).
    method : str
        The method that produced the value (``"dual"``, ``"lp"``, ``"cvxpy"``, ``"bruteforce"``).
    sampling : str
        The draft-sampling scheme.
    n : int
        Number of drafts.
    success : bool
        True when the solver finished, the certificate re-check passed (``p(H) + 1 - Q(H)``
        recomputed by code independent of the solver agrees with ``value`` to ``RECHECK_TOL``, so
        ``value`` is an upper bound on alpha* to that tolerance), and ``lower_bound``, where computed,
        does not exceed ``value`` by more than ``RECHECK_TOL``. It does not by itself say that ``H``
        is optimal: see ``lower_bound`` and docs/math.md#dual-and-sorting-theorem.
    message : str
        Human-readable status.
    lower_bound : float or None
        A lower bound on alpha*: the exact acceptance of a valid verifier for the scheme that attains
        alpha* (``DraftScheme.optimal_at_full_v``, computed by the verifier's own code, which shares
        nothing with the dual scan). ``value - lower_bound`` then bounds the distance to the optimum
        (optimality proven when it is below ``RECHECK_TOL``). Computed where it costs O(V) (greedy,
        hub and top-n drafts), with ``prove=True`` also for i.i.d. drafts (the full-vocabulary
        construction, about two scans); ``None`` otherwise (sequential and conditional-Poisson drafts
        have no such verifier at full V).
    plan : ndarray or None
        Primal methods only: ``plan[s, y]`` = probability of outputting ``y`` given draft set ``s``
        (rows follow ``draft_sets``).
    draft_sets : tuple of tuple of int or None
        Primal methods only: the reachable draft sets, in the order of ``plan``'s rows.
    residual : ndarray or None
        Primal methods only: the distribution to sample from on rejection.
    """

    value: float
    subset: np.ndarray
    method: str
    sampling: str
    n: int
    success: bool = True
    message: str = "optimal"
    plan: np.ndarray | None = field(default=None, repr=False)
    draft_sets: tuple | None = field(default=None, repr=False)
    residual: np.ndarray | None = field(default=None, repr=False)
    lower_bound: float | None = None

    @property
    def gap(self) -> float:
        """Optimal rejection probability ``1 - value``."""
        return 1.0 - self.value

    def __float__(self) -> float:
        return float(self.value)

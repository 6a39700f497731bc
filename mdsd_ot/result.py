"""The one result type returned by every bound solver."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

#: Integer status codes of :class:`AcceptanceResult` (as ``scipy.optimize``: 0 is success).
STATUS = {
    0: "success: the value's certificate was re-checked independently",
    1: "the independent re-check of the certificate failed (value not certified)",
    2: "the solver failed (no value)",
}


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
    status : int
        ``0`` success, ``1`` the certificate re-check failed, ``2`` the solver failed (value NaN); see
        :data:`STATUS`. Derived from ``success`` and ``value`` when not given.
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
    status: int | None = None
    lower_bound: float | None = None

    def __post_init__(self):
        if self.status is None:
            code = 0 if self.success else (2 if not math.isfinite(self.value) else 1)
            object.__setattr__(self, "status", code)
        elif self.status not in STATUS:
            raise ValueError(f"status must be one of {sorted(STATUS)}, got {self.status!r}")

    def to_dict(self) -> dict:
        """The result as plain Python values (lists, floats, ints, str), ready for ``json.dumps``.

        The primal fields (``plan``, ``draft_sets``, ``residual``) are included only when present.

        >>> from mdsd_ot import optimal_acceptance
        >>> d = optimal_acceptance([0.5, 0.3, 0.2, 0.0], [0.1, 0.2, 0.3, 0.4], 2).to_dict()
        >>> d["status"], d["success"], round(d["value"], 6), d["subset"], d["method"]
        (0, True, 0.69, [1, 2, 3], 'dual')
        """
        out = {
            "value": float(self.value),
            "subset": [int(i) for i in np.asarray(self.subset).tolist()],
            "method": self.method,
            "sampling": self.sampling,
            "n": int(self.n),
            "success": bool(self.success),
            "status": int(self.status),
            "message": self.message,
            "lower_bound": None if self.lower_bound is None else float(self.lower_bound),
        }
        if self.plan is not None:
            out["plan"] = np.asarray(self.plan, dtype=np.float64).tolist()
        if self.draft_sets is not None:
            out["draft_sets"] = [[int(t) for t in s] for s in self.draft_sets]
        if self.residual is not None:
            out["residual"] = np.asarray(self.residual, dtype=np.float64).tolist()
        return out

    @property
    def gap(self) -> float:
        """Optimal rejection probability ``1 - value``."""
        return 1.0 - self.value

    def __float__(self) -> float:
        return float(self.value)

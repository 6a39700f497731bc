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
        True when the solver finished and the certificate re-check passed.
    message : str
        Human-readable status.
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

    @property
    def gap(self) -> float:
        """Optimal rejection probability ``1 - value``."""
        return 1.0 - self.value

    def __float__(self) -> float:
        return float(self.value)

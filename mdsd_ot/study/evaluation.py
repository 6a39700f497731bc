"""Evaluation: every bound and verifier acceptance at each position, stored only when checked.

The evaluation itself is the library's (:func:`mdsd_ot.rows.evaluate_rows`: the numpy plan, or the
batched torch plan on the tensors' device); the study adds its every-K subsampling of expensive
methods (:func:`mdsd_ot.study.parse_every`).
"""

from __future__ import annotations

import numpy as np

from .. import rows as _rows
from ..rows import _agree  # noqa: F401  (kept for mdsd_ot.study.evaluation._agree)
from .config import _skip, parse_every


def evaluate_rows(
    P,
    Q,
    *,
    ns,
    schemes,
    verifiers,
    backend: str = "numpy",
    seed: int = 0,
    check: bool = False,
    every=None,
    positions=None,
    mc_samples: int | None = None,
) -> list[dict]:
    """Bounds and verifier acceptances for each row of (P, Q), by the evaluation plan.

    Each row is one :func:`mdsd_ot.plan.evaluate_position` (one sort, shared tables, every
    certificate re-checked independently); with torch tensors and ``backend`` ``"torch"``/``"auto"``
    the quantities of :func:`mdsd_ot.backends.torch.evaluate_batch` come from one batched pass on the
    tensors' device, and the rest (sequential n >= 3, RSD n >= 3) from the numpy plan.

    Parameters
    ----------
    P, Q : ndarray or torch.Tensor, float64, shape (m, V)
        Target and draft distributions, one position per row.
    ns, schemes, verifiers : lists
        See :class:`StudyConfig`.
    backend : {"numpy", "torch", "auto"}
        ``"torch"``: the batched torch plan for the tensors (any device); ``"auto"``: that on a
        non-CPU device, the numpy plan on CPU (faster there); ``"numpy"``: the numpy plan.
    seed : int
        Seed of Monte Carlo verifiers (``seed + row``), when they take an ``rng``.
    check : bool
        Re-check the torch values of the first row against the numpy evaluation plan (which equals
        ``mdsd_ot.optimal_acceptance`` and ``verifier_acceptance`` to 1e-12), to ``VALUE_TOL``.
    every : dict or str or None
        Subsampling of expensive methods (:func:`parse_every`): a method whose key starts with a
        pattern is evaluated only at positions ``pos % K == 0`` (absent from the other rows);
        ``K = 0`` switches it off.
    positions : sequence of int or None
        Position index of each row (default ``0..m-1``), used by ``every``.
    mc_samples : int or None
        ``samples`` passed to ``verifier_acceptance`` (Monte Carlo fallback).

    Returns
    -------
    list of dict
        One dict per row: ``{"bound:<scheme>@<n>": float, "verifier:<name>@<n>": float,
        "verifier:<name>@<n>:se": float (only when > 0)}``; a value that could not be computed
        (the method raised ``ValueError``) is ``None`` and its message is in ``"errors"``.
    """
    every = parse_every(every)
    skip = (lambda key, position: _skip(key, every, position)) if every else None
    return _rows.evaluate_rows(
        P,
        Q,
        ns=ns,
        schemes=schemes,
        verifiers=verifiers,
        backend=backend,
        seed=seed,
        check=check,
        skip=skip,
        positions=positions,
        mc_samples=mc_samples,
    )


def _core():
    """The package namespace (kept for ``mdsd_ot.study._core``; the rows now come from the plan)."""
    import mdsd_ot

    return mdsd_ot


def _call_verifier(core, name, p, q, n, seed, samples=None):
    """One verifier acceptance the one-at-a-time way (the plan's fallback does the same)."""
    kw = {"rng": np.random.default_rng(seed)}
    if samples:
        kw["samples"] = int(samples)
    return core.verifier_acceptance(name, p, q, n, **kw)

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
    """:func:`mdsd_ot.rows.evaluate_rows` (same parameters, same rows) with the study's every-K
    subsampling.

    Parameters
    ----------
    every : dict or str or None
        Subsampling of expensive methods (:func:`parse_every`): a method whose key starts with a
        pattern is evaluated only at positions ``pos % K == 0`` (absent from the other rows);
        ``K = 0`` switches it off. Every other parameter is that of :func:`mdsd_ot.rows.evaluate_rows`
        (``ns``, ``schemes``, ``verifiers`` as in :class:`StudyConfig`; ``positions`` also feeds
        ``every``).
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

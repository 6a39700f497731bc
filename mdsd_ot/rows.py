"""Rows: every bound and verifier acceptance at each position of a batch, stored only when checked.

The evaluation behind a study row (:func:`mdsd_ot.study.evaluate_rows`, which adds the every-K
subsampling) and behind :func:`mdsd_ot.trees.node_bounds` on a device: the numpy evaluation plan per
row, or the batched torch plan on the tensors' device with what it does not cover from the numpy
plan. Keys are those of :mod:`mdsd_ot.keys`.
"""

from __future__ import annotations

import numpy as np

from ._config import RECHECK_TOL, VALUE_TOL
from ._validate import fingerprint
from .keys import bound_key, bound_key_of_verifier, se_key, verifier_key
from .keys import verifier_applies as _verifier_applies

__all__ = ["evaluate_rows"]


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
    skip=None,
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
        Numbers of drafts, draft schemes and registry verifier names.
    backend : {"numpy", "torch", "auto"}
        ``"torch"``: the batched torch plan for the tensors (any device); ``"auto"``: that on a
        non-CPU device, the numpy plan on CPU (faster there); ``"numpy"``: the numpy plan.
    seed : int
        Seed of Monte Carlo verifiers (``seed + row``), when they take an ``rng``.
    check : bool
        Re-check the torch values of the first row against the numpy evaluation plan (which equals
        ``mdsd_ot.optimal_acceptance`` and ``verifier_acceptance`` to 1e-12), to ``VALUE_TOL``.
    skip : callable or None
        ``skip(key, position) -> bool``: a method key left out of the row at that position (absent
        from the row; the study's every-K subsampling, :func:`mdsd_ot.study.evaluate_rows`).
    positions : sequence of int or None
        Position index of each row (default ``0..m-1``), passed to ``skip``.
    mc_samples : int or None
        ``samples`` passed to ``verifier_acceptance`` (Monte Carlo fallback).

    Returns
    -------
    list of dict
        One dict per row: ``{"bound:<scheme>@<n>": float, "verifier:<name>@<n>": float,
        "verifier:<name>@<n>:se": float (only when > 0)}``; a value that could not be computed
        (the method raised ``ValueError``) is ``None`` and its message is in ``"errors"``.
    """
    m = int(P.shape[0])
    positions = list(range(m)) if positions is None else [int(x) for x in positions]
    rows = [dict() for _ in range(m)]
    fast = {}  # key -> (m,) values of the batched torch plan (bounds re-checked on the device)
    on_device = hasattr(P, "detach") and getattr(P.device, "type", "cpu") != "cpu"
    # "auto": the batched torch plan on an accelerator; on CPU the numpy plan is faster (bench_plan.py)
    if hasattr(P, "detach") and (backend == "torch" or (backend == "auto" and on_device)):
        from .backends import torch as tb

        try:
            fast = {
                k: v.cpu().numpy()
                for k, v in tb.evaluate_batch(P, Q, ns, schemes=schemes, verifiers=verifiers).items()
            }
        except (RuntimeError, ValueError):  # a failed re-check or an unusual row: every row by the numpy plan
            fast = {}
    Pn = P.cpu().numpy() if hasattr(P, "detach") else np.asarray(P, dtype=np.float64)
    Qn = Q.cpu().numpy() if hasattr(Q, "detach") else np.asarray(Q, dtype=np.float64)
    from . import _compile
    from .plan import evaluate_checked

    if m:  # a line before the plan's long first compile (numpy plan only; the torch plan compiles nothing)
        _compile.notice_for_plan(schemes, verifiers, ns, int(Pn.shape[1]))

    bound_keys = [(s, n, bound_key(s, n)) for s in schemes for n in ns]
    verifier_keys = [(v, n, verifier_key(v, n)) for v in verifiers for n in ns if _verifier_applies(v, n)]
    for i in range(m):
        p, q = Pn[i], Qn[i]
        row = rows[i]
        bounds = [(s, n) for s, n, k in bound_keys if not (skip is not None and skip(k, positions[i]))]
        pairs = [(v, n) for v, n, k in verifier_keys if not (skip is not None and skip(k, positions[i]))]
        todo_b = [(s, n) for s, n in bounds if bound_key(s, n) not in fast or (check and i == 0)]
        todo_v = [(v, n) for v, n in pairs if verifier_key(v, n) not in fast or (check and i == 0)]
        res = evaluate_checked(p, q, todo_b, todo_v, seed=seed + positions[i], mc_samples=mc_samples)
        errors = dict(res.get("errors", {}))
        for s, n in bounds:
            key = bound_key(s, n)
            if key in fast:
                row[key] = float(fast[key][i])
                if check and i == 0 and res.get(key) is not None:
                    _agree(key, row[key], res[key])
            else:
                row[key] = res[key]
        for name, n in pairs:
            key = verifier_key(name, n)
            if key in fast:
                value, se = float(fast[key][i]), 0.0
                if check and i == 0 and res.get(key) is not None:
                    _agree(key, value, res[key])
            else:
                value, se = res[key], res.get(se_key(key), 0.0)
            row[key] = value
            if value is None:
                continue
            bound = row.get(bound_key_of_verifier(name, n))
            if bound is not None and value - bound > RECHECK_TOL + 4.0 * se:
                row[key] = None  # no valid verifier beats its bound: an internal error, recorded
                errors[key] = (
                    f"internal error: acceptance {value:.15g} above the bound {bound:.15g}; "
                    f"please report this input (fingerprint {fingerprint(p, q, n=n, verifier=name)})"
                )
                continue
            if se > 0:
                row[se_key(key)] = se
        if errors:
            row["errors"] = errors
    return rows


def _agree(key, fast_value, ref):
    """The batched torch value of the first row against the numpy plan (the re-check of ``check``)."""
    if abs(ref - fast_value) > VALUE_TOL:
        raise RuntimeError(
            f"torch and numpy values disagree for {key}: {fast_value!r} vs {ref!r} (tolerance {VALUE_TOL:g})"
        )

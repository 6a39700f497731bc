"""Evaluation: every bound and verifier acceptance at each position, stored only when checked."""

from __future__ import annotations

import numpy as np

from .._config import RECHECK_TOL, VALUE_TOL
from .._validate import fingerprint
from .config import _skip, _verifier_applies, parse_every, verifier_scheme


def _core():
    import mdsd_ot

    missing = [f for f in ("optimal_acceptance",) if not hasattr(mdsd_ot, f)]
    if missing:
        raise ImportError(f"mdsd_ot.{missing[0]} is not available in this installation")
    return mdsd_ot


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
    """Bounds and verifier acceptances for each row of (P, Q).

    Parameters
    ----------
    P, Q : ndarray or torch.Tensor, float64, shape (m, V)
        Target and draft distributions, one position per row.
    ns, schemes, verifiers : lists
        See :class:`StudyConfig`.
    backend : {"numpy", "torch", "auto"}
        See :attr:`StudyConfig.bound_backend` (torch needs tensor input).
    seed : int
        Seed of Monte Carlo verifiers (``seed + row``), when they take an ``rng``.
    check : bool
        Re-check the torch bounds of the first row against ``mdsd_ot.optimal_acceptance``.
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
    m = int(P.shape[0])
    positions = list(range(m)) if positions is None else [int(x) for x in positions]
    rows = [dict() for _ in range(m)]
    fast = {}
    if backend in ("torch", "auto") and hasattr(P, "detach"):
        from ..backends import torch as tb

        def batched(scheme, fn, *args):  # a failed certificate re-check: those rows go to numpy
            try:
                for n, v in fn(*args).items():
                    fast[(scheme, n)] = v.cpu().numpy()
            except RuntimeError:
                pass

        if "with_replacement" in schemes:
            batched("with_replacement", tb.sorted_prefix_bounds, P, Q, ns, "with_replacement")
        support = (Q > 0).sum(-1)
        small = [n for n in ns if n <= 2]
        if "without_replacement" in schemes and small and bool((support >= 2).all()):
            batched("without_replacement", tb.sorted_prefix_bounds, P, Q, small, "without_replacement")
        if "greedy" in schemes and bool((support >= max(ns)).all()):
            batched("greedy", tb.greedy_bounds, P, Q, ns)
    Pn = P.cpu().numpy() if hasattr(P, "detach") else np.asarray(P, dtype=np.float64)
    Qn = Q.cpu().numpy() if hasattr(Q, "detach") else np.asarray(Q, dtype=np.float64)
    core = None
    need_core = any((s, n) not in fast for s in schemes for n in ns) or bool(verifiers) or check
    if need_core:
        core = _core()
    for i in range(m):
        p, q = Pn[i], Qn[i]
        row = rows[i]
        errors = {}
        for s in schemes:
            for n in ns:
                key = f"bound:{s}@{n}"
                if _skip(key, every, positions[i]):
                    continue
                if (s, n) in fast:
                    row[key] = float(fast[(s, n)][i])
                    if check and i == 0:
                        ref = float(core.optimal_acceptance(p, q, n, sampling=s).value)
                        if abs(ref - row[key]) > VALUE_TOL:
                            raise RuntimeError(
                                f"torch and numpy bounds disagree for {key}: {row[key]!r} vs "
                                f"{ref!r} (tolerance {VALUE_TOL:g})"
                            )
                    continue
                try:
                    res = core.optimal_acceptance(p, q, n, sampling=s)
                except ValueError as exc:
                    row[key] = None
                    errors[key] = str(exc)
                    continue
                if getattr(res, "success", True):
                    row[key] = float(res.value)
                else:  # stored only when its certificate re-check passed
                    row[key] = None
                    errors[key] = res.message
        for name in verifiers:
            for n in ns:
                key = f"verifier:{name}@{n}"
                if not _verifier_applies(name, n) or _skip(key, every, positions[i]):
                    continue
                try:
                    res = _call_verifier(core, name, p, q, n, seed + positions[i], mc_samples)
                except ValueError as exc:
                    row[key] = None
                    errors[key] = str(exc)
                    continue
                se = float(getattr(res, "stderr", 0.0) or 0.0)
                bound = row.get(f"bound:{verifier_scheme(name)}@{n}")
                if bound is not None and float(res.value) - bound > RECHECK_TOL + 4.0 * se:
                    row[key] = None  # no valid verifier beats its bound: an internal error, recorded
                    errors[key] = (
                        f"internal error: acceptance {float(res.value):.15g} above the bound {bound:.15g}; "
                        f"please report this input (fingerprint {fingerprint(p, q, n=n, verifier=name)})"
                    )
                    continue
                row[key] = float(res.value)
                if se > 0:
                    row[key + ":se"] = se
        if errors:
            row["errors"] = errors
    return rows


def _call_verifier(core, name, p, q, n, seed, samples=None):
    fn = getattr(core, "verifier_acceptance", None)
    if fn is None:
        try:
            from ..verifiers import verifier_acceptance as fn
        except ImportError:
            raise ImportError("mdsd_ot.verifier_acceptance is not available in this installation") from None
    kw = {"rng": np.random.default_rng(seed)}
    if samples:
        kw["samples"] = int(samples)
    return fn(name, p, q, n, **kw)

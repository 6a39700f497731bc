"""Published verifiers against the optimal acceptance rate of their own draft scheme.

For each verifier, :func:`compare` reports its acceptance rate (exact, or Monte Carlo with a standard
error), the optimal acceptance ``alpha*`` for the draft scheme it assumes
(:func:`mdsd_ot.optimal_acceptance`), the gap ``alpha* - acceptance`` and the ratio
``acceptance / alpha*``.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

import numpy as np

from ._config import ENUMERATION_MAX_TUPLES, RECHECK_TOL
from ._validate import check_choice, check_n, fingerprint, normalized_pair
from .drafts import DraftScheme, get_scheme
from .verifiers import (
    ACCEPTANCE_METHODS,
    DEFAULT_SAMPLES,
    VERIFIERS,
    check_samples,
    get_verifier,
    verifier_acceptance,
)
from .verifiers.base import power_exceeds

__all__ = ["compare", "Comparison", "ComparisonRecord", "OPTIMAL_DEFAULT_MAX_TUPLES"]

#: ``compare(verifiers=None)`` includes the ``"optimal"`` verifier for a scheme it can only run as an
#: LP (without replacement, conditional Poisson) only when the number of ordered draft tuples
#: ``support(q)^n`` is at most this (the LP is the slow ground truth); for i.i.d., greedy and hub
#: drafts it always runs (docs/math.md#optimal-verifier-full-v).
OPTIMAL_DEFAULT_MAX_TUPLES = 20_000


def _optimal_covers(verifier, sampling) -> bool:
    """True when the optimal verifier runs without the LP for ``sampling`` (any vocabulary size)."""
    try:
        return bool(verifier.covers(sampling))
    except (AttributeError, ValueError):
        return False


@dataclass(frozen=True)
class ComparisonRecord:
    """One verifier against the bound of its draft scheme.

    Attributes
    ----------
    verifier : str
        Registry name.
    sampling : str
        The draft scheme the verifier was run under.
    acceptance : float
        Its acceptance rate.
    stderr : float
        Standard error of ``acceptance`` (0.0 when exact).
    method : str
        ``"exact"`` or ``"monte_carlo"``.
    bound : float
        ``alpha*`` for ``sampling``.
    gap : float
        ``bound - acceptance``.
    ratio : float
        ``min(acceptance, bound) / bound`` (1.0 when the bound is 0): an acceptance above the bound
        by rounding or Monte Carlo noise (larger excesses are internal errors) counts as attaining it.
    """

    verifier: str
    sampling: str
    acceptance: float
    stderr: float
    method: str
    bound: float
    gap: float
    ratio: float


@dataclass(frozen=True)
class Comparison:
    """The table returned by :func:`compare`: records, plus the verifiers skipped and why.

    ``str()`` gives an aligned text table; :meth:`to_dicts` / :meth:`to_json` give machine output.
    Iterating yields the records; ``table["rrs"]`` looks one up by verifier name.
    """

    records: tuple[ComparisonRecord, ...]
    skipped: tuple[tuple[str, str], ...]
    n: int
    V: int

    def __iter__(self):
        return iter(self.records)

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, name: str) -> ComparisonRecord:
        for r in self.records:
            if r.verifier == name:
                return r
        raise KeyError(f"no record for verifier {name!r}; have {[r.verifier for r in self.records]}")

    def to_dicts(self) -> list[dict]:
        """One plain dict per record (JSON-serialisable)."""
        return [asdict(r) for r in self.records]

    def to_json(self, **kwargs) -> str:
        """``{"n", "V", "records": [...], "skipped": [{"verifier", "reason"}]}`` as a JSON string."""
        payload = {
            "n": self.n,
            "V": self.V,
            "records": self.to_dicts(),
            "skipped": [{"verifier": name, "reason": why} for name, why in self.skipped],
        }
        return json.dumps(payload, **kwargs)

    def __str__(self) -> str:
        head = ["verifier", "sampling", "acceptance", "stderr", "bound", "gap", "ratio", "method"]
        rows = [
            [
                r.verifier,
                r.sampling,
                f"{r.acceptance:.6f}",
                f"{r.stderr:.1e}" if r.stderr else "0",
                f"{r.bound:.6f}",
                f"{_shown(r.gap):.6f}",
                f"{r.ratio:.4f}",
                r.method,
            ]
            for r in self.records
        ]
        widths = [max([len(h)] + [len(row[i]) for row in rows]) for i, h in enumerate(head)]
        numeric = {2, 3, 4, 5, 6}

        def fmt(cells):
            return "  ".join(
                c.rjust(w) if i in numeric else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths))
            )

        lines = [f"n = {self.n} drafts, V = {self.V} tokens", fmt(head), fmt(["-" * w for w in widths])]
        lines += [fmt(row) for row in rows]
        lines += [f"skipped {name}: {why}" for name, why in self.skipped]
        return "\n".join(line.rstrip() for line in lines)


def _shown(x: float) -> float:
    """Rounding noise below the printed precision is shown as 0.000000, not -0.000000."""
    return 0.0 if abs(x) < 5e-7 else x


def _parse_names(verifiers) -> list[str]:
    if isinstance(verifiers, str):
        verifiers = [v.strip() for v in verifiers.split(",") if v.strip()]
    names = [get_verifier(v).name for v in verifiers]
    if not names:
        raise ValueError(f"no verifiers given; choose from {list(VERIFIERS)}")
    return list(dict.fromkeys(names))


def _check_below_bound(result, bound: float, p, q) -> None:
    """No valid verifier beats the optimal acceptance of its scheme: an exact value above the bound
    (beyond ``RECHECK_TOL``), or a Monte Carlo value above it by more than 4 standard errors, is an
    internal error, raised with the input's fingerprint; it is never reported as a ratio above one."""
    excess = result.value - bound
    if excess <= RECHECK_TOL + 4.0 * result.stderr:
        return
    raise RuntimeError(
        f"internal error: verifier {result.verifier!r} ({result.method}) accepts {result.value:.15g}, above "
        f"the optimal acceptance {bound:.15g} of {result.sampling!r} drafts with n={result.n} by "
        f"{excess:.3g}; please report this input (fingerprint "
        f"{fingerprint(p, q, n=result.n, sampling=result.sampling, verifier=result.verifier)})"
    )


def compare(
    p,
    q,
    n,
    *,
    verifiers=None,
    sampling=None,
    method: str = "auto",
    samples: int = DEFAULT_SAMPLES,
    rng=None,
    normalize: bool = False,
) -> Comparison:
    """Acceptance of published verifiers against the optimal acceptance for their draft scheme.

    .. math:: \\text{gap} = \\alpha^*_{\\text{scheme}} - \\alpha_{\\text{verifier}}, \\qquad
              \\text{ratio} = \\alpha_{\\text{verifier}} / \\alpha^*_{\\text{scheme}}

    Parameters
    ----------
    p, q : array_like, shape (V,)
        Target and draft distributions.
    n : int
        Number of drafts.
    verifiers : sequence of str, str or None
        Names from :data:`mdsd_ot.verifiers.VERIFIERS` (a comma-separated string is accepted). With
        ``None``, every verifier that can run is used; the others (e.g. ``spechub`` for n != 2, the
        LP-based ``optimal`` for large inputs) are listed in ``Comparison.skipped`` with the reason.
        A verifier named explicitly that cannot run is a ``ValueError``.
    sampling : str or None
        Run every verifier under this draft scheme (only verifiers valid for it); default: each
        verifier's own scheme.
    method, samples, rng
        Passed to :func:`mdsd_ot.verifiers.verifier_acceptance` (exact when possible, else Monte
        Carlo with ``samples`` draft tuples drawn from ``rng``).
    normalize : bool
        Rescale p and q to sum to one instead of rejecting unnormalised input.

    Returns
    -------
    Comparison
        One :class:`ComparisonRecord` per verifier.

    Examples
    --------
    >>> from mdsd_ot.compare import compare
    >>> table = compare([0.5, 0.3, 0.2, 0.0], [0.1, 0.2, 0.3, 0.4], 2, verifiers=["rrs", "greedy"])
    >>> [(r.verifier, round(r.acceptance, 4), round(r.bound, 4)) for r in table]
    [('rrs', 0.65, 0.69), ('greedy', 0.6667, 0.6667)]
    """
    from .api import optimal_acceptance

    p, q = normalized_pair(p, q, normalize=normalize)
    n = check_n(n)
    # option names first: inside the loop a bad name would be one more "cannot run" reason, and every
    # verifier would be skipped silently (an empty table)
    if sampling is not None and not isinstance(sampling, DraftScheme):
        sampling = get_scheme(sampling).name  # aliases and any case accepted
    method = check_choice(method, "method", ACCEPTANCE_METHODS)
    samples = check_samples(samples)  # up front, even where every verifier turns out exact
    explicit = verifiers is not None
    names = _parse_names(verifiers) if explicit else list(VERIFIERS)
    if not isinstance(rng, np.random.Generator):
        rng = np.random.default_rng(rng)
    records, skipped, bounds = [], [], {}
    support = int(np.count_nonzero(q > 0))
    for name in names:
        verifier = VERIFIERS[name]
        if (
            not explicit
            and name == "optimal"
            and not _optimal_covers(verifier, sampling)
            and power_exceeds(support, n, OPTIMAL_DEFAULT_MAX_TUPLES)
        ):
            # its acceptance is the bound of its scheme by construction; say whether asking helps
            if power_exceeds(support, n, ENUMERATION_MAX_TUPLES):
                why = (
                    f"the LP would need ~{support}^{n} draft tuples, beyond the enumeration limit "
                    f"({ENUMERATION_MAX_TUPLES:,}); it attains the bound column by construction"
                )
            else:
                why = (
                    f"the LP has ~{support}^{n} draft tuples (its time grows with them); request it "
                    f"explicitly (verifiers='optimal', CLI --verifiers optimal) to build it; it "
                    f"attains the bound column by construction"
                )
            skipped.append((name, why))
            continue
        try:
            if sampling is not None:
                verifier.resolve_scheme(sampling)
            result = verifier_acceptance(
                verifier, p, q, n, method=method, samples=samples, rng=rng, sampling=sampling
            )
        except ValueError as exc:
            if explicit:
                raise
            skipped.append((name, " ".join(str(exc).split())))
            continue
        scheme = result.sampling
        if scheme not in bounds:
            bounds[scheme] = optimal_acceptance(p, q, n, sampling=scheme)
        bound = bounds[scheme]
        value = float(bound.value)
        if bound.success is False:
            skipped.append((name, f"bound for {scheme!r} failed: {bound.message}"))
            continue
        _check_below_bound(result, value, p, q)
        # above the bound only by rounding (or Monte Carlo noise: _check_below_bound raised beyond it),
        # the verifier attains the bound: ratio 1, never above (a subnormal acceptance over a bound
        # of 0 printed "inf")
        ratio = min(result.value, value) / value if value > 0 else 1.0
        records.append(
            ComparisonRecord(
                name, scheme, result.value, result.stderr, result.method, value, value - result.value, ratio
            )
        )
    return Comparison(tuple(records), tuple(skipped), n, int(p.size))

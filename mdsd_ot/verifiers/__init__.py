"""Published multi-draft verification algorithms, their exact output laws and acceptance rates.

Registry (:data:`VERIFIERS`, name -> verifier; each module cites its paper):

===========================  ======================  ==============================================
name                         draft scheme            method
===========================  ======================  ==============================================
``naive``                    with_replacement (any)  independent target sample, accepted if drafted
``rrs``                      with_replacement        SpecInfer recursive rejection sampling
``rrs_without_replacement``  without_replacement     RSD (recursive speculative decoding)
``spectr``                   with_replacement        SpecTr K-SEQ at the smallest valid rho
``spechub``                  hub (n = 2)             SpecHub
``greedy``                   greedy                  Hu et al., optimal for greedy drafts
``optimal``                  any (small V)           the LP transport plan, attains alpha*
===========================  ======================  ==============================================

:func:`verifier_acceptance` evaluates a verifier's acceptance rate exactly (the closed forms of
docs/math.md#verifiers) or by Monte Carlo with a standard error (docs/math.md#monte-carlo-error).
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass

import numpy as np

from .._config import MAX_MONTE_CARLO_DRAWS
from .._validate import check_choice
from .base import PreparedVerifier, Verdict, Verifier, sample_drafts_batch, unit_interval
from .greedy import GreedyVerifier
from .naive import NaiveVerifier
from .optimal import OptimalVerifier
from .rsd import RSDVerifier
from .spechub import SpecHubVerifier
from .specinfer import SpecInferVerifier
from .spectr import SpecTrVerifier

__all__ = [
    "VERIFIERS",
    "ALIASES",
    "Verifier",
    "PreparedVerifier",
    "Verdict",
    "VerifierAcceptance",
    "get_verifier",
    "verifier_acceptance",
    "ACCEPTANCE_METHODS",
    "DEFAULT_SAMPLES",
    "DEFAULT_VERIFIERS",
    "sample_drafts_batch",
]

#: name -> verifier, in the order used by :func:`mdsd_ot.compare.compare`.
VERIFIERS: dict[str, Verifier] = {
    v.name: v
    for v in (
        NaiveVerifier(),
        SpecInferVerifier(),
        RSDVerifier(),
        SpecTrVerifier(),
        SpecHubVerifier(),
        GreedyVerifier(),
        OptimalVerifier(),
    )
}

#: The verifiers evaluated by default (the study, the evaluation plan, the CLI), in registry order:
#: every registered verifier with a closed form at any vocabulary, i.e. all but those that solve a
#: transport LP where no full-vocabulary construction covers the scheme (a ``covers(sampling)``
#: method: ``optimal``). Derived from :data:`VERIFIERS`, so a new verifier joins by construction.
DEFAULT_VERIFIERS: tuple[str, ...] = tuple(name for name, v in VERIFIERS.items() if not hasattr(v, "covers"))

#: Other names accepted wherever a verifier name is (:func:`get_verifier`, ``compare``, the CLI):
#: the papers' names for the registry entries. Results always carry the registry name.
#: Matching ignores case and ``-`` vs ``_`` (``"SpecTr"``, ``"RRS"``, ``"K-SEQ"`` are accepted).
ALIASES: dict[str, str] = {"specinfer": "rrs", "rsd": "rrs_without_replacement", "k_seq": "spectr"}

ACCEPTANCE_METHODS = ("auto", "exact", "monte_carlo")

#: Default number of Monte Carlo draft tuples.
DEFAULT_SAMPLES = 20_000


def check_samples(samples) -> int:
    """The number of Monte Carlo draft tuples: an int >= 2 (a standard error needs two)."""
    if isinstance(samples, bool) or not isinstance(samples, numbers.Integral):
        raise TypeError(f"samples must be an int (number of Monte Carlo draft tuples), got {samples!r}")
    samples = int(samples)
    if samples < 2:
        raise ValueError(f"samples must be >= 2 for a standard error, got {samples}")
    return samples


def get_verifier(name) -> Verifier:
    """Look up a verifier by registry name or alias (``ValueError`` listing the choices when unknown).

    Parameters
    ----------
    name : str or Verifier
        Registry name or alias, matched case-insensitively with ``-`` and ``_`` alike; a
        :class:`Verifier` is returned as is (``TypeError`` for another non-string).

    Returns
    -------
    Verifier

    >>> get_verifier("specinfer").name, get_verifier("SpecTr").name, get_verifier("RSD").name
    ('rrs', 'spectr', 'rrs_without_replacement')
    """
    if isinstance(name, Verifier):
        return name
    return VERIFIERS[check_choice(name, "verifier", VERIFIERS, ALIASES)]


@dataclass(frozen=True)
class VerifierAcceptance:
    """Acceptance rate of one verifier on one problem.

    Attributes
    ----------
    value : float
        Acceptance rate (exact, or the Monte Carlo mean).
    stderr : float
        Standard error of ``value``; 0.0 when exact.
    method : str
        ``"exact"`` or ``"monte_carlo"``.
    verifier : str
        Registry name of the verifier.
    sampling : str
        The draft scheme.
    n : int
        Number of drafts.
    samples : int
        Number of Monte Carlo draft tuples (0 when exact).
    """

    value: float
    stderr: float
    method: str
    verifier: str
    sampling: str
    n: int
    samples: int = 0

    def __float__(self) -> float:
        return float(self.value)


def _monte_carlo(prepared: PreparedVerifier, samples: int, rng: np.random.Generator) -> np.ndarray:
    """Per-sample P(accepted | drafts) for ``samples`` draft tuples (Rao-Blackwellised over coins)."""
    if hasattr(prepared, "monte_carlo"):
        return prepared.monte_carlo(samples, rng)
    drafts = sample_drafts_batch(prepared.scheme, prepared.q, prepared.n, samples, rng)
    return np.array([prepared.accept_probability(x) for x in drafts])


def verifier_acceptance(
    name,
    p,
    q,
    n,
    *,
    method: str = "auto",
    samples: int = DEFAULT_SAMPLES,
    rng=None,
    sampling=None,
    normalize: bool = False,
) -> VerifierAcceptance:
    """Acceptance rate of a published verifier: exact closed form or Monte Carlo.

    .. math:: \\alpha = P(\\text{output} \\in \\text{drafts})
              = E_{\\bar x}\\bigl[P(Y \\in S(\\bar x) \\mid \\bar x)\\bigr]

    Parameters
    ----------
    name : str
        A key of :data:`VERIFIERS`.
    p, q : array_like, shape (V,)
        Target and draft distributions.
    n : int
        Number of drafts.
    method : {"auto", "exact", "monte_carlo"}
        ``"exact"`` uses the closed form / recursion of docs/math.md#verifiers (``ValueError`` when none
        applies at this size); ``"monte_carlo"`` averages the exact P(accepted | drafts) over
        ``samples`` sampled draft tuples; ``"auto"`` is exact when possible.
    samples : int
        Number of Monte Carlo draft tuples.
    rng : numpy.random.Generator, int or None
        Randomness for Monte Carlo (``np.random.default_rng(rng)`` if not a Generator).
    sampling : str or None
        Draft scheme; default: the verifier's own (a scheme it does not support is a ``ValueError``).
    normalize : bool
        Rescale p and q to sum to one instead of rejecting unnormalised input.

    Returns
    -------
    VerifierAcceptance
        ``value``, ``stderr`` (0.0 when exact; for Monte Carlo the sample standard error, but never
        below ``1.5 (hi - lo) / samples`` for the range ``[lo, hi]`` of the per-sample values, which
        covers rare draft events no sample hit), ``method``, ``verifier``, ``sampling``.

    Examples
    --------
    >>> from mdsd_ot.verifiers import verifier_acceptance
    >>> r = verifier_acceptance("rrs", [0.5, 0.3, 0.2, 0.0], [0.1, 0.2, 0.3, 0.4], 2)
    >>> round(r.value, 6), r.stderr, r.method
    (0.65, 0.0, 'exact')
    """
    verifier = get_verifier(name)
    method = check_choice(method, "method", ACCEPTANCE_METHODS)
    prepared = verifier.prepare(p, q, n, sampling=sampling, normalize=normalize)
    sampling_name = prepared.scheme.name
    if method in ("auto", "exact") and prepared.exact_available():
        value = unit_interval(prepared.acceptance())  # clips rounding only; raises beyond 1e-12
        return VerifierAcceptance(value, 0.0, "exact", verifier.name, sampling_name, prepared.n)
    if method == "exact":
        raise ValueError(
            f"no exact acceptance for verifier {verifier.name!r} with sampling {sampling_name!r} at "
            f"V={prepared.p.size}, n={prepared.n}; use method='monte_carlo'"
        )
    samples = check_samples(samples)
    if samples * prepared.n > MAX_MONTE_CARLO_DRAWS:  # checked before any (samples, n) array exists
        raise ValueError(
            f"Monte Carlo with samples={samples:,} draft tuples of n={prepared.n:,} drafts would draw "
            f"{samples * prepared.n:,} tokens, more than MAX_MONTE_CARLO_DRAWS = {MAX_MONTE_CARLO_DRAWS:,}; "
            f"lower samples (at most {max(MAX_MONTE_CARLO_DRAWS // prepared.n, 0):,} for this n) or n"
        )
    if not isinstance(rng, np.random.Generator):
        rng = np.random.default_rng(rng)
    acc = unit_interval(_monte_carlo(prepared, samples, rng), "per-sample acceptance")
    lo, hi = prepared.monte_carlo_range()
    # never below the shift that unobserved rare draft events could cause (PreparedVerifier.monte_carlo_range)
    stderr = max(float(acc.std(ddof=1) / np.sqrt(samples)), 1.5 * (hi - lo) / samples)
    return VerifierAcceptance(
        float(acc.mean()), stderr, "monte_carlo", verifier.name, sampling_name, prepared.n, samples
    )


def deprecated_formula_registry(field: str, old_name: str) -> dict:
    """``{name: Verifier.<field>}`` of the verifiers that have that formula (``"plan"`` or ``"batch"``),
    as a read-only copy, with a ``DeprecationWarning`` naming ``old_name``: what the removed registries
    ``mdsd_ot.plan.PLAN_VERIFIERS`` and ``mdsd_ot.backends.torch.TORCH_VERIFIERS`` now read as.

    Parameters
    ----------
    field : str
        ``"plan"`` or ``"batch"``.
    old_name : str
        The removed registry's full name, for the message.

    Returns
    -------
    dict
    """
    import warnings

    warnings.warn(
        f"{old_name} is deprecated: each verifier holds its formula as `Verifier.{field}` "
        f"(mdsd_ot.VERIFIERS[name].{field}); this is a read-only copy",
        DeprecationWarning,
        stacklevel=3,  # the module attribute access in the caller's code
    )
    formulas = {n: getattr(v, field) for n, v in VERIFIERS.items()}
    return {n: f for n, f in formulas.items() if f is not None}

r"""Audit any multi-draft verifier: is the law of its output token exactly ``p``?

A verifier is *lossless* when, with drafts drawn under its draft scheme, its output token is
distributed exactly as the target ``p``. :func:`audit` checks a verifier you wrote (or found) from
the outside, by running it: it needs only a callable ``verify(p, q, drafts, rng) -> token``.

Procedure (small vocabularies)
------------------------------
1. Enumerate every ordered draft tuple ``t`` of the scheme with its exact probability ``pi_t``
   (:meth:`mdsd_ot.drafts.DraftScheme.tuple_law`).
2. Run ``verify`` ``R_t = max(min_runs, ceil(trials * pi_t))`` times on tuple ``t``, with a generator
   of its own seeded from ``seed`` (``numpy.random.SeedSequence(seed).spawn``), so the audit is
   reproducible and a tuple's runs do not depend on the other tuples.
3. Estimate the output law by the stratified mean, unbiased whatever the ``R_t``:

   .. math:: \hat L(y) = \sum_t \pi_t \, \frac{\#\{\text{runs on } t \text{ that output } y\}}{R_t},
             \qquad \widehat{TV} = \tfrac12 \sum_y |\hat L(y) - p(y)|.

Statistics (all at confidence ``1 - level``)
--------------------------------------------
* ``tv_upper``: a finite-sample upper confidence bound on the true ``TV(L, p)``. For any token set
  ``A``, ``hat L(A)`` is a sum of independent terms with ranges ``pi_t / R_t``, so Hoeffding's
  inequality and a union bound over the ``2^V`` sets (the argument of the Bretagnolle-Huber-Carol
  inequality) give ``P(TV(hat L, L) >= eps) <= 2^V exp(-2 eps^2 / S)`` with ``S = sum_t pi_t^2 / R_t``;
  hence ``tv_upper = tv + sqrt(S (V ln 2 + ln(1/level)) / 2)``. No asymptotics; conservative.
* ``pvalue``: Pearson's chi-square test of ``H0: L = p`` with ``X^2 = N sum_c (hat L(c) - p(c))^2 / p(c)``
  and ``N = min_t R_t / pi_t`` (at least ``trials``), on ``k - 1`` degrees of freedom after pooling the
  cells with expected count ``N p(c) < 5``. Stratifying by tuple only lowers the variance of
  ``hat L`` below that of ``N`` i.i.d. outputs (law of total variance; ``R_t >= N pi_t``), so the
  chi-square p-value is asymptotically *conservative*: a lossless verifier is flagged with
  probability at most ``level``. An output token with ``p = 0`` is proof of bias: p-value 0.
* ``acceptance``: ``sum_t pi_t a_t`` with ``a_t`` the fraction of runs on ``t`` whose output is one of
  its drafts, and ``stderr = sqrt(sum_t pi_t^2 s_t^2 / R_t)`` (``s_t^2`` the sample variance of the
  accept indicator on ``t``; the ``pi_t`` are exact, so there is no between-tuple term).
* ``lossless``: ``pvalue >= level`` and no token with ``p = 0`` was output. It means "no evidence of
  bias at this level", not a proof: ``tv_upper`` says how large a bias the data still allow, and
  ``detectable_tv`` how large a bias the test flags with probability at least ``POWER``. Under a bias
  the statistic is about noncentral chi-square with noncentrality ``N chi^2(L, p)`` on the test's
  cells, and a law at total variation ``delta`` from ``p`` on those cells has
  ``chi^2(L, p) >= 4 delta^2`` (equality when the bias moves ``delta`` between two halves of ``p``'s
  mass, the hardest shape to see), so every bias with ``delta >= sqrt(lambda* / (4 N))`` is flagged
  with probability ``>= POWER`` (``lambda*``: the noncentrality at which the level-``level`` test on
  ``df`` degrees of freedom has that power). At the default 50,000 trials and level 0.01 that is a
  TV of about 0.009 to 0.016 (1 to 100 degrees of freedom): a smaller bias can pass; it falls as
  ``1/sqrt(trials)``.
* ``top_tuples``: which draft tuples the output departs on. A lossless verifier's per-tuple output
  laws are not ``p`` (they favour the drafts) and their departures cancel in the mixture, so a tuple
  can only be judged against a reference algorithm: by default (``reference="auto"``) the library's
  verifier of the same scheme (``rrs`` with replacement, ``rrs_without_replacement`` without,
  ``greedy``, ``spechub`` for hub drafts), whose exact per-tuple law ``L_ref,t`` is known. Each tuple's
  *departure* is ``pi_t TV(hat L_t, L_ref,t)``; the tuples with the largest are listed. A verifier
  implementing another valid algorithm (e.g. SpecTr against ``rrs``) departs legitimately: the
  verdict comes from ``tv``, ``tv_upper`` and ``pvalue`` only, the departures say where to look.

Cost: ``sum_t R_t <= trials + T * min_runs`` calls of ``verify`` (``T`` tuples); a registry verifier
takes ~20-50 us per call. ``T`` is at most ``max_tuples`` (``V^n`` with replacement): beyond it, a
``ValueError`` says how many tuples the scheme has.

Tree verifiers
--------------
:func:`audit_tree` does the same for a tree verifier, whose output is a string of tokens (a path of the
drafted tree, then one token): it compares the law of the first ``k`` tokens streamed by chained calls
with the target's, exactly from ``law(tree)`` (every drafted tree of every call enumerated at tiny
``V``) or by sampling ``verify(tree, rng)``, with the same verdict fields (``lossless``, the largest
deviation, where it shows) and the same exit statuses on the command line (docs/tree-decoding.md).

Example
-------
>>> from mdsd_ot.audit import audit, registry_verify
>>> r = audit(registry_verify("rrs"), [0.5, 0.3, 0.2, 0.0], [0.1, 0.2, 0.3, 0.4], 2,
...           sampling="with_replacement", trials=20_000, seed=1)
>>> r.lossless, r.tuples, abs(r.acceptance - 0.65) < 4 * r.stderr
(True, 16, True)
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass, field

import numpy as np

from ._config import LAW_TOL
from ._validate import check_n, normalized_pair
from .drafts import SCHEMES, get_scheme

__all__ = [
    "audit",
    "AuditResult",
    "TupleShare",
    "VerifierError",
    "registry_verify",
    "DEFAULT_TRIALS",
    "DEFAULT_MAX_TUPLES",
    "MAX_RUNS",
    "audit_tree",
    "TreeAuditResult",
    "TreeAuditCase",
    "tree_audit_pairs",
    "DEFAULT_TREE_K",
    "DEFAULT_TREE_TRIALS",
    "TREE_AUDIT_POWER",
]

#: Default ``trials``: the stratified sample size (runs are allocated to tuples in proportion to
#: their probability).
DEFAULT_TRIALS = 50_000

#: Default largest number of draft tuples to enumerate.
DEFAULT_MAX_TUPLES = 20_000

#: Largest total number of ``verify`` calls one audit may make.
MAX_RUNS = 20_000_000

#: Cells with expected count below this are pooled before the chi-square test.
MIN_EXPECTED = 5.0

#: ``AuditResult.detectable_tv`` is the smallest bias flagged with at least this probability.
POWER = 0.8

#: ``reference="auto"``: the registry verifier each draft scheme's tuples are compared with
#: (``DraftScheme.reference_verifier``; None for a scheme without one).
DEFAULT_REFERENCE = {name: s.reference_verifier for name, s in SCHEMES.items() if s.reference_verifier}


class VerifierError(RuntimeError):
    """The audited callable raised, or returned something that is not a token index."""


@dataclass(frozen=True)
class TupleShare:
    """One draft tuple of the audit, with its departure from the reference verifier.

    Attributes
    ----------
    drafts : tuple of int
        The ordered draft tuple.
    probability : float
        Its exact probability ``pi_t`` under the draft scheme.
    runs : int
        Number of ``verify`` calls on it.
    departure : float
        ``pi_t * TV(hat L_t, L_ref,t)``: how far the observed output frequencies on this tuple are
        from the reference verifier's exact output law, weighted by the tuple's probability
        (sampling noise included: about ``pi_t sqrt(V / R_t)`` at most).
    acceptance : float
        Fraction of its runs whose output is one of its drafts.
    frequencies : ndarray, shape (V,)
        Observed output frequencies ``hat L_t`` on this tuple.
    """

    drafts: tuple
    probability: float
    runs: int
    departure: float
    acceptance: float
    frequencies: np.ndarray = field(repr=False)


@dataclass(frozen=True)
class AuditResult:
    """Outcome of :func:`audit` (see the module docstring for each statistic).

    Attributes
    ----------
    tv, tv_upper : float
        Estimated total-variation distance of the output law from ``p``, and its upper confidence
        bound at confidence ``1 - level``.
    pvalue : float
        Chi-square goodness-of-fit p-value of ``H0: output law = p`` (0.0 when a token with
        ``p = 0`` was output).
    acceptance, stderr : float
        Estimated acceptance rate P(output is one of the drafts) and its standard error.
    lossless : bool
        ``pvalue >= level`` and no impossible token: no evidence of bias at this level (not a proof:
        see ``detectable_tv``).
    level : float
        Significance level of the verdict (the confidence of ``tv_upper`` is ``1 - level``).
    output_law : ndarray, shape (V,)
        The estimated output law ``hat L``.
    p : ndarray, shape (V,)
        The target law the output is compared with.
    statistic : float
        Pearson's ``X^2``.
    df : int
        Its degrees of freedom (cells after pooling, minus one).
    impossible : tuple of int
        Tokens with ``p = 0`` that ``verify`` output.
    top_tuples : tuple of TupleShare
        The draft tuples that depart most from ``reference`` (empty without a reference).
    reference : str or None
        The registry verifier the tuples were compared with.
    n, sampling, tuples, runs, trials, seed, name
        The setting: drafts, scheme, number of draft tuples enumerated, ``verify`` calls made,
        the ``trials`` asked for, the seed, and the callable's name.
    detectable_tv : float or None
        Every bias of the output law with at least this total variation from ``p`` (on the test's
        cells) is flagged with probability at least :data:`POWER` at this level, whatever its shape;
        a smaller one can pass as ``lossless`` (more ``trials`` lower it, as ``1/sqrt(trials)``).
        None when ``p`` is one-hot (only an impossible token can show a bias).
    """

    tv: float
    tv_upper: float
    pvalue: float
    acceptance: float
    stderr: float
    lossless: bool
    level: float
    output_law: np.ndarray = field(repr=False)
    p: np.ndarray = field(repr=False)
    statistic: float = 0.0
    df: int = 0
    impossible: tuple = ()
    top_tuples: tuple = field(default=(), repr=False)
    reference: str | None = None
    n: int = 0
    sampling: str = ""
    tuples: int = 0
    runs: int = 0
    trials: int = 0
    seed: int | None = None
    name: str = ""
    detectable_tv: float | None = None

    def to_dict(self) -> dict:
        """Plain JSON-serialisable dict."""
        return {
            "name": self.name,
            "n": self.n,
            "sampling": self.sampling,
            "V": int(self.p.size),
            "tuples": self.tuples,
            "runs": self.runs,
            "trials": self.trials,
            "seed": self.seed,
            "level": self.level,
            "lossless": self.lossless,
            "detectable_tv": self.detectable_tv,
            "tv": self.tv,
            "tv_upper": self.tv_upper,
            "pvalue": self.pvalue,
            "statistic": self.statistic,
            "df": self.df,
            "acceptance": self.acceptance,
            "stderr": self.stderr,
            "impossible": list(self.impossible),
            "output_law": self.output_law.tolist(),
            "p": self.p.tolist(),
            "reference": self.reference,
            "top_tuples": [
                {
                    "drafts": list(t.drafts),
                    "probability": t.probability,
                    "runs": t.runs,
                    "departure": t.departure,
                    "acceptance": t.acceptance,
                    "frequencies": t.frequencies.tolist(),
                }
                for t in self.top_tuples
            ],
        }

    def __str__(self) -> str:
        conf = f"{100 * (1 - self.level):g}%"
        lines = [
            f"audit of {self.name or 'verify'}: n = {self.n}, sampling = {self.sampling}, "
            f"V = {self.p.size}, {self.tuples:,} draft tuples, {self.runs:,} runs (seed {self.seed})",
            f"output law vs p: TV = {self.tv:.4f} (upper bound {self.tv_upper:.4f} at {conf} "
            f"confidence); chi-square {self.statistic:.1f} on {self.df} df, p-value {self.pvalue:.3g}",
        ]
        if self.impossible:
            lines.append(f"output tokens with p = 0: {list(self.impossible)}")
        lines.append(f"acceptance = {self.acceptance:.4f} (standard error {self.stderr:.4f})")
        verdict = "lossless: no evidence of bias" if self.lossless else "NOT lossless: biased"
        lines.append(f"verdict at level {self.level:g}: {verdict}")
        if self.lossless and self.detectable_tv is not None:
            lines.append(
                f"  (not a proof: a bias of TV >= {self.detectable_tv:.2g} is flagged with probability "
                f">= {POWER:.0%}, a smaller one can pass; more trials lower this as 1/sqrt(trials))"
            )
        if self.top_tuples:
            lines.append(
                f"draft tuples departing most from the reference verifier {self.reference!r} "
                f"(P(drafts) x TV of the outputs on them; sampling noise included):"
            )
            lines.append(f"  {'drafts':<16} {'P(drafts)':>10} {'runs':>7} {'departure':>10} {'accept':>7}")
            for t in self.top_tuples:
                lines.append(
                    f"  {str(t.drafts):<16} {t.probability:>10.6f} {t.runs:>7,} "
                    f"{t.departure:>10.4f} {t.acceptance:>7.3f}"
                )
        return "\n".join(lines)


# ----------------------------------------------------------------------------------------- helpers
def _token(x) -> int:
    """An int from what ``verify`` returned: int, numpy/torch integer scalar, or an object with
    ``.token`` (e.g. :class:`mdsd_ot.verifiers.Verdict`). Booleans are refused (``True`` is not token
    1), as are floats; anything that raises while being read (a ``.token`` or ``__index__`` that
    raises) is a :class:`VerifierError` naming the exception."""
    if type(x) is int:
        return x
    try:
        x = getattr(x, "token", x)
        if isinstance(x, (bool, np.bool_)):
            raise VerifierError(f"verify must return an integer token index, got the boolean {x!r}")
        try:
            return operator.index(x)
        except TypeError:
            pass
        item = getattr(x, "item", None)  # one-element numpy arrays and torch tensors
        if callable(item):
            try:
                value = item()
            except (TypeError, ValueError, RuntimeError):
                value = None
            if isinstance(value, (bool, np.bool_)):
                raise VerifierError(f"verify must return an integer token index, got a boolean {x!r}")
            if value is not None:
                try:
                    return operator.index(value)
                except TypeError:
                    pass
        shown = repr(x)
    except (VerifierError, KeyboardInterrupt):
        raise
    except BaseException as exc:  # the returned object is foreign code too
        raise VerifierError(
            f"reading the token that verify returned raised {type(exc).__name__}: {_exc_text(exc)}"
        ) from None
    raise VerifierError(f"verify must return an integer token index, got {type(x).__name__} {shown}")


def _exc_text(exc: BaseException) -> str:
    """One line for an exception raised by audited code (its message, or its arguments)."""
    text = " ".join(str(exc).split())
    return text if text else repr(exc)


def _torch_generator(seq: np.random.SeedSequence):
    import torch

    return torch.Generator().manual_seed(int(seq.generate_state(1, np.uint64)[0] >> np.uint64(1)))


def _pooled_cells(p: np.ndarray, N: float) -> list[np.ndarray]:
    """Token groups for the chi-square test: tokens with ``N p >= MIN_EXPECTED`` alone, the others
    pooled, and the pool merged into the smallest cell while it is still below the threshold."""
    support = np.flatnonzero(p > 0)
    big = [np.array([i]) for i in support if N * p[i] >= MIN_EXPECTED]
    small = support[N * p[support] < MIN_EXPECTED]
    if small.size:
        if N * p[small].sum() >= MIN_EXPECTED or not big:
            big.append(small)
        else:
            j = int(np.argmin([p[c].sum() for c in big]))
            big[j] = np.concatenate([big[j], small])
    return big


def _chi_square(law: np.ndarray, p: np.ndarray, N: float, impossible: bool):
    """Pearson's test of ``H0: law = p`` from ``N`` (effective) samples: ``(X^2, df, p-value, cells)``,
    the cells of :func:`_pooled_cells`. An impossible outcome (``p = 0``, observed) is proof of bias:
    p-value 0; a one-cell ``p`` cannot show a bias otherwise: p-value 1."""
    from scipy.stats import chi2

    cells = _pooled_cells(p, N)
    if impossible:
        return math.inf, max(len(cells) - 1, 0), 0.0, cells
    if len(cells) < 2:  # p is one-hot: only impossible outcomes could show a bias
        return 0.0, 0, 1.0, cells
    obs = np.array([law[c].sum() for c in cells])
    exp = np.array([p[c].sum() for c in cells])
    statistic = float(N * np.sum((obs - exp) ** 2 / exp))
    df = len(cells) - 1
    return statistic, df, float(chi2.sf(statistic, df)), cells


def registry_verify(name, *, sampling=None):
    """A ``verify(p, q, drafts, rng) -> token`` callable running a verifier of the registry.

    It prepares the verifier once per ``(p, q, n)`` and calls
    :meth:`mdsd_ot.verifiers.PreparedVerifier.verify`, so that :func:`audit` can check the library's
    own verifiers (and aliases such as ``"specinfer"``) exactly like third-party ones.

    Parameters
    ----------
    name : str or Verifier
        Registry verifier name or alias (``ValueError`` when unknown), or a :class:`Verifier`.
    sampling : str or None
        Draft scheme the verifier is prepared for; ``None``: the verifier's own scheme.

    Returns
    -------
    callable
        ``verify(p, q, drafts, rng) -> int``, named after the verifier, with attribute
        ``default_sampling`` (``sampling`` or the verifier's scheme).

    >>> import numpy as np
    >>> verify = registry_verify("specinfer")
    >>> verify.__name__, verify(np.array([0.5, 0.5]), np.array([0.5, 0.5]), np.array([1, 0]),
    ...                         np.random.default_rng(0))
    ('rrs', 1)
    """
    from .verifiers import get_verifier

    verifier = get_verifier(name)
    cache = {}

    def verify(p, q, drafts, rng):
        key = (np.asarray(p).tobytes(), np.asarray(q).tobytes(), int(np.size(drafts)))
        prepared = cache.get(key)
        if prepared is None:
            cache.clear()
            prepared = cache[key] = verifier.prepare(p, q, key[2], sampling=sampling)
        return prepared.verify(drafts, rng).token

    verify.__name__ = verify.__qualname__ = verifier.name
    verify.default_sampling = verifier.scheme if sampling is None else sampling
    return verify


# -------------------------------------------------------------------------------------------- audit
def audit(
    verify,
    p,
    q,
    n,
    *,
    sampling: str = "with_replacement",
    trials: int = DEFAULT_TRIALS,
    min_runs: int = 10,
    level: float = 0.01,
    seed: int | None = 0,
    backend: str = "numpy",
    max_tuples: int = DEFAULT_MAX_TUPLES,
    top: int = 5,
    reference="auto",
    normalize: bool = False,
) -> AuditResult:
    """Run ``verify`` on every draft tuple and test whether its output law equals ``p``.

    .. math:: \\hat L = \\sum_t \\pi_t \\hat L_t, \\qquad
              \\text{tv\\_upper} = \\widehat{TV} + \\sqrt{S\\,(V \\ln 2 + \\ln(1/\\text{level}))/2},
              \\quad S = \\sum_t \\pi_t^2 / R_t

    Parameters
    ----------
    verify : callable
        ``verify(p, q, drafts, rng) -> token``. With ``backend="numpy"``: ``p``, ``q`` read-only
        float64 arrays of shape (V,), ``drafts`` an int64 array of shape (n,), ``rng`` a
        ``numpy.random.Generator``. With ``backend="torch"``: float64 tensors, an int64 tensor and a
        ``torch.Generator`` (CPU). It must return the output token index (int, numpy or torch integer
        scalar, or an object with a ``.token`` attribute) and must not modify its inputs. Its
        randomness must come from ``rng`` only, with no state kept between calls: the statistics
        assume independent runs.
    p, q : array_like, shape (V,)
        Target and draft distributions (validated as by :func:`mdsd_ot.optimal_acceptance`).
    n : int
        Number of drafts.
    sampling : str
        The draft scheme the verifier assumes (:data:`mdsd_ot.SCHEMES`).
    trials : int
        Stratified sample size: tuple ``t`` is run ``max(min_runs, ceil(trials * pi_t))`` times.
    min_runs : int
        Fewest runs per tuple (>= 2, for a per-tuple variance).
    level : float
        Significance level of the verdict, in (0, 1); ``tv_upper`` holds with confidence ``1 - level``.
    seed : int or None
        Seed of the per-tuple generators (``None``: fresh entropy, not reproducible).
    backend : {"numpy", "torch"}
        What ``verify`` receives.
    max_tuples : int
        Largest number of draft tuples to enumerate (``ValueError`` beyond it).
    top : int
        How many draft tuples to report in ``top_tuples``.
    reference : str or None
        Registry verifier (name or alias) whose exact per-tuple output law the tuples are compared
        with for ``top_tuples``; ``"auto"``: :data:`DEFAULT_REFERENCE` for the scheme (none for
        conditional Poisson); ``None``: no comparison. It does not affect the verdict.
    normalize : bool
        Rescale ``p`` and ``q`` to sum to one instead of rejecting unnormalised input.

    Returns
    -------
    AuditResult
        ``tv``, ``tv_upper``, ``pvalue``, ``acceptance``, ``stderr``, ``lossless`` and the details.

    Raises
    ------
    ValueError, TypeError
        Bad input, or more draft tuples than ``max_tuples`` / calls than :data:`MAX_RUNS`.
    VerifierError
        ``verify`` raised or returned something that is not a token in ``[0, V)``; the message
        names the draft tuple.
    """
    p, q = normalized_pair(p, q, normalize=normalize)
    n = check_n(n)
    scheme = get_scheme(sampling)
    scheme.check(q, n)
    if not callable(verify):
        raise TypeError(f"verify must be a callable verify(p, q, drafts, rng), got {type(verify).__name__}")
    for name, value, low in (
        ("trials", trials, 1),
        ("min_runs", min_runs, 2),
        ("max_tuples", max_tuples, 1),
        ("top", top, 0),
    ):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
        if value < low:
            raise ValueError(f"{name} must be >= {low}, got {value}")
    if isinstance(level, bool) or not isinstance(level, (int, float)) or not 0.0 < level < 1.0:
        raise ValueError(f"level must be a float in (0, 1), e.g. 0.01; got {level!r}")
    if backend not in ("numpy", "torch"):
        raise ValueError(f"unknown backend {backend!r}; choose 'numpy' or 'torch'")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0):
        raise TypeError(f"seed must be a non-negative int or None, got {seed!r}")
    if isinstance(reference, str) and reference == "auto":
        reference = DEFAULT_REFERENCE.get(scheme.name)
    if reference is not None:
        from .verifiers import get_verifier

        reference = get_verifier(reference)
        reference.resolve_scheme(scheme.name)  # ValueError when it assumes another scheme

    V = p.size
    k = int(np.count_nonzero(q > 0))
    log_count = scheme.log_tuple_count(k, n)
    if log_count > math.log(max_tuples) + 1e-9:
        shown = (
            f"{math.exp(log_count):,.0f}" if log_count < 40 else f"about 10^{log_count / math.log(10):.0f}"
        )
        raise ValueError(
            f"the {scheme.name!r} scheme has {shown} draft tuples for {k} tokens of q > 0 and n = {n}, "
            f"more than max_tuples = {max_tuples:,}; audit on a smaller vocabulary (a few tokens "
            f"suffice to expose a bias) or a smaller n, or raise max_tuples"
        )
    tuples, probs = scheme.tuple_law(q, n)
    probs = probs / probs.sum()
    T = len(probs)
    runs = np.maximum(min_runs, np.ceil(trials * probs - 1e-9)).astype(np.int64)
    total = int(runs.sum())
    if total > MAX_RUNS:
        raise ValueError(
            f"the audit would call verify {total:,} times (limit {MAX_RUNS:,}); lower trials or min_runs"
        )

    seqs = np.random.SeedSequence(seed).spawn(T)
    if backend == "torch":
        import torch

        p_arg = torch.from_numpy(p.copy())
        q_arg = torch.from_numpy(q.copy())
        drafts_args = [torch.from_numpy(t.copy()) for t in tuples]
        make_rng = _torch_generator
    else:
        p_arg, q_arg = p.copy(), q.copy()
        p_arg.flags.writeable = False
        q_arg.flags.writeable = False
        drafts_args = []
        for t in tuples:
            d = t.copy()
            d.flags.writeable = False
            drafts_args.append(d)

        def make_rng(seq):
            return np.random.Generator(np.random.PCG64(seq))

    counts = np.zeros((T, V), dtype=np.int64)
    accepted = np.zeros(T, dtype=np.int64)
    for i in range(T):
        drafts = drafts_args[i]
        members = set(tuples[i].tolist())
        rng = make_rng(seqs[i])
        row = counts[i]
        acc = 0
        for call in range(int(runs[i])):
            try:
                out = verify(p_arg, q_arg, drafts, rng)
            except KeyboardInterrupt:
                raise
            except BaseException as exc:  # foreign code: SystemExit, GeneratorExit too, never an exit
                raise VerifierError(
                    f"verify raised {type(exc).__name__} on drafts {tuple(tuples[i].tolist())} "
                    f"(run {call + 1}): {_exc_text(exc)}"
                ) from None
            try:
                tok = _token(out)
            except VerifierError as exc:
                raise VerifierError(f"{exc} (drafts {tuple(tuples[i].tolist())}, run {call + 1})") from None
            if not 0 <= tok < V:
                raise VerifierError(
                    f"verify returned token {tok} on drafts "
                    f"{tuple(tuples[i].tolist())}; tokens lie in [0, {V})"
                )
            row[tok] += 1
            acc += tok in members
        accepted[i] = acc

    freq = counts / runs[:, None]
    law = probs @ freq
    diff = law - p
    tv = 0.5 * float(np.abs(diff).sum())
    S = float(np.sum(probs**2 / runs))
    tv_upper = min(1.0, tv + math.sqrt(S * (V * math.log(2.0) + math.log(1.0 / level)) / 2.0))

    impossible = tuple(int(y) for y in np.flatnonzero((p == 0) & (counts.sum(axis=0) > 0)))
    N = float(np.min(runs / probs))
    statistic, df, pvalue, cells = _chi_square(law, p, N, bool(impossible))
    detectable = _detectable_tv(N, df, level) if len(cells) >= 2 else None

    a = accepted / runs
    var = a * (1.0 - a) * runs / (runs - 1)
    acceptance = float(probs @ a)
    stderr = float(math.sqrt(np.sum(probs**2 * var / runs)))

    top_tuples = ()
    if reference is not None:
        prepared = reference.prepare(p, q, n, sampling=scheme.name)
        ref = np.array([prepared.output_law(t)[0] for t in tuples])
        departure = probs * 0.5 * np.abs(freq - ref).sum(axis=1)
        order = np.argsort(-departure, kind="stable")[:top]
        top_tuples = tuple(
            TupleShare(
                tuple(int(x) for x in tuples[i]),
                float(probs[i]),
                int(runs[i]),
                float(departure[i]),
                float(a[i]),
                freq[i].copy(),
            )
            for i in order
        )
    return AuditResult(
        tv=tv,
        tv_upper=tv_upper,
        pvalue=pvalue,
        acceptance=acceptance,
        stderr=stderr,
        lossless=bool(pvalue >= level and not impossible),
        level=float(level),
        output_law=law,
        p=p,
        statistic=statistic,
        df=df,
        impossible=impossible,
        top_tuples=top_tuples,
        reference=None if reference is None else reference.name,
        n=n,
        sampling=scheme.name,
        tuples=T,
        runs=total,
        trials=int(trials),
        seed=seed,
        name=getattr(verify, "__name__", type(verify).__name__),
        detectable_tv=detectable,
    )


def _detectable_tv(N: float, df: int, level: float) -> float:
    """``sqrt(lambda* / (4 N))``: the total variation above which every bias is flagged with
    probability >= :data:`POWER` (``lambda*``: the noncentrality of a noncentral chi-square on ``df``
    degrees of freedom exceeding the level-``level`` critical value with that probability)."""
    from scipy.optimize import brentq
    from scipy.stats import chi2, ncx2

    critical = chi2.isf(level, df)
    lam = brentq(lambda x: ncx2.sf(critical, df, x) - POWER, 1e-9, 1e6)
    return math.sqrt(lam / (4.0 * N))


# =========================================================================================== trees
#: Default number of first emitted tokens whose law a tree audit checks.
DEFAULT_TREE_K = 3

#: Default number of sampled streams per case of a sampling tree audit.
DEFAULT_TREE_TRIALS = 4_000

#: Power the sampling tree audit states its detectable bias at.
TREE_AUDIT_POWER = 0.8

#: Largest number of ordered drafted trees at one context a tree audit enumerates.
TREE_AUDIT_MAX_TREES = 50_000

#: Tolerance on the sum of a law returned by an audited ``law(tree)``.
_LAW_SUM_TOL = 1e-9


class _BatteryLaw:
    """A next-token law built from a seed and the context (the same law at every call)."""

    def __init__(self, V, seed, kind, conc=1.0, base=None):
        self.V, self.seed, self.kind, self.conc, self.base = V, seed, kind, conc, base

    def __call__(self, ctx):
        V = self.V
        rng = np.random.default_rng([self.seed, len(ctx), *ctx])
        if self.kind == "dirichlet":
            return rng.dirichlet(np.full(V, self.conc))
        if self.kind == "zeros":  # sharp, with tokens of probability 0
            x = rng.dirichlet(np.full(V, self.conc))
            x[rng.random(V) < 0.3] = 0.0
            if not x.sum() > 0:
                x[int(rng.integers(V))] = 1.0
            return x / x.sum()
        if self.kind == "near":  # half the base law, half noise
            return 0.5 * self.base(ctx) + 0.5 * rng.dirichlet(np.ones(V))
        if self.kind == "weights":  # small integer weights
            w = self.weights(ctx)
            return w / w.sum()
        if self.kind == "heavier":  # the base weights with one token made heavier: every other token
            w = np.array(self.base.weights(ctx))  # has p > q, so min(1, p/q) = 1 ties on all of them
            w[int(rng.integers(V))] += 3.0
            return w / w.sum()
        raise AssertionError(self.kind)

    def weights(self, ctx):
        w = np.random.default_rng([self.seed, len(ctx), *ctx]).integers(1, 4, self.V)
        return w.astype(np.float64)


def tree_audit_pairs(vocab: int = 3, seed: int = 0) -> tuple:
    """The model pairs a tree audit runs on by default: ``((name, target, draft), ...)``.

    Context-dependent laws (each context's law drawn from a generator seeded by ``seed`` and the
    context), ``V = vocab`` tokens:

    * ``near``: target Dirichlet(1), draft half the target and half Dirichlet(1) noise;
    * ``sharp``: target Dirichlet(0.3) with about 30% of its tokens at probability 0, draft an
      independent Dirichlet(0.3) (sharp and mismatched);
    * ``mismatched``: target and draft independent Dirichlet(1);
    * ``ties``: small integer weights, the draft's one token heavier: every other token has ``p > q``,
      so the clipped ratios ``min(1, p/q)`` tie at 1 exactly (the common case a tie order must handle);
    * ``equal``: the draft equals the target (every ratio is 1; the 0/0 branches of the verifiers);
    * ``sun``: Sun et al.'s example at ``V = 2``, target ``(1/3, 2/3)``, draft ``(2/3, 1/3)`` at every
      context.

    Parameters
    ----------
    vocab : int
        Vocabulary of every pair but ``sun`` (>= 2).
    seed : int
        Seed (>= 0).

    Returns
    -------
    tuple of (str, NextTokenLaw, NextTokenLaw)

    >>> [(name, t(()).size) for name, t, d in tree_audit_pairs(3)]
    [('near', 3), ('sharp', 3), ('mismatched', 3), ('ties', 3), ('equal', 3), ('sun', 2)]
    """
    from .trees.enumerate import NextTokenLaw, _positive_int

    V, seed = _positive_int(vocab, "vocab", low=2), _positive_int(seed, "seed", low=0)
    s = 10 * seed
    base = _BatteryLaw(V, s + 1, "dirichlet")
    ties = _BatteryLaw(V, s + 5, "weights")
    equal = _BatteryLaw(V, s + 7, "dirichlet")
    laws = [
        ("near", base, _BatteryLaw(V, s + 2, "near", base=base)),
        ("sharp", _BatteryLaw(V, s + 3, "zeros", 0.3), _BatteryLaw(V, s + 4, "dirichlet", 0.3)),
        ("mismatched", _BatteryLaw(V, s + 8, "dirichlet"), _BatteryLaw(V, s + 9, "dirichlet")),
        ("ties", ties, _BatteryLaw(V, s + 6, "heavier", base=ties)),
        ("equal", equal, equal),
        ("sun", lambda c: [1 / 3, 2 / 3], lambda c: [2 / 3, 1 / 3]),
    ]
    return tuple((n, NextTokenLaw(t, "target"), NextTokenLaw(d, "draft")) for n, t, d in laws)


def _as_pairs(pairs, vocab, seed) -> tuple:
    from .trees.enumerate import as_next_token_law

    if pairs is None:
        return tree_audit_pairs(vocab, seed)
    if isinstance(pairs, (str, bytes)) or not hasattr(pairs, "__iter__"):
        raise TypeError(
            f"pairs must be a sequence of (target, draft) or (name, target, draft), got {pairs!r}"
        )
    out = []
    for i, pair in enumerate(pairs):
        pair = tuple(pair) if isinstance(pair, (tuple, list)) else None
        if pair is None or len(pair) not in (2, 3):
            raise TypeError(f"pairs[{i}] must be (target, draft) or (name, target, draft)")
        name, target, draft = pair if len(pair) == 3 else (f"pair {i}", *pair)
        out.append((str(name), as_next_token_law(target, "target"), as_next_token_law(draft, "draft")))
    if not out:
        raise ValueError("pairs is empty; give at least one (target, draft) pair, or None for the battery")
    return tuple(out)


def _as_shapes(shape) -> list:
    from numbers import Integral

    from .trees.shape import TreeShape, parse_shape

    if isinstance(shape, (str, TreeShape, Integral)):
        items = [shape]
    elif hasattr(shape, "__iter__"):
        items = list(shape)
        if items and all(isinstance(b, Integral) and not isinstance(b, bool) for b in items):
            items = [items]  # one shape given as its branching
    else:
        raise TypeError(f"shape must be a tree shape ('2x2', '2,1', [2, 1]) or a list of them, got {shape!r}")
    if not items:
        raise ValueError("no tree shape given; pass one ('2x2') or a list (['2x1', '2x2'])")
    return list(dict.fromkeys(parse_shape(s) for s in items))


def _as_schemes(scheme) -> list:
    if isinstance(scheme, str):
        scheme = [x.strip() for x in scheme.split(",") if x.strip()]
    names = list(dict.fromkeys(get_scheme(s).name for s in scheme))
    if not names:
        raise ValueError("no draft scheme given; pass one ('with_replacement') or a list")
    return names


def _count(n: int, what: str) -> str:
    return f"{n} {what}" if n == 1 else f"{n} {what}s"


def _tree_text(tree) -> str:
    """The drafted tree as its root-to-leaf paths in draft order, e.g. ``[0 2] [1 1]``."""
    leaves = [v for v in range(tree.tokens.size) if tree.children[v].size == 0]
    return " ".join("[" + " ".join(map(str, tree.path(v))) + "]" for v in leaves)


def _where(case_label: str, tree, context) -> str:
    ctx = " ".join(map(str, context)) or "empty"
    return f"{case_label}, the tree drafted at context ({ctx}) with paths {_tree_text(tree)}"


def _freeze(tree) -> None:
    """The audited code gets read-only arrays (a verifier that writes into them raises)."""
    for a in (tree.tokens, tree.parent, tree.depth, tree.q, tree.p, *tree.children):
        a.flags.writeable = False


def _emission(value, tree, paths: set, where: str, what: str) -> tuple:
    """``value`` as a tuple of ints that is a path of ``tree`` followed by one token."""
    if callable(getattr(value, "items", None)):
        raise VerifierError(
            f"{what} is a {type(value).__name__}, not a list of tokens: a law(tree) is audited with "
            f"kind='law' (--law on the command line) ({where})"
        )
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        raise VerifierError(
            f"{what} must be a sequence of tokens, got {type(value).__name__} {value!r} ({where})"
        )
    out = []
    for t in value:
        if isinstance(t, (bool, np.bool_)):
            raise VerifierError(f"{what} holds the boolean {t!r}, not a token ({where})")
        try:
            out.append(operator.index(t))
        except TypeError:
            raise VerifierError(
                f"{what} holds {type(t).__name__} {t!r}, not a token index ({where})"
            ) from None
    e = tuple(out)
    if not e:
        raise VerifierError(f"{what} is empty; every call emits at least one token ({where})")
    if not 0 <= e[-1] < tree.vocab:
        raise VerifierError(f"{what} {list(e)} ends with token {e[-1]}, outside [0, {tree.vocab}) ({where})")
    if e[:-1] not in paths:
        raise VerifierError(
            f"{what} {list(e)} is not a path of the drafted tree followed by one token ({where})"
        )
    return e


def _checked_law(law_fn, tree, where: str) -> dict:
    """Run ``law_fn(tree)`` and check that it is a law of emissions of the tree."""
    try:
        raw = law_fn(tree)
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # foreign code
        raise VerifierError(f"law raised {type(exc).__name__} on {where}: {_exc_text(exc)}") from None
    items = getattr(raw, "items", None)
    if not callable(items):
        raise VerifierError(
            f"law must return a dict {{tuple of tokens: probability}}, got {type(raw).__name__} ({where})"
        )
    paths = {tree.path(v) for v in range(tree.tokens.size)}
    out: dict = {}
    for key, pr in items():
        e = _emission(key, tree, paths, where, "an emission of law")
        try:
            x = float(pr)
        except (TypeError, ValueError):
            raise VerifierError(
                f"law gives {type(pr).__name__} {pr!r} for {list(e)}, not a number ({where})"
            ) from None
        if not math.isfinite(x) or x < -LAW_TOL:
            raise VerifierError(f"law gives probability {x!r} to {list(e)} ({where})")
        out[e] = out.get(e, 0.0) + x
    total = math.fsum(out.values())
    if not abs(total - 1.0) <= _LAW_SUM_TOL:
        raise VerifierError(f"law's probabilities sum to {total!r}, not 1 ({where})")
    return out


@dataclass(frozen=True)
class TreeAuditCase:
    """One (model pair, shape, scheme) of :func:`audit_tree`.

    Attributes
    ----------
    pair, shape, scheme : str
        The model pair (:func:`tree_audit_pairs`), the tree shape's label and the draft scheme.
    V : int
        The pair's vocabulary.
    lossless : bool
        Exact mode: ``max_deviation <= tol``. Sampling mode: the case's p-value is at least its share
        of the level (Bonferroni over the cases).
    max_deviation : float
        Largest ``|P(stream starts with s) - P_target(s)|`` over every string ``s`` of ``1..k`` tokens:
        exact (exact mode) or observed over the test's cells (sampling mode).
    tv : float
        Total-variation distance between the law of the first ``k`` streamed tokens and the target's.
    tokens_per_call : float
        Expected tokens one call emits at the root context, averaged over the drafted trees: exact
        (exact mode) or the mean of the streams' first calls (sampling mode, ``stderr`` its error).
    optimum : float or None
        :func:`mdsd_ot.trees.tree_optimum` at the root context (None when not asked).
    prefix : tuple of int or None
        Exact mode: the shortest string whose stream probability is off (the most among the shortest);
        ``prefix_probability`` against ``target_probability``.
    context, string, defect : tuple, tuple, float or None
        Exact mode: the call (its context) and the emitted string ``u y`` (``context + u y`` ends the
        prefix) where condition (C), ``m(u y) = P(y | u) m+(u)``, fails most; ``defect`` is
        ``m(u y) - P(y | u) m+(u)`` of that call's law.
    tree, tree_probability, tree_defect, tree_law
        Exact mode: the drafted tree at ``context`` contributing most to ``defect`` (its share
        ``P(T) [law_T(begins with u y) - P(y | u) law_T(strictly extends u)]``, of the same sign), its
        probability and the verifier's law on it.
    trees : int
        Drafted trees evaluated (every context reached), or sampled calls (sampling mode).
    pvalue, statistic, df, detectable, stderr
        Sampling mode: the chi-square test of the first ``k`` tokens (cells of expected count below 5
        pooled), and the smallest bias on one cell it detects with probability
        :data:`TREE_AUDIT_POWER` at the case's level.
    """

    pair: str
    shape: str
    scheme: str
    V: int
    lossless: bool
    max_deviation: float
    tv: float
    tokens_per_call: float
    optimum: float | None = None
    prefix: tuple | None = None
    prefix_probability: float | None = None
    target_probability: float | None = None
    context: tuple | None = None
    string: tuple | None = None
    defect: float | None = None
    tree: object = field(default=None, repr=False)
    tree_probability: float | None = None
    tree_defect: float | None = None
    tree_law: dict | None = field(default=None, repr=False)
    trees: int = 0
    pvalue: float | None = None
    statistic: float | None = None
    df: int | None = None
    detectable: float | None = None
    stderr: float | None = None

    @property
    def label(self) -> str:
        return f"pair {self.pair} (V = {self.V}), shape {self.shape}, {self.scheme} drafts"

    def to_dict(self) -> dict:
        d = {
            k: getattr(self, k)
            for k in (
                "pair", "shape", "scheme", "V", "lossless", "max_deviation", "tv", "tokens_per_call",
                "optimum", "prefix_probability", "target_probability", "defect", "tree_probability",
                "tree_defect", "trees", "pvalue", "statistic", "df", "detectable", "stderr",
            )
        }  # fmt: skip
        for k in ("prefix", "context", "string"):
            v = getattr(self, k)
            d[k] = None if v is None else list(v)
        d["tree_paths"] = None if self.tree is None else _tree_text(self.tree)
        d["tree_law"] = None if self.tree_law is None else [[list(e), p] for e, p in self.tree_law.items()]
        return d


@dataclass(frozen=True)
class TreeAuditResult:
    """Outcome of :func:`audit_tree`: the verdict, and every case.

    Attributes
    ----------
    lossless : bool
        Exact mode: every case's stream law equals the target's to ``tol``. Sampling mode: no case's
        p-value falls below ``level / len(cases)`` (no evidence of bias at ``level``).
    max_deviation : float
        The largest case's ``max_deviation``.
    mode : {"exact", "sample"}
    kind : {"law", "verify"}
        What the audited callable returns (a registry verifier provides both).
    pvalue : float or None
        Sampling mode: the smallest case p-value times the number of cases (Bonferroni), at most 1.
    level, tol, k, seed, trials, name
        The setting: significance level (sampling), tolerance (exact), tokens checked, seed, streams
        per case (sampling) and the audited callable's name.
    cases : tuple of TreeAuditCase

    The properties ``worst``, ``prefix``, ``tree``, ``tokens_per_call`` and ``optimum`` read the case
    that shows the bias most (largest deviation; sampling: smallest p-value).
    """

    lossless: bool
    max_deviation: float
    mode: str
    kind: str
    cases: tuple = field(repr=False)
    pvalue: float | None = None
    level: float = 0.01
    tol: float = 0.0
    k: int = DEFAULT_TREE_K
    seed: int | None = None
    trials: int = 0
    name: str = ""
    skipped: tuple = ()

    @property
    def worst(self) -> TreeAuditCase:
        if self.mode == "sample":
            return min(self.cases, key=lambda c: (c.pvalue, -c.max_deviation))
        return max(self.cases, key=lambda c: c.max_deviation)

    @property
    def prefix(self):
        return self.worst.prefix

    @property
    def tree(self):
        return self.worst.tree

    @property
    def tokens_per_call(self) -> float:
        return self.worst.tokens_per_call

    @property
    def optimum(self):
        return self.worst.optimum

    def to_dict(self) -> dict:
        """Plain JSON-serialisable dict."""
        return {
            "name": self.name,
            "mode": self.mode,
            "kind": self.kind,
            "k": self.k,
            "lossless": self.lossless,
            "max_deviation": self.max_deviation,
            "pvalue": self.pvalue,
            "level": self.level,
            "tol": self.tol,
            "seed": self.seed,
            "trials": self.trials,
            "cases": [c.to_dict() for c in self.cases],
            "skipped": [
                {"pair": p, "shape": sh, "scheme": sc, "reason": why} for p, sh, sc, why in self.skipped
            ],
        }

    def __str__(self) -> str:
        n = len(self.cases)
        pairs = len({c.pair for c in self.cases})
        shapes = len({c.shape for c in self.cases})
        schemes = len({c.scheme for c in self.cases})
        how = "exact law" if self.mode == "exact" else "sampled calls"
        head = (
            f"tree audit of {self.name or 'verify'} ({how}): "
            f"the first {self.k} emitted tokens over chained calls, {_count(pairs, 'model pair')} x "
            f"{_count(shapes, 'shape')} x {_count(schemes, 'scheme')} = {_count(n, 'case')}"
        )
        lines = [head]
        w = self.worst
        if self.mode == "exact":
            if self.lossless:
                verdict = (
                    f"lossless: the stream's law equals the target's in every case (largest deviation "
                    f"{self.max_deviation:.2g} <= {self.tol:g})"
                )
            else:
                verdict = (
                    f"NOT lossless: biased, the stream's law departs from the target's by up to "
                    f"{self.max_deviation:.6g}"
                )
            lines.append(f"verdict (exact, tolerance {self.tol:g}): {verdict}")
            if not self.lossless and w.prefix is not None:
                s = " ".join(map(str, w.prefix))
                lines.append(
                    f"  shortest prefix that shows it: P(stream starts {s}) = {w.prefix_probability:.6f} "
                    f"against the target's {w.target_probability:.6f} ({w.label})"
                )
                if w.tree is not None:
                    ctx = " ".join(map(str, w.context)) or "empty"
                    u = " ".join(map(str, w.string))
                    lines.append(
                        f"  the call at context ({ctx}) breaks m(u y) = P(y | u) m+(u) at u y = ({u}) by "
                        f"{w.defect:+.6f}; the drafted tree contributing most: paths {_tree_text(w.tree)} "
                        f"(probability {w.tree_probability:.6f}, share {w.tree_defect:+.6f})"
                    )
        else:
            conf = f"{100 * TREE_AUDIT_POWER:g}%"
            verdict = "lossless: no evidence of bias" if self.lossless else "NOT lossless: biased"
            lines.append(
                f"verdict at level {self.level:g} (Bonferroni over {_count(n, 'case')}; p-value "
                f"{self.pvalue:.3g}): "
                f"{verdict}"
            )
            lines.append(
                f"  {self.trials:,} sampled streams per case; a bias of "
                f"{max(c.detectable for c in self.cases):.3g} on one cell (a {self.k}-token string) is "
                f"detected with probability about {conf} (noncentral chi-square) in every case"
            )
        cols = ["pair", "V", "shape", "scheme", "max dev.", "tokens/call", "optimum"]
        if self.mode == "sample":
            cols += ["p-value", "detects"]
        rows = []
        for c in self.cases:
            opt = "-" if c.optimum is None else f"{c.optimum:.6f}"
            tok = (
                f"{c.tokens_per_call:.6f}" if c.stderr is None else f"{c.tokens_per_call:.4f}+-{c.stderr:.4f}"
            )
            row = [c.pair, str(c.V), c.shape, c.scheme, f"{c.max_deviation:.2e}", tok, opt]
            if self.mode == "sample":
                row += [f"{c.pvalue:.3g}", f"{c.detectable:.3g}"]
            rows.append(row)
        widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(cols)]

        def fmt(cells):
            return "  ".join(
                x.rjust(wd) if i in (1,) or i >= 4 else x.ljust(wd)
                for i, (x, wd) in enumerate(zip(cells, widths))
            )

        lines += [fmt(cols), fmt(["-" * wd for wd in widths])] + [fmt(r) for r in rows]
        lines += [f"skipped pair {p}, shape {sh}, {sc} drafts: {why}" for p, sh, sc, why in self.skipped]
        return "\n".join(line.rstrip() for line in lines)


def _resolve(verify_or_law, kind: str, mode: str):
    """``(name, law_fn or None, verify_fn or None, kind, mode, tree verifier or None)``."""
    from .trees.tree import canonical_verifier, outcome_law, verify_tree
    from .trees.verifiers import TreeVerifier
    from .verifiers.base import Verifier

    if kind not in ("verify", "law"):
        raise ValueError(
            f"kind must be 'verify' (the callable is verify(tree, rng) -> tokens) or 'law' (law(tree) -> "
            f"{{tuple of tokens: probability}}), got {kind!r}"
        )
    if mode not in ("auto", "exact", "sample"):
        raise ValueError(f"mode must be 'auto', 'exact' or 'sample', got {mode!r}")
    if isinstance(verify_or_law, (str, TreeVerifier, Verifier)):  # the library's: law and sampler known
        v = verify_or_law
        if isinstance(v, str):
            v = canonical_verifier(v)
            name = v
        else:
            name = v.name
        tree_level = v if isinstance(v, TreeVerifier) else None
        if tree_level is None and isinstance(v, str):
            from .trees.verifiers import TREE_VERIFIERS

            tree_level = TREE_VERIFIERS.get(v)
        mode = "exact" if mode == "auto" else mode
        return (
            name,
            lambda t: outcome_law(t, v),
            lambda t, rng: verify_tree(t, v, rng),
            "law" if mode == "exact" else "verify",
            mode,
            tree_level,
        )
    if not callable(verify_or_law):
        raise TypeError(
            f"verify_or_law must be a callable verify(tree, rng) / law(tree), a registry verifier name or "
            f"a TreeVerifier; got {type(verify_or_law).__name__}"
        )
    name = getattr(verify_or_law, "__name__", type(verify_or_law).__name__)
    if kind == "law":
        if mode == "sample":
            raise ValueError(
                "a law(tree) is audited exactly; mode='sample' needs kind='verify' and verify(tree, rng)"
            )
        return name, verify_or_law, None, "law", "exact", None
    if mode == "exact":
        raise ValueError(
            "an exact audit needs the law of each call: pass law(tree) -> {tuple of tokens: probability} "
            "with kind='law' (the contract of mdsd_ot.trees.outcome_law), or audit verify(tree, rng) by "
            "sampling (mode='sample' or 'auto')"
        )
    return name, None, verify_or_law, "verify", "sample", None


class _Contexts:
    """Every ordered drafted tree at each context reached (enumerated once, frozen)."""

    def __init__(self, target, draft, shape, scheme, max_trees):
        self.args = (target, draft, shape, scheme)
        self.max_trees = max_trees
        self.memo: dict = {}

    def __call__(self, ctx):
        if ctx not in self.memo:
            from .trees.enumerate import enumerate_trees

            e = enumerate_trees(*self.args, context=ctx, max_classes=self.max_trees)
            trees = list(e.trees(max_trees=self.max_trees))
            for t, _ in trees:
                _freeze(t)
            self.memo[ctx] = trees
        return self.memo[ctx]


def _cannot_draft(pair, shape, scheme) -> str | None:
    """Why ``scheme`` cannot draft ``shape`` at the root context of ``pair`` (e.g. three tokens without
    replacement from a two-token vocabulary), else None."""
    q = pair[2](())
    for b in sorted(set(shape.branching)):
        try:
            get_scheme(scheme).check(q, b)
        except ValueError as exc:
            return " ".join(str(exc).split())
    return None


def _exact_case(law_fn, pair, shape, scheme, k, tol, with_optimum, max_trees) -> TreeAuditCase:
    from .trees.chained import autoregressive_law, chained_law, prefix_deviation, prefix_laws
    from .trees.optimum import tree_optimum

    pname, target, draft = pair
    V = int(target(()).size)
    label = f"pair {pname} (V = {V}), shape {shape.label}, {scheme} drafts"
    contexts = _Contexts(target, draft, shape, scheme, max_trees)
    per_tree: dict = {}  # context -> [(tree, prob, law)]
    calls: dict = {}

    def call(ctx):
        items, out = [], {}
        for tree, prob in contexts(ctx):
            law = _checked_law(law_fn, tree, _where(label, tree, ctx))
            items.append((tree, prob, law))
            for e, pr in law.items():
                out[e] = out.get(e, 0.0) + prob * pr
        per_tree[ctx] = items
        calls[ctx] = out
        return out

    law_k = chained_law(call, k)
    reference = autoregressive_law(target, k)
    dev, prefix = prefix_deviation(law_k, reference, tol=tol)
    keys = set(law_k) | set(reference)
    tv = 0.5 * math.fsum(abs(law_k.get(s, 0.0) - reference.get(s, 0.0)) for s in keys)
    tokens = math.fsum(pr * len(e) for e, pr in calls[()].items())
    optimum = None
    if with_optimum:
        r = tree_optimum(target, draft, shape, scheme)
        optimum = float(r.value) if r.success else None
    fields = {}
    if prefix is not None:
        ours, theirs = prefix_laws(law_k), prefix_laws(reference)
        fields = dict(
            prefix=prefix,
            prefix_probability=ours.get(prefix, 0.0),
            target_probability=theirs.get(prefix, 0.0),
        )
        fields.update(_locate(prefix, calls, per_tree, target))
    return TreeAuditCase(
        pair=pname,
        shape=shape.label,
        scheme=scheme,
        V=V,
        lossless=bool(dev <= tol),
        max_deviation=float(dev),
        tv=float(tv),
        tokens_per_call=float(tokens),
        optimum=optimum,
        trees=sum(len(v) for v in per_tree.values()),
        **fields,
    )


def _begins(law: dict, w: tuple) -> float:
    n = len(w)
    return math.fsum(pr for e, pr in law.items() if e[:n] == w)


def _extends(law: dict, u: tuple) -> float:
    n = len(u)
    return math.fsum(pr for e, pr in law.items() if len(e) > n and e[:n] == u)


def _locate(prefix, calls, per_tree, target) -> dict:
    """Where condition (C) fails for the shortest deviating prefix: the call, the string and the tree."""
    reach = {(): 1.0}  # P(a call starts at context c), for the proper prefixes of ``prefix``
    for j in range(1, len(prefix)):
        c = prefix[:j]
        reach[c] = math.fsum(reach[c[:i]] * calls[c[:i]].get(c[i:], 0.0) for i in range(j) if c[:i] in calls)
    best = None
    for j in range(len(prefix)):
        c, w = prefix[:j], prefix[j:]
        if c not in calls or reach.get(c, 0.0) == 0.0:
            continue
        u, y = w[:-1], w[-1]
        py = float(target(c + u)[y])
        defect = _begins(calls[c], w) - py * _extends(calls[c], u)
        if best is None or abs(reach[c] * defect) > abs(best[0]):
            best = (reach[c] * defect, c, w, defect, py)
    if best is None:
        return {}
    _, c, w, defect, py = best
    sign = 1.0 if defect >= 0 else -1.0
    share = [
        (prob * (_begins(law, w) - py * _extends(law, w[:-1])), tree, prob, law)
        for tree, prob, law in per_tree[c]
    ]
    s, tree, prob, law = max(share, key=lambda x: sign * x[0])
    return dict(
        context=c, string=w, defect=float(defect), tree=tree, tree_probability=float(prob),
        tree_defect=float(s), tree_law=dict(law),
    )  # fmt: skip


def _detectable(N: float, df: int, level: float) -> float:
    """Smallest deviation ``d`` on one cell that Pearson's test on ``N`` samples detects with probability
    :data:`TREE_AUDIT_POWER` at ``level``: any law ``L`` with ``|L(c) - p(c)| >= d`` on some cell has
    noncentrality ``N sum (L - p)^2 / p >= N d^2 / (p(c) (1 - p(c))) >= 4 N d^2`` (Cauchy-Schwarz on the
    other cells), so ``d = sqrt(lambda / (4 N))`` with ``lambda`` the noncentrality of that power."""
    from scipy.optimize import brentq
    from scipy.stats import chi2, ncx2

    if df < 1:
        return math.inf
    crit = chi2.isf(level, df)

    def power(lam):
        return ncx2.sf(crit, df, lam) - TREE_AUDIT_POWER

    hi = 1.0
    while power(hi) < 0:
        hi *= 2.0
    lam = brentq(power, 1e-9, hi, xtol=1e-9)
    return math.sqrt(lam / (4.0 * N))


def _sample_case(
    verify_fn, pair, shape, scheme, k, trials, level, rngs, with_optimum, max_trees
) -> TreeAuditCase:
    from .trees.chained import autoregressive_law
    from .trees.optimum import tree_optimum

    pname, target, draft = pair
    V = int(target(()).size)
    label = f"pair {pname} (V = {V}), shape {shape.label}, {scheme} drafts"
    contexts = _Contexts(target, draft, shape, scheme, max_trees)
    cdfs: dict = {}
    draft_rng, verify_rng = rngs
    counts: dict = {}
    first = np.empty(trials)
    calls = 0
    for i in range(trials):
        out: tuple = ()
        while len(out) < k:
            trees = contexts(out)
            if out not in cdfs:
                cdfs[out] = np.cumsum([pr for _, pr in trees])
            cdf = cdfs[out]
            j = min(int(np.searchsorted(cdf, draft_rng.random() * cdf[-1], side="right")), len(trees) - 1)
            tree = trees[j][0]
            where = _where(label, tree, out)
            try:
                raw = verify_fn(tree, verify_rng)
            except KeyboardInterrupt:
                raise
            except BaseException as exc:  # foreign code
                raise VerifierError(
                    f"verify raised {type(exc).__name__} on {where}: {_exc_text(exc)}"
                ) from None
            e = _emission(
                raw, tree, {tree.path(v) for v in range(tree.tokens.size)}, where, "verify's output"
            )
            if not out:
                first[i] = len(e)
            out += e
            calls += 1
        counts[out[:k]] = counts.get(out[:k], 0) + 1
    reference = autoregressive_law(target, k)
    cells_list = sorted(set(reference) | set(counts))
    p = np.array([reference.get(s, 0.0) for s in cells_list])
    freq = np.array([counts.get(s, 0) for s in cells_list], dtype=np.float64) / trials
    impossible = bool(np.any((p == 0) & (freq > 0)))
    statistic, df, pvalue, cells = _chi_square(freq, p, float(trials), impossible)
    dev = max(abs(freq[c].sum() - p[c].sum()) for c in cells) if cells else 0.0
    if impossible:
        dev = max(dev, float(freq[p == 0].max()))
    tv = 0.5 * float(np.abs(freq - p).sum())
    optimum = None
    if with_optimum:
        r = tree_optimum(target, draft, shape, scheme)
        optimum = float(r.value) if r.success else None
    return TreeAuditCase(
        pair=pname,
        shape=shape.label,
        scheme=scheme,
        V=V,
        lossless=bool(pvalue >= level),
        max_deviation=float(dev),
        tv=tv,
        tokens_per_call=float(first.mean()),
        stderr=float(first.std(ddof=1) / math.sqrt(trials)) if trials > 1 else math.inf,
        optimum=optimum,
        trees=calls,
        pvalue=float(pvalue),
        statistic=float(statistic),
        df=int(df),
        detectable=_detectable(float(trials), df, level),
    )


def audit_tree(
    verify_or_law,
    shape,
    scheme="with_replacement",
    *,
    kind: str = "verify",
    mode: str = "auto",
    k: int = DEFAULT_TREE_K,
    pairs=None,
    vocab: int = 3,
    seed: int | None = 0,
    trials: int = DEFAULT_TREE_TRIALS,
    level: float = 0.01,
    tol: float = LAW_TOL,
    optimum: bool = True,
    max_trees: int = TREE_AUDIT_MAX_TREES,
) -> TreeAuditResult:
    """Audit a tree verifier: does the stream of chained calls have the target's law?

    A call at context ``c`` drafts a tree (shape and scheme given), the verifier emits ``E`` (a path of
    the tree, then one token), the next call starts at ``c + E``. For every model pair of a battery
    (:func:`tree_audit_pairs`, or ``pairs``), every shape and every scheme, the law of the first ``k``
    streamed tokens is compared with the target's autoregressive law:

    .. math:: \\text{max\\_deviation} = \\max_{1 \\le |s| \\le k}
              \\bigl| P(\\text{stream starts with } s) - P_\\text{target}(s) \\bigr|

    **Exact mode** (a law): every ordered drafted tree at every context a stream shorter than ``k``
    reaches is enumerated (:class:`mdsd_ot.trees.TreeEnumeration`) with its probability, the
    verifier's law on each is mixed (:func:`mdsd_ot.trees.chained.chained_law`); ``lossless`` is
    ``max_deviation <= tol``. A biased case names the shortest prefix that shows it, the call and
    string where condition (C) of docs/math.md#tree-level-verification fails, and the drafted tree
    contributing most to that failure. **Sampling mode** (a sampler): ``trials`` independent streams
    per case (trees drawn from the exact enumeration), Pearson's chi-square test of the first ``k``
    tokens (cells of expected count below 5 pooled), Bonferroni over the cases; each case states the
    smallest bias on one cell it detects with probability :data:`TREE_AUDIT_POWER`.

    Parameters
    ----------
    verify_or_law : callable, str or TreeVerifier
        With ``kind="verify"``: ``verify(tree, rng) -> list of tokens`` (the contract of
        :func:`mdsd_ot.trees.verify_tree`: ``tree`` a :class:`~mdsd_ot.trees.DraftTree` with read-only
        arrays, ``rng`` a ``numpy.random.Generator``; the accepted path's tokens, then one token).
        With ``kind="law"``: ``law(tree) -> {tuple of tokens: probability}`` (the contract of
        :func:`mdsd_ot.trees.outcome_law`). A registry verifier name (node-wise or tree-level) or a
        :class:`~mdsd_ot.trees.TreeVerifier` provides both (``kind`` is then ignored).
    shape : str, sequence of int, TreeShape, or a list of them
        Tree shape(s), e.g. ``"2x2"`` or ``["2x1", "2x2", "3x1"]``.
    scheme : str or list of str
        Draft scheme(s) (a comma-separated string is accepted).
    kind : {"verify", "law"}
        What a plain callable returns (said explicitly, never guessed).
    mode : {"auto", "exact", "sample"}
        ``"auto"``: exact when a law is available, sampling otherwise.
    k : int
        Number of first streamed tokens checked (>= 1; the contexts reached grow as ``V^(k-1)``).
    pairs : sequence or None
        ``(target, draft)`` or ``(name, target, draft)`` next-token laws (callables ``context -> (V,)``);
        None: :func:`tree_audit_pairs` ``(vocab, seed)``.
    vocab, seed : int
        The battery's vocabulary and seed (``seed`` also seeds the sampling mode's generators; None
        there: fresh entropy).
    trials : int
        Sampling mode: streams per case.
    level : float
        Sampling mode: significance level of the verdict, in (0, 1).
    tol : float
        Exact mode: largest deviation still called lossless (float rounding).
    optimum : bool
        Compute :func:`mdsd_ot.trees.tree_optimum` per case (an LP; the yardstick of ``tokens_per_call``).
    max_trees : int
        Refuse more ordered drafted trees at one context (``ValueError``).

    Returns
    -------
    TreeAuditResult

    Raises
    ------
    ValueError, TypeError
        Bad input (including a registry verifier that cannot verify a shape or scheme asked).
    VerifierError
        The audited callable raised or returned something that is not a law of emissions of the tree
        (or a path plus one token); the message names the pair, the shape, the scheme, the context and
        the drafted tree.

    Examples
    --------
    >>> r = audit_tree("traversal", ["2x1", "2x2"], "with_replacement", k=2, optimum=False)
    >>> r.lossless, r.max_deviation < 1e-12, len(r.cases)
    (True, True, 12)
    """
    name, law_fn, verify_fn, kind, mode, tree_level = _resolve(verify_or_law, kind, mode)
    shapes = _as_shapes(shape)
    schemes = _as_schemes(scheme)
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise ValueError(f"k (the number of first streamed tokens checked) must be an int >= 1, got {k!r}")
    k = int(k)
    if isinstance(trials, bool) or not isinstance(trials, (int, np.integer)) or trials < 2:
        raise ValueError(f"trials must be an int >= 2, got {trials!r}")
    if isinstance(level, bool) or not isinstance(level, (int, float)) or not 0.0 < level < 1.0:
        raise ValueError(f"level must be a float in (0, 1), e.g. 0.01; got {level!r}")
    if isinstance(max_trees, bool) or not isinstance(max_trees, (int, np.integer)) or max_trees < 1:
        raise ValueError(f"max_trees must be an int >= 1, got {max_trees!r}")
    if not isinstance(optimum, bool):
        raise TypeError(f"optimum must be True or False, got {optimum!r}")
    if isinstance(tol, bool) or not isinstance(tol, (int, float)) or not 0.0 <= tol < 1.0:
        raise ValueError(f"tol must be a float in [0, 1), e.g. 1e-12; got {tol!r}")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0):
        raise TypeError(f"seed must be a non-negative int or None, got {seed!r}")
    battery = _as_pairs(pairs, vocab, 0 if seed is None else seed)
    if tree_level is not None:
        for s in shapes:
            for sc in schemes:
                why = tree_level.why_not(s, sc)
                if why is not None:
                    raise ValueError(
                        f"verifier {name!r} cannot verify {s.label} trees of {sc!r} drafts: {why}"
                    )
    elif isinstance(verify_or_law, str):  # a node-wise registry verifier
        from .trees.tree import valid_verifiers

        bad = [sc for sc in schemes if name not in valid_verifiers(sc, [name], shape=shapes[0])]
        if bad:
            raise ValueError(
                f"verifier {name!r} is not valid for {bad} drafts; audit it under its own schemes"
            )
    cases = []
    streams = np.random.SeedSequence(seed).spawn(len(battery) * len(shapes) * len(schemes))
    n_cases = len(streams)
    skipped = []
    for pair in battery:
        for s in shapes:
            for sc in schemes:
                why = _cannot_draft(pair, s, sc)
                if why is not None:
                    skipped.append((pair[0], s.label, sc, why))
                    continue
                if mode == "exact":
                    cases.append(_exact_case(law_fn, pair, s, sc, k, float(tol), optimum, max_trees))
                else:
                    a, b = streams[len(cases)].spawn(2)
                    rngs = (np.random.Generator(np.random.PCG64(a)), np.random.Generator(np.random.PCG64(b)))
                    cases.append(
                        _sample_case(
                            verify_fn, pair, s, sc, k, int(trials), level / n_cases, rngs, optimum, max_trees
                        )
                    )
    cases = tuple(cases)
    if not cases:
        raise ValueError(
            "no case to audit: the schemes cannot draft the shapes asked on any pair ("
            + "; ".join(f"{p}, {sh}, {sc}: {why}" for p, sh, sc, why in skipped)
            + ")"
        )
    if mode == "exact":
        return TreeAuditResult(
            lossless=all(c.lossless for c in cases),
            max_deviation=max(c.max_deviation for c in cases),
            mode=mode, kind=kind, cases=cases, level=float(level), tol=float(tol), k=k, seed=seed, name=name,
            skipped=tuple(skipped),
        )  # fmt: skip
    pvalue = min(1.0, n_cases * min(c.pvalue for c in cases))
    return TreeAuditResult(
        lossless=all(c.lossless for c in cases),
        max_deviation=max(c.max_deviation for c in cases),
        mode=mode, kind=kind, cases=cases, pvalue=pvalue, level=float(level), tol=float(tol), k=k, seed=seed,
        trials=int(trials), name=name, skipped=tuple(skipped),
    )  # fmt: skip

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
    from scipy.stats import chi2

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
    cells = _pooled_cells(p, N)
    if impossible:
        statistic, df, pvalue = math.inf, max(len(cells) - 1, 0), 0.0
    elif len(cells) < 2:  # p is one-hot: only impossible tokens could show a bias
        statistic, df, pvalue = 0.0, 0, 1.0
    else:
        obs = np.array([law[c].sum() for c in cells])
        exp = np.array([p[c].sum() for c in cells])
        statistic = float(N * np.sum((obs - exp) ** 2 / exp))
        df = len(cells) - 1
        pvalue = float(chi2.sf(statistic, df))

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

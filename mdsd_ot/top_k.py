"""Bounds on alpha* when only the top-k probabilities of the target and of the draft are known.

Serving engines return the log-probabilities of a few most likely tokens per position (the
``top_logprobs`` of OpenAI-compatible servers). The rest of each distribution is unknown: a mass
``r_p = 1 - sum(p_probs)`` of the target and ``r_q = 1 - sum(q_probs)`` of the draft lies on tokens the
lists do not name, in an unknown way. :func:`optimal_acceptance_top_k` returns the interval
``[lower, upper]`` that holds alpha* of every *completion* (every way of spreading ``r_p`` over the
tokens outside the target's list and ``r_q`` over the tokens outside the draft's list, on a vocabulary
of ``vocab_size`` tokens, or of any size when it is None), with the extremal completions where an end
is attained. Proofs: docs/math.md#bounds-from-truncated-distributions.

* ``with_replacement``: both ends are exact and attained (closed forms; an enumeration of at most
  ``(|E| + 1)(|D| + 2)`` vertices for the lower end when the vocabulary has fewer than two unlisted
  tokens to spare).
* ``without_replacement``: ``lower`` is the infimum over completions (the draft's missing mass spread
  over ever more, ever smaller unlisted tokens: approached, not attained, unless ``r_q = 0``);
  ``upper`` is a valid bound (a min-max over a family of dual sets), not claimed to be attained.
* Other schemes are refused: with unknown masses the identity of the top tokens (``greedy``, ``hub``,
  ``top_n``) or the subset law (``conditional_poisson``) is not determined by the lists.

The completions ignore that an unlisted token is at most as likely as the least likely listed one:
the interval covers more distributions than the lists allow, so it is valid, and can be wider than
necessary when the missing masses are large.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field

import numpy as np

__all__ = [
    "optimal_acceptance_top_k",
    "TopKBounds",
    "TOP_K_SAMPLINGS",
    "read_top_logprobs",
    "continuum_sequential_mass",
]

#: Draft schemes :func:`optimal_acceptance_top_k` bounds.
TOP_K_SAMPLINGS = ("with_replacement", "without_replacement")

#: Listed probabilities may sum above 1 by this much (rounded log-probabilities); they are then
#: rescaled to sum to 1 (``TopKBounds.rescaled``). A larger excess is refused.
TOP_K_SUM_TOL = 1e-5

_SAMPLING_WHY = {
    "greedy": "greedy drafts take the draft's n-1 most likely tokens, and with unknown masses a missing "
    "token may be among them",
    "hub": "SpecHub drafts use the draft's most likely token, which the unknown masses may change",
    "top_n": "top_n drafts are the draft's n most likely tokens, which the unknown masses may change",
    "conditional_poisson": "no proof of these bounds is written for conditional-Poisson subsets",
}


@dataclass(frozen=True)
class TopKBounds:
    """The interval of alpha* over every completion of truncated target and draft distributions.

    Attributes
    ----------
    lower, upper : float
        ``lower <= alpha*(p, q) <= upper`` for every completion ``(p, q)`` of the lists.
    lower_attained, upper_attained : bool
        Whether an actual completion has that alpha* (then ``lower_completion`` /
        ``upper_completion`` gives one); a False end is a bound or an infimum, see ``note``.
    lower_completion, upper_completion : dict or None
        ``{"target": {token: mass}, "draft": {token: mass}}``: where the missing masses go in an
        extremal completion (listed tokens by their id, unlisted ones as ``"<unlisted 1>"``,
        ``"<unlisted 2>"``).
    target_missing, draft_missing : float
        ``r_p = 1 - sum(p_probs)`` and ``r_q = 1 - sum(q_probs)``.
    n, sampling, vocab_size
        As given.
    rescaled : tuple of str
        ``"target"`` / ``"draft"`` when that list summed above 1 (within ``TOP_K_SUM_TOL``) and was
        rescaled to sum to 1.
    note : str
        What each end is (exact and attained, infimum, bound).
    """

    lower: float
    upper: float
    lower_attained: bool
    upper_attained: bool
    lower_completion: dict | None
    upper_completion: dict | None
    target_missing: float
    draft_missing: float
    n: int
    sampling: str
    vocab_size: int | None
    rescaled: tuple = field(default=())
    note: str = ""

    @property
    def width(self) -> float:
        """``upper - lower``: what the truncation leaves unknown."""
        return self.upper - self.lower

    def to_dict(self) -> dict:
        """The fields as plain Python values (JSON-ready; completion keys as strings)."""

        def plain(c):
            if c is None:
                return None
            return {side: {str(k): float(v) for k, v in masses.items()} for side, masses in c.items()}

        return {
            "lower": self.lower,
            "upper": self.upper,
            "width": self.width,
            "lower_attained": self.lower_attained,
            "upper_attained": self.upper_attained,
            "lower_completion": plain(self.lower_completion),
            "upper_completion": plain(self.upper_completion),
            "target_missing": self.target_missing,
            "draft_missing": self.draft_missing,
            "n": self.n,
            "sampling": self.sampling,
            "vocab_size": self.vocab_size,
            "rescaled": list(self.rescaled),
            "note": self.note,
        }


# ----------------------------------------------------------------------------------------- input


def _ids(ids, name: str) -> list:
    if isinstance(ids, (str, bytes, dict, set)) or ids is None:
        raise TypeError(f"{name} must be a sequence of token ids (ints or strings), got {type(ids).__name__}")
    if hasattr(ids, "detach") and hasattr(ids, "cpu"):
        ids = ids.detach().cpu().numpy()
    arr = np.asarray(ids, dtype=object) if not isinstance(ids, np.ndarray) else ids
    if arr.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional; got shape {np.shape(arr)}")
    out = []
    for t in arr.tolist():
        if isinstance(t, bool) or not isinstance(t, (numbers.Integral, str)):
            raise TypeError(f"{name} holds {t!r} ({type(t).__name__}); token ids must be ints or strings")
        out.append(int(t) if isinstance(t, numbers.Integral) else t)
    seen = set()
    for t in out:
        if t in seen:
            raise ValueError(f"{name} lists token {t!r} twice; give each token once (sum its probabilities)")
        seen.add(t)
    return out


def _probs(probs, name: str, count: int, ids_name: str) -> tuple[np.ndarray, bool]:
    from ._validate import _as_float_array

    arr = _as_float_array(probs, name)
    if arr.ndim != 1 or arr.size != count:
        raise ValueError(
            f"{name} must hold one probability per id of {ids_name} ({count}); got shape {arr.shape}"
        )
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} holds a non-finite value ({arr[~np.isfinite(arr)][0]}); pass probabilities")
    if arr.size and arr.min() < 0:
        raise ValueError(
            f"{name} holds a negative value ({arr.min():.3g}); pass probabilities, not log-probabilities "
            f"(np.exp(logprobs))"
        )
    total = math.fsum(arr.tolist())
    if total > 1.0 + TOP_K_SUM_TOL:
        raise ValueError(
            f"{name} sums to {total:.9g} > 1 (by more than {TOP_K_SUM_TOL:g}); the listed probabilities of "
            f"one position must sum to at most 1"
        )
    if total > 1.0:
        return arr / total, True
    return arr, False


def _missing(arr: np.ndarray) -> float:
    return max(0.0, 1.0 - math.fsum(arr.tolist()))


# ------------------------------------------------------------------------------- the exact values


def _alpha(tokens, n: int, sampling: str) -> float:
    """alpha* of the pair given as ``[(p_mass, q_mass), ...]`` (tokens with both masses zero dropped)."""
    from .api import optimal_acceptance

    pairs = [(a, b) for a, b in tokens if a > 0 or b > 0]
    p = np.array([a for a, _ in pairs], dtype=np.float64)
    q = np.array([b for _, b in pairs], dtype=np.float64)
    # the masses are exact splits of 1 up to rounding: renormalise the last ulps
    p /= math.fsum(p.tolist())
    q /= math.fsum(q.tolist())
    return float(optimal_acceptance(p, q, n, sampling=sampling).value)


class _Split:
    """The lists split into C = both lists, D = target only, E = draft only."""

    def __init__(self, p_ids, p, q_ids, q):
        qi = {t: i for i, t in enumerate(q_ids)}
        pi = {t: i for i, t in enumerate(p_ids)}
        self.C = [t for t in p_ids if t in qi]
        self.D = [t for t in p_ids if t not in qi]
        self.E = [t for t in q_ids if t not in pi]
        self.p = {t: float(p[i]) for t, i in pi.items()}
        self.q = {t: float(q[i]) for t, i in qi.items()}
        self.pC = [self.p[t] for t in self.C]
        self.qC = [self.q[t] for t in self.C]
        self.pD = math.fsum(self.p[t] for t in self.D)
        self.qE = math.fsum(self.q[t] for t in self.E)
        self.named = len(self.C) + len(self.D) + len(self.E)


def _wr_lower(s: _Split, rp: float, rq: float, n: int, spare: float):
    """Exact minimum over completions, with replacement (docs/math.md#top-k-with-replacement)."""
    known = list(zip(s.pC, s.qC))
    need = int(rp > 0) + int(rq > 0)
    if spare >= need:  # both rests on unlisted tokens: one drafted but never targeted, one the reverse
        value = _alpha([*known, (0.0, s.qE + rq), (s.pD + rp, 0.0)], n, "with_replacement")
        target = {"<unlisted 1>": rp} if rp > 0 else {}
        draft = {f"<unlisted {1 + int(rp > 0)}>": rq} if rq > 0 else {}
        return value, {"target": target, "draft": draft}
    # fewer unlisted tokens than that: the minimum is at a vertex (all of each rest on one token)
    fresh = [f"<unlisted {i + 1}>" for i in range(int(spare))]
    a_choices = (s.E + fresh) if rp > 0 else [None]
    b_choices = (s.D + fresh) if rq > 0 else [None]
    best = None
    for a in a_choices:
        for b in b_choices:
            pm = dict(s.p)
            qm = dict(s.q)
            if a is not None:
                pm[a] = pm.get(a, 0.0) + rp
            if b is not None:
                qm[b] = qm.get(b, 0.0) + rq
            tokens = sorted(set(pm) | set(qm), key=str)
            value = _alpha([(pm.get(t, 0.0), qm.get(t, 0.0)) for t in tokens], n, "with_replacement")
            if best is None or value < best[0]:
                best = (
                    value,
                    {"target": {a: rp} if a is not None else {}, "draft": {b: rq} if b is not None else {}},
                )
    return best


def _wr_upper(s: _Split, rp: float, rq: float, n: int, spare: float):
    """Exact maximum over completions, with replacement (docs/math.md#top-k-with-replacement)."""
    known = list(zip(s.pC, s.qC))
    P, Q = s.pD + rp, s.qE + rq
    if spare >= 1 and s.qE * s.pD < rp * rq:
        # every token outside C at the ratio Q/P: they act as one token (P, Q)
        value = _alpha([*known, (P, Q)], n, "with_replacement")
        target = {t: s.q[t] * P / Q for t in s.E}
        draft = {t: s.p[t] * Q / P for t in s.D}
        pu = rp - math.fsum(target.values())
        qu = rq - math.fsum(draft.values())
        if pu > 0 or qu > 0:
            target["<unlisted 1>"] = max(pu, 0.0)
            draft["<unlisted 1>"] = max(qu, 0.0)
        return value, {"target": target, "draft": draft}
    # the whole target rest on E (in proportion to q), the whole draft rest on D (in proportion to p)
    value = _alpha([*known, (rp, s.qE), (s.pD, rq)], n, "with_replacement")
    fresh = iter(f"<unlisted {i}>" for i in (1, 2))
    if rp > 0:
        target = {t: rp * s.q[t] / s.qE for t in s.E} if s.qE > 0 else {next(fresh): rp}
    else:
        target = {}
    if rq > 0:
        draft = {t: rq * s.p[t] / s.pD for t in s.D} if s.pD > 0 else {next(fresh): rq}
    else:
        draft = {}
    return value, {"target": target, "draft": draft}


def continuum_sequential_mass(q_in, continuum: float, outside: float, n: int) -> float:
    """``W_n`` of a set holding the tokens ``q_in`` and a *continuum* of mass ``continuum`` (infinitely
    many infinitely small tokens, so that drawing from it never depletes it), the rest ``outside``:
    the probability that ``n`` sequential draws without replacement all land in the set.

    ``W = ∫ R e^{-R t} P(N(t) + Pois(c t) >= n) dt`` (docs/math.md#top-k-without-replacement): the
    tokens' clocks as in docs/math.md#exponential-clocks, the continuum's rings a Poisson process of
    rate ``c``. n <= 2 in closed form, else the trapezoid rule in ``s = log t``.

    Parameters
    ----------
    q_in : array_like
        Masses of the set's tokens.
    continuum : float
        Mass of the continuum ``c`` (0: the plain ``W_n``).
    outside : float
        Mass outside the set ``R``.
    n : int
        Number of draws.

    Returns
    -------
    float

    >>> round(continuum_sequential_mass([0.5], 0.2, 0.3, 2), 12)  # 0.5*0.2/0.5 + 0.2*0.7
    0.34
    """
    q_in = np.asarray(q_in, dtype=np.float64)
    q_in = q_in[q_in > 0]
    c, R = float(continuum), float(outside)
    inside = math.fsum(q_in.tolist()) + c
    if R <= 0.0:
        return 1.0 if (c > 0 or q_in.size >= n) else 0.0
    if n == 1:
        return inside
    if n == 2:
        # first a token i, then H without i out of R + (H without i), each a direct sum; or first the
        # continuum, which stays
        vals = q_in.tolist()
        terms = [c * inside / (R + inside)]
        for i, qi in enumerate(vals):
            others = math.fsum(vals[:i] + vals[i + 1 :]) + c
            terms.append(qi * others / (R + others))
        return math.fsum(terms)
    if c == 0.0:
        from .drafts.without_replacement import sequential_mass_inside

        return sequential_mass_inside(q_in, R, n)
    h = 0.25 / math.sqrt(n + 1)
    # left: the integrand is below R (inside t)^n t / n!, so stop where inside^n t^(n+1) = 1e-18;
    # right: the rest of R e^{-R t} beyond t is e^{-R t} < 1e-18
    s_lo = (math.log(1e-18) - n * math.log(inside)) / (n + 1) - 1.0
    s_hi = math.log(42.0 / R) + 1.0
    s = np.arange(s_lo, s_hi + h, h)
    log_q = np.log(q_in)
    count = np.zeros((s.size, n))
    count[:, 0] = 1.0
    for lq in log_q:  # Poisson-binomial law of the token clocks that rang, cut at n
        qt = np.exp(np.minimum(lq + s, 700.0))
        stay = np.exp(-qt)
        ring = -np.expm1(-qt)
        count[:, 1:] = count[:, 1:] * stay[:, None] + count[:, :-1] * ring[:, None]
        count[:, 0] *= stay
    ct = np.exp(np.minimum(math.log(c) + s, 700.0))
    pois = np.empty((s.size, n))
    pois[:, 0] = np.exp(-ct)
    for j in range(1, n):
        pois[:, j] = pois[:, j - 1] * ct / j
    below = np.zeros(s.size)
    for a in range(n):
        below += count[:, a] * pois[:, : n - a].sum(axis=1)
    at_least = np.clip(1.0 - below, 0.0, 1.0)
    rt = np.exp(np.minimum(math.log(R) + s, 700.0))
    return float(h * np.sum(rt * np.exp(-rt) * at_least))


def _prefixes(s: _Split) -> list[list[int]]:
    """The prefixes of C sorted by q/p, largest first (p = 0 first of all), as index lists."""
    order = sorted(
        range(len(s.C)),
        key=lambda i: (-(s.qC[i] / s.pC[i]) if s.pC[i] > 0 else -math.inf, i),
    )
    return [order[:k] for k in range(len(order) + 1)]


def _wor_lower(s: _Split, rp: float, rq: float, n: int) -> float:
    """Infimum over completions, without replacement: the target rest on an undrafted token, the draft
    rest a continuum on untargeted tokens (docs/math.md#top-k-without-replacement)."""
    qE = [s.q[t] for t in s.E]
    best = 1.0
    for head in _prefixes(s):
        inside = set(head)
        q_in = [s.qC[i] for i in head] + qE
        outside = math.fsum(s.qC[i] for i in range(len(s.C)) if i not in inside)
        value = math.fsum(s.pC[i] for i in head) + 1.0 - continuum_sequential_mass(q_in, rq, outside, n)
        best = min(best, value)
    return best


def _wor_upper(s: _Split, rp: float, rq: float, n: int) -> float:
    """A min-max upper bound, without replacement: for each set H of a family, the largest
    ``p(H) + 1 - W_n(H)`` over completions; the least of them (docs/math.md#top-k-without-replacement)."""
    from .drafts.without_replacement import sequential_mass_inside

    qE = [s.q[t] for t in s.E]
    best = 1.0
    for head in _prefixes(s):
        inside = set(head)
        q_head = [s.qC[i] for i in head]
        p_head = math.fsum(s.pC[i] for i in head)
        out_c = math.fsum(s.qC[i] for i in range(len(s.C)) if i not in inside)
        # H = head: the draft rest outside H, the target rest outside H
        w = sequential_mass_inside(np.array(q_head), out_c + s.qE + rq, n) if q_head else 0.0
        best = min(best, p_head + 1.0 - w)
        if qE:  # H = head + E: the target rest can sit in H (on an E token)
            w = sequential_mass_inside(np.array(q_head + qE), out_c + rq, n)
            best = min(best, p_head + rp + 1.0 - w)
    # merging every token outside C into one never lowers alpha* (docs/math.md#top-k-without-replacement)
    merged = [(a, b) for a, b in zip(s.pC, s.qC)] + [(s.pD + rp, s.qE + rq)]
    if sum(1 for _, b in merged if b > 0) >= n:
        best = min(best, _alpha(merged, n, "without_replacement"))
    return best


# ----------------------------------------------------------------------------------------- public


def optimal_acceptance_top_k(
    p_ids, p_probs, q_ids, q_probs, n, *, sampling: str = "with_replacement", vocab_size=None
) -> TopKBounds:
    """Bounds on alpha* from the top-k probabilities of the target and of the draft.

    ``p_probs[i]`` is the target's probability of token ``p_ids[i]``, ``q_probs[j]`` the draft's of
    ``q_ids[j]`` (ints or strings; the two lists need not name the same tokens). The masses the lists
    miss, ``r_p = 1 - sum(p_probs)`` and ``r_q = 1 - sum(q_probs)``, may lie anywhere outside each
    list. The result's ``lower <= alpha*(p, q) <= upper`` for every completion ``(p, q)``; with
    replacement both ends are attained (``lower_completion`` / ``upper_completion`` give a completion
    that reaches each), without replacement ``lower`` is the infimum (attained only when ``r_q = 0``)
    and ``upper`` a bound. docs/math.md#bounds-from-truncated-distributions.

    Parameters
    ----------
    p_ids, q_ids : sequence of int or str
        Token ids of the target's and the draft's lists (each token once).
    p_probs, q_probs : array_like of float
        Their probabilities (sums at most 1; above 1 by up to ``TOP_K_SUM_TOL`` they are rescaled).
    n : int
        Number of drafts (>= 1).
    sampling : str
        ``"with_replacement"`` or ``"without_replacement"`` (:data:`TOP_K_SAMPLINGS`).
    vocab_size : int or None
        Vocabulary size, at least the number of distinct listed tokens; None: any size.

    Returns
    -------
    TopKBounds

    Raises
    ------
    ValueError, TypeError
        Bad lists, a scheme without a proof, or a missing mass with no token to go to.

    >>> b = optimal_acceptance_top_k([0, 1], [0.5, 0.3], [0, 2], [0.6, 0.2], 2)
    >>> round(b.lower, 6), round(b.upper, 6), b.lower_attained, b.upper_attained
    (0.5, 1.0, True, True)
    """
    from ._validate import check_n

    if not isinstance(sampling, str):
        raise TypeError(f"sampling must be a string, got {type(sampling).__name__}")
    if sampling not in TOP_K_SAMPLINGS:
        why = _SAMPLING_WHY.get(sampling, "it is not a draft scheme of this library")
        raise ValueError(
            f"optimal_acceptance_top_k bounds sampling='with_replacement' or 'without_replacement'; got "
            f"{sampling!r}: {why}"
        )
    n = check_n(n)
    pid = _ids(p_ids, "p_ids")
    qid = _ids(q_ids, "q_ids")
    p, p_rescaled = _probs(p_probs, "p_probs", len(pid), "p_ids")
    q, q_rescaled = _probs(q_probs, "q_probs", len(qid), "q_ids")
    rp, rq = _missing(p), _missing(q)
    s = _Split(pid, p, qid, q)
    if vocab_size is None:
        spare = math.inf
    else:
        if isinstance(vocab_size, bool) or not isinstance(vocab_size, numbers.Integral):
            raise TypeError(f"vocab_size must be an int or None, got {type(vocab_size).__name__}")
        if vocab_size < s.named:
            raise ValueError(
                f"vocab_size {vocab_size} is smaller than the {s.named} distinct tokens the two lists name"
            )
        spare = int(vocab_size) - s.named
    if rp > 0 and not s.E and spare == 0:
        raise ValueError(
            f"the target's missing mass {rp:.3g} has no token to go to: the vocabulary of {vocab_size} "
            f"tokens is exactly the listed ones and the target lists them all; give a larger vocab_size "
            f"or a target list that sums to 1"
        )
    if rq > 0 and not s.D and spare == 0:
        raise ValueError(
            f"the draft's missing mass {rq:.3g} has no token to go to: the vocabulary of {vocab_size} "
            f"tokens is exactly the listed ones and the draft lists them all; give a larger vocab_size "
            f"or a draft list that sums to 1"
        )
    if sampling == "without_replacement" and n > 1:
        reach = int(np.count_nonzero(q)) + ((len(s.D) + spare) if rq > 0 else 0)
        if reach < n:
            raise ValueError(
                f"without replacement n = {n} drafts need {n} tokens with q > 0, but no completion of the "
                f"draft's list has more than {reach}; lower n or use sampling='with_replacement'"
            )
    rescaled = tuple(name for name, flag in (("target", p_rescaled), ("draft", q_rescaled)) if flag)
    common = dict(
        target_missing=rp, draft_missing=rq, n=n, sampling=sampling, vocab_size=vocab_size, rescaled=rescaled
    )
    if sampling == "with_replacement" or n == 1:  # n = 1: both schemes draw one token from q
        lo, lo_c = _wr_lower(s, rp, rq, n, spare)
        up, up_c = _wr_upper(s, rp, rq, n, spare)
        return TopKBounds(
            lower=lo,
            upper=max(up, lo),
            lower_attained=True,
            upper_attained=True,
            lower_completion=lo_c,
            upper_completion=up_c,
            note="both ends exact, attained by the completions given (docs/math.md#top-k-with-replacement)",
            **common,
        )
    lo = _wor_lower(s, rp, rq, n)
    up = _wor_upper(s, rp, rq, n)
    exact_lo = rq == 0.0 and (rp == 0.0 or spare >= 1)
    lo_c = {"target": {"<unlisted 1>": rp} if rp > 0 else {}, "draft": {}} if exact_lo else None
    if rp == 0.0 and rq == 0.0:
        return TopKBounds(
            lower=lo,
            upper=lo,
            lower_attained=True,
            upper_attained=True,
            lower_completion=lo_c,
            upper_completion=lo_c,
            note="nothing is missing: alpha* itself",
            **common,
        )
    return TopKBounds(
        lower=lo,
        upper=max(up, lo),
        lower_attained=exact_lo,
        upper_attained=False,
        lower_completion=lo_c,
        upper_completion=None,
        note=(
            "lower: "
            + (
                "attained"
                if exact_lo
                else "the infimum, approached as the draft's missing mass is spread over "
                "ever more unlisted tokens"
            )
            + "; upper: a valid bound, not claimed attained (docs/math.md#top-k-without-replacement)"
        ),
        **common,
    )


# ------------------------------------------------------------------ OpenAI-compatible logprob files


def _entries(obj, where: str):
    """The per-position entries of a response: ``("chat", [...])`` or ``("legacy", (tokens, tops))``."""
    if isinstance(obj, dict) and "choices" in obj:
        choices = obj["choices"]
        if not isinstance(choices, list) or len(choices) != 1:
            count = len(choices) if isinstance(choices, list) else type(choices).__name__
            raise ValueError(f"{where}: 'choices' holds {count} choices; give a response with exactly one")
        obj = choices[0].get("logprobs") if isinstance(choices[0], dict) else None
        if obj is None:
            raise ValueError(
                f"{where}: the choice has no 'logprobs'; request them (chat: logprobs=true, top_logprobs=K; "
                f"completions: logprobs=K)"
            )
    if isinstance(obj, dict) and "content" in obj:
        obj = obj["content"]
    if isinstance(obj, dict) and "top_logprobs" in obj:
        return "legacy", (obj.get("tokens"), obj["top_logprobs"])
    if isinstance(obj, list):
        return "chat", obj
    raise ValueError(
        f"{where}: not an OpenAI-style logprobs response (expected "
        f"choices[0].logprobs.content[i].top_logprobs, or the completions API's "
        f"choices[0].logprobs.top_logprobs)"
    )


def _position(tops, where: str) -> dict:
    out = {}
    items = tops.items() if isinstance(tops, dict) else enumerate(tops)
    for j, item in items:
        if isinstance(tops, dict):
            token, logprob = j, item
        else:
            if not isinstance(item, dict) or "token" not in item or "logprob" not in item:
                raise ValueError(
                    f"{where}: top_logprobs entry {j} is not an object with 'token' and 'logprob'"
                )
            token, logprob = item["token"], item["logprob"]
        if not isinstance(token, str):
            raise ValueError(f"{where}: token {token!r} is not a string")
        if (
            isinstance(logprob, bool)
            or not isinstance(logprob, (int, float))
            or math.isnan(logprob)
            or logprob > 1e-6
        ):
            raise ValueError(
                f"{where}: token {token!r} has logprob {logprob!r}; a log-probability is a number <= 0"
            )
        if token in out:
            raise ValueError(
                f"{where}: token {token!r} is listed twice (two token ids with the same text?); "
                f"these bounds match tokens by their text"
            )
        out[token] = math.exp(min(float(logprob), 0.0))
    return out


def read_top_logprobs(source, *, name: str | None = None) -> list:
    """The top log-probabilities per position of an OpenAI-compatible response, as probabilities.

    Accepts the chat format (``choices[0].logprobs.content[i]`` with ``token``, ``logprob`` and
    ``top_logprobs: [{"token", "logprob"}, ...]``), the completions format
    (``choices[0].logprobs`` with ``tokens`` and ``top_logprobs: [{token: logprob}, ...]``), or the
    ``logprobs`` object or its ``content`` list alone.

    Parameters
    ----------
    source : str, os.PathLike, dict or list
        A JSON file, or its parsed content.
    name : str or None
        Name used in error messages (default: the file name).

    Returns
    -------
    list of (str or None, dict or None)
        Per position: the sampled token (None if the file does not say) and ``{token text:
        probability}`` of the listed tokens (None where the position has no list, as the completions
        format's first prompt token).

    Raises
    ------
    ValueError
        A file that is not JSON or not in one of these formats (the message names the position).

    >>> chat = {"choices": [{"logprobs": {"content": [
    ...     {"token": "a", "logprob": -0.1, "top_logprobs": [{"token": "a", "logprob": -0.1},
    ...                                                       {"token": "b", "logprob": -2.5}]}]}}]}
    >>> [(t, {k: round(v, 4) for k, v in d.items()}) for t, d in read_top_logprobs(chat)]
    [('a', {'a': 0.9048, 'b': 0.0821})]
    """
    import json
    import os

    if isinstance(source, (str, os.PathLike)):
        where = name or os.fspath(source)
        try:
            with open(source, encoding="utf-8") as fh:
                obj = json.load(fh)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{where}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
    else:
        where, obj = name or "logprobs", source
    kind, entries = _entries(obj, where)
    out = []
    if kind == "legacy":
        tokens, tops = entries
        if not isinstance(tops, list) or (
            tokens is not None and (not isinstance(tokens, list) or len(tokens) != len(tops))
        ):
            raise ValueError(f"{where}: 'tokens' and 'top_logprobs' must be lists of the same length")
        for i, top in enumerate(tops):
            if top is not None and not isinstance(top, dict):
                raise ValueError(f"{where}: position {i}: top_logprobs must be an object {{token: logprob}}")
            token = tokens[i] if tokens is not None else None
            out.append((token, None if top is None else _position(top, f"{where}: position {i}")))
        return out
    for i, entry in enumerate(entries):
        if entry is None:
            out.append((None, None))
            continue
        if not isinstance(entry, dict) or "top_logprobs" not in entry:
            raise ValueError(f"{where}: position {i} has no 'top_logprobs' (request top_logprobs=K)")
        top = entry["top_logprobs"]
        if top is None:
            out.append((entry.get("token"), None))
            continue
        if not isinstance(top, list):
            raise ValueError(f"{where}: position {i}: top_logprobs must be a list of {{token, logprob}}")
        out.append((entry.get("token"), _position(top, f"{where}: position {i}")))
    return out

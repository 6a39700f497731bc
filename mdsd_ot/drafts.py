"""Draft-sampling schemes: how the n drafts are drawn from the draft distribution q.

Each scheme can draw drafts with a :class:`numpy.random.Generator`, enumerate its exact law over
ordered draft tuples (small vocabularies; the test oracle), and evaluate

.. math:: Q(H) = \\Pr[\\text{every draft lies in } H]

for an arbitrary token subset ``H`` (docs/math.md#draft-schemes). The dual solver (:mod:`mdsd_ot.dual`) only
needs ``Q`` along sorted prefixes; :meth:`DraftScheme.mass` is the independent, subset-at-a-time
evaluation used to re-check its certificates.

Masses "outside a set" (``1 - q(S)``) are always computed as direct sums over the complement, never by
subtraction from one: near one-hot drafts (``q_max = 1 - 1e-12``) would otherwise lose every digit.

Schemes
-------
``with_replacement``      i.i.d. drafts, ``Q(H) = q(H)^n``.
``without_replacement``   sequential draws without replacement (draw, remove, renormalise; the law
                          of Gumbel-top-n in draw order), ``Q(H) = W_n(H)``.
``greedy``                the n-1 most likely tokens (ties by index) plus one draw from q restricted
                          to the others (Hu et al., 2025).
``hub``                   SpecHub's n = 2 drafts: ``x1 ~ q``; ``x2 = argmax q`` if ``x1`` differs
                          from it, else ``x2 ~ q`` on the rest.
``conditional_poisson``   an n-subset drawn with probability proportional to ``prod q``;
                          ``Q(H) = e_n(q_H) / e_n(q)``.
``top_n``                 deterministic: the n most likely tokens (ties by index), as EAGLE / SGLang
                          draft trees do; ``Q(H) = 1[Top_n in H]``, ``alpha* = p(Top_n)``.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ._config import ENUMERATION_MAX_TUPLES, PARALLEL_MIN_ENTRIES, PLAIN_ESP_MIN
from ._validate import check_choice

__all__ = ["DraftScheme", "SCHEMES", "get_scheme", "complement_masses", "top_tokens"]


# ----------------------------------------------------------------------------------------- helpers
def complement_masses(q: np.ndarray) -> np.ndarray:
    """``1 - q_i`` for every token, computed without cancellation.

    Only a token holding more than half of the mass can suffer cancellation in ``sum(q) - q_i``;
    for it the complement is summed directly.
    """
    total = q.sum()
    rest = total - q
    big = np.flatnonzero(q > 0.5 * total)
    for i in big:  # at most one token
        rest[i] = np.delete(q, i).sum()
    return rest


def top_tokens(q: np.ndarray, k: int) -> np.ndarray:
    """The ``k`` most likely tokens of ``q`` in decreasing order, ties broken by token index.

    Exactly ``np.argsort(-q, kind="stable")[:k]`` (the reference, and the path for ``k >= V`` and for
    input with NaN), in O(V + k log k): ``np.argpartition`` finds the k-th largest value ``v``; every
    token above ``v`` is taken and the remaining places go to the lowest-index tokens equal to ``v``;
    the ``k`` candidates are then sorted by value, ties by index.

    >>> top_tokens(np.array([0.1, 0.3, 0.2, 0.3, 0.1]), 3).tolist()
    [1, 3, 2]
    """
    q = np.asarray(q)
    V = q.size
    k = int(k)
    if k <= 0:
        return np.empty(0, dtype=np.int64)
    if k >= V or np.isnan(q).any():
        return np.argsort(-q, kind="stable")[:k].astype(np.int64)
    if k == 1:
        return np.array([int(np.argmax(q))], dtype=np.int64)  # argmax returns the first maximum
    v = q[np.argpartition(q, V - k)[V - k]]  # the k-th largest value
    above = np.flatnonzero(q > v)
    ties = np.flatnonzero(q == v)[: k - above.size]
    sel = np.concatenate([above, ties])
    return sel[np.lexsort((sel, -q[sel]))].astype(np.int64)


def _as_mask(subset, V: int) -> np.ndarray:
    mask = np.zeros(V, dtype=bool)
    subset = np.asarray(subset)
    if subset.dtype == bool:
        if subset.shape != (V,):
            raise ValueError(f"a boolean subset mask must have shape ({V},), got {subset.shape}")
        return subset.copy()
    mask[subset.astype(np.int64)] = True
    return mask


def _support_size(q: np.ndarray) -> int:
    return int(np.count_nonzero(q > 0))


def _check_enumerable(count: int) -> None:
    if count > ENUMERATION_MAX_TUPLES:
        raise ValueError(
            f"exact enumeration would visit {count:,} draft tuples (limit "
            f"{ENUMERATION_MAX_TUPLES:,}); use a smaller vocabulary or the dual solver"
        )


def _check_enumerable_log(log_count: float, exact_count, n: int) -> None:
    """:func:`_check_enumerable` from ``log(count)`` first, so that a huge count (``n`` up to 2**63)
    is rejected before it is built; ``exact_count()`` is only evaluated when the count is small.
    A single tuple of more than ``ENUMERATION_MAX_TUPLES`` drafts (one token with q > 0) is too large too.
    """
    if n > ENUMERATION_MAX_TUPLES:
        raise ValueError(
            f"exact enumeration of draft tuples of n = {n:,} drafts (more than {ENUMERATION_MAX_TUPLES:,}); "
            f"use the dual solver"
        )
    if log_count > math.log(ENUMERATION_MAX_TUPLES) + 1.0:
        raise ValueError(
            f"exact enumeration would visit about 10^{log_count / math.log(10):.0f} draft tuples (limit "
            f"{ENUMERATION_MAX_TUPLES:,}); use a smaller vocabulary or the dual solver"
        )
    _check_enumerable(exact_count())


def _sequential_tuple_probs(q: np.ndarray, tuples: np.ndarray) -> np.ndarray:
    """Probability of each ordered tuple of distinct tokens under sequential sampling.

    The mass left before each draw is summed directly over the tokens not yet drawn.
    """
    T, n = tuples.shape
    probs = np.ones(T)
    remaining = np.ones((T, q.size), dtype=bool)
    rows = np.arange(T)
    for i in range(n):
        left = (remaining * q).sum(axis=1)
        probs *= q[tuples[:, i]] / left
        remaining[rows, tuples[:, i]] = False
    return probs


def _merged_sequential_mass(q_in: np.ndarray, outside: float, n: int) -> float:
    """``W_n(H)`` by enumerating ordered draws inside ``H``, the complement merged into one token.

    Only the first draw outside ``H`` matters, so the complement can be merged into a single token
    of mass ``outside`` without changing the event "the first n draws all lie in H".
    """
    q_pos = q_in[q_in > 0]  # zero masses are never drawn
    if q_pos.size < n:
        return 0.0
    q_ext = np.append(q_pos, outside)
    tuples = np.array(list(itertools.permutations(range(q_pos.size), n)), dtype=np.int64)
    return float(_sequential_tuple_probs(q_ext, tuples).sum())


def _elementary_symmetric_tree(x: np.ndarray, n: int) -> tuple[float, int]:
    """``e_n(x) = m * 2**k`` as ``(m, k)`` (``m = 0``: fewer than n positive entries), by a pairwise
    product of the polynomials ``1 + x_i t`` truncated at degree n, in numpy.

    The conditional-Poisson re-check (docs/math.md#conditional-poisson): an algorithm independent of
    the solver's sequential DP (``_kernels.esp_prefix_scaled``). Each coefficient is a mantissa in
    [1/2, 1) and an integer exponent (so no range is lost); the terms of a product coefficient are
    positive and added after alignment to the largest, so the relative error is at most about
    ``(n + 2) log2(V)`` ulps."""
    x = np.asarray(x, dtype=np.float64)
    x = x[x > 0]
    if x.size < n:
        return 0.0, 0
    size = x.size + (x.size % 2)  # an even number of leaves; odd levels get one identity row below
    # Plain float64 first: with x <= 1 no coefficient overflows, and a term lost to underflow moves the
    # result by at most 2^-1074 per operation, negligible when e_n >= 2^-900 (else: exponents below)
    c = np.zeros((size, n + 1))
    c[:, 0] = 1.0
    c[: x.size, 1] = x
    if x.max() <= 1.0:
        while c.shape[0] > 1:
            if c.shape[0] % 2:
                c = np.vstack([c, np.eye(1, n + 1)])
            a, b = c[0::2], c[1::2]
            out = a * b[:, :1]
            for i in range(1, n + 1):
                out[:, i:] += a[:, : n + 1 - i] * b[:, i : i + 1]
            c = out
        if c[0, n] >= PLAIN_ESP_MIN:
            m0, k0 = np.frexp(c[0, n])
            return float(m0), int(k0)
    m = np.zeros((size, n + 1))
    k = np.full((size, n + 1), _NO_EXPONENT, dtype=np.int64)
    m[:, 0], k[:, 0] = 0.5, 1  # the constant 1
    m[: x.size, 1], k[: x.size, 1] = np.frexp(x)
    while m.shape[0] > 1:
        if m.shape[0] % 2:
            m = np.vstack([m, 0.5 * np.eye(1, n + 1)])
            k = np.vstack([k, np.where(np.eye(1, n + 1, dtype=bool), 1, _NO_EXPONENT)])
        ma, mb, ka, kb = m[0::2], m[1::2], k[0::2], k[1::2]
        mo = np.zeros_like(ma)
        ko = np.full_like(ka, _NO_EXPONENT)
        for d in range(n + 1):
            tm = ma[:, : d + 1] * mb[:, d::-1]  # terms a_i b_(d - i), i = 0..d
            tk = ka[:, : d + 1] + kb[:, d::-1]
            tk = np.where(tm > 0, tk, _NO_EXPONENT)
            top = tk.max(axis=1)
            total = np.ldexp(tm, tk - top[:, None]).sum(axis=1)
            mo[:, d], shift = np.frexp(total)
            ko[:, d] = np.where(total > 0, top + shift, _NO_EXPONENT)
        m, k = mo, ko
    return float(m[0, n]), int(k[0, n])


_NO_EXPONENT = -(1 << 40)  # the exponent of a zero coefficient: below every other after alignment


# ----------------------------------------------------------------------------------------- schemes
@dataclass(frozen=True)
class DraftScheme:
    """A draft-sampling scheme (see the module docstring for the list).

    Attributes
    ----------
    name : str
        Registry name.
    description : str
        One-line description.
    prefix_optimal : bool
        True when an optimal dual subset is a prefix of the tokens sorted by ``q/p``
        (docs/math.md#dual-and-sorting-theorem).
    """

    name: str
    description: str
    prefix_optimal: bool
    _sample: Callable
    _tuples: Callable
    _mass: Callable
    _min_support: Callable  # n -> number of tokens with q > 0 the scheme needs
    fixed_n: int | None = None  # the scheme is only defined for this number of drafts
    #: Q(H) is a numerical quadrature (not a closed form) from this n on; None: never.
    quadrature_from: int | None = None
    #: Optional ``(Q (B, V), n, masks (B, V)) -> (B,)``: Q(H) of many rows at once (else a loop).
    _mass_rows: Callable | None = None
    #: ``(k, n) -> log`` of the number of ordered draft tuples when k tokens have q > 0.
    _log_count: Callable | None = None
    #: Code of the sorted-prefix kernel family (:mod:`mdsd_ot._kernels.scans`), or None.
    kernel_code: int | None = None
    #: Largest n for which ``Q(H)`` depends on ``H`` only through sums over ``H`` (``q(H)``; for
    #: sequential n = 2 also ``sum q_i / (1 - q_i)``), so that the binned scan needs no full sort
    #: (docs/math.md#dual-and-sorting-theorem); n = 1 always qualifies (``Q(H) = q(H)``).
    sums_up_to: int = 1
    #: Optional closed-form dual ``(p, q, n) -> (alpha*, subset)`` (schemes that are not prefix-optimal).
    _dual: Callable | None = None
    #: Optional ``(q, n, samples, rng) -> (samples, n)``: many draft tuples at once (else a loop).
    _sample_rows: Callable | None = None
    #: Optional ``(drafts, q, n, cache) -> None``: raise ``ValueError`` if drafts break the scheme's
    #: form (``cache``: a dict the caller keeps per (q, n), for precomputed tokens).
    _structure: Callable | None = None
    #: Optional ``(p, q, n, samples, rng) -> (samples,)``: ``p(S)`` of sampled draft sets, faster than
    #: drawing the tuples (else computed from :meth:`sample_batch`).
    _set_mass_rows: Callable | None = None
    #: Optional ``(q, n) -> pi``: ``P(token y is drafted)`` in closed form (None where there is none).
    _inclusion: Callable | None = None
    #: Another scheme with the same law of draft *sets* (for the n this one is defined for), hence the
    #: same bound: hub drafts (n = 2) are greedy drafts in another order (docs/math.md#greedy-and-hub).
    same_sets_as: str | None = None
    #: The registry verifier built for this scheme (``mdsd_ot.audit``'s default reference).
    reference_verifier: str | None = None
    #: How ``VERIFIERS["optimal"]`` attains alpha* at any vocabulary size: ``"chain"`` (the i.i.d.
    #: construction, docs/math.md#optimal-verifier-full-v), the name of a registry verifier that
    #: already attains it, or None (the LP plan, small vocabularies).
    optimal_at_full_v: str | None = None
    #: ``Q(H) <= q(H)`` for every ``H``, so that ``p == q`` gives ``alpha* = 1`` (a verifier may output
    #: the draft law unchanged). False for deterministic drafts (``top_n``: ``alpha* = p(Top_n)``).
    q_dominates: bool = True
    #: The draft set is the ``n - 1`` most likely tokens of q and one draw from the rest (greedy, and hub
    #: through its sets): the evaluation plan computes the bound from its fused top-of-q sums
    #: (docs/math.md#greedy-and-hub).
    top_family: bool = False
    #: The first ``k`` of ``n`` draws are distributed exactly as ``k`` draws of this scheme (every
    #: ``k <= n``), so the first-children sub-tree of a drafted tree is a drafted tree of the smaller
    #: shape (docs/math.md#union-trees): with and without replacement, ``top_n`` in rank order.
    nested_draws: bool = False

    # -- validation ------------------------------------------------------------------------------
    def check(self, q: np.ndarray, n: int) -> None:
        """Raise ``ValueError`` if ``n`` drafts cannot be drawn from ``q`` under this scheme."""
        if self.fixed_n is not None and n != self.fixed_n:
            raise ValueError(f"the {self.name!r} scheme is defined for n = {self.fixed_n} only, got n={n}")
        need = self._min_support(n)
        have = _support_size(q)
        if have < need:
            raise ValueError(
                f"the {self.name!r} scheme with n={n} needs at least {need} tokens with q > 0, "
                f"but q has {have}; lower n or use sampling='with_replacement'"
            )

    # -- the law --------------------------------------------------------------------------------
    def sample(self, q: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
        """Draw one ordered draft tuple, shape ``(n,)``, int64."""
        if not isinstance(rng, np.random.Generator):
            raise TypeError(f"rng must be a numpy.random.Generator, got {type(rng).__name__}")
        self.check(q, n)
        return np.asarray(self._sample(q, n, rng), dtype=np.int64)

    def tuple_law(self, q: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
        """All ordered draft tuples with positive probability: ``(tuples (T, n) int64, probs (T,))``."""
        self.check(q, n)
        tuples, probs = self._tuples(q, n)
        keep = probs > 0
        return tuples[keep], probs[keep]

    def set_law(self, q: np.ndarray, n: int) -> tuple[list[tuple[int, ...]], np.ndarray]:
        """The law of the set of distinct drafted tokens: ``(sets, probs)``, sets as sorted tuples."""
        tuples, probs = self.tuple_law(q, n)
        law: dict[tuple[int, ...], float] = {}
        for t, pr in zip(tuples.tolist(), probs.tolist()):
            key = tuple(sorted(set(t)))
            law[key] = law.get(key, 0.0) + pr
        sets = sorted(law, key=lambda s: (len(s), s))
        return sets, np.array([law[s] for s in sets])

    def mass(self, q: np.ndarray, n: int, subset, *, refine: int = 0) -> float:
        """``Q(H)``: probability that all ``n`` drafts fall in ``subset`` (indices or a bool mask).

        ``refine`` (schemes with ``quadrature_from``): halve the quadrature step that many times
        (the nodes lie half-way between those of the dual solver at the same ``refine``).
        """
        self.check(q, n)
        mask = _as_mask(subset, q.size)
        if self.is_quadrature(n):
            return float(self._mass(q, n, mask, refine))
        return float(self._mass(q, n, mask))

    def masses(self, Q: np.ndarray, n: int, masks: np.ndarray) -> np.ndarray:
        """``Q(H_b)`` for every row ``b`` of ``(B, V)`` arrays (validated rows; the batch re-check)."""
        if self._mass_rows is not None:
            return self._mass_rows(Q, n, masks)
        return np.array([self.mass(q, n, h) for q, h in zip(Q, masks)])

    def closed_form_dual(self, p: np.ndarray, q: np.ndarray, n: int):
        """``(alpha*, subset)`` in closed form, or None when the dual needs the sorted-prefix scan."""
        return None if self._dual is None else self._dual(p, q, n)

    def sample_batch(self, q: np.ndarray, n: int, samples: int, rng: np.random.Generator) -> np.ndarray:
        """``samples`` draft tuples at once, shape ``(samples, n)`` (validated q)."""
        if self._sample_rows is not None:
            return np.asarray(self._sample_rows(q, n, samples, rng), dtype=np.int64)
        return np.array([self._sample(q, n, rng) for _ in range(samples)], dtype=np.int64).reshape(samples, n)

    def check_structure(self, drafts: np.ndarray, q: np.ndarray, n: int, cache: dict | None = None) -> None:
        """Raise ``ValueError`` when in-range drafts cannot come from this scheme (e.g. repeated tokens
        for a scheme that drafts distinct ones); ``cache`` keeps what it precomputes for this (q, n)."""
        if self._structure is not None:
            self._structure(drafts, q, n, {} if cache is None else cache)

    def drafted_mass_samples(self, p: np.ndarray, q: np.ndarray, n: int, samples: int, rng) -> np.ndarray:
        """``p(S)`` for ``samples`` sampled draft sets ``S`` (each drafted token counted once)."""
        if self._set_mass_rows is not None:
            return self._set_mass_rows(p, q, n, samples, rng)
        drafts = np.sort(self.sample_batch(q, n, samples, rng), axis=1)
        first = np.ones(drafts.shape, dtype=bool)
        first[:, 1:] = drafts[:, 1:] != drafts[:, :-1]
        return np.where(first, p[drafts], 0.0).sum(axis=1)

    def log_tuple_count(self, k: int, n: int) -> float:
        """log of the number of ordered draft tuples when ``k`` tokens have q > 0."""
        return self._log_count(k, n)

    def inclusion_probabilities(self, q: np.ndarray, n: int) -> np.ndarray | None:
        """``P(token y is among the n drafts)`` for every token in closed form, or None."""
        return None if self._inclusion is None else self._inclusion(q, n)

    def sums_suffice(self, n: int) -> bool:
        """True when the sorted-prefix bound for ``n`` drafts needs only sums over H (see ``sums_up_to``)."""
        return self.kernel_code is not None and n <= self.sums_up_to

    def is_quadrature(self, n: int) -> bool:
        """True when ``Q(H)`` for ``n`` drafts is evaluated by quadrature (its grid can be refined)."""
        return self.quadrature_from is not None and n >= self.quadrature_from


# with replacement ------------------------------------------------------------------------------
def _inverse_cdf(q: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Inverse-CDF draws; a zero-mass token is never returned (``side='right'``, ``u < 1``)."""
    cdf = np.cumsum(q)
    idx = np.searchsorted(cdf, u * cdf[-1], side="right")
    return np.minimum(idx, np.flatnonzero(q > 0)[-1])


def _with_sample(q, n, rng):
    return _inverse_cdf(q, rng.random(n))


def _with_sample_rows(q, n, samples, rng):
    return _inverse_cdf(q, rng.random((samples, n)))


def _with_inclusion(q, n):
    """``1 - (1 - q(y))^n``, with ``log(1 - q)`` from whichever of q, 1 - q is accurate (any n)."""
    miss = complement_masses(q)  # 1 - q(y), no cancellation
    with np.errstate(divide="ignore"):
        log_miss = np.where(q < 0.5, np.log1p(-np.minimum(q, 0.5)), np.log(miss))
    return -np.expm1(n * log_miss)


def _with_log_count(k, n):
    return n * math.log(k) if k > 1 else 0.0


def _with_tuples(q, n):
    support = np.flatnonzero(q > 0)
    k = support.size
    _check_enumerable_log(_with_log_count(k, n), lambda: k**n, n)
    tuples = np.array(list(itertools.product(support, repeat=n)), dtype=np.int64).reshape(-1, n)
    return tuples, np.prod(q[tuples], axis=1)


def _with_mass_rows(Q, n, masks):
    from . import _kernels

    if Q.size < PARALLEL_MIN_ENTRIES:  # no parallel kernel to compile for a small batch
        inside, outside = (Q * masks).sum(axis=1), (Q * ~masks).sum(axis=1)
    else:
        inside, outside = _kernels.masked_row_sums(Q, masks)  # row-parallel plain masked sums
    with np.errstate(divide="ignore"):  # outside = 1 is not read below (the power is used there)
        via_rest = np.minimum(np.exp(n * np.log1p(-np.minimum(outside, 0.5))), inside)
    return np.where((n > 1) & (outside < 0.5), via_rest, inside**n)


def _with_mass(q, n, mask):
    return with_mass_from_sums((q * mask).sum(), (q * ~mask).sum(), n)


def with_mass_from_sums(inside, outside, n):
    """``q(H)^n`` from ``inside = q(H)`` and ``outside``, the mass outside H summed directly."""
    if n > 1 and outside < 0.5:  # x^n multiplies x's relative error by n: use log1p of the outside
        return min(math.exp(n * math.log1p(-outside)), inside)
    return inside**n


# without replacement (sequential) --------------------------------------------------------------
def _without_sample(q, n, rng):
    with np.errstate(divide="ignore"):
        keys = np.log(q) + rng.gumbel(size=q.size)
    keys[q == 0] = -np.inf
    return top_tokens(keys, n)  # the n largest keys in decreasing order: the draw order


def _without_set_mass_rows(p, q, n, samples, rng):
    from ._kernels import verifiers as kernels  # a numba sampler: no (samples, V) Gumbel keys

    return kernels.sequential_draft_mass(p, q, n, samples, int(rng.integers(0, 2**32 - 1)))


def _distinct_structure(drafts, q, n, cache):
    if np.unique(drafts).size != drafts.size:
        raise ValueError(f"this scheme drafts distinct tokens; got {drafts.tolist()}")


def _without_inclusion(q, n):
    """``P(y drafted)``: q for n = 1; ``q(y) (1 + sum_{x != y} q(x) / (1 - q(x)))`` for n = 2 (no
    ratio can overflow); None beyond (no closed form: enumerate or sample)."""
    if n == 1:
        return q.copy()
    if n != 2:
        return None
    rest = complement_masses(q)
    big = int(np.argmax(q))
    others = np.arange(q.size) != big
    odds = np.zeros_like(q)
    odds[others] = q[others] / rest[others]  # each at most 1 (q(x) <= 1/2 of the mass)
    small = odds.sum()  # every term but the largest token's, which may overflow
    # sum over x != y; its rounding error times q(y) is at most eps * q(y) * small <= eps
    pi = q * (1.0 + np.maximum(small - odds, 0.0))
    # the largest token's term, q(y) q(big) / (1 - q(big)), cannot overflow: q(y) <= 1 - q(big)
    pi[others] += q[big] * (q[others] / rest[big])
    return pi


def _without_log_count(k, n):
    return math.lgamma(k + 1) - math.lgamma(k - n + 1)


def _without_tuples(q, n):
    support = np.flatnonzero(q > 0)
    k = support.size  # >= n (checked by the scheme); k! / (k - n)! ordered tuples
    _check_enumerable_log(_without_log_count(k, n), lambda: math.perm(k, n), n)
    tuples = np.array(list(itertools.permutations(support, n)), dtype=np.int64).reshape(-1, n)
    return tuples, _sequential_tuple_probs(q, tuples)


#: Largest number of ordered draws inside H that :func:`_without_mass` enumerates exactly.
_ENUMERATE_DRAWS = 200_000


def _without_mass(q, n, mask, refine=0):
    """``W_n(H)``: n = 1, 2 in closed form; n >= 3 by enumerating the ordered draws inside H when
    there are at most ``_ENUMERATE_DRAWS`` of them, else by the independent exponential-clock
    evaluation :func:`mdsd_ot._kernels.sequential_mass_check` (not the solver's fast path) on a grid
    whose nodes lie half-way between those of the solver's grid at the same ``refine``
    (docs/math.md#independent-check)."""
    if n == 1:
        return q[mask].sum()
    if n == 2:
        return _without_pair_mass(q, mask)
    return sequential_mass_inside(q[mask], float(q[~mask].sum()), n, refine)


def _without_pair_mass(q, mask):
    """``W_2(H) = q(H) - R sum_{i in H} q_i / (1 - q_i)`` with ``R = q(not H)`` and each ``1 - q_i``
    from :func:`complement_masses`; in whole-vocabulary passes (no gather: H may hold most of V)."""
    inside = q * mask  # q on H, 0 elsewhere
    outside = (q - inside).sum()  # each difference exact (q_i or 0)
    if outside == 0.0:
        return 1.0 if _support_size(inside) >= 2 else 0.0
    # inside H, 1 - q_i >= R: each ratio is at most 1 (no overflow), and the max keeps it so when
    # rounding leaves 1 - q_i a hair below R; outside H the ratio is multiplied by q * mask = 0
    ratio = outside / np.maximum(complement_masses(q), outside)
    return inside.sum() - np.sum(inside * ratio)


def sequential_mass_inside(q_in, outside: float, n: int, refine: int = 0) -> float:
    """``W_n(H)`` for n >= 3 from the masses ``q_in`` of H's tokens and ``outside`` = q(not H), by
    enumeration or the independent evaluation (see :func:`_without_mass`, which calls it)."""
    if outside == 0.0:
        return 1.0 if _support_size(q_in) >= n else 0.0
    k = _support_size(q_in)
    if k < n:
        return 0.0
    if math.lgamma(k + 1) - math.lgamma(k - n + 1) <= math.log(_ENUMERATE_DRAWS):
        return _merged_sequential_mass(q_in, outside, n)
    from . import _kernels

    return float(_kernels.sequential_mass_check(np.ascontiguousarray(q_in), outside, n, refine))


# greedy (Hu et al.) ------------------------------------------------------------------------------
def _greedy_parts(q, n):
    top = top_tokens(q, n - 1)
    rest_mask = np.ones(q.size, dtype=bool)
    rest_mask[top] = False
    rest_mass = q[rest_mask].sum()  # direct sum, never 1 - q(Top)
    return top, rest_mask, rest_mass


def _greedy_sample(q, n, rng):
    top, rest_mask, _ = _greedy_parts(q, n)
    q_rest = np.where(rest_mask, q, 0.0)
    return np.append(top, _inverse_cdf(q_rest, rng.random(1)))


def _greedy_tuples(q, n):
    top, rest_mask, rest_mass = _greedy_parts(q, n)
    last = np.flatnonzero(rest_mask & (q > 0))
    tuples = np.column_stack([np.tile(top, (last.size, 1)), last]).astype(np.int64)
    return tuples, q[last] / rest_mass


def _greedy_dual(p, q, n):
    """``alpha* = p(Top) + sum_{x not in Top} min(p(x), q'(x))`` (docs/math.md#greedy-and-hub), with
    ``q'`` q on the others renormalised (rest mass summed directly). The optimal subset is ``Top``
    plus the tokens with ``q' > p`` (empty when alpha* = 1). O(V). Also the hub scheme's (n = 2)."""
    top, rest, rest_mass = _greedy_parts(q, n)
    q_rest = np.where(rest, q, 0.0) / rest_mass
    gain = rest & (q_rest > p)
    excess = (q_rest[gain] - p[gain]).sum() - p[top].sum()  # Q(H) - p(H) for H = Top + gain
    if excess <= 0.0:
        return 1.0, np.empty(0, dtype=np.int64)
    gain[top] = True  # H = Top + gain (disjoint), as sorted token indices without a sort
    return max(1.0 - float(excess), 0.0), np.flatnonzero(gain).astype(np.int64)


def _greedy_sample_rows(q, n, samples, rng):
    top, rest_mask, _ = _greedy_parts(q, n)
    last = _inverse_cdf(np.where(rest_mask, q, 0.0), rng.random(samples))
    return np.column_stack([np.tile(top, (samples, 1)), last])


def _greedy_structure(drafts, q, n, cache):
    top = cache.get("top")
    if top is None:
        top = cache["top"] = top_tokens(q, n - 1)
    if set(drafts[: n - 1].tolist()) != set(top.tolist()) or drafts[-1] in top:
        raise ValueError(
            f"greedy drafts are the {n - 1} most likely tokens {sorted(top.tolist())} followed by "
            f"one other token; got {drafts.tolist()}"
        )


def _greedy_inclusion(q, n):
    """``P(y drafted)``: 1 on ``Top``, ``q'(y)`` elsewhere (greedy and hub drafts alike)."""
    top, rest_mask, rest_mass = _greedy_parts(q, n)
    pi = np.where(rest_mask, q, 0.0) / rest_mass
    pi[top] = 1.0
    return pi


def _greedy_log_count(k, n):
    return math.log(max(k - n + 1, 1))


def _greedy_mass(q, n, mask):
    top, rest_mask, rest_mass = _greedy_parts(q, n)
    if not mask[top].all():
        return 0.0
    return q[mask & rest_mask].sum() / rest_mass


# hub (SpecHub, n = 2) --------------------------------------------------------------------------
def _hub_sample(q, n, rng):
    a = int(top_tokens(q, 1)[0])
    x1 = int(_inverse_cdf(q, rng.random(1))[0])
    if x1 != a:
        return np.array([x1, a])
    q_rest = q.copy()
    q_rest[a] = 0.0
    return np.array([a, int(_inverse_cdf(q_rest, rng.random(1))[0])])


def _hub_sample_rows(q, n, samples, rng):
    a = int(top_tokens(q, 1)[0])
    rest = q.copy()
    rest[a] = 0.0
    first = _inverse_cdf(q, rng.random(samples))
    second = _inverse_cdf(rest, rng.random(samples))
    return np.column_stack([first, np.where(first == a, second, a)])


def _hub_structure(drafts, q, n, cache):
    _distinct_structure(drafts, q, n, cache)
    a = int(np.argmax(q))  # the first maximum: ties by index
    if a not in drafts:
        raise ValueError(f"hub drafts always contain the hub token {a} (argmax q); got {drafts.tolist()}")


def _hub_log_count(k, n):
    return math.log(max(2 * (k - 1), 1))


def _hub_tuples(q, n):
    a = int(top_tokens(q, 1)[0])
    others = np.flatnonzero((q > 0) & (np.arange(q.size) != a))
    rest_mass = np.delete(q, a).sum()
    first = np.column_stack([others, np.full(others.size, a)])
    second = np.column_stack([np.full(others.size, a), others])
    tuples = np.vstack([first, second]).astype(np.int64)
    probs = np.concatenate([q[others], q[a] * q[others] / rest_mass])
    return tuples, probs


# conditional Poisson -----------------------------------------------------------------------------
def _cp_sample(q, n, rng):
    from . import _kernels

    # T[i, j] = log e_j(q[i:]); token i joins the set with probability q_i e_{j-1}(q[i+1:]) / e_j(q[i:])
    T = _kernels.log_esp_suffix_table(np.ascontiguousarray(q), n)
    chosen, need = [], n
    for i in range(q.size):
        if need == 0:
            break
        if q[i] > 0 and np.log(rng.random()) < np.log(q[i]) + T[i + 1, need - 1] - T[i, need]:
            chosen.append(i)
            need -= 1
    return np.array(chosen)


def _cp_inclusion(q, n):
    """``q(y) e_{n-1}(q without y) / e_n(q)``; scale invariant, so q is rescaled to max 1 first."""
    from ._kernels import verifiers as kernels

    return kernels.cp_inclusion(q / q.max(), n)


def _cp_log_count(k, n):
    return math.lgamma(k + 1) - math.lgamma(n + 1) - math.lgamma(k - n + 1)


def _cp_tuples(q, n):
    support = np.flatnonzero(q > 0)
    k = support.size  # >= n (checked by the scheme)
    _check_enumerable_log(_cp_log_count(k, n), lambda: math.comb(k, n), n)
    tuples = np.array(list(itertools.combinations(support, n)), dtype=np.int64).reshape(-1, n)
    logw = np.log(q[tuples]).sum(axis=1)
    return tuples, np.exp(logw - np.logaddexp.reduce(logw))


def _cp_mass(q, n, mask):
    """``e_n(q on H) / e_n(q)`` by the pairwise product (independent of the solver's DP)."""
    m_in, k_in = _elementary_symmetric_tree(q[mask], n)
    if m_in == 0.0:
        return 0.0
    m_all, k_all = _elementary_symmetric_tree(q, n)
    return float(np.ldexp(m_in / m_all, k_in - k_all))


# top-n (deterministic) ---------------------------------------------------------------------------
def _top_sample(q, n, rng):
    return top_tokens(q, n)


def _top_sample_rows(q, n, samples, rng):
    return np.tile(top_tokens(q, n), (samples, 1))


def _top_tuples(q, n):
    return top_tokens(q, n).reshape(1, n), np.ones(1)


def _top_mass(q, n, mask):
    return 1.0 if mask[top_tokens(q, n)].all() else 0.0


def _top_dual(p, q, n):
    """``alpha* = p(Top_n)`` with ``H = Top_n`` (docs/math.md#top-n): ``Q(H) = 1`` exactly when ``H``
    holds every drafted token, so ``p(H) + 1 - Q(H)`` is ``p(H) >= p(Top_n)`` there and ``>= 1``
    elsewhere. Returned as a fraction of ``sum(p)`` (the drafted plus the undrafted mass, each a
    direct sum) so that it lies in [0, 1]."""
    top = top_tokens(q, n)
    rest = np.ones(p.size, dtype=bool)
    rest[top] = False
    inside, outside = float(p[top].sum()), float(p[rest].sum())
    total = inside + outside
    return (inside / total if total > 0.0 else 0.0), np.sort(top)


def _top_structure(drafts, q, n, cache):
    top = cache.get("top_n")
    if top is None:
        top = cache["top_n"] = top_tokens(q, n)
    if np.unique(drafts).size != drafts.size or set(drafts.tolist()) != set(top.tolist()):
        raise ValueError(
            f"top_n drafts are the {n} most likely tokens {sorted(top.tolist())}; got {drafts.tolist()}"
        )


def _top_inclusion(q, n):
    pi = np.zeros(q.size)
    pi[top_tokens(q, n)] = 1.0
    return pi


def _top_set_mass_rows(p, q, n, samples, rng):
    return np.full(samples, float(p[top_tokens(q, n)].sum()))


#: Kernel codes of the sorted-prefix scans (:mod:`mdsd_ot._kernels.scans`).
_WITH, _WITHOUT, _CP = 0, 1, 2

SCHEMES: dict[str, DraftScheme] = {
    s.name: s
    for s in [
        DraftScheme(
            "with_replacement",
            "n i.i.d. drafts from q",
            True,
            _with_sample,
            _with_tuples,
            _with_mass,
            lambda n: 1,
            _mass_rows=_with_mass_rows,
            _log_count=_with_log_count,
            kernel_code=_WITH,
            sums_up_to=2**63 - 1,  # any n
            _sample_rows=_with_sample_rows,
            _inclusion=_with_inclusion,
            reference_verifier="rrs",
            optimal_at_full_v="chain",
            nested_draws=True,
        ),
        DraftScheme(
            "without_replacement",
            "sequential draws without replacement (Gumbel-top-n order)",
            True,
            _without_sample,
            _without_tuples,
            _without_mass,
            lambda n: n,
            quadrature_from=3,
            _log_count=_without_log_count,
            kernel_code=_WITHOUT,
            sums_up_to=2,
            _structure=_distinct_structure,
            _inclusion=_without_inclusion,
            _set_mass_rows=_without_set_mass_rows,
            reference_verifier="rrs_without_replacement",
            nested_draws=True,
        ),
        DraftScheme(
            "greedy",
            "the n-1 most likely tokens plus one draw from the rest",
            False,
            _greedy_sample,
            _greedy_tuples,
            _greedy_mass,
            lambda n: n,
            _log_count=_greedy_log_count,
            _dual=_greedy_dual,
            _sample_rows=_greedy_sample_rows,
            _structure=_greedy_structure,
            _inclusion=_greedy_inclusion,
            reference_verifier="greedy",
            optimal_at_full_v="greedy",
            top_family=True,
        ),
        DraftScheme(
            "hub",
            "SpecHub drafts (n = 2): x1 ~ q, then argmax q or a draw from the rest",
            False,
            _hub_sample,
            _hub_tuples,
            lambda q, n, mask: _greedy_mass(q, 2, mask),
            lambda n: 2,
            fixed_n=2,
            _log_count=_hub_log_count,
            _dual=_greedy_dual,  # the hub draft-set law is the greedy one for n = 2
            _sample_rows=_hub_sample_rows,
            _structure=_hub_structure,
            _inclusion=_greedy_inclusion,
            same_sets_as="greedy",
            reference_verifier="spechub",
            optimal_at_full_v="spechub",
            top_family=True,
        ),
        DraftScheme(
            "conditional_poisson",
            "an n-subset with probability proportional to prod q",
            True,
            _cp_sample,
            _cp_tuples,
            _cp_mass,
            lambda n: n,
            _log_count=_cp_log_count,
            kernel_code=_CP,
            _structure=_distinct_structure,
            _inclusion=_cp_inclusion,
        ),
        DraftScheme(
            "top_n",
            "deterministic: the n most likely tokens (EAGLE / SGLang trees)",
            False,
            _top_sample,
            _top_tuples,
            _top_mass,
            lambda n: n,
            _log_count=lambda k, n: 0.0,
            _dual=_top_dual,
            _sample_rows=_top_sample_rows,
            _structure=_top_structure,
            _inclusion=_top_inclusion,
            _set_mass_rows=_top_set_mass_rows,
            q_dominates=False,
            reference_verifier="naive",  # naive attains alpha* = p(Top_n) for deterministic drafts
            optimal_at_full_v="naive",
            nested_draws=True,
        ),
    ]
}


#: Other accepted scheme names; matching ignores case and ``-`` vs ``_`` (``"With-Replacement"``).
SCHEME_ALIASES: dict[str, str] = {
    "iid": "with_replacement",
    "sequential": "without_replacement",
    "cp": "conditional_poisson",
    "top": "top_n",
}


def get_scheme(name) -> DraftScheme:
    """Look up a scheme by name or alias (``ValueError`` listing the choices and aliases when unknown).

    >>> get_scheme("With-Replacement").name, get_scheme("iid").name, get_scheme("CP").name
    ('with_replacement', 'with_replacement', 'conditional_poisson')
    """
    if isinstance(name, DraftScheme):
        return name
    return SCHEMES[check_choice(name, "sampling", SCHEMES, SCHEME_ALIASES)]

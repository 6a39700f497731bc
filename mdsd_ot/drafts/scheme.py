"""The :class:`DraftScheme` record every scheme module fills in, and what it may hold for other engines."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from ._common import _as_mask, _support_size, group_rows

#: Codes of the numba sorted-prefix scan families (:mod:`mdsd_ot._kernels.scans`; ``kernel_code``).
KERNEL_WITH, KERNEL_WITHOUT, KERNEL_CP = 0, 1, 2


class TorchPrefix(NamedTuple):
    """A scheme's torch twin of the sorted-prefix bound (``DraftScheme.torch_prefix``).

    ``max_n``: the largest n evaluated on the device (None: any; beyond it,
    :func:`mdsd_ot.optimal_acceptance`). ``mass(rows, n)``: ``Q(H_k)`` for k = 0..V along the order of
    ``rows`` (:class:`mdsd_ot.backends.torch._SortedRows`: ``qs``, prefix sums ``Q``, suffix sums
    ``R``). ``check(ps, qs, inside, q_h, out_h, n)``: ``Q(H)`` of each row's certificate ``H`` (the
    mask ``inside``) re-evaluated by masked sums, without prefix sums (``q_h = q(H)``, ``out_h`` the
    mass outside H summed directly). Both are tested against :meth:`DraftScheme.mass` for every n up
    to ``max_n``, n = 1 included."""

    max_n: int | None
    mass: Callable
    check: Callable


#: Schemes whose one draft (``n = 1``) is a single draw from ``q`` (:meth:`DraftScheme.one_draw`).
ONE_DRAW_SCHEMES = frozenset({"with_replacement", "without_replacement", "greedy", "conditional_poisson"})


def set_tuples(rows: np.ndarray) -> list[tuple[int, ...]]:
    """The sets of :meth:`DraftScheme.set_rows` as tuples (the ``-1`` padding dropped)."""
    return [tuple(y for y in r if y >= 0) for r in rows.tolist()]


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
    #: The torch twin of the sorted-prefix bound (:class:`TorchPrefix`, evaluated by
    #: :mod:`mdsd_ot.backends.torch` on the tensors' device), or None (not on the device).
    torch_prefix: TorchPrefix | None = None

    # -- validation ------------------------------------------------------------------------------
    def __repr__(self) -> str:
        """``<draft scheme 'greedy': ...>``, as the verifiers print (not the dataclass's dump of every
        field and function)."""
        return f"<draft scheme {self.name!r}: {self.description}>"

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
        rows, probs = self.set_rows(q, n)
        return set_tuples(rows), probs

    def set_rows(self, q: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`set_law` as arrays: ``(rows (S, n) int64, probs (S,))``, row ``i`` the tokens of set
        ``i`` ascending, padded with ``-1``; sets ordered by size, then tokens. Each set's probability
        adds its tuples' in enumeration order (as a loop over the tuples would)."""
        tuples, probs = self.tuple_law(q, n)
        rows = np.sort(tuples, axis=1)
        rows[:, 1:][rows[:, 1:] == rows[:, :-1]] = q.size  # a repeat: pad past every token
        rows.sort(axis=1)
        sets, group = group_rows(rows)  # sets in token order
        sizes = (sets < q.size).sum(axis=1)
        by_size = np.argsort(sizes, kind="stable")
        masses = np.bincount(group, weights=probs, minlength=len(sets))
        sets = np.where(sets < q.size, sets, -1)
        return sets[by_size], masses[by_size]

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

    def one_draw(self, n: int) -> bool:
        """True when ``n`` drafts of this scheme are a single draw from ``q``: ``n = 1`` for every scheme
        that samples (i.i.d., sequential, greedy, conditional Poisson), never for ``top_n`` (its one
        draft is the most likely token) nor ``hub`` (two drafts). Such a draft is i.i.d.'s for ``n =
        1``: the same verifiers, bounds and optimum (``sum min(p, q)``) apply."""
        return n == 1 and self.name in ONE_DRAW_SCHEMES

    def sums_suffice(self, n: int) -> bool:
        """True when the sorted-prefix bound for ``n`` drafts needs only sums over H (see ``sums_up_to``)."""
        return self.kernel_code is not None and n <= self.sums_up_to

    def plan_route(self, n: int, *, same: bool = False) -> str:
        """How the evaluation plans compute this scheme's bound for ``n`` drafts, from the fields above:
        ``"same"`` (``p == q`` and ``Q(H) <= q(H)``: exactly 1), ``"prefix"`` (a sorted-prefix kernel
        from the shared sums), ``"sequential"`` (the quadrature scan), ``"greedy"`` (the fused top-of-q
        sums, ``top_family``) or ``"closed_form"`` (``closed_form_dual``, re-checked by ``mass``).

        Parameters
        ----------
        n : int
            Number of drafts.
        same : bool
            Whether the position has ``p == q``.

        Returns
        -------
        str
        """
        if same and self.q_dominates:
            return "same"
        if self.kernel_code is not None:
            return "sequential" if self.is_quadrature(n) else "prefix"
        if self.top_family:
            return "greedy"
        return "closed_form"

    def torch_route(self, n: int) -> str | None:
        """How the batched torch plan computes this scheme's bound for ``n`` drafts: ``"prefix"`` (its
        torch twin, ``torch_prefix``), ``"greedy"`` (the greedy-family sums, ``top_family``) or None (not
        on the device: the numpy plan).

        Parameters
        ----------
        n : int
            Number of drafts.

        Returns
        -------
        str or None
        """
        if self.torch_covers(n):
            return "prefix"
        if self.top_family:
            return "greedy"
        return None

    def torch_covers(self, n: int) -> bool:
        """True when the torch backend evaluates the sorted-prefix bound for ``n`` drafts."""
        t = self.torch_prefix
        return t is not None and (t.max_n is None or n <= t.max_n)

    def is_quadrature(self, n: int) -> bool:
        """True when ``Q(H)`` for ``n`` drafts is evaluated by quadrature (its grid can be refined)."""
        return self.quadrature_from is not None and n >= self.quadrature_from

"""The optimal verifier: a full-vocabulary construction where one is known, the LP plan elsewhere.

* i.i.d. drafts (``with_replacement``), any V: select one draft by a randomised interval-class rule
  built from the lower convex hull of the sorted prefix points, then one step of speculative
  sampling against the exact law of the selected token (docs/math.md#optimal-verifier-full-v).
  Exact closed forms throughout; ``prepare`` is one sort plus O(V log V) heap work.
* ``greedy`` and ``hub`` drafts: the verifiers of Hu et al. and SpecHub, which attain those
  schemes' ``alpha*`` (docs/math.md#greedy-verifier, docs/math.md#spechub).
* every other scheme (``without_replacement``, ``conditional_poisson``): the LP plan below, small V.

LP plan:

Reference: the optimal-transport formulation of SpecTr (Sun et al., NeurIPS 2023,
arXiv:2310.15141) and its membership-cost LP / max-flow form (Hu et al., ICLR 2025,
arXiv:2502.18779). docs/math.md#primal-lp and docs/math.md#optimal-verifier.

Given a feasible flow ``pi(S, y)`` (``sum_y pi(S, y) <= Q_S``, ``sum_S pi(S, y) <= p(y)``), the
verifier outputs ``y in S`` with probability ``pi(S, y) / Q_S`` for the observed draft set ``S`` and
otherwise samples the residual ``(p - sum_S pi(S, .)) / (1 - sum pi)``. The output is exactly ``p``
for any feasible flow; a maximum flow attains ``alpha*``.

The plan comes from :func:`mdsd_ot.optimal_acceptance` with ``method="lp"`` (HiGHS). Solver
tolerances (``LP_SOLVER_TOL``) can leave the flow infeasible by ~1e-10, which would break exact
validity, so the flow is projected back onto the feasible set (negative entries dropped, then rows
and columns scaled down to their capacities) and the residual is recomputed from it. The acceptance
is the total projected flow (within ~1e-9 of ``alpha*``). The LP has ``sum_S |S|`` columns: small
vocabularies only.
"""

from __future__ import annotations

import threading
import time

import numpy as np

from .._config import VALUE_TOL
from ..drafts import SCHEMES, get_scheme
from ..drafts.scheme import KERNEL_WITH
from .base import (
    ANY_SCHEME,
    PlanVerifier,
    PreparedVerifier,
    Verdict,
    Verifier,
    accept_fraction,
    accept_ratio,
    residual,
    sample_drafts_batch,
    sample_index,
)

__all__ = ["OptimalVerifier", "feasible_flow", "FULL_V_SCHEMES", "CONSTRUCTIONS"]

#: Draft schemes for which the optimal verifier has a construction at any vocabulary size
#: (``DraftScheme.optimal_at_full_v``).
FULL_V_SCHEMES = tuple(name for name, s in SCHEMES.items() if s.optimal_at_full_v)

#: ``OptimalVerifier(construction=...)``: ``"auto"`` (full-V construction where there is one, else
#: the LP) or ``"lp"`` (the LP plan for every scheme: the small-V reference).
CONSTRUCTIONS = ("auto", "lp")


def feasible_flow(flow: np.ndarray, set_mass: np.ndarray, p: np.ndarray) -> np.ndarray:
    """Project a nearly feasible flow ``flow[s, y]`` onto the feasible set.

    Rows are scaled so that ``sum_y flow[s, y] <= set_mass[s]`` and then columns so that
    ``sum_s flow[s, y] <= p[y]`` (scaling down never breaks the other family of constraints).

    Parameters
    ----------
    flow : numpy.ndarray, shape (S, V)
        Flow from each draft set ``s`` to each token ``y`` (negative entries are set to 0).
    set_mass : numpy.ndarray, shape (S,)
        Probability of each draft set.
    p : numpy.ndarray, shape (V,)
        Target law.

    Returns
    -------
    numpy.ndarray, shape (S, V)
        A new array; ``flow`` is not modified.
    """
    f = np.maximum(flow, 0.0)
    rows = f.sum(axis=1)
    over = rows > set_mass
    f[over] *= (set_mass[over] / rows[over])[:, None]
    cols = f.sum(axis=0)
    over = cols > p
    f[:, over] *= p[over] / cols[over]  # cols > p >= 0 there
    return f


_SCRATCH = threading.local()


def _chain_scratch(V: int):
    """Scratch arrays for the chain kernel, kept per thread and reused by the next ``prepare`` (fresh
    pages cost more than the work done in them); regrown when a larger vocabulary comes."""
    from .._kernels.optimal import chain_scratch

    arrays = getattr(_SCRATCH, "chain", None)
    if arrays is None or arrays[0].shape[1] < V + 1:
        arrays = chain_scratch(V)
        _SCRATCH.chain = arrays
    return arrays


#: ``"radix"`` or ``"argsort"``: the faster route to the chain's order on this machine (timed once).
_CHAIN_SORT: dict = {}


def chain_token_order(p: np.ndarray, q: np.ndarray, scratch) -> np.ndarray:
    """The tokens sorted by ``chain_keys`` (``q/p``) ascending, ties in token-index order: exactly
    ``np.argsort(keys, kind="stable")``, the same on every machine.

    Two exact routes give it: the radix sort ``_kernels.optimal.chain_order`` (about a third of numpy's
    argsort where numpy sorts without SIMD) and numpy's argsort with each run of ties put back in index
    order (``index_order_ties``; faster where numpy sorts with AVX-512). The first vocabulary of at
    least ``ORDER_TIMING_MIN_V`` tokens in a process times both once and keeps the faster; below it the
    radix sort, and numpy's stable sort up to ``PYTHON_MAX_V`` tokens. ``scratch``: :func:`_chain_scratch`.
    """
    from .. import _kernels
    from .._config import ORDER_TIMING_MIN_V, PYTHON_MAX_V
    from .._kernels.optimal import chain_keys, chain_order

    V = p.size
    keys = _kernels.small_or_jit(chain_keys, V)(p, q, scratch[0][-1, :V])
    if V <= PYTHON_MAX_V:
        return np.argsort(keys, kind="stable")
    how = _CHAIN_SORT.get("how")
    if how is None and V >= ORDER_TIMING_MIN_V:  # time both routes once (each compiled or loaded first)
        out = chain_order(keys)
        t0 = time.perf_counter()
        chain_order(keys)
        t1 = time.perf_counter()
        index_order_ties(np.argsort(keys), keys)
        _CHAIN_SORT["how"] = "radix" if t1 - t0 <= time.perf_counter() - t1 else "argsort"
        return out
    if how == "argsort":
        return index_order_ties(np.argsort(keys), keys)
    return chain_order(keys)


def index_order_ties(order: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """Put each run of equal ``keys`` along ``order`` in token-index order, in place: any argsort of
    ``keys`` becomes ``np.argsort(keys, kind="stable")``. O(V) without ties; the tied positions alone
    are sorted (by run, then index)."""
    k = keys[order]
    same = k[1:] == k[:-1]
    if not same.any():
        return order
    tied = np.zeros(order.size, dtype=bool)
    tied[1:] |= same
    tied[:-1] |= same
    at = np.flatnonzero(tied)
    run = np.cumsum(np.concatenate(([True], ~same)))[at]
    order[at] = order[at][np.lexsort((order[at], run))]
    return order


class _PreparedOptimal(PreparedVerifier):
    def __init__(self, verifier, p, q, n, scheme):
        super().__init__(verifier, p, q, n, scheme)
        from ..api import optimal_acceptance

        result = optimal_acceptance(p, q, n, sampling=scheme.name, method="lp")
        if not result.success or result.plan is None:
            raise ValueError(f"the LP for the optimal verifier failed: {result.message}")
        self.bound = result
        self.sets = tuple(tuple(int(y) for y in s) for s in result.draft_sets)
        self.row = {s: i for i, s in enumerate(self.sets)}
        sets, masses = scheme.set_law(q, n)
        law = dict(zip((tuple(s) for s in sets), masses))
        self.set_mass = np.array([law.get(s, 0.0) for s in self.sets])
        flow = feasible_flow(result.plan * self.set_mass[:, None], self.set_mass, p)
        with np.errstate(divide="ignore", invalid="ignore"):
            plan = np.where(self.set_mass[:, None] > 0, flow / self.set_mass[:, None], 0.0)
        self.plan = plan  # P(output y | draft set s), rows sum to <= 1
        self.stay = np.maximum(1.0 - plan.sum(axis=1), 0.0)  # P(reject | s)
        self.residual, _ = residual(p, flow.sum(axis=0))
        self.value = float(flow.sum())

    def _plan_row(self, drafts):
        key = tuple(sorted(set(int(x) for x in drafts)))
        if key not in self.row:
            raise ValueError(f"draft set {list(key)} has probability 0 under {self.scheme.name!r}")
        return self.row[key]

    def _verify(self, drafts, rng):
        i = self._plan_row(drafts)
        u = rng.random()
        cdf = np.cumsum(self.plan[i])
        if u < cdf[-1]:
            return min(int(np.searchsorted(cdf, u, side="right")), self.p.size - 1)
        return sample_index(self.residual, rng.random())

    def _law(self, drafts):
        i = self._plan_row(drafts)
        return self.plan[i] + self.stay[i] * self.residual

    def monte_carlo(self, samples: int, rng: np.random.Generator) -> np.ndarray:
        """P(accepted | drafts) of ``samples`` sampled draft tuples: it depends on the draft set only,
        so it is evaluated once per distinct set (the same values as the per-tuple loop)."""
        drafts = sample_drafts_batch(self.scheme, self.q, self.n, samples, rng)
        sets, inverse = np.unique(np.sort(drafts, axis=1), axis=0, return_inverse=True)
        accept = np.array([self._law(s)[np.unique(s)].sum() for s in sets])
        return accept[inverse.reshape(-1)]

    def acceptance(self):
        """Total (projected) flow of the optimal plan, ``alpha*`` to the LP tolerance."""
        return self.value


class _PreparedChain(PreparedVerifier):
    """i.i.d. drafts at any V: interval-class selection, then speculative sampling against its law.

    docs/math.md#optimal-verifier-full-v. ``prepare``: tokens with ``q > 0`` sorted by ``q/p``
    ascending, the lower convex hull of ``(p(first k), 1 - q(rest)^n)``, runs pooled inside its
    blocks, units (groups of tokens that are one class at every level), the chain decomposition into
    interval-class rules (a death level per unit boundary), the exact law ``r = q * ratio[unit]`` of
    the selected token, and a segment tree of the death levels. ``n = 1`` needs none of it (``r = q``).
    ``verify``: a uniform level ``t``, the class of the lowest draft at that level (range maxima), its
    first draft in draw order, accepted with ``min(1, p/r)``, else a draw from ``(p - r)_+``.
    """

    def __init__(self, verifier, p, q, n, scheme):
        super().__init__(verifier, p, q, n, scheme)
        from .. import _kernels
        from .._config import CHAIN_SCAN_MAX_UNITS, POOL_MARGIN
        from .._kernels.optimal import chain_prepare, max_tree, single_draft_prepare

        small = _kernels.small_or_jit  # small V: the kernels' Python twins, nothing to compile
        if n > 1:
            from .. import _compile

            _compile.notice("optimal", p.size)
        if n == 1:
            self._order = None  # the residual CDF runs over the tokens in index order
            out = small(single_draft_prepare, p.size)(p, q)
        else:
            scratch = _chain_scratch(p.size)
            self._order = chain_token_order(p, q, scratch)
            out = small(chain_prepare, p.size)(p, q, self._order, n, POOL_MARGIN, *scratch)
        self.cls, self.tau, self.ratio, self._lam_unit, self._cdf, accept, widest = out
        if widest > CHAIN_SCAN_MAX_UNITS:  # range maxima from a segment tree
            self.tree, self.size = small(max_tree, p.size)(self.tau)
        else:  # short scans of tau itself (size 0), no tree to build
            self.tree, self.size = self.tau, 0
        self.reject_mass = float(self._cdf[-1]) if self._cdf.size else 0.0
        self._accept = accept_fraction(float(accept), self.reject_mass)

    def _residual_weights(self) -> np.ndarray:
        """The weights the residual draw uses, per token: the increments of its CDF (``(p - r)_+``
        to rounding, on the residual's support)."""
        if not hasattr(self, "_res_w"):
            w = np.diff(self._cdf, prepend=0.0)
            if self._order is None:
                self._res_w = w
            else:
                self._res_w = np.zeros(self.p.size)
                self._res_w[self._order[: w.size]] = w
        return self._res_w

    @property
    def r(self) -> np.ndarray:
        """The exact law of the selected token, ``q * ratio[unit]`` (0 where ``q = 0``)."""
        if not hasattr(self, "_r"):  # ratio[-1] at cls = -1 is discarded (q > 0 somewhere: ratio not empty)
            self._r = np.where(self.cls >= 0, self.q * self.ratio[self.cls], 0.0)
        return self._r

    @property
    def lam(self) -> np.ndarray:
        """Hull slope of each token's block (``q/p`` itself for ``n = 1``; 0 where ``q = 0``)."""
        if self.n == 1:
            with np.errstate(divide="ignore", invalid="ignore"):
                return np.where(self.q > 0, self.q / self.p, 0.0)
        on = self.cls >= 0
        lam = np.zeros(self.p.size)
        lam[on] = self._lam_unit[self.cls[on]]
        return lam

    def _residual_draw(self, rng):
        """Inverse-CDF draw from ``(p - r)_+`` on the precomputed CDF (as ``base.sample_index``; the
        CDF runs over the tokens in ``self._order``)."""
        if self.reject_mass <= 0.0:
            return sample_index(self.p, rng.random())  # rejection has probability zero here
        idx = int(np.searchsorted(self._cdf, rng.random() * self._cdf[-1], side="right"))
        if idx >= self._cdf.size:  # only rounding can push it past the end: the last positive weight
            idx = int(np.flatnonzero(self._cdf < self._cdf[-1]).size)
        return idx if self._order is None else int(self._order[idx])

    def _selection(self, drafts):
        from .._kernels.optimal import selection_law

        return selection_law(self.cls[drafts].astype(np.int64), self.tree, self.size)

    def verify(self, drafts, rng):
        """As :meth:`PreparedVerifier.verify`, with a compiled fast path for an int64 array of n
        drafts (anything else, or a draft that fails a check, goes through the general validation)."""
        if (
            type(drafts) is np.ndarray
            and drafts.dtype == np.int64
            and drafts.shape == (self.n,)
            and isinstance(rng, np.random.Generator)
        ):
            y = self._step(drafts, rng)
            if y != -2:
                token = int(y) if y >= 0 else self._residual_draw(rng)
                return Verdict(token, y >= 0 or bool(np.any(drafts == token)))
        return super().verify(drafts, rng)

    def _step(self, drafts, rng):
        """The selected draft if accepted, -1 if rejected, -2 for a draft that fails a check."""
        from .._kernels.optimal import verify_draft_set

        t, u = rng.random(), rng.random()
        return verify_draft_set(drafts, self.cls, self.tree, self.size, self.p, self.q, self.ratio, t, u)

    def _verify(self, drafts, rng):
        y = self._step(drafts, rng)
        return int(y) if y >= 0 else self._residual_draw(rng)

    def _law(self, drafts):
        sel = self._selection(drafts)
        law = np.zeros(self.p.size)
        stay = 0.0
        for i, y in enumerate(drafts):
            a = accept_ratio(self.p[y], self.r[y])
            law[y] += sel[i] * a
            stay += sel[i] * (1.0 - a)
        if stay > 0.0:
            law += stay * (self._residual_weights() / self.reject_mass if self.reject_mass > 0 else self.p)
        return law

    def accept_probability(self, drafts):
        """P(output is a draft | drafts) in O(n log V): the accepted selection plus the residual's
        mass on the draft set."""
        x = self.check_drafts(drafts)
        sel = self._selection(x)
        acc = 0.0
        stay = 0.0
        for i, y in enumerate(x):
            a = accept_ratio(self.p[y], self.r[y])
            acc += sel[i] * a
            stay += sel[i] * (1.0 - a)
        if stay > 0.0 and self.reject_mass > 0.0:
            u = np.unique(x)
            acc += stay * float(self._residual_weights()[u].sum()) / self.reject_mass
        return min(acc, 1.0)

    def acceptance(self):
        """``sum_y min(p(y), r(y))`` for the law ``r`` the rule induces (``alpha*`` to rounding)."""
        return self._accept


# -- the same acceptance in the evaluation plan (mdsd_ot.plan; its numba passes in _kernels/plan.py)
def _plan_acceptance(plan, ns):
    """The full-vocabulary optimal verifier for i.i.d. drafts (docs/math.md#optimal-verifier-full-v):
    ``sum min(p, r)`` for the law ``r`` its interval-class rule induces, from its public ``prepare``,
    cross-checked against the plan's with-replacement bound ``alpha*`` (the verifier attains it): a
    disagreement by more than ``VALUE_TOL`` is returned as an error, not as a value."""
    from . import VERIFIERS

    verifier = VERIFIERS["optimal"]
    bounds = plan.scans(ns) if not plan.same else {}
    out = []
    for n in ns:
        try:
            value = float(verifier.prepare(plan.p, plan.q, n, sampling="with_replacement").acceptance())
        except ValueError as exc:
            out.append(exc)
            continue
        bound = 1.0 if plan.same else max(1.0 - float(bounds[n][0]), 0.0)
        if not abs(value - bound) <= VALUE_TOL:
            value = RuntimeError(
                f"internal error: the optimal verifier accepts {value!r} but alpha* (with replacement, "
                f"n={n}) is {bound!r}; please report this input"
            )
        out.append(value)
    return out


def _optimal_in_plan(n) -> bool:
    from . import VERIFIERS

    verifier = VERIFIERS["optimal"]  # its default scheme must be the plan's with-replacement scan
    return get_scheme(verifier.scheme).kernel_code == KERNEL_WITH and verifier.covers(verifier.scheme)


class OptimalVerifier(Verifier):
    """The optimal verifier: attains ``alpha*`` of its draft scheme.

    i.i.d., greedy and hub drafts at any vocabulary size (docs/math.md#optimal-verifier-full-v);
    other schemes through the LP plan (small vocabularies). ``construction="lp"`` uses the LP plan
    for every scheme (the small-V reference).

    Examples
    --------
    >>> from mdsd_ot.verifiers import VERIFIERS
    >>> round(VERIFIERS["optimal"].acceptance([0.5, 0.3, 0.2, 0.0], [0.1, 0.2, 0.3, 0.4], 2), 6)
    0.69
    """

    name = "optimal"
    plan = PlanVerifier(_optimal_in_plan, _plan_acceptance)
    schemes = ANY_SCHEME
    reference = "optimal transport plan (SpecTr, arXiv:2310.15141; Hu et al., arXiv:2502.18779)"

    def __init__(self, construction: str = "auto"):
        from .._validate import check_choice

        self.construction = check_choice(construction, "construction", CONSTRUCTIONS)

    def covers(self, sampling) -> bool:
        """True when ``sampling`` has a construction at any vocabulary size (no LP)."""
        return self.construction == "auto" and self.resolve_scheme(sampling).optimal_at_full_v is not None

    def _prepare(self, p, q, n, scheme):
        how = scheme.optimal_at_full_v if self.construction == "auto" else None
        if how is None and self.construction == "auto" and scheme.one_draw(n):
            how = "chain"  # one draw from q: i.i.d.'s construction for n = 1, sum min(p, q), at any V
        if how == "chain":
            return _PreparedChain(self, p, q, n, scheme)
        if how is not None:  # a registry verifier that attains this scheme's alpha*
            from . import VERIFIERS

            prepared = VERIFIERS[how]._prepare(p, q, n, scheme)
            prepared.verifier = self
            return prepared
        return _PreparedOptimal(self, p, q, n, scheme)

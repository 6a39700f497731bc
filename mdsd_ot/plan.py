"""Every bound and every verifier acceptance of one position from one sort (docs/math.md#evaluation-plan).

:func:`evaluate_position` evaluates, for a target ``p`` and a draft ``q``, the optimal acceptance of
several draft schemes and the exact acceptance of several verifiers, for several ``n`` at once. The
one-at-a-time API (:func:`mdsd_ot.optimal_acceptance`, :func:`mdsd_ot.verifier_acceptance`) sorts
and allocates for every quantity; here the tokens are ordered once by ``q/p`` (a bucket sort on the
bits of the ratio, O(V) for spread-out ratios) and every quantity is a pass over shared tables:

==============================  =====================================================================
quantity                        from the shared tables
==============================  =====================================================================
with replacement, any n         prefix sums of p and q along the order (pruned scans, all n)
without replacement, n = 2      the same, plus the prefix sum of ``q_i / (1 - q_i)``
without replacement, n >= 3     the quadrature scan on the sorted arrays (its own preparation)
conditional Poisson             ``log e_n`` prefixes for every n in one pass
greedy, hub                     the top of q (from the summary pass) and blocked sums for every n
naive (i.i.d.)                  moments ``sum p q (1 - q)^j`` (no logarithm), four per pass
rrs, spectr                     searches on the ratios along the order and its prefix/suffix sums
rrs_without_replacement, n = 2  in the backward pass of the tables (a search per token with q > p)
optimal (i.i.d., full V)        its public ``prepare``, cross-checked against alpha* of the plan
==============================  =====================================================================

Every bound's certificate is re-checked as :func:`mdsd_ot.optimal_acceptance` does it, by code that
does not run the scans: plain sums over the certificate (no prefix table) for the prefix
certificates, an independent check of the top tokens, the rest mass and the objective for greedy
drafts, and :meth:`mdsd_ot.drafts.DraftScheme.mass` (the independent quadrature) for sequential
sampling with n >= 3 and for conditional Poisson. A value whose re-check fails is recomputed by the
one-at-a-time API, and left out (``None``, with the message in ``errors``) if that fails too.

Verifiers without a plan function (RSD with n >= 3, any verifier under a non-default scheme) go
through :func:`mdsd_ot.verifier_acceptance`, so their value is exactly the one-at-a-time one. A
verifier whose acceptance follows from the plan's tables says how in its own module, as its
``Verifier.plan`` (a :class:`mdsd_ot.verifiers.base.PlanVerifier`).
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from . import _kernels
from ._config import (
    NAIVE_POLY_MAX_N,
    ORDER_BINS_PER_TOKEN,
    PLAN_WORKSPACE_MAX_V,
    QUAD_MAX_REFINE,
    RECHECK_TOL,
)
from ._kernels import plan as _plan_kernels  # noqa: F401  (registers _kernels.plan)
from ._validate import check_n, check_pair, distinct_ns, normalized_pair
from .drafts import get_scheme
from .drafts.greedy import plan_bounds as greedy_plan_bounds
from .drafts.scheme import KERNEL_CP, KERNEL_WITH, KERNEL_WITHOUT
from .drafts.with_replacement import with_mass_from_sums
from .drafts.without_replacement import pair_mass_of_prefix
from .dual import is_sequential_scan, sequential_objective
from .keys import bound_key, se_key, verifier_key
from .verifiers import DEFAULT_VERIFIERS  # evaluated by default, each under its own scheme
from .verifiers.base import PlanVerifier

__all__ = [
    "PositionEvaluation",
    "evaluate_position",
    "evaluate_positions",
    "evaluate_checked",
    "PlanVerifier",
    "PlanTables",
    "DEFAULT_SCHEMES",
    "DEFAULT_VERIFIERS",
]

#: The key of sequential n = 2 among the prefix scans' (the others are the n of with replacement).
WOR2_SCAN = 0

#: Draft schemes evaluated by default (hub is n = 2 only; it is skipped for other n).
DEFAULT_SCHEMES = ("with_replacement", "without_replacement", "greedy", "hub", "conditional_poisson")


@dataclass(frozen=True)
class PositionEvaluation:
    """Bounds and verifier acceptances of one position (:func:`evaluate_position`).

    Attributes
    ----------
    bounds : dict
        ``{(scheme, n): alpha*}``; ``None`` where it could not be computed (see ``errors``).
    verifiers : dict
        ``{(name, n): VerifierAcceptance}`` (value, standard error, method); ``None`` where it could
        not be computed.
    errors : dict
        ``{"bound:<scheme>@<n>" or "verifier:<name>@<n>": message}``.
    """

    bounds: dict = field(default_factory=dict)
    verifiers: dict = field(default_factory=dict)
    errors: dict = field(default_factory=dict)

    def row(self) -> dict:
        """The study's row format: ``{"bound:<scheme>@<n>": float, "verifier:<name>@<n>": float,
        "verifier:<name>@<n>:se": float (when > 0), "errors": {...} (when any)}``."""
        out = {}
        for (s, n), v in self.bounds.items():
            out[bound_key(s, n)] = v
        for (name, n), r in self.verifiers.items():
            key = verifier_key(name, n)
            out[key] = None if r is None else float(r.value)
            if r is not None and r.stderr > 0:
                out[se_key(key)] = float(r.stderr)
        if self.errors:
            out["errors"] = dict(self.errors)
        return out


# ------------------------------------------------------------------------------------ the plan
class PlanTables(NamedTuple):
    """The per-position tables the plan's bounds and closed-form verifiers are functions of, along the
    order by ``q/p`` descending (ties by index; :func:`_kernels.plan.order_tables`): arrays of size
    ``V`` (``ps``, ``qs``) or ``V + 1`` (the sums, index ``k`` for the first ``k`` tokens). They live in
    the thread's workspace until the plan is closed: read them, do not keep them."""

    ps: np.ndarray  #: p along the order
    qs: np.ndarray  #: q along the order
    P: np.ndarray  #: prefix sums of p (compensated)
    Q: np.ndarray  #: prefix sums of q (compensated)
    R: np.ndarray  #: suffix sums of q (the mass outside the prefix, summed directly)
    Ps: np.ndarray  #: suffix sums of p
    D: np.ndarray  #: suffix sums of (p - q)_+
    S: np.ndarray  #: prefix sums of q_i / (1 - q_i) without the big token (sequential n = 2 only)
    big_pos: int  #: rank of the token above half of q's mass (V + 1: none)
    rsd_rejection: float  #: RSD's rejection with two sequential drafts (when asked for)


class _Workspace(threading.local):
    """The plan's O(V) work arrays, kept between calls in each thread (fresh page-faulted buffers of
    a few MB per position cost as much as a pass over them). Up to ``PLAN_WORKSPACE_MAX_V`` tokens;
    a plan evaluated while another runs in the same thread (re-entrance) gets fresh arrays."""

    def __init__(self):
        self.buffers = {}
        self.busy = False

    def take(self, V: int):
        if self.busy or V > PLAN_WORKSPACE_MAX_V:
            return _Buffers({}, V)
        self.busy = True
        return _Buffers(self.buffers, V, release=self)


class _Buffers:
    def __init__(self, store, V, release=None):
        self.store = store
        self.V = V
        self.release = release

    def get(self, name, size, dtype=np.float64):
        buf = self.store.get(name)
        if buf is None or buf.size < size or buf.dtype != dtype:
            buf = np.empty(size, dtype=dtype)
            self.store[name] = buf
        return buf[:size]

    def close(self):
        if self.release is not None:
            self.release.busy = False
            self.release = None


_WORKSPACE = _Workspace()


class _Plan:
    """Shared tables of one validated, normalised position (the passes of :mod:`._kernels.plan`).

    The summary of q (pass 1) is taken on construction; the order, its tables (passes 2-3) and the
    token sums (pass 4) on first use, for every quantity requested in ``need`` (a request for more
    later reruns that pass). ``need`` keys: ``greedy`` and ``naive`` (the n of the greedy family and of
    the naive verifier), ``wor2`` (sequential n = 2: the table of ``q / (1 - q)``), ``rsd2`` (RSD with
    two drafts). The arrays live in the thread's
    workspace until :meth:`close` (a verifier's ``plan.evaluate`` must not keep them).
    """

    def __init__(self, p: np.ndarray, q: np.ndarray, *, greedy=(), naive=(), wor2=False, rsd2=False):
        self.p = p
        self.q = q
        self.V = p.size
        self.need = {"greedy": set(greedy), "naive": set(naive), "wor2": wor2, "rsd2": rsd2}
        K = max(self.need["greedy"], default=2) - 1
        total, support, same, big, big_rest, self._top, self.tail = _kernels.plan.q_summary(p, q, K)
        self.total, self.support, self.same = float(total), int(support), bool(same)
        self.big, self.big_rest = int(big), float(big_rest)
        self._buf = _WORKSPACE.take(self.V)
        self._order = self._tables = None
        self._cache = {}

    def close(self):
        """Hand the work arrays back to the thread's workspace."""
        self._buf.close()

    # -- passes 2 and 3
    def _order_pass(self):
        if self._order is None:
            V, buf = self.V, self._buf
            order, rs = buf.get("order", V, np.int64), buf.get("rs", V)
            ps, qs = buf.get("ps", V), buf.get("qs", V)
            bits, bins = buf.get("bits", V, np.int64), buf.get("bins", ORDER_BINS_PER_TOKEN * V + 2, np.int32)
            _kernels.plan.ratio_order_into(self.p, self.q, order, rs, ps, qs, bits, bins)
            self._order = order, rs, ps, qs
        return self._order

    @property
    def order(self):
        return self._order_pass()[0]

    @property
    def rs(self):
        """``q/p`` along the order (non-increasing; ``inf`` for ``p = 0 < q``, ``0`` for ``q = 0``)."""
        return self._order_pass()[1]

    def tables(self, *, wor2=False, rsd2=False):
        """The :class:`PlanTables` of this position, with at least the flags asked for here."""
        need = self.need
        if self._tables is not None and not ((wor2 and not need["wor2"]) or (rsd2 and not need["rsd2"])):
            return self._tables
        need["wor2"] = need["wor2"] or wor2
        need["rsd2"] = need["rsd2"] or rsd2
        order, rs, ps, qs = self._order_pass()
        V, buf = self.V, self._buf
        P, Q, R, Ps, D, S = (buf.get(x, V + 1) for x in ("P", "Q", "R", "Ps", "D", "S"))
        big_pos, rej = _kernels.plan.order_tables(
            order, rs, ps, qs, self.total, self.big, self.big_rest, need["wor2"], need["rsd2"],
            P, Q, R, Ps, D, S,
        )  # fmt: skip
        self._tables = PlanTables(ps, qs, P, Q, R, Ps, D, S, int(big_pos), float(rej))
        self._cache.pop("scans", None)
        return self._tables

    @property
    def sorted(self):
        """``(ps, qs, P, Q, R)``: p and q in the plan's order, prefix sums, suffix sums of q."""
        return self.tables()[:5]

    def scans(self, ns):
        """``{n: (D, k)}`` of the prefix scans (:func:`_kernels.plan.prefix_scans`): with replacement for
        ``n >= 1`` (n = 1: every prefix scheme), sequential n = 2 under the key :data:`WOR2_SCAN`."""
        have = self._cache.get("scans", {})
        if not set(ns) <= set(have):
            t = self.tables(wor2=WOR2_SCAN in ns)
            want = distinct_ns(set(ns) | set(have))
            big_q = float(self.q[self.big]) if self.big >= 0 else 0.0
            out = _kernels.plan.prefix_scans(t.P, t.Q, t.R, t.S, big_q, self.big_rest, t.big_pos, want)
            have = dict(zip(want.tolist(), out))
            self._cache["scans"] = have
        return have

    def mask(self, k: int):
        """The first ``k`` tokens of the order, as a boolean mask."""
        mask = np.zeros(self.V, dtype=bool)
        mask[self.order[:k]] = True
        return mask

    # -- passes 1 and 4
    def top(self, k: int):
        """The ``k`` most likely tokens of q in rank order (ties by index)."""
        if self._top.size < k:
            self.need["greedy"].add(k + 1)
            summary = _kernels.plan.q_summary(self.p, self.q, k)
            self._top, self.tail = summary[5], summary[6]  # the tail is the mass outside this top
            self._cache.pop("greedy", None)
        return self._top[:k]

    @property
    def held_top(self):
        """Every token of the top of q computed so far, in rank order (:meth:`top`)."""
        return self._top

    def rest_outside_top(self, n, tail):
        """The q mass outside ``top[:n - 1]``: ``tail`` (outside all of the top) plus the rest of it."""
        return math.fsum([tail] + [float(self.q[i]) for i in self._top[n - 1 :]])

    def greedy(self, ns):
        """``{n: (p(Top), sum min(p, q'), sum (p - q')_+, sum (q' - p)_+)}`` for every n of the greedy
        family (:func:`_kernels.plan.greedy_sums`; one pass for all the requested n)."""
        if any(n > self.support for n in ns):  # callers check the scheme first; never divide by 0 here
            raise ValueError(f"greedy drafts need at least max(n) tokens with q > 0, q has {self.support}")
        have = self._cache.get("greedy", {})
        if not set(ns) <= set(have):
            self.need["greedy"] = {n for n in self.need["greedy"] | set(ns) if n <= self.support}
            want = distinct_ns(self.need["greedy"])
            self.top(int(want[-1]) - 1)
            rest = np.array([self.rest_outside_top(n, self.tail) for n in want.tolist()])
            sums = _kernels.plan.greedy_sums(self.p, self.q, self._top, want, rest)
            have = dict(zip(want.tolist(), sums))
            self._cache["greedy"] = have
        return have

    def naive(self, ns):
        """``{n: (sum p pi, sum p (1 - pi))}`` for i.i.d. drafts (:func:`_kernels.plan.naive_moments`)."""
        have = self._cache.get("naive", {})
        if not set(ns) <= set(have):
            self.need["naive"] |= set(ns)
            want = sorted(self.need["naive"])
            poly = [n for n in want if n <= NAIVE_POLY_MAX_N]
            have = {}
            if poly:
                M, total_p = _kernels.plan.naive_moments(
                    self.p, self.q, self.total, self.big, self.big_rest, max(poly)
                )
                run = np.cumsum(M)  # positive terms: accept_n = M_0 + ... + M_{n-1}
                for n in poly:
                    accept = min(float(run[n - 1]), float(total_p))
                    have[n] = (accept, float(total_p) - accept)
            for n in want:
                if n > NAIVE_POLY_MAX_N:
                    have[n] = _kernels.plan.naive_log(self.p, self.q, self.total, self.big, self.big_rest, n)
            self._cache["naive"] = have
        return have


# -------------------------------------------------------------------------------------- bounds
def _closed_form_bound(plan: _Plan, s: str, n: int):
    """``(alpha*, |re-check difference|)`` from the scheme's closed-form dual and its ``mass``."""
    scheme = get_scheme(s)
    value, subset = scheme.closed_form_dual(plan.p, plan.q, n)
    mask = np.zeros(plan.V, dtype=bool)
    mask[np.asarray(subset, dtype=np.int64)] = True
    check = float(plan.p[mask].sum()) + 1.0 - scheme.mass(plan.q, n, mask)
    return float(value), abs(check - float(value))


def _prefix_bounds(plan: _Plan, requests):
    """Values and prefix lengths of the prefix-optimal schemes (sequential n >= 3 excluded)."""
    out = {}
    code = {key: get_scheme(key[0]).kernel_code for key in requests}
    cp = sorted({n for (s, n) in requests if code[(s, n)] == KERNEL_CP and n > 1})
    keys = {(s, n): (n if (n == 1 or code[(s, n)] == KERNEL_WITH) else WOR2_SCAN) for s, n in requests}
    scans = plan.scans({k for key, k in keys.items() if code[key] != KERNEL_CP or key[1] == 1})
    M = E = None
    if cp:
        ps, qs, P, Q, _ = plan.sorted
        M, E = _kernels.esp_prefix_scaled(qs, np.array(cp, dtype=np.int64))
    for s, n in requests:
        if code[(s, n)] == KERNEL_CP and n > 1:
            j = cp.index(n)
            d, k = _kernels.scan_conditional_poisson_sums(M[j], E[j], P, Q)
        else:
            d, k = scans[keys[(s, n)]]
        out[(s, n)] = (max(1.0 - float(d), 0.0), int(k))
    return out


def _recheck_prefixes(plan: _Plan, solved):
    """Re-evaluate ``p(H) + 1 - Q(H)`` of every prefix certificate ``H`` (the first ``k`` tokens of the
    order) by code that shares nothing with the scans but p and q along the order: plain (numpy
    pairwise) sums over the segments between the certificates' lengths, added up from the left for
    ``H`` and from the right for its complement (one pass over p and two over q for all of them), no
    prefix table, the total and the largest token of q found again; returns
    ``{(scheme, n): |difference|}``. Conditional Poisson goes through :meth:`DraftScheme.mass` (its own
    ``log e_n`` of the masked draft)."""
    code = {key: get_scheme(key[0]).kernel_code for key in solved}
    keys = [key for key in solved if code[key] != KERNEL_CP]
    diffs = {}
    if keys:
        po, qo = plan.sorted[:2]
        total = float(qo.sum())
        b = int(np.argmax(qo))  # the only rank whose 1 - q can cancel (q > total / 2)
        big = bool(qo[b] > 0.5 * total)
        big_rest = float(qo[:b].sum() + qo[b + 1 :].sum()) if big else 1.0
        cuts = sorted({solved[key][1] for key in keys})
        p_in, q_in, q_out = {}, {}, {}
        run_p = run_q = 0.0
        for lo, hi in zip([0] + cuts, cuts):  # H grows segment by segment
            run_p += float(po[lo:hi].sum())
            run_q += float(qo[lo:hi].sum())
            p_in[hi], q_in[hi] = run_p, run_q
        run_q = 0.0
        for lo, hi in reversed(list(zip(cuts, cuts[1:] + [qo.size]))):  # the complement, from the right
            run_q += float(qo[lo:hi].sum())
            q_out[lo] = run_q
        for s, n in keys:
            value, k = solved[(s, n)]
            if n == 1 or code[(s, n)] == KERNEL_WITH:
                mass = with_mass_from_sums(q_in[k], q_out[k], n)
            else:
                mass = pair_mass_of_prefix(qo, k, q_in[k], q_out[k], total, b if big else -1, big_rest)
            diffs[(s, n)] = abs(p_in[k] + 1.0 - mass - value)
    for s, n in solved:
        if code[(s, n)] == KERNEL_CP:
            value, k = solved[(s, n)]
            mask = plan.mask(k)
            check = float(plan.p[mask].sum()) + 1.0 - get_scheme(s).mass(plan.q, n, mask)
            diffs[(s, n)] = abs(check - value)
    return diffs


def _sequential_bound(plan: _Plan, s: str, n: int):
    """A scheme whose Q(H) is a quadrature at this n (sequential sampling, n >= 3): the pruned
    quadrature scan on the plan's arrays, re-checked by the independent quadrature with the refinement
    loop of :func:`mdsd_ot.optimal_acceptance`."""
    ps, qs, P, Q, R = plan.sorted
    scheme = get_scheme(s)
    refine = 0
    while True:
        d, k = _kernels.solve_sorted(ps, qs, n, scheme.kernel_code, refine, sums=(P, Q, R))
        value = max(1.0 - float(d), 0.0)
        if is_sequential_scan(scheme, n):  # on the sorted slices, by the independent evaluation
            check = sequential_objective(ps, qs, int(k), n, refine)
        else:
            mask = plan.mask(int(k))
            check = float(plan.p[mask].sum()) + 1.0 - scheme.mass(plan.q, n, mask, refine=refine)
        diff = abs(check - value)
        if diff <= RECHECK_TOL or refine == QUAD_MAX_REFINE:
            return value, diff
        refine += 1


# ----------------------------------------------------------------------------------- verifiers
def _unit(x):
    from .verifiers.base import unit_interval

    return unit_interval(x)


# --------------------------------------------------------------------------------- entry points
def _check_scheme(scheme, q, n, support):
    """``scheme.check(q, n)`` from the support size counted once (the scheme's own message on failure)."""
    if (scheme.fixed_n is None or n == scheme.fixed_n) and support >= scheme._min_support(n):
        return
    scheme.check(q, n)


def _evaluate(p, q, bounds, verifiers, *, seed=0, mc_samples=None) -> PositionEvaluation:
    """The plan for validated, normalised ``p``, ``q``; ``bounds`` a list of ``(scheme, n)``,
    ``verifiers`` a list of ``(name, n)`` (names resolved to registry names)."""
    from .verifiers import get_verifier

    # what the passes must compute, so that each runs once
    named = [(get_verifier(name), n) for name, n in verifiers]
    asks = []
    for s, n in bounds:
        scheme = get_scheme(s)
        kind = scheme.plan_route(n)
        if kind == "greedy":
            asks.append({"greedy": n})
        elif kind == "prefix" and scheme.kernel_code == KERNEL_WITHOUT and n == 2:
            asks.append({"wor2": True})
    for v, n in named:
        entry = v.plan
        if entry is not None and entry.covers(n):
            asks.append(entry.needs(n))
    need = {"greedy": set(), "naive": set(), "wor2": False, "rsd2": False}
    for ask in asks:
        for key, value in ask.items():
            if isinstance(need[key], set):
                need[key].add(value)
            else:
                need[key] = need[key] or bool(value)
    plan = _Plan(p, q, **need)
    try:
        return _run(plan, p, q, bounds, verifiers, named, seed=seed, mc_samples=mc_samples)
    finally:
        plan.close()


def _bound_values(plan, p, q, bounds):
    """``(values, errors)`` for a list of ``(scheme, n)``: every bound by the plan's passes, each
    re-checked independently (a failed re-check goes through the one-at-a-time API, refinement
    included; ``None`` with its message where that fails too or the scheme cannot run)."""
    from . import api

    values, errors = {}, {}
    runnable = []
    for s, n in bounds:
        try:
            _check_scheme(get_scheme(s), q, n, plan.support)
        except ValueError as exc:
            values[(s, n)] = None
            errors[bound_key(s, n)] = str(exc)
            continue
        runnable.append((s, n))
    found, diffs = {}, {}
    kinds = {key: get_scheme(key[0]).plan_route(key[1], same=plan.same) for key in runnable}
    for key, kind in kinds.items():
        if kind == "same":  # identical distributions: exactly 1 (as optimal_acceptance)
            found[key], diffs[key] = 1.0, 0.0
        elif kind == "closed_form":
            found[key], diffs[key] = _closed_form_bound(plan, *key)
    solved = _prefix_bounds(plan, [key for key, kind in kinds.items() if kind == "prefix"])
    found.update({key: v for key, (v, _) in solved.items()})
    diffs.update(_recheck_prefixes(plan, solved))
    for (s, n), kind in kinds.items():
        if kind == "sequential":
            found[(s, n)], diffs[(s, n)] = _sequential_bound(plan, s, n)
    family = sorted({n for (s, n), kind in kinds.items() if kind == "greedy"})
    if family:
        greedy = greedy_plan_bounds(plan, family)
        for (s, n), kind in kinds.items():
            if kind == "greedy":
                found[(s, n)], diffs[(s, n)] = greedy[n]
    for s, n in runnable:
        if diffs[(s, n)] <= RECHECK_TOL:
            values[(s, n)] = found[(s, n)]
            continue
        res = api.optimal_acceptance(p, q, n, sampling=s)  # the one-at-a-time path, refinement included
        values[(s, n)] = float(res.value) if res.success else None
        if not res.success:
            errors[bound_key(s, n)] = res.message
    return values, errors


def _bound_scheme(sampling: str) -> str:
    """The scheme whose alpha* bounds a verifier run under ``sampling`` (that scheme, or the one with
    the same draft-set law, as the study compares them)."""
    scheme = get_scheme(sampling)
    return scheme.same_sets_as or scheme.name


def _check_verifiers_below_bounds(plan, p, q, result):
    """Every verifier value against the optimal acceptance of its scheme, whether or not that bound
    was requested (the missing ones are computed here, re-checked as requested ones are, and not
    reported): a value above it by more than ``RECHECK_TOL`` plus four standard errors is an internal
    error, recorded in ``errors`` with the input's fingerprint instead of the value."""
    from ._validate import fingerprint

    want = {}
    for (name, n), r in result.verifiers.items():
        if r is not None:
            want[(name, n)] = (_bound_scheme(r.sampling), n)
    missing = sorted({key for key in want.values() if key not in result.bounds})
    extra = _bound_values(plan, p, q, missing)[0] if missing else {}
    for (name, n), key in want.items():
        bound = result.bounds[key] if key in result.bounds else extra.get(key)
        r = result.verifiers[(name, n)]
        if bound is None or r.value - bound <= RECHECK_TOL + 4.0 * r.stderr:
            continue
        result.verifiers[(name, n)] = None
        result.errors[verifier_key(name, n)] = (
            f"internal error: acceptance {r.value:.15g} above the bound {bound:.15g} of {key[0]!r} drafts; "
            f"please report this input (fingerprint {fingerprint(p, q, n=n, verifier=r.verifier)})"
        )


def _run(plan, p, q, bounds, verifiers, named, *, seed, mc_samples) -> PositionEvaluation:
    from .verifiers import VerifierAcceptance, get_verifier, verifier_acceptance

    result = PositionEvaluation()
    # -- bounds
    values, errors = _bound_values(plan, p, q, bounds)
    result.bounds.update(values)
    result.errors.update(errors)
    # -- verifiers
    fused: dict[str, list] = {}
    for (name, n), (v, _) in zip(verifiers, named):
        try:
            v.check_n(n)
            _check_scheme(v.resolve_scheme(None), q, n, plan.support)
        except ValueError as exc:
            result.verifiers[(name, n)] = None
            result.errors[verifier_key(name, n)] = str(exc)
            continue
        entry = v.plan
        if entry is not None and entry.covers(n):
            fused.setdefault(v.name, []).append(n)
            continue
        kw = {"rng": np.random.default_rng(seed)}
        if mc_samples:
            kw["samples"] = int(mc_samples)
        try:
            result.verifiers[(name, n)] = verifier_acceptance(v.name, p, q, n, **kw)
        except ValueError as exc:
            result.verifiers[(name, n)] = None
            result.errors[verifier_key(name, n)] = str(exc)
    for name, ns in fused.items():
        values = get_verifier(name).plan.evaluate(plan, ns)
        scheme = get_verifier(name).scheme
        for n, value in zip(ns, values):
            if isinstance(value, Exception):  # a value the plan could not vouch for
                result.verifiers[(name, n)] = None
                result.errors[verifier_key(name, n)] = str(value)
                continue
            result.verifiers[(name, n)] = VerifierAcceptance(_unit(value), 0.0, "exact", name, scheme, n)
    _check_verifiers_below_bounds(plan, p, q, result)
    return result


def evaluate_position(
    p,
    q,
    ns,
    *,
    schemes=DEFAULT_SCHEMES,
    verifiers=DEFAULT_VERIFIERS,
    seed: int = 0,
    mc_samples: int | None = None,
    normalize: bool = False,
) -> PositionEvaluation:
    """Every requested bound and verifier acceptance of one position, from one sort.

    The values are those of :func:`mdsd_ot.optimal_acceptance` and
    :func:`mdsd_ot.verifier_acceptance` (each verifier under its own draft scheme) to 1e-12, at a
    fraction of the cost: the tokens are ordered once and every quantity is an O(V) pass over shared
    tables (module docstring; docs/math.md#evaluation-plan). Each bound's certificate is re-checked
    independently, as the one-at-a-time API does.

    Parameters
    ----------
    p, q : array_like, shape (V,)
        Target and draft distributions (validated and normalised as in ``optimal_acceptance``).
    ns : iterable of int
        Numbers of drafts.
    schemes : iterable of str
        Draft schemes whose optimal acceptance to evaluate (``hub`` only for n = 2; skipped
        otherwise).
    verifiers : iterable of str
        Verifier names (aliases accepted); ``spechub`` only for n = 2.
    seed : int
        Seed of the Monte Carlo fallbacks (RSD with n >= 3 at large V): ``np.random.default_rng(seed)``,
        as :func:`mdsd_ot.study.evaluate_rows` passes it.
    mc_samples : int or None
        Monte Carlo samples of those fallbacks (default: ``verifier_acceptance``'s).
    normalize : bool
        Rescale p and q to sum to one instead of rejecting unnormalised input.

    Returns
    -------
    PositionEvaluation
        ``bounds[(scheme, n)]``, ``verifiers[(name, n)]`` (a ``VerifierAcceptance``), ``errors``
        for the quantities that cannot be computed (e.g. too few tokens with q > 0 for n).

    Examples
    --------
    >>> from mdsd_ot.plan import evaluate_position
    >>> r = evaluate_position([0.5, 0.3, 0.2, 0.0], [0.1, 0.2, 0.3, 0.4], [2])
    >>> round(r.bounds[("with_replacement", 2)], 6), round(r.bounds[("without_replacement", 2)], 6)
    (0.69, 0.734524)
    >>> round(r.verifiers[("rrs", 2)].value, 6), r.verifiers[("spechub", 2)].method
    (0.65, 'exact')
    """
    from .verifiers import get_verifier

    p, q = normalized_pair(p, q, normalize=normalize)
    ns = sorted({check_n(n) for n in ns})
    schemes = [get_scheme(s).name for s in schemes]
    names = [get_verifier(v).name for v in verifiers]
    bounds = [(s, n) for s in schemes for n in ns if get_scheme(s).fixed_n in (None, n)]
    pairs = [(v, n) for v in names for n in ns if not (get_verifier(v).fixed_n not in (None, n))]
    return _evaluate(p, q, bounds, pairs, seed=seed, mc_samples=mc_samples)


def evaluate_checked(p, q, bounds, verifiers, *, seed=0, mc_samples=None) -> dict:
    """The study's row (:meth:`PositionEvaluation.row`) for explicit lists of ``(scheme, n)`` and
    ``(verifier, n)``; input the one-at-a-time API would reject gives ``None`` values with its message.

    Parameters
    ----------
    p, q : array_like, shape (V,)
        Target and draft distributions (checked by :func:`mdsd_ot._validate.check_pair`, then rescaled
        to sum to one).
    bounds : iterable of tuple
        ``(scheme, n)`` pairs whose alpha* to evaluate.
    verifiers : iterable of tuple
        ``(verifier, n)`` pairs whose acceptance to evaluate.
    seed : int
        Seed of the Monte Carlo fallbacks.
    mc_samples : int or None
        Monte Carlo samples of those fallbacks (default: ``verifier_acceptance``'s).

    Returns
    -------
    dict
        The row: value keys (``None`` where not computed) and ``errors`` for the failures.
    """
    try:
        p, q = check_pair(p, q)
    except ValueError as exc:
        keys = [bound_key(s, n) for s, n in bounds] + [verifier_key(v, n) for v, n in verifiers]
        row = {k: None for k in keys}
        if keys:
            row["errors"] = {k: str(exc) for k in keys}
        return row
    p /= p.sum()
    q /= q.sum()
    return _evaluate(p, q, bounds, verifiers, seed=seed, mc_samples=mc_samples).row()


def evaluate_positions(P, Q, ns, **kwargs) -> list:
    """:func:`evaluate_position` for each row of ``(B, V)`` arrays (a loop over rows).

    Parameters
    ----------
    P, Q : array_like, shape (B, V)
        Target and draft distributions, one position per row (``ValueError`` for other shapes).
    ns : iterable of int
        Numbers of drafts.
    **kwargs
        Keyword arguments of :func:`evaluate_position` (``schemes``, ``verifiers``, ``seed``, ...).

    Returns
    -------
    list of PositionEvaluation
        One per row.
    """
    P = np.asarray(P, dtype=np.float64)
    Q = np.asarray(Q, dtype=np.float64)
    if P.ndim != 2 or P.shape != Q.shape:
        raise ValueError(f"P and Q must have the same shape (B, V); got {P.shape} and {Q.shape}")
    return [evaluate_position(p, q, ns, **kwargs) for p, q in zip(P, Q)]


def __getattr__(name):
    if name == "PLAN_VERIFIERS":  # deprecated: each verifier module holds its plan formula
        from .verifiers import deprecated_formula_registry

        return deprecated_formula_registry("plan", "mdsd_ot.plan.PLAN_VERIFIERS")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

"""Every bound and every verifier acceptance of one position from one sort (docs/math.md#evaluation-plan).

:func:`evaluate_position` evaluates, for a target ``p`` and a draft ``q``, the optimal acceptance of
several draft schemes and the exact acceptance of several verifiers, for several ``n`` at once. The
one-at-a-time API (:func:`mdsd_ot.optimal_acceptance`, :func:`mdsd_ot.verifier_acceptance`) sorts
and allocates for every quantity; here the tokens are ordered once by ``q/p`` (a bucket sort on the
bits of the ratio, O(V) for spread-out ratios) and every quantity is a pass over shared tables:

==============================  =====================================================================
quantity                        from the shared tables
==============================  =====================================================================
with replacement, any n         prefix sums of p and q along the order (one scan per n)
without replacement, n = 2      the same, plus the prefix sum of ``q_i / (1 - q_i)``
without replacement, n >= 3     the quadrature scan on the sorted arrays (its own preparation)
conditional Poisson             ``log e_n`` prefixes for every n in one pass
greedy, hub                     the top of q (one O(V) selection) and one pass for every n
naive (i.i.d.)                  one pass for every n
rrs, spectr                     ratio tables read off the order (no second sort)
rrs_without_replacement, n = 2  the tokens with p > q in the order (no second sort)
==============================  =====================================================================

Every bound's certificate is re-checked as :func:`mdsd_ot.optimal_acceptance` does it, by code that
does not run the scans: plain masked sums in token-index order for the prefix certificates, an
independent check of the top tokens and the rest mass for greedy drafts, and
:meth:`mdsd_ot.drafts.DraftScheme.mass` (the independent quadrature) for sequential sampling with
n >= 3 and for conditional Poisson. A value whose re-check fails is recomputed by the one-at-a-time
API, and left out (``None``, with the message in ``errors``) if that fails too.

Verifiers without a plan kernel (RSD with n >= 3, any verifier under a non-default scheme, the LP
``optimal`` verifier) go through :func:`mdsd_ot.verifier_acceptance`, so their value is exactly the
one-at-a-time one. A verifier whose acceptance follows from the plan's tables registers a function
in :data:`PLAN_VERIFIERS` (the hook for the full-vocabulary optimal verifier).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from . import _kernels
from ._config import QUAD_MAX_REFINE, RECHECK_TOL
from ._kernels import plan as _plan_kernels  # noqa: F401  (registers _kernels.plan)
from ._kernels import verifiers as _verifier_kernels
from ._validate import check_n, check_pair
from .drafts import complement_masses, get_scheme, with_mass_from_sums

__all__ = [
    "PositionEvaluation",
    "evaluate_position",
    "evaluate_positions",
    "evaluate_checked",
    "PLAN_VERIFIERS",
    "DEFAULT_SCHEMES",
    "DEFAULT_VERIFIERS",
]

#: Draft schemes evaluated by default (hub is n = 2 only; it is skipped for other n).
DEFAULT_SCHEMES = ("with_replacement", "without_replacement", "greedy", "hub", "conditional_poisson")

#: Verifiers evaluated by default (each under its own draft scheme).
DEFAULT_VERIFIERS = ("naive", "rrs", "rrs_without_replacement", "spectr", "spechub", "greedy")


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
            out[f"bound:{s}@{n}"] = v
        for (name, n), r in self.verifiers.items():
            key = f"verifier:{name}@{n}"
            out[key] = None if r is None else float(r.value)
            if r is not None and r.stderr > 0:
                out[key + ":se"] = float(r.stderr)
        if self.errors:
            out["errors"] = dict(self.errors)
        return out


# ------------------------------------------------------------------------------------ the plan
class _Plan:
    """Shared tables of one validated, normalised position, built on first use."""

    def __init__(self, p: np.ndarray, q: np.ndarray):
        self.p = p
        self.q = q
        self.V = p.size
        self.same = bool(np.array_equal(p, q))
        self._cache = {}

    def _get(self, name, build):
        if name not in self._cache:
            self._cache[name] = build()
        return self._cache[name]

    @property
    def order(self):
        return self._get("order", lambda: _kernels.plan.ratio_order(self.p, self.q))

    @property
    def sorted(self):
        """``(ps, qs, P, Q, R)``: p and q in the plan's order, prefix sums, suffix sums of q."""

        def build():
            o = self.order
            ps = np.ascontiguousarray(self.p[o])
            qs = np.ascontiguousarray(self.q[o])
            return ps, qs, _kernels.prefix_sums(ps), _kernels.prefix_sums(qs), _kernels.suffix_sums(qs)

        return self._get("sorted", build)

    @property
    def rank(self):
        def build():
            r = np.empty(self.V, dtype=np.int64)
            r[self.order] = np.arange(self.V, dtype=np.int64)
            return r

        return self._get("rank", build)

    @property
    def ratios(self):
        return self._get("ratios", lambda: _kernels.plan.ratio_tables(*self.sorted[:2]))

    def top(self, k: int):
        """The ``k`` most likely tokens of q in rank order (ties by index); grows on demand."""
        if k > self.V:  # the kernel writes k entries: never ask it for more tokens than there are
            raise ValueError(f"asked for the top {k} tokens of a vocabulary of {self.V}")
        have = self._cache.get("top")
        if have is None or have.size < k:
            have = _kernels.plan.top_of_q(self.q, max(k, 1))
            self._cache["top"] = have
        return have[:k]

    def greedy(self, ns):
        """``{n: greedy_sums row}`` (:func:`_kernels.plan.greedy_sums`) for every n of the greedy family
        (one pass for all the n registered in ``greedy_ns`` and these)."""
        have = self._cache.setdefault("greedy", {})
        missing = [n for n in ns if n not in have]
        if missing:
            support = int(np.count_nonzero(self.q > 0))  # greedy drafts need n tokens with q > 0
            want = sorted(n for n in set(missing) | set(self._cache.get("greedy_ns", ())) if n <= support)
            if any(n > support for n in missing):
                raise ValueError(f"greedy drafts need at least max(n) tokens with q > 0, q has {support}")
            top = self.top(max(want) - 1)
            sums = _kernels.plan.greedy_sums(self.p, self.q, top, np.array(want, dtype=np.int64))
            have.update(zip(want, sums))
        return have

    @property
    def complement(self):
        return self._get("complement", lambda: complement_masses(self.q))


# -------------------------------------------------------------------------------------- bounds
def _bound_kind(scheme, n: int, same: bool) -> str:
    """How the plan evaluates a scheme's bound, from what the scheme owns (no names):
    ``same`` (p == q and Q(H) <= q(H): exactly 1), ``prefix`` (a sorted-prefix kernel from the shared
    sums), ``sequential`` (the quadrature scan, n >= 3), ``greedy`` (the fused greedy/hub sums) or
    ``closed_form`` (the scheme's own closed-form dual, re-checked by its ``mass``)."""
    if same and scheme.q_dominates:
        return "same"
    if scheme.kernel_code is not None:
        return "sequential" if scheme.is_quadrature(n) else "prefix"
    if "greedy" in (scheme.name, scheme.same_sets_as):
        return "greedy"
    return "closed_form"


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
    ps, qs, P, Q, R = plan.sorted
    out = {}
    code = {key: get_scheme(key[0]).kernel_code for key in requests}  # 0 with, 1 without, 2 CP
    cp = sorted({n for (s, n) in requests if code[(s, n)] == 2 and n > 1})
    L = _kernels.log_esp_prefix_many(qs, np.array(cp, dtype=np.int64)) if cp else None
    rest_s = None
    for s, n in requests:
        if n == 1 or code[(s, n)] == 0:
            d, k = _kernels.scan_with_replacement_sums(P, Q, R, n)
        elif code[(s, n)] == 1:  # n == 2
            if rest_s is None:
                rest_s = _kernels.complement_masses_kernel(qs)
            d, k = _kernels.scan_without_replacement_2_sums(P, Q, R, qs, rest_s)
        else:  # conditional Poisson
            d, k = _kernels.scan_conditional_poisson_sums(L[cp.index(n)], P, Q)
        out[(s, n)] = (max(1.0 - float(d), 0.0), int(k))
    return out


def _recheck_prefixes(plan: _Plan, solved):
    """Re-evaluate ``p(H) + 1 - Q(H)`` of every prefix certificate by plain masked sums (no prefix
    sums); returns ``{(scheme, n): |difference|}``. Conditional Poisson goes through
    :meth:`DraftScheme.mass` (its own ``log e_n`` of the masked draft)."""
    keys = [key for key in solved if key[0] != "conditional_poisson"]
    diffs = {}
    if keys:
        ks = np.array([solved[key][1] for key in keys], dtype=np.int64)
        sums = _kernels.plan.prefix_certificate_sums(plan.p, plan.q, plan.rank, ks)
        for (s, n), row in zip(keys, sums):
            p_in, q_in, q_out, odds, big_q, big_rest, big_in = row
            if n == 1 or s == "with_replacement":
                mass = with_mass_from_sums(q_in, q_out, n)
            else:  # W_2(H) = q(H) - R sum_{i in H} q_i / (1 - q_i), the big token's term as q (R / (1 - q))
                mass = q_in - q_out * odds - (big_q * (q_out / big_rest) if big_in else 0.0)
            diffs[(s, n)] = abs(p_in + 1.0 - mass - solved[(s, n)][0])
    for s, n in solved:
        if s == "conditional_poisson":
            value, k = solved[(s, n)]
            mask = np.zeros(plan.V, dtype=bool)
            mask[plan.order[:k]] = True
            check = float(plan.p[mask].sum()) + 1.0 - get_scheme(s).mass(plan.q, n, mask)
            diffs[(s, n)] = abs(check - value)
    return diffs


def _sequential_bound(plan: _Plan, n: int):
    """Sequential sampling with n >= 3: the pruned quadrature scan on the plan's arrays, re-checked by
    the independent quadrature with the refinement loop of :func:`mdsd_ot.optimal_acceptance`."""
    ps, qs = plan.sorted[:2]
    scheme = get_scheme("without_replacement")
    refine = 0
    while True:
        d, k = _kernels.solve_sorted(ps, qs, n, scheme.kernel_code, refine)
        value = max(1.0 - float(d), 0.0)
        mask = np.zeros(plan.V, dtype=bool)
        mask[plan.order[: int(k)]] = True
        check = float(plan.p[mask].sum()) + 1.0 - scheme.mass(plan.q, n, mask, refine=refine)
        diff = abs(check - value)
        if diff <= RECHECK_TOL or refine == QUAD_MAX_REFINE:
            return value, diff
        refine += 1


def _greedy_bounds(plan: _Plan, ns):
    """Greedy (and hub) closed forms for every n, each re-checked (:func:`greedy_certificate`)."""
    sums = plan.greedy(ns)
    out = {}
    for n in ns:
        p_top, gain = sums[n][0], sums[n][4]
        excess = gain - p_top  # Q(H) - p(H) for H = Top + {q' > p} (docs/math.md#greedy-and-hub)
        if excess <= 0.0:
            out[n] = (1.0, 0.0)  # the empty set certifies 1
            continue
        value = max(1.0 - float(excess), 0.0)
        check = _kernels.plan.greedy_certificate(plan.p, plan.q, plan.top(n - 1), n)
        out[n] = (value, abs(check - value) if np.isfinite(check) else np.inf)
    return out


# ----------------------------------------------------------------------------------- verifiers
def _unit(x):
    from .verifiers.base import unit_interval

    return unit_interval(x)


def _v_naive(plan: _Plan, ns):
    from .verifiers.base import accept_fraction

    sums = _kernels.plan.naive_with_sums(plan.p, plan.q, plan.complement, np.array(ns, dtype=np.int64))
    return [accept_fraction(float(a), float(r)) for a, r in sums]


def _v_rrs(plan: _Plan, ns):
    from .verifiers.specinfer import rrs_chain

    t, P, Q = plan.ratios[4:]
    return [1.0 - r for r in rrs_chain(t, P, Q, ns)]


def _v_spectr(plan: _Plan, ns):
    from .verifiers.spectr import accept_any, kseq_rho_sorted

    t, P_up, Q_up, Q_hi = plan.ratios[:4]
    ps = plan.sorted[0]
    t_max = float(t[-1]) if t.size and not np.any(ps[t.size :] > 0) else np.inf
    total = float(plan.q.sum())
    out = []
    for n in ns:
        rho = kseq_rho_sorted(t, Q_up, P_up, Q_hi, n, t_max)
        k = int(np.searchsorted(t, rho, side="left"))  # tokens with p / rho < q: the first k
        beta = Q_hi[k] + P_up[k] / rho  # sum min(q, p / rho)
        reject = max(Q_up[k] - P_up[k] / rho, 0.0)  # sum (q - p / rho)_+
        out.append(accept_any(beta / total, reject / total, n))
    return out


def _v_greedy(plan: _Plan, ns):
    from .verifiers.base import accept_fraction

    sums = plan.greedy(ns)
    return [accept_fraction(float(sums[n][0] + sums[n][2]), float(sums[n][3])) for n in ns]


def _v_spechub(plan: _Plan, ns):
    from .verifiers.base import accept_fraction

    p_top, _, s, rejected, reject = plan.greedy([2])[2]  # S, sum (p - q')_+, sum (q' - p)_+
    a = int(plan.top(1)[0])
    hub = min(float(plan.p[a]), float(reject))
    return [accept_fraction(float(s) + hub, float(rejected) + (float(plan.p[a]) - hub)) for _ in ns]


def _v_rsd2(plan: _Plan, ns):
    from .verifiers.rsd import rsd_rejection

    out = []
    for n in ns:
        if n == 2:
            p, q, o = plan.p, plan.q, plan.order
            idx = np.ascontiguousarray(o[p[o] > q[o]])  # the tokens with p > q in increasing p/q
            tv = float(np.maximum(p - q, 0.0).sum())
            with np.errstate(divide="ignore"):  # q = 0: key +inf
                key = np.log((p[idx] - q[idx]) / tv) - np.log(q[idx]) if tv > 0 else np.zeros(idx.size)
            rej = _verifier_kernels.rsd2_rejection_keyed(p, q, plan.complement, idx, key, tv)
        else:  # n = 1: one speculative-sampling step
            rej = rsd_rejection(plan.p, plan.q, 1)
        out.append(1.0 - float(rej))
    return out


#: ``name -> (ns_supported, function(plan, ns) -> list of acceptances)`` for verifiers evaluated from
#: the plan's tables (each under its own default scheme). ``ns_supported(n)`` says which n the
#: function covers; other n go through :func:`mdsd_ot.verifier_acceptance`. The full-vocabulary
#: optimal verifier registers here: ``PLAN_VERIFIERS["optimal"] = (lambda n: True, fn)``, where ``fn``
#: may read ``plan.sorted`` (``ps, qs, P, Q, R`` along the q/p order) and ``plan.order``.
PLAN_VERIFIERS: dict[str, tuple[Callable, Callable]] = {
    "naive": (lambda n: True, _v_naive),
    "rrs": (lambda n: True, _v_rrs),
    "spectr": (lambda n: True, _v_spectr),
    "greedy": (lambda n: True, _v_greedy),
    "spechub": (lambda n: n == 2, _v_spechub),
    "rrs_without_replacement": (lambda n: n <= 2, _v_rsd2),
}


# --------------------------------------------------------------------------------- entry points
def _bound_key(s, n):
    return f"bound:{s}@{n}"


def _verifier_key(name, n):
    return f"verifier:{name}@{n}"


def _evaluate(p, q, bounds, verifiers, *, seed=0, mc_samples=None) -> PositionEvaluation:
    """The plan for validated, normalised ``p``, ``q``; ``bounds`` a list of ``(scheme, n)``,
    ``verifiers`` a list of ``(name, n)`` (names resolved to registry names)."""
    from . import api
    from .verifiers import VerifierAcceptance, get_verifier, verifier_acceptance

    plan = _Plan(p, q)
    family = {n for s, n in bounds if s in ("greedy", "hub")}
    plan._cache["greedy_ns"] = sorted(family | {n for v, n in verifiers if v in ("greedy", "spechub")})
    result = PositionEvaluation()
    # -- bounds
    runnable = []
    for s, n in bounds:
        try:
            get_scheme(s).check(q, n)
        except ValueError as exc:
            result.bounds[(s, n)] = None
            result.errors[_bound_key(s, n)] = str(exc)
            continue
        runnable.append((s, n))
    values, diffs = {}, {}
    kinds = {key: _bound_kind(get_scheme(key[0]), key[1], plan.same) for key in runnable}
    for key, kind in kinds.items():
        if kind == "same":  # identical distributions: exactly 1 (as optimal_acceptance)
            values[key], diffs[key] = 1.0, 0.0
        elif kind == "closed_form":
            values[key], diffs[key] = _closed_form_bound(plan, *key)
    solved = _prefix_bounds(plan, [key for key, kind in kinds.items() if kind == "prefix"])
    values.update({key: v for key, (v, _) in solved.items()})
    diffs.update(_recheck_prefixes(plan, solved))
    for (s, n), kind in kinds.items():
        if kind == "sequential":
            values[(s, n)], diffs[(s, n)] = _sequential_bound(plan, n)
    family = sorted({n for (s, n), kind in kinds.items() if kind == "greedy"})
    if family:
        greedy = _greedy_bounds(plan, family)
        for (s, n), kind in kinds.items():
            if kind == "greedy":
                values[(s, n)], diffs[(s, n)] = greedy[n]
    for s, n in runnable:
        if diffs[(s, n)] <= RECHECK_TOL:
            result.bounds[(s, n)] = values[(s, n)]
            continue
        res = api.optimal_acceptance(p, q, n, sampling=s)  # the one-at-a-time path, refinement included
        result.bounds[(s, n)] = float(res.value) if res.success else None
        if not res.success:
            result.errors[_bound_key(s, n)] = res.message
    # -- verifiers
    fused: dict[str, list] = {}
    for name, n in verifiers:
        v = get_verifier(name)
        try:
            v.check_n(n)
            v.resolve_scheme(None).check(q, n)
        except ValueError as exc:
            result.verifiers[(name, n)] = None
            result.errors[_verifier_key(name, n)] = str(exc)
            continue
        entry = PLAN_VERIFIERS.get(v.name)
        if entry is not None and entry[0](n):
            fused.setdefault(v.name, []).append(n)
            continue
        kw = {"rng": np.random.default_rng(seed)}
        if mc_samples:
            kw["samples"] = int(mc_samples)
        try:
            result.verifiers[(name, n)] = verifier_acceptance(v.name, p, q, n, **kw)
        except ValueError as exc:
            result.verifiers[(name, n)] = None
            result.errors[_verifier_key(name, n)] = str(exc)
    for name, ns in fused.items():
        values = PLAN_VERIFIERS[name][1](plan, ns)
        scheme = get_verifier(name).scheme
        for n, value in zip(ns, values):
            result.verifiers[(name, n)] = VerifierAcceptance(_unit(value), 0.0, "exact", name, scheme, n)
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

    p, q = check_pair(p, q, normalize=normalize)
    p /= p.sum()  # check_pair returned fresh copies
    q /= q.sum()
    ns = sorted({check_n(n) for n in ns})
    schemes = [get_scheme(s).name for s in schemes]
    names = [get_verifier(v).name for v in verifiers]
    bounds = [(s, n) for s in schemes for n in ns if not (s == "hub" and n != 2)]
    pairs = [(v, n) for v in names for n in ns if not (get_verifier(v).fixed_n not in (None, n))]
    return _evaluate(p, q, bounds, pairs, seed=seed, mc_samples=mc_samples)


def evaluate_checked(p, q, bounds, verifiers, *, seed=0, mc_samples=None) -> dict:
    """The study's row (:meth:`PositionEvaluation.row`) for explicit lists of ``(scheme, n)`` and
    ``(verifier, n)``; input the one-at-a-time API would reject gives ``None`` values with its message."""
    try:
        p, q = check_pair(p, q)
    except ValueError as exc:
        keys = [_bound_key(s, n) for s, n in bounds] + [_verifier_key(v, n) for v, n in verifiers]
        row = {k: None for k in keys}
        if keys:
            row["errors"] = {k: str(exc) for k in keys}
        return row
    p /= p.sum()
    q /= q.sum()
    return _evaluate(p, q, bounds, verifiers, seed=seed, mc_samples=mc_samples).row()


def evaluate_positions(P, Q, ns, **kwargs) -> list:
    """:func:`evaluate_position` for each row of ``(B, V)`` arrays (a loop over rows)."""
    P = np.asarray(P, dtype=np.float64)
    Q = np.asarray(Q, dtype=np.float64)
    if P.ndim != 2 or P.shape != Q.shape:
        raise ValueError(f"P and Q must have the same shape (B, V); got {P.shape} and {Q.shape}")
    return [evaluate_position(p, q, ns, **kwargs) for p, q in zip(P, Q)]

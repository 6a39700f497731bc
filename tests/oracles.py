"""Exact references for the tests, independent of the code under test.

* :func:`exact_set_law`, :func:`exact_alpha`: exact rational arithmetic (``fractions.Fraction``) by
  enumerating every ordered draft tuple and every subset (small V; any magnitude down to subnormals,
  since every float is an exact rational).
* :func:`class_sequential_mass`: ``W_n(H)`` for sequential sampling when the masses take a few
  distinct values, by a DP over how many tokens of each value have been drawn (no quadrature).
* :func:`uniform_sequential_alpha`: the closed form for a uniform draft, where the drafted set is a
  uniform n-subset: ``W_n(H) = C(|H|, n) / C(V, n)``.
* 50-digit :mod:`mpmath` references (``mp_*``): alpha* without replacement (n = 2, 3), greedy and
  conditional Poisson along every sorted prefix, for near-one-hot inputs at V ~ 10^3;
* :func:`brute_sequential_mass`: ``W_n(H)`` by enumerating every ordered draw sequence;
  :func:`slow_excess`: the dual's best prefix with ``Q`` evaluated subset by subset;
* :func:`exact_sequential_alpha`: alpha* for sequential sampling in exact rationals by a DP over the
  drawn sets (every subset H, no sorting theorem; V <= 9), and :func:`few_ordinary_sequential_alpha`,
  exact to a stated ``eps`` when fewer than n tokens carry non-negligible mass (any n);
* slow twins of the verifier kernels (suffix ``_slow``: the docs/math.md recursions verbatim, in
  numpy) and the draft-tuple RSD Monte Carlo kernel they are compared with.
"""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import mpmath
import numpy as np
from numba import njit

from mdsd_ot._kernels.verifiers import _excess, _undrafted_mass


def fr(x):
    """The exact rationals of a float vector, normalised to sum to one."""
    f = [Fraction(float(v)) for v in np.asarray(x, dtype=np.float64)]
    s = sum(f)
    return [v / s for v in f]


def top_indices(q, k):
    """The k largest entries' indices, ties by index."""
    return sorted(range(len(q)), key=lambda i: (-q[i], i))[:k]


def exact_set_law(q, n, scheme):
    """{frozenset: probability} of the drafted set, exact; ``q`` a list of Fractions."""
    V = len(q)
    sup = [i for i in range(V) if q[i] > 0]
    law = {}

    def add(t, pr):
        law[frozenset(t)] = law.get(frozenset(t), Fraction(0)) + pr

    if scheme == "with_replacement":
        for t in itertools.product(sup, repeat=n):
            add(t, math.prod((q[i] for i in t), start=Fraction(1)))
    elif scheme == "without_replacement":
        for t in itertools.permutations(sup, n):
            pr, used = Fraction(1), set()
            for i in t:
                pr *= q[i] / sum((q[j] for j in range(V) if j not in used), Fraction(0))
                used.add(i)
            add(t, pr)
    elif scheme == "conditional_poisson":
        sets = list(itertools.combinations(sup, n))
        w = [math.prod((q[i] for i in s), start=Fraction(1)) for s in sets]
        for s, wi in zip(sets, w):
            add(s, wi / sum(w))
    elif scheme == "greedy":
        top = top_indices(q, n - 1)
        rest = [i for i in sup if i not in top]
        mass = sum(q[i] for i in rest)
        for i in rest:
            add(top + [i], q[i] / mass)
    elif scheme == "hub":
        a = top_indices(q, 1)[0]
        rest = sum(q[i] for i in range(V) if i != a)
        for i in sup:
            if i != a:
                add((i, a), q[i])
                add((a, i), q[a] * q[i] / rest)
    elif scheme == "top_n":
        add(top_indices(q, n), Fraction(1))
    else:
        raise ValueError(scheme)
    return law


def exact_alpha(p, q, n, scheme):
    """Exact alpha* by brute force over all subsets (Fraction)."""
    P, Q = fr(p), fr(q)
    V = len(P)
    law = [(sum(1 << i for i in s), pr) for s, pr in exact_set_law(Q, n, scheme).items()]
    return min(
        sum((P[i] for i in range(V) if h >> i & 1), Fraction(0))
        + 1
        - sum((pr for m, pr in law if m & ~h == 0), Fraction(0))
        for h in range(1 << V)
    )


def exact_alpha_with_replacement(p, q, n):
    """Exact alpha* for i.i.d. drafts at any n: ``min_H p(H) + 1 - q(H)^n`` over all subsets."""
    P, Q = fr(p), fr(q)
    V = len(P)
    best = Fraction(1)
    for h in range(1 << V):
        pick = [i for i in range(V) if h >> i & 1]
        best = min(
            best, sum((P[i] for i in pick), Fraction(0)) + 1 - sum((Q[i] for i in pick), Fraction(0)) ** n
        )
    return best


def class_sequential_mass(values, inside, outside, n):
    """``W_n(H)`` for sequential draws when the masses take a few distinct values.

    ``values[c]`` is the mass of one token of class c, ``inside[c]`` how many of them H holds, and
    ``outside`` the total mass outside H. A DP over ``(drawn from class 0, drawn from class 1, ...)``
    in 50-digit arithmetic; every step adds non-negative terms and the mass left is a direct sum.
    """
    with mpmath.workdps(50):
        vals = [mpmath.mpf(float(v)) for v in values]
        out = mpmath.mpf(float(outside))
        states = {tuple(0 for _ in vals): mpmath.mpf(1)}
        for _ in range(n):
            nxt = {}
            for drawn, pr in states.items():
                left = out + mpmath.fsum((k - d) * v for k, d, v in zip(inside, drawn, vals))
                for c, v in enumerate(vals):
                    if inside[c] - drawn[c] > 0 and v > 0:
                        d2 = drawn[:c] + (drawn[c] + 1,) + drawn[c + 1 :]
                        nxt[d2] = nxt.get(d2, 0) + pr * (inside[c] - drawn[c]) * v / left
            states = nxt
        return mpmath.fsum(states.values())


def class_sequential_alpha(p, cls, values, n):
    """alpha* for sequential draws of a class-structured draft (token i has mass ``values[cls[i]]``).

    Prefixes of the tokens sorted by q/p (high to low; ``p = 0 < q`` first) contain an optimal H
    (the sorting theorem); ``W_n`` of a prefix depends only on its class counts. 50-digit arithmetic.
    The class DP runs at the prefixes in decreasing order of ``q(H) - p(H)``, an upper bound on
    ``W_n(H) - p(H)`` (all n draws in H implies the first in H), until that bound falls below the best
    value found: the skipped prefixes cannot attain the maximum, which is the one over every prefix.
    """
    with mpmath.workdps(50):
        V = len(p)
        P = [mpmath.mpf(float(x)) for x in p]
        total_p = mpmath.fsum(P)
        P = [x / total_p for x in P]
        vals = [mpmath.mpf(float(v)) for v in values]
        total_q = mpmath.fsum(vals[c] for c in cls)
        vals = [v / total_q for v in vals]
        q = [vals[c] for c in cls]
        key = [(mpmath.inf if P[i] == 0 else q[i] / P[i]) if q[i] > 0 else -mpmath.inf for i in range(V)]
        order = sorted(range(V), key=lambda i: -key[i])
        counts = [0] * len(vals)
        n_classes = [sum(1 for c in cls if c == k) for k in range(len(vals))]
        best = mpmath.mpf(0)
        pH = mpmath.mpf(0)
        pending = []  # (upper bound q(H) - p(H), p(H), class counts, mass outside H)
        for i in order:
            counts[cls[i]] += 1
            pH += P[i]
            out = mpmath.fsum((n_classes[k] - counts[k]) * vals[k] for k in range(len(vals)))
            if sum(counts[k] for k in range(len(vals)) if vals[k] > 0) < n:
                best = max(best, -pH)  # W = 0
            elif out == 0:
                best = max(best, 1 - pH)  # W = 1
            else:
                qH = mpmath.fsum(counts[k] * vals[k] for k in range(len(vals)))
                pending.append((qH - pH, pH, list(counts), out))
        pending.sort(key=lambda t: -t[0])
        for bound, pH, counts, out in pending:
            if bound < best - mpmath.mpf(10) ** -30:  # below the best by far more than rounding
                break
            best = max(best, class_sequential_mass(vals, counts, out, n) - pH)
        return 1 - best


def uniform_sequential_alpha(p, n):
    """alpha* for a uniform draft on all V tokens (sequential draws = a uniform n-subset).

    ``W_n(H) = C(|H|, n) / C(V, n)`` depends on |H| only, so the best H of each size holds the
    tokens of smallest p: ``alpha* = min_k [p_(1) + ... + p_(k) + 1 - C(k, n) / C(V, n)]``.
    40-digit arithmetic; the ratio is built as a product, never from factorials.
    """
    V = len(p)
    with mpmath.workdps(40):
        ps = [mpmath.mpf(x) for x in sorted(float(x) for x in p)]  # floats convert exactly: same order
        total = mpmath.fsum(ps)
        best = mpmath.mpf(1)
        pk = mpmath.mpf(0)
        ratio = mpmath.mpf(0)  # C(k, n) / C(V, n)
        for k in range(1, V + 1):
            pk += ps[k - 1] / total
            if k == n:
                ratio = mpmath.fprod(mpmath.mpf(n - i) / (V - i) for i in range(n))
            elif k > n:
                ratio = ratio * k / (k - n)
            best = min(best, pk + 1 - ratio)
        return best


def sequential_mass_3(q, mask):
    """``W_3(H)`` by its double-sum closed form (draw i, then j, then any third token of H):
    ``sum_{i != j in H} q_i q_j / (1 - q_i) * (q(H) - q_i - q_j) / (1 - q_i - q_j)``.

    O(|H|^2) in extended precision; every mass left is ``outside + (what is left of H)``, and what is
    left of H is summed directly wherever a subtraction could cancel (after the largest mass, and
    after the two largest: no 1 - q_max).
    """
    q = np.asarray(q, dtype=np.longdouble)
    q = q / q.sum()
    qh = q[mask]
    outside = q[~mask].sum()
    order = np.argsort(-qh)
    qh = qh[order]
    total_h = qh.sum()
    rest_without_top = qh[1:].sum()  # q(H) minus its largest mass, summed directly
    qi = qh[:, None]
    qj = qh[None, :]
    left_i = outside + total_h - qi  # mass left after drawing i
    left_i[0, 0] = outside + rest_without_top
    inside_ij = total_h - qi - qj  # what is left of H after drawing i and j
    inside_ij[0, :] = rest_without_top - qh
    inside_ij[:, 0] = inside_ij[0, :]
    if qh.size > 1:  # the two largest masses may hold almost all of H: sum the rest directly
        inside_ij[0, 1] = inside_ij[1, 0] = qh[2:].sum()
    terms = qi * qj / left_i * inside_ij / (outside + inside_ij)
    np.fill_diagonal(terms, 0.0)
    return float(terms.sum())


# ------------------------------------------------------------ slow twins of the verifier kernels
def rsd2_rejection_slow(p, q):
    """Pure-numpy O(V^2) twin of :func:`rsd2_rejection`: the recursion of docs/math.md#rsd verbatim."""
    d = np.maximum(p - q, 0.0)
    tv = d.sum()
    if tv <= 0.0:
        return 0.0
    r = d / tv
    total = 0.0
    for x in np.flatnonzero(q > p):
        keep = np.arange(q.size) != x
        s = np.where(keep, q, 0.0) / q[keep].sum()
        total += (q[x] - p[x]) * np.maximum(r - s, 0.0).sum()
    return float(total)


@njit(cache=True)  # self-contained (numpy only): numba's cache sees any change to it in this file
def rsd_mc_accept(p, q, n, u):
    """Per-sample P(accepted | drafts) of RSD, drafts drawn sequentially without replacement.

    The plain estimator, O(S n V): the library uses :func:`rsd_path_mc`; this one is kept as an
    independent cross-check of it in the tests.

    Row ``j`` of ``u`` (shape ``(S, n)``, uniforms in [0, 1)) draws the ``n`` drafts of sample ``j``
    by inverse CDF over the tokens not yet drawn (their mass is re-summed directly, never
    ``1 - q(drawn)``). Given the drafts, the acceptance probability
    ``1 - prod_i (1 - min(1, r_i(x_i) / s_i(x_i)))`` is exact (Rao-Blackwellised over the accept
    coins). Complexity O(S n V).
    """
    V = p.size
    S = u.shape[0]
    out = np.empty(S, dtype=np.float64)
    r = np.empty(V, dtype=np.float64)
    live = np.empty(V, dtype=np.bool_)
    for j in range(S):
        for i in range(V):
            r[i] = p[i]
            live[i] = q[i] > 0.0
        mass = 0.0
        for i in range(V):
            if live[i]:
                mass += q[i]
        alive = 1.0
        for step in range(n):
            # draw x from q restricted to the live tokens
            target = u[j, step] * mass
            acc = 0.0
            x = -1
            last = -1
            for i in range(V):
                if live[i]:
                    last = i
                    acc += q[i]
                    if acc > target:
                        x = i
                        break
            if x < 0:
                x = last
            a = r[x] * mass / q[x]
            if a > 1.0:
                a = 1.0
            alive *= 1.0 - a
            if alive <= 0.0 or step == n - 1:
                break
            # r <- (r - s)_+ normalised, s = q / mass on the live tokens
            tot = 0.0
            for i in range(V):
                d = r[i] - (q[i] / mass if live[i] else 0.0)
                if d > 0.0:
                    r[i] = d
                    tot += d
                else:
                    r[i] = 0.0
            if tot > 0.0:
                for i in range(V):
                    r[i] /= tot
            else:  # rejection had probability zero: keep a valid placeholder law
                alive = 0.0
                break
            live[x] = False
            mass = 0.0
            for i in range(V):
                if live[i]:
                    mass += q[i]
        out[j] = 1.0 - alive
    return out


def rsd_mc_accept_slow(p, q, n, u):
    """Pure-numpy twin of :func:`rsd_mc_accept` (same uniforms, same draws)."""
    S = u.shape[0]
    out = np.empty(S)
    for j in range(S):
        r = p.copy()
        live = q > 0
        alive = 1.0
        for step in range(n):
            w = np.where(live, q, 0.0)
            cdf = np.cumsum(w)
            mass = cdf[-1]
            x = int(np.searchsorted(cdf, u[j, step] * mass, side="right"))
            if x >= q.size:
                x = int(np.flatnonzero(live)[-1])
            a = min(1.0, r[x] * mass / q[x])
            alive *= 1.0 - a
            if alive <= 0.0 or step == n - 1:
                break
            d = np.maximum(r - w / mass, 0.0)
            if d.sum() <= 0.0:
                alive = 0.0
                break
            r = d / d.sum()
            live[x] = False
        out[j] = 1.0 - alive
    return out


@njit  # not cached: it calls the library's kernels, whose changes numba's cache would not see
def rsd_path_value(t, ps, qs, Ps, Qs, atoms, rest_q, path):
    """``E(theta_{n+1})`` along a given path of rejected tokens (sorted positions), O(n (n + log V)).

    The deterministic part of :func:`rsd_path_mc`, exposed for the tests: it equals ``prod_k Z_k`` of
    :func:`rsd_path_value_slow`.
    """
    theta = 0.0
    e = _excess(t, Ps, Qs, 0.0)
    mass = _undrafted_mass(qs, atoms, rest_q, path, 0)
    for k in range(path.size):
        theta = theta + e / mass
        e = _excess(t, Ps, Qs, theta)
        if e <= 0.0:
            return 0.0
        mass = _undrafted_mass(qs, atoms, rest_q, path, k + 1)
    return _excess(t, Ps, Qs, theta + e / mass)


def rsd_path_value_slow(p, q, path):
    """Pure-numpy twin of :func:`rsd_path_value`, straight from the residuals (no theta algebra).

    Returns ``(prod_k Z_k, probability of the path under the w-sampler)`` for the rejected tokens
    ``path`` (token ids), with ``Z_k = sum_y (s_k - r_k)_+`` the rejection probability of step k.
    Summing ``value * probability`` over all paths of length ``n - 1`` gives P(all n steps reject).
    """
    r, s = p.copy(), q.copy()
    value, prob = 1.0, 1.0
    for x in list(path) + [None]:
        w = np.maximum(s - r, 0.0)
        z = w.sum()
        value *= z
        if x is None or z <= 0.0:
            break
        prob *= w[x] / z
        d = np.maximum(r - s, 0.0)
        r = d / d.sum()
        s = s.copy()
        s[x] = 0.0
        s = s / s[np.arange(s.size) != x].sum()
    return value, prob


def cp_inclusion_slow(x, n):
    """Pure-numpy twin of :func:`cp_inclusion`: ``e_{n-1}`` recomputed without each token, O(n V^2)."""

    def e(v, k):
        t = np.zeros(k + 1)
        t[0] = 1.0
        for vi in v:
            t[1:] = t[1:] + vi * t[:-1]
        return t[k]

    e_n = e(x, n)
    return np.minimum(np.array([x[y] * e(np.delete(x, y), n - 1) / e_n for y in range(x.size)]), 1.0)


def _mp(x):
    v = [mpmath.mpf(float(t)) for t in x]
    s = mpmath.fsum(v)
    return [t / s for t in v]


_MP_MEMO: dict = {}


def _mp_memo(x):
    """:func:`_mp` of a float vector, remembered for the last few vectors at the current precision
    (callers that bound many subsets of one draft convert it once; the values are the same)."""
    x = np.asarray(x, dtype=np.float64)
    key = (x.tobytes(), mpmath.mp.prec)
    if key not in _MP_MEMO:
        if len(_MP_MEMO) >= 4:
            _MP_MEMO.pop(next(iter(_MP_MEMO)))
        _MP_MEMO[key] = tuple(_mp(x))
    return _MP_MEMO[key]


def mp_without_replacement_2(p, q):
    """alpha*_without (n = 2) in 50-digit arithmetic: W_2 at every prefix sorted by q/p.

    docs/math.md#without-replacement."""
    with mpmath.workdps(50):
        P, Q = _mp(p), _mp(q)
        V = len(P)
        key = [
            (mpmath.inf if P[i] == 0 and Q[i] > 0 else (Q[i] / P[i] if P[i] > 0 else -mpmath.inf))
            for i in range(V)
        ]
        order = sorted(range(V), key=lambda i: -key[i])
        total = mpmath.fsum(Q)
        best = mpmath.mpf(0)
        pH = qH = S = mpmath.mpf(0)
        for i in order:
            pH += P[i]
            qH += Q[i]
            S += Q[i] / (total - Q[i])
            R = total - qH  # exact enough at 50 digits
            best = max(best, qH - R * S - pH)
        return 1 - best


def mp_greedy(p, q, n):
    """alpha*_greedy = p(Top) + sum_{x not in Top} min(p(x), q(x) / q(rest)) (docs/math.md#greedy-and-hub)."""
    with mpmath.workdps(50):
        P, Q = _mp(p), _mp(q)
        top = top_indices([float(v) for v in q], n - 1)
        rest = [i for i in range(len(P)) if i not in top]
        mass = mpmath.fsum(Q[i] for i in rest)
        return mpmath.fsum(P[i] for i in top) + mpmath.fsum(min(P[i], Q[i] / mass) for i in rest)


def mp_without_replacement_3(p, q):
    """alpha*_without (n = 3) at 50 digits: W_3 by inclusion-exclusion (docs/math.md#without-replacement)
    at every prefix
    sorted by q/p, with the pair sums updated incrementally (O(V^2) in all).

    W_3(H) = 1 - R [1 + sum_i (1/(1-q_i) - 1) + sum_{i<j} (1 - 1/(1-q_i) - 1/(1-q_j) + 1/(1-q_i-q_j))],
    R = q(outside H). Inclusion-exclusion cancels ~|H|^2 in float64, harmless at 50 digits.
    """
    with mpmath.workdps(50):
        P, Q = _mp(p), _mp(q)
        V = len(P)
        total = mpmath.fsum(Q)
        key = [
            (mpmath.inf if P[i] == 0 and Q[i] > 0 else (Q[i] / P[i] if P[i] > 0 else -mpmath.inf))
            for i in range(V)
        ]
        order = sorted(range(V), key=lambda i: -key[i])
        best = mpmath.mpf(0)
        pH = qH = single = pair = mpmath.mpf(0)
        H = []
        for k in order:
            ak = 1 / (total - Q[k])
            for i in H:
                pair += 1 - 1 / (total - Q[i]) - ak + 1 / (total - Q[i] - Q[k])
            single += ak - 1
            H.append(k)
            pH += P[k]
            qH += Q[k]
            R = total - qH
            if R > 0:
                W = 1 - R * (1 + single + pair)
            else:
                W = mpmath.mpf(1) if sum(1 for i in H if Q[i] > 0) >= 3 else mpmath.mpf(0)
            best = max(best, W - pH)
        return 1 - best


def mp_conditional_poisson(p, q, n):
    """alpha* for conditional Poisson at 50 digits: Q(H) = e_n(q_H) / e_n(q) (docs/math.md#draft-schemes)
    at every
    prefix sorted by q/p, e_n by the DP e_j(S + x) = e_j(S) + x e_{j-1}(S)."""
    with mpmath.workdps(50):
        P, Q = _mp(p), _mp(q)
        V = len(P)
        key = [
            (mpmath.inf if P[i] == 0 and Q[i] > 0 else (Q[i] / P[i] if P[i] > 0 else -mpmath.inf))
            for i in range(V)
        ]
        order = sorted(range(V), key=lambda i: -key[i])
        # e_j of the first m masses is 0 for j > m: the loops start at j = min(n, m) (the same sums)
        e = [mpmath.mpf(1)] + [mpmath.mpf(0)] * n
        for m, x in enumerate(Q, 1):
            for j in range(min(n, m), 0, -1):
                e[j] += x * e[j - 1]
        h = [mpmath.mpf(1)] + [mpmath.mpf(0)] * n
        best = pH = mpmath.mpf(0)
        for m, k in enumerate(order, 1):
            for j in range(min(n, m), 0, -1):
                h[j] += Q[k] * h[j - 1]
            pH += P[k]
            best = max(best, h[n] / e[n] - pH)
        return 1 - best


def brute_sequential_mass(q, n, mask):
    """W_n(H) from the textbook definition: every ordered draw, rest mass recomputed each step."""
    total = 0.0
    support = [i for i in range(q.size) if q[i] > 0]
    for t in itertools.permutations(support, n):
        pr, left = 1.0, list(range(q.size))
        for x in t:
            pr *= q[x] / sum(q[j] for j in left)
            left.remove(x)
        if all(mask[x] for x in t):
            total += pr
    return total


def slow_excess(ps, qs, n, scheme):
    """max_k Q(H_k) - p(H_k) with Q from the scheme's subset-at-a-time ``mass`` (no prefix code)."""
    from mdsd_ot import get_scheme

    V = ps.size
    best = 0.0
    for k in range(1, V + 1):
        mask = np.zeros(V, dtype=bool)
        mask[:k] = True
        d = get_scheme(scheme).mass(qs, n, mask) - ps[:k].sum()
        if d > best + 1e-15:
            best = d
    return best


def mp_t_quantile(df: int, prob: float) -> float:
    """Quantile of Student's t on ``df`` degrees of freedom by 50-digit root finding on its CDF
    ``F(t) = 1 - I_{df/(df+t^2)}(df/2, 1/2) / 2`` (``t > 0``; regularised incomplete beta, mpmath),
    independent of scipy."""
    with mpmath.workdps(50):
        df_, p_ = mpmath.mpf(df), mpmath.mpf(prob)

        def cdf_minus(t):
            x = df_ / (df_ + t * t)
            return 1 - mpmath.betainc(df_ / 2, mpmath.mpf(1) / 2, 0, x, regularized=True) / 2 - p_

        return float(mpmath.findroot(cdf_minus, mpmath.mpf(2)))


def few_ordinary_sequential_alpha(p, q, n, ordinary):
    """alpha* for sequential sampling when fewer than n tokens carry non-negligible draft mass.

    ``ordinary`` lists the k < n tokens of ordinary mass; every other token with ``q > 0`` is tiny,
    their total ``q(T)`` at most ``1e-30`` of the smallest ordinary mass. Let E be the event that the
    first k draws are the k ordinary tokens: each of those draws is tiny with probability at most
    ``q(T) / min q(O)``, so ``P(not E) <= eps = k q(T) / min q(O)``. Given E, the remaining
    ``m = n - k`` draws are sequential draws from the tiny tokens alone (renormalised), so
    ``|W_n(H) - 1[O in H] W'_m(H cap T)| <= eps`` for every H, hence
    ``alpha* = min(1, p(O) + min_G [p(G) + 1 - W'_m(G)])`` over ``G`` inside T, to ``eps``.
    ``W'_m`` depends on the class counts of ``G`` only (tiny tokens of equal mass form a class), so the
    best ``G`` of each profile holds the smallest p of each class. One class: the m draws are a
    uniform m-subset, ``W'_m(G) = C(|G|, m) / C(|T|, m)``, in exact rationals; two or three classes:
    the 50-digit class DP (:func:`class_sequential_mass`). Returns ``(alpha, eps)``.
    """
    P = fr(p)
    qf = np.asarray(q, dtype=np.float64)
    qf = qf / qf.sum()
    ordinary = sorted(int(i) for i in ordinary)
    tiny = [i for i in range(qf.size) if qf[i] > 0 and i not in ordinary]
    m = n - len(ordinary)
    assert m >= 1 and len(tiny) >= m, "need k < n ordinary tokens and at least n - k tiny ones"
    q_tiny = math.fsum(qf[i] for i in tiny)
    low = min(qf[i] for i in ordinary)
    assert q_tiny <= 1e-30 * low, "the tiny masses are not negligible"
    eps = len(ordinary) * q_tiny / low
    values = sorted({float(qf[i]) for i in tiny}, reverse=True)
    assert len(values) <= 3, "at most three classes of tiny masses"
    members = [sorted(P[i] for i in tiny if float(qf[i]) == v) for v in values]
    cum = []
    for c in members:
        run = [Fraction(0)]
        for x in c:
            run.append(run[-1] + x)
        cum.append(run)
    best = None
    for counts in itertools.product(*[range(len(c) + 1) for c in members]):
        p_g = sum((cum[c][counts[c]] for c in range(len(members))), Fraction(0))
        if sum(counts) < m:
            w = 0
        elif len(members) == 1:
            w = Fraction(math.comb(counts[0], m), math.comb(len(tiny), m))
        else:
            out = sum((len(members[c]) - counts[c]) * values[c] for c in range(len(members)))
            w = 1 if out == 0 else class_sequential_mass(values, counts, out, m)
        v = p_g + 1 - w if len(members) == 1 else mpmath.mpf(p_g.numerator) / p_g.denominator + 1 - w
        best = v if best is None or v < best else best
    p_o = sum((P[i] for i in ordinary), Fraction(0))
    if len(members) > 1:
        p_o = mpmath.mpf(p_o.numerator) / p_o.denominator
    return min(1, p_o + best), eps


def exact_sequential_alpha(p, q, n):
    """alpha* for sequential sampling without replacement, exact rationals, every subset H.

    ``law[D]`` = P(the first j draws are the set D) by the DP ``law[D + x] += law[D] q_x / (1 - q(D))``
    (``1 - q(D)`` summed over the tokens not in D), then ``W_n(H) = sum_{D in H, |D| = n} law[D]`` for
    every H by a sum over subsets (zeta transform). O(3^V)-free: O(V 2^V) rationals; V <= 9.
    """
    P, Q = fr(p), fr(q)
    V = len(P)
    assert V <= 9
    law = {0: Fraction(1)}
    for _ in range(n):
        nxt = {}
        for D, pr in law.items():
            left = sum((Q[i] for i in range(V) if not D >> i & 1), Fraction(0))
            for x in range(V):
                if not D >> x & 1 and Q[x] > 0:
                    nxt[D | 1 << x] = nxt.get(D | 1 << x, Fraction(0)) + pr * Q[x] / left
        law = nxt
    W = [Fraction(0)] * (1 << V)
    for D, pr in law.items():
        W[D] += pr
    for i in range(V):
        for h in range(1 << V):
            if h >> i & 1:
                W[h] += W[h ^ (1 << i)]
    return min(sum((P[i] for i in range(V) if h >> i & 1), Fraction(0)) + 1 - W[h] for h in range(1 << V))


def mp_with_replacement(p, q, n):
    """alpha* for i.i.d. drafts at 50 digits: ``q(H)^n`` at every prefix sorted by q/p (the sorting
    theorem), the outside mass summed directly (``q(H)^n = (1 - R)^n`` loses nothing near one)."""
    with mpmath.workdps(50):
        P, Q = _mp(p), _mp(q)
        V = len(P)
        key = [
            (mpmath.inf if P[i] == 0 and Q[i] > 0 else (Q[i] / P[i] if P[i] > 0 else -mpmath.inf))
            for i in range(V)
        ]
        order = sorted(range(V), key=lambda i: -key[i])
        best = pH = qH = mpmath.mpf(0)
        for k in order:
            pH += P[k]
            qH += Q[k]
            best = max(best, min(qH**n, qH) - pH)
        return 1 - best


def mp_sequential_product_bound(q, mask, n):
    """A lower bound on ``W_n(H)`` at 50 digits: ``prod_{j<n} d_j / (R + d_j)``, ``d_j`` the mass of H
    outside its j largest tokens and R the mass outside H, each summed directly (docs/math.md#pruning:
    each further draw lands in H with probability at least ``d_j / (R + d_j)``)."""
    with mpmath.workdps(50):
        Q = _mp_memo(q)
        inside = sorted((Q[i] for i in range(len(Q)) if mask[i]), reverse=True)
        R = mpmath.fsum(Q[i] for i in range(len(Q)) if not mask[i])
        w = mpmath.mpf(1)
        for j in range(n):
            d = mpmath.fsum(inside[j:])
            w *= d / (R + d) if d > 0 else 0
        return w


def ratio_bin_sums_slow(p, rho, grid):
    """numpy twin of :func:`mdsd_ot._kernels.verifiers.ratio_bin_sums` (the lookahead verifier's
    acceptance tables before the kernel): ``searchsorted`` bins of ``rho / p``, two ``bincount``."""
    with np.errstate(divide="ignore", invalid="ignore"):
        s = np.where(p > 0, rho / p, 0.0)
    b = np.searchsorted(grid, s, side="left")
    return (
        np.bincount(b, weights=p * s, minlength=grid.size + 1),
        np.bincount(b, weights=p, minlength=grid.size + 1),
    )

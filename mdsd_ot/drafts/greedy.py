"""Greedy drafts (Hu et al., 2025): the n - 1 most likely tokens (ties by index) plus one draw from q
restricted to the others; alpha* in closed form (docs/math.md#greedy-and-hub)."""

from __future__ import annotations

import math

import numpy as np

from .._config import RECHECK_TOL
from .._validate import distinct_ns
from ..backends._tensor import require_torch
from ._common import _inverse_cdf, top_tokens
from .scheme import DraftScheme


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
    top = cache.get("top")  # the set of the n - 1 most likely tokens, for this (q, n)
    if top is None:
        top = cache["top"] = set(top_tokens(q, n - 1).tolist())
    given = drafts.tolist()
    if set(given[: n - 1]) != top or given[-1] in top:
        raise ValueError(
            f"greedy drafts are the {n - 1} most likely tokens {sorted(top)} followed by "
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


# -- the same bound in the evaluation plan (mdsd_ot.plan; its numba passes in _kernels/plan.py)
def plan_bounds(plan, ns):
    """Greedy (and hub) closed forms for every n, each re-checked: the top of q verified and the mass
    outside it summed again (:func:`mdsd_ot._kernels.plan.top_check`), then the objective of the
    certificate ``Top + {q' > p}`` by masked sums (:func:`mdsd_ot._kernels.plan.greedy_certificates`).
    ``plan`` is the position (:class:`mdsd_ot.interfaces.PlanView`); returns
    ``{n: (alpha*, |re-check - alpha*|)}``."""
    from .._kernels import plan as plan_kernels

    sums = plan.greedy(ns)
    out = {}
    check_ns = []
    for n in ns:
        p_top, gain = sums[n][0], sums[n][3]
        excess = gain - p_top  # Q(H) - p(H) for H = Top + {q' > p} (docs/math.md#greedy-and-hub)
        if excess <= 0.0:
            out[n] = (1.0, 0.0)  # the empty set certifies 1
        else:
            out[n] = (max(1.0 - float(excess), 0.0), np.inf)
            check_ns.append(n)
    if check_ns:
        ok, tail = plan_kernels.top_check(plan.q, plan.held_top)
        if ok:
            rest = np.array([plan.rest_outside_top(n, tail) for n in check_ns])
            targets = distinct_ns(check_ns)
            checks = plan_kernels.greedy_certificates(plan.p, plan.q, plan.held_top, targets, rest)
            for n, check in zip(check_ns, checks):
                out[n] = (out[n][0], abs(float(check) - out[n][0]) if np.isfinite(check) else np.inf)
    return out


# -- ... and in the batched torch plan (mdsd_ot.backends.torch), on the tensors' device
def _torch_top_of_q(qt, k):
    """The ``k`` most likely tokens of each row in rank order, ties by lower index (``drafts.top_tokens``),
    without a full sort: ``torch.topk`` gives the k-th largest mass, the tokens above it and the first
    tied ones (in index order) make the set, and a sort of those k tokens ranks them. ``(B, k)`` int64."""
    torch = require_torch()
    B = qt.shape[0]
    thr = torch.topk(qt, k, dim=-1).values[:, -1:]
    above = qt > thr
    tie = qt == thr
    room = k - above.sum(-1, keepdim=True)
    member = above | (tie & (torch.cumsum(tie, -1, dtype=torch.int32) <= room))
    cols = torch.nonzero(member)[:, 1].view(B, k)  # index order within each row
    vals = torch.gather(qt, 1, cols)
    return torch.gather(cols, 1, torch.sort(vals, dim=-1, descending=True, stable=True).indices)


def torch_sums(pt, qt, ns):
    """``{n: (p(Top), sum min(p, q'), sum (p - q')_+, sum (q' - p)_+, p(argmax q))}`` per row, with ``Top``
    the ``n - 1`` most likely tokens (:func:`_torch_top_of_q`) and ``q' = q / q(rest)``, the rest summed
    directly; O(V) per n, no sort. Also returns ``top``."""
    torch = require_torch()
    k = max(max(ns) - 1, 1)
    top = _torch_top_of_q(qt, k)
    out = {}
    fixed = torch.zeros_like(qt, dtype=torch.bool)
    done = 0
    for n in sorted(ns):
        if n - 1 > done:
            fixed.scatter_(1, top[:, done : n - 1], True)
            done = n - 1
        q_free = torch.where(fixed, 0.0, qt)
        rest = q_free.sum(-1, keepdim=True)  # direct sum over the complement of Top
        qp = q_free.div_(rest)
        pr = torch.where(fixed, 0.0, pt)
        s_min = torch.minimum(pr, qp)
        out[n] = (
            torch.gather(pt, 1, top[:, : n - 1]).sum(-1),
            s_min.sum(-1),
            (pr - s_min).sum(-1),
            (qp - s_min).sum(-1),
            torch.gather(pt, 1, top[:, :1]).squeeze(-1),
        )
    return out, top


def torch_bound(pt, qt, sums, top, n: int):
    """alpha* of the greedy family for ``n`` drafts from :func:`torch_sums` (``sums[n]``, ``top``),
    re-checked by :func:`torch_recheck`."""
    torch = require_torch()
    p_top, _, _, s_q, _ = sums[n]
    same = (pt == qt).all(-1)
    excess = s_q - p_top
    bound = torch.where(same | (excess <= 0), 1.0, (1.0 - excess).clamp(0.0, 1.0))
    torch_recheck(pt, qt, top, n, bound)
    return bound


def torch_recheck(pt, qt, top, n, value):
    """Re-evaluate ``p(H) + 1 - Q(H)`` for the greedy certificate ``H = Top + {q' > p}`` in token-index
    order and raise ``RuntimeError`` where it differs from ``value`` by more than ``RECHECK_TOL``.

    Independent of the greedy sums: ``Top = top[:, :n - 1]`` is verified (in rank order, and every
    other token has a smaller mass than its last one, or an equal one and a larger index), the rest
    mass is summed again and the objective is a masked sum of p and q over ``H``."""
    torch = require_torch()
    V = qt.shape[-1]
    fixed = torch.zeros_like(qt, dtype=torch.bool)
    ok = torch.ones_like(value, dtype=torch.bool)
    if n > 1:
        tk = top[:, : n - 1]
        fixed.scatter_(1, tk, True)
        qk = torch.gather(qt, 1, tk)
        if n > 2:
            a, b = qk[:, :-1], qk[:, 1:]
            ok &= ((a > b) | ((a == b) & (tk[:, :-1] < tk[:, 1:]))).all(-1)
        low, low_idx = qk[:, -1:], tk[:, -1:]
        idx = torch.arange(V, device=qt.device).unsqueeze(0)
        above = ~fixed & ((qt > low) | ((qt == low) & (idx < low_idx)))
        ok &= ~above.any(-1)
    zero = torch.zeros_like(qt)
    rest = torch.where(fixed, zero, qt).sum(-1, keepdim=True)
    gain = ~fixed & (qt / rest > pt)
    in_h = fixed | gain
    check = torch.where(in_h, pt, zero).sum(-1) + 1.0 - torch.where(gain, qt, zero).sum(-1) / rest.squeeze(-1)
    check = torch.where(gain.any(-1) | (n > 1), check, torch.ones_like(check))
    trivial = value >= 1.0  # the empty set certifies 1
    bad = torch.nonzero(~trivial & (~ok | ((check - value).abs() > RECHECK_TOL))).flatten()
    if bad.numel():
        i = int(bad[0])
        raise RuntimeError(
            f"internal error: the torch greedy bound of row {i} (n={n}) is {float(value[i])!r} but its "
            f"certificate re-evaluates to {float(check[i])!r} (top of q verified: {bool(ok[i])}); "
            "please report this input"
        )


SCHEME = DraftScheme(
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
)

"""Greedy drafts (Hu et al., 2025): the n - 1 most likely tokens (ties by index) plus one draw from q
restricted to the others; alpha* in closed form (docs/math.md#greedy-and-hub)."""

from __future__ import annotations

import math

import numpy as np

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

"""SpecHub's n = 2 drafts: ``x1 ~ q``; ``x2 = argmax q`` if ``x1`` differs from it, else ``x2 ~ q`` on the
rest. The draft *sets* are greedy drafts in another order, so the bound is greedy's
(docs/math.md#greedy-and-hub)."""

from __future__ import annotations

import math

import numpy as np

from ._common import _distinct_structure, _inverse_cdf, top_tokens
from .greedy import _greedy_dual, _greedy_inclusion, _greedy_mass
from .scheme import DraftScheme


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
    a = cache.get("hub")
    if a is None:
        a = cache["hub"] = int(np.argmax(q))  # the first maximum: ties by index
    if a not in drafts.tolist():
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


SCHEME = DraftScheme(
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
)

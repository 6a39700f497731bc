"""Deterministic top-n drafts: the n most likely tokens (ties by index), as EAGLE / SGLang draft trees
do; ``Q(H) = 1[Top_n in H]``, ``alpha* = p(Top_n)`` (docs/math.md#top-n)."""

from __future__ import annotations

import numpy as np

from ._common import top_tokens
from .scheme import DraftScheme


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
    top = cache.get("top_n")  # the set of the n most likely tokens, for this (q, n)
    if top is None:
        top = cache["top_n"] = set(top_tokens(q, n).tolist())
    given = drafts.tolist()
    drafted = set(given)
    if len(drafted) != len(given) or drafted != top:
        raise ValueError(f"top_n drafts are the {n} most likely tokens {sorted(top)}; got {given}")


def _top_inclusion(q, n):
    pi = np.zeros(q.size)
    pi[top_tokens(q, n)] = 1.0
    return pi


def _top_set_mass_rows(p, q, n, samples, rng):
    return np.full(samples, float(p[top_tokens(q, n)].sum()))


SCHEME = DraftScheme(
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
)

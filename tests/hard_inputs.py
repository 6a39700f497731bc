"""Input classes on which the solvers used to be slowest, as seeded builders.

Each builder takes ``(V, n, rng)`` and returns ``(p, q)``, float64, each summing to one (the draft
keeps at least ``n`` tokens of positive mass, so every scheme accepts it). The tests run them at small
V in the fast lane and at V = 152,064 in the full lane, against the independent oracles of
``oracles.py``; ``benchmarks/bench_floors.py`` times them (``--only worst``). ``CLASSES`` maps a name
to its builder; ``ORDINARY`` gives, for the classes whose draft has a handful of ordinary masses and
every other mass tiny, how many ordinary tokens lead the vocabulary (the exact reduction of
``oracles.few_ordinary_sequential_alpha`` applies when that count is below n).
"""

from __future__ import annotations

import numpy as np

__all__ = ["CLASSES", "ORDINARY", "build", "llm_like"]


def llm_like(V, rng, temperature=1.0):
    """Heavy-tailed logits, the draft a noisy copy of the target (as the benchmarks' LLM-like pair)."""
    z = rng.standard_normal(V) * 2.5 - 1.1 * np.log(np.arange(1, V + 1))
    zq = z + rng.standard_normal(V)
    p = np.exp((z - z.max()) / temperature)
    q = np.exp((zq - zq.max()) / temperature)
    return p / p.sum(), q / q.sum()


def _norm(x):
    return x / x.sum()


def _tiny_block(V, rng, tail, k=4, spread=0.0):
    """A draft of ``k`` ordinary masses (tokens 0..k-1) and a block of ``V - k`` equal (or, with
    ``spread``, nearly equal) tiny masses; an LLM-like target."""
    p, _ = llm_like(V, rng)
    q = np.full(V, tail)
    if spread:
        q *= 1.0 + spread * rng.random(V)
    q[:k] = 0.2 + rng.random(k)
    return p, _norm(q)


def tiny_block(V, n, rng):
    """A handful of ordinary draft masses and a block of equal masses of 1e-300 (a float64 softmax
    where most logits share one floor far below the rest)."""
    return _tiny_block(V, rng, 1e-300)


def near_equal_block(V, n, rng):
    """As :func:`tiny_block`, the block's masses within a factor 1 + 1e-6 of each other."""
    return _tiny_block(V, rng, 1e-300, spread=1e-6)


def subnormal_block(V, n, rng):
    """As :func:`tiny_block`, the block's masses subnormal (5e-311 after normalisation)."""
    return _tiny_block(V, rng, 1e-310)


def subnormal_both(V, n, rng):
    """Four ordinary masses in each of p and q (overlapping on two tokens), every other mass of both
    subnormal and equal."""
    p = np.full(V, 1e-310)
    p[:4] = 0.2 + rng.random(4)
    q = np.full(V, 1e-311)
    q[2:6] = 0.2 + rng.random(4)
    return _norm(p), _norm(q)


def one_hot_target(V, n, rng):
    """A one-hot target against a confident draft on another token, the rest of the draft flat and
    tiny (1e-25 a token: below 2^-79, with no subnormal)."""
    p = np.zeros(V)
    p[0] = 1.0
    q = np.full(V, 1e-25)
    q[1] = 1.0
    return p, _norm(q)


def near_one_hot_target(V, n, rng):
    """A target with all but 1e-9 of its mass on one token, an LLM-like draft."""
    p, q = llm_like(V, rng)
    p = p * 1e-9 / p.sum()
    p[int(np.argmax(q))] += 1.0
    return _norm(p), q


def tied_draft(V, n, rng):
    """A draft whose masses mostly tie: 64 distinct ordinary masses (V / 2 below V = 128), the rest one
    equal floor."""
    p, q = llm_like(V, rng)
    q = np.full(V, 1e-9)
    k = min(64, V // 2)
    q[rng.choice(V, k, replace=False)] = rng.random(k)
    return p, _norm(q)


def top_k_target(V, n, rng):
    """A target truncated to its 50 most likely tokens (exact zeros elsewhere), an LLM-like draft."""
    p, q = llm_like(V, rng)
    p[np.argsort(-p, kind="stable")[50:]] = 0.0
    return _norm(p), q


def ratio_clusters(V, n, rng):
    """Integer-valued p and q in 1..3: nine distinct ratios, each shared by about V / 9 tokens."""
    return _norm(rng.integers(1, 4, V).astype(float)), _norm(rng.integers(1, 4, V).astype(float))


def wide_range(V, n, rng):
    """p ~ Dirichlet(0.05), q = 0.7 p + 0.3 Dirichlet(0.05): q/p over hundreds of octaves."""
    p = rng.dirichlet(np.full(V, 0.05))
    q = 0.7 * p + 0.3 * rng.dirichlet(np.full(V, 0.05))
    return _norm(p), _norm(q)


def cold_softmax(V, n, rng):
    """An LLM-like pair at temperature 0.02: most masses far below the top, many subnormal or zero
    (a draft needs n positive masses: the n most likely tokens keep theirs)."""
    p, q = llm_like(V, rng, temperature=0.02)
    return p, q


def small_target_support(V, n, rng):
    """A target on 3 tokens against an LLM-like draft: n far above the target's support."""
    _, q = llm_like(V, rng)
    p = np.zeros(V)
    p[rng.choice(V, 3, replace=False)] = rng.random(3) + 0.1
    return _norm(p), q


def interleaved_magnitudes(V, n, rng):
    """A draft whose masses alternate, token by token, between two scales 384 octaves apart (2^-10 and
    2^-394, each times 1 to 1.5), a flat random target: every second mass of the conditional-Poisson
    re-check in another exponent class (before its scaled chunks: 168 ms a call at n = 128, V = 152,064)."""
    q = np.where(np.arange(V) % 2 == 0, 2.0**-10, 2.0**-394) * (1.0 + 0.5 * rng.random(V))
    return _norm(rng.random(V)), _norm(q)


CLASSES = {
    "tiny block 1e-300": tiny_block,
    "near-equal block": near_equal_block,
    "subnormal block": subnormal_block,
    "subnormal both sides": subnormal_both,
    "one-hot target": one_hot_target,
    "near one-hot target": near_one_hot_target,
    "tied draft": tied_draft,
    "top-50 target": top_k_target,
    "ratio clusters": ratio_clusters,
    "wide range": wide_range,
    "cold softmax T=0.02": cold_softmax,
    "3-token target": small_target_support,
    "interleaved magnitudes": interleaved_magnitudes,
}

#: Ordinary draft tokens (the first ones of the vocabulary) of the classes whose other draft masses
#: are all tiny and equal.
ORDINARY = {"tiny block 1e-300": 4, "subnormal block": 4}


def build(name, V, n, seed=0):
    """``(p, q)`` of the class ``name`` at ``V`` tokens for ``n`` drafts, seeded."""
    return CLASSES[name](V, n, np.random.default_rng(seed))

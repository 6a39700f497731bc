"""With vs without replacement vs greedy drafts on LLM-like distributions at full vocabulary size.

Run: ``python examples/sampling_schemes.py`` (about ten seconds, most of it numba compilation).
"""

import numpy as np

from mdsd_ot import optimal_acceptance_batch

rng = np.random.default_rng(0)
B, V = 64, 32_000
logits = rng.standard_normal((B, V)) * 2.5 - 1.1 * np.log(np.arange(1, V + 1))
draft_logits = logits + rng.standard_normal((B, V))

for T in (0.3, 0.7, 1.0):
    P = np.exp((logits - logits.max(axis=1, keepdims=True)) / T)
    Q = np.exp((draft_logits - draft_logits.max(axis=1, keepdims=True)) / T)
    P /= P.sum(axis=1, keepdims=True)
    Q /= Q.sum(axis=1, keepdims=True)
    for n in (2, 4):
        row = {
            s: optimal_acceptance_batch(P, Q, n, sampling=s).mean()
            for s in ("with_replacement", "without_replacement", "greedy")
        }
        print(f"T={T} n={n}: " + ", ".join(f"{s} {v:.4f}" for s, v in row.items()))

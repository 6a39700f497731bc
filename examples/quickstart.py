"""Optimal acceptance for a toy target/draft pair, checked against the LP, and verifiers vs the bound.

Run: ``python examples/quickstart.py`` (a second or two).
"""

import numpy as np

from mdsd_ot import compare, optimal_acceptance

p = np.array([0.5, 0.3, 0.2, 0.0])  # target
q = np.array([0.1, 0.2, 0.3, 0.4])  # draft

for sampling in ("with_replacement", "without_replacement", "greedy"):
    fast = optimal_acceptance(p, q, 2, sampling=sampling)
    lp = optimal_acceptance(p, q, 2, sampling=sampling, method="lp")
    print(f"{sampling:20s} alpha* = {fast.value:.6f} (LP {lp.value:.6f}), optimal H = {fast.subset.tolist()}")

print()
print(compare(p, q, 2))

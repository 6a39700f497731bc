"""Bounds on the bundled real Qwen2.5-Coder sample: numpy core vs the batched torch backend.

Runs offline in a few seconds::

    python examples/real_models_sample_bounds.py

For each temperature it prints the mean optimal acceptance with replacement, without replacement
(sequential) and for greedy drafts, n = 2, over the sample's positions, computed once with
``mdsd_ot.optimal_acceptance`` and, when torch is installed, once with
``mdsd_ot.backends.torch`` (records padded to a common width with zero-mass tokens, which changes
nothing), and the largest disagreement between the two.
"""

from __future__ import annotations

import time

import numpy as np

import mdsd_ot
from mdsd_ot.sample import load_sample, sample_metadata


def main() -> None:
    meta = sample_metadata()
    print(
        f"sample: {meta['target']} / {meta['draft']}, {meta['positions']} positions, "
        f"top-{meta['top_k']} union + tail"
    )
    for T in meta["temperatures"]:
        recs = load_sample(temperatures=[T])[::4]
        t0 = time.time()
        ref = {
            s: np.array([mdsd_ot.optimal_acceptance(r.p, r.q, 2, sampling=s).value for r in recs])
            for s in ("with_replacement", "without_replacement", "greedy")
        }
        t_np = time.time() - t0
        line = (
            f"T={T:<4} positions={len(recs):4d}  with={ref['with_replacement'].mean():.4f}  "
            f"without={ref['without_replacement'].mean():.4f}  "
            f"greedy={ref['greedy'].mean():.4f}  (numpy {t_np:.2f} s"
        )
        try:
            import torch

            from mdsd_ot.backends.torch import greedy_bounds, sorted_prefix_bounds
        except ImportError:
            print(line + "; torch not installed)")
            continue
        width = max(r.p.size for r in recs)
        P = torch.zeros(len(recs), width, dtype=torch.float64)
        Q = torch.zeros_like(P)
        for i, r in enumerate(recs):
            P[i, : r.p.size] = torch.from_numpy(r.p)
            Q[i, : r.q.size] = torch.from_numpy(r.q)
        t0 = time.time()
        got = {
            "with_replacement": sorted_prefix_bounds(P, Q, [2])[2].numpy(),
            "without_replacement": sorted_prefix_bounds(P, Q, [2], "without_replacement")[2].numpy(),
            "greedy": greedy_bounds(P, Q, [2])[2].numpy(),
        }
        t_torch = time.time() - t0
        worst = max(float(np.max(np.abs(got[s] - ref[s]))) for s in ref)
        print(line + f", torch {t_torch:.3f} s, max |torch - numpy| = {worst:.1e})")


if __name__ == "__main__":
    main()

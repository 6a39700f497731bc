"""Benchmark the exact acceptance rate of each closed-form verifier at full vocabulary sizes.

Run: ``python benchmarks/bench_verifiers.py`` (prints a Markdown table). Every time is reported as a
ratio against ``np.argsort`` of a vector of the same size measured in the same run (these machines are
shared and noisy; ratios travel, seconds do not). The accuracy column compares the fast path with an
independent evaluation where one is cheap enough: the RSD n = 2 kernel against the Monte Carlo
kernel (in standard errors).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from _common import best_time, header, llm_like_pair  # noqa: E402

from mdsd_ot.verifiers import verifier_acceptance  # noqa: E402

CASES = [  # (verifier, n)
    ("naive", 2),
    ("naive", 8),
    ("rrs", 2),
    ("rrs", 8),
    ("rrs_without_replacement", 2),
    ("spectr", 2),
    ("spectr", 8),
    ("spechub", 2),
    ("greedy", 2),
    ("greedy", 8),
]


def zipf_pair(V: int, rng: np.random.Generator):
    """Zipf-like target over shuffled token ids; the draft is the target times log-normal noise."""
    ranks = np.arange(1, V + 1, dtype=float)
    p = ranks**-1.1
    q = p * np.exp(rng.normal(0.0, 0.7, V))
    perm = rng.permutation(V)
    p, q = p[perm], q[perm]
    return p / p.sum(), q / q.sum()


def main():
    rng = np.random.default_rng(0)
    lines = [
        header("Verifier acceptance: exact closed forms vs np.argsort"),
        "| V | distributions | verifier | n | acceptance | ms | argsort ms | ratio |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for V in (32_000, 152_064):
        for kind, pair in (
            ("LLM-like T=1", llm_like_pair(V, rng)),
            ("LLM-like T=0.3", llm_like_pair(V, rng, temperature=0.3)),
            ("Zipf", zipf_pair(V, rng)),
        ):
            p, q = pair
            t_sort = best_time(lambda: np.argsort(q), repeat=5)
            for name, n in CASES:
                value = verifier_acceptance(name, p, q, n).value
                t = best_time(lambda: verifier_acceptance(name, p, q, n), repeat=5)
                lines.append(
                    f"| {V} | {kind} | {name} | {n} | {value:.6f} | {t * 1e3:.2f} | "
                    f"{t_sort * 1e3:.2f} | {t / t_sort:.2f}x |"
                )
    # accuracy of the O(V log V) RSD kernel against the independent Monte Carlo kernel
    p, q = llm_like_pair(152_064, rng)
    exact = verifier_acceptance("rrs_without_replacement", p, q, 2).value
    mc = verifier_acceptance("rrs_without_replacement", p, q, 2, method="monte_carlo", samples=4000, rng=1)
    lines.append("")
    lines.append(
        f"RSD n=2 at V=152064: exact {exact:.6f}, Monte Carlo {mc.value:.6f} +- {mc.stderr:.6f} "
        f"({abs(exact - mc.value) / mc.stderr:.1f} standard errors)"
    )
    print("\n".join(lines))


if __name__ == "__main__":
    main()

"""Time of the exact tree optimum (``mdsd_ot.trees.tree_optimum``) against the number of tree classes.

For small toy models (``mdsd_ot.trees.toy_models``) and growing tree shapes, vocabularies and schemes:
the number of path-set classes of drafted trees, the causal LP's columns, and the CPU time of the
enumeration and of the whole ``tree_optimum`` call (LP build, HiGHS, basis re-solve, re-checks). The
baseline, measured in the same run, is one HiGHS solve of the one-step transport LP of about as many
columns (``mdsd_ot.primal.solve_highs`` on i.i.d. drafts, n = 2 at V = sqrt(columns): V^2 columns), so
the ratio says what the tree structure costs over a plain LP of the same size; time per column is
printed too. CPU time (``time.process_time``), best of ``--repeat``.

    python benchmarks/bench_tree_optimum.py [--repeat 3] [--large]
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np
from _common import header

from mdsd_ot.drafts import get_scheme
from mdsd_ot.primal import build_lp, solve_highs
from mdsd_ot.trees import enumerate_trees, toy_models, tree_optimum

CASES = [
    (3, "1x2", "with_replacement"),
    (4, "2,1", "without_replacement"),
    (4, "2,2", "without_replacement"),
    (4, "2,2", "with_replacement"),
    (4, "3,1", "with_replacement"),
    (4, "2,1,1", "with_replacement"),
    (5, "2,2", "with_replacement"),
]
LARGE = [(3, "2,2,1", "with_replacement")]  # 6,840 classes: above TREE_OPTIMUM_MAX_CLASSES


def cpu_best(fn, repeat):
    best, out = math.inf, None
    for _ in range(repeat):
        t0 = time.process_time()
        out = fn()
        best = min(best, time.process_time() - t0)
    return best, out


def baseline(columns, repeat):
    """One HiGHS solve of the one-step transport LP (i.i.d. drafts, n = 2) with about ``columns`` columns."""
    V = max(2, round(math.sqrt(columns)))
    rng = np.random.default_rng(V)
    p, q = rng.dirichlet(np.ones(V)), rng.dirichlet(np.ones(V))
    lp = build_lp(p, q, 2, get_scheme("with_replacement"))
    t, sol = cpu_best(lambda: solve_highs(lp), repeat)
    assert sol.success
    return t, lp.num_columns


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--large", action="store_true", help="also the 6,840-class case (about a minute)")
    args = ap.parse_args()
    tree_optimum(*toy_models(3, 0), "1x1", "with_replacement")  # warm-up: imports, HiGHS banner
    print(header("tree_optimum: time against the number of tree classes"))
    print(
        "| V | shape | scheme | classes | LP columns | enumerate (s) | tree_optimum (s) | us / column "
        "| baseline LP (columns, s) | ratio | value | success |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for V, shape, scheme in CASES + (LARGE if args.large else []):
        target, draft = toy_models(V, 1)
        t_enum, e = cpu_best(lambda: enumerate_trees(*toy_models(V, 1), shape, scheme, max_classes=10**5), 1)
        t_opt, r = cpu_best(
            lambda: tree_optimum(target, draft, shape, scheme, max_classes=10**5), args.repeat
        )
        t_base, base_cols = baseline(r.n_variables, args.repeat)
        print(
            f"| {V} | {shape} | {scheme} | {r.n_trees:,} | {r.n_variables:,} | {t_enum:.3f} | {t_opt:.3f} | "
            f"{1e6 * t_opt / r.n_variables:.1f} | {base_cols:,}, {t_base:.3f} | {t_opt / t_base:.2f} | "
            f"{r.value:.6f} | {r.success} |"
        )


if __name__ == "__main__":
    main()

"""The tree dual at full vocabulary: cost of each certified rule per drafted tree, and the sandwich
[best verifier, best certified bound] on random LLM-like trees (docs/performance.md#tree-bounds).

Trees: shape [4,2,2,1] (45 nodes), V = 152,064. At every path ``u`` the target is ``softmax(s z_u)``
and the draft ``softmax(s z_u + noise e_u)``, ``z_u`` and ``e_u`` standard normal vectors drawn afresh
per path (a fixed function of the path, seeded by it); the logit scale ``s`` plays the role of an inverse
temperature, ``noise`` the draft's distance from the target.

* ``cost``: :func:`mdsd_ot.trees.upper_bound` of each rule on one tree, against ``np.argsort`` of a
  V-vector timed in the same loop (interleaved; each ratio is one rule's time over the median of the
  argsorts around it; the median ratio over the trees is reported, with its range). The laws are
  computed before timing (they come from the forwards). One tree per scheme and seed.
* ``sandwich``: per setting (scale, noise), ``--trees`` i.i.d. trees; mean +- standard error over the
  trees of every rule's value (each mean is a certified upper bound on the mean optimum over these
  contexts) and of the exact tokens per call of node-wise ``optimal``, ``traversal`` and ``lookahead`` on the
  same trees; the lowest rule minus the best verifier, paired over the trees, and the width
  ``best bound / best verifier - 1``.
* ``paired``: per setting and scheme (i.i.d. and sequential without replacement), ``--trees`` trees;
  each certified rule minus the default ``subtree`` on the same trees, mean +- standard error (a
  negative mean: a tighter certified bound on the same contexts), and each rule's time over
  ``subtree``'s (median over the trees, timed back to back).
* ``contexts``: per fixed context (the laws of every path fixed by a seed, so that only the drafting
  varies), ``--trees`` trees of ``--scheme`` at ``--vocab`` tokens: every certified rule's mean over
  the trees and the exact mean tokens of the verifiers on the same trees, and each rule minus the best
  verifier, paired, mean +- standard error (a certified rule's mean over the trees drafted at one
  context is at least the optimum, so at least every verifier's mean: a difference many standard
  errors below 0 would be a bug). Four contexts (scale, noise): (2, 1), (3, 2), (1, 0.5), (4, 1).
* ``tiny``: the tightness at V = 3-4 (toy models, random seeds, draft temperatures and noises; shapes
  1,1 / 1,1,1 / 2,1 / 2,2 / 3,1 / 2,1,1; i.i.d. and without replacement): each rule's exact mean over
  every drafted tree against the causal LP's optimum, ``mean / OPT - 1`` as median / max per group, and
  the best valid verifier (mean over the ordered trees) below the optimum.

    NUMBA_NUM_THREADS=1 python benchmarks/bench_tree_bound.py cost [--trees 6]
    NUMBA_NUM_THREADS=1 python benchmarks/bench_tree_bound.py sandwich [--trees 24]
    NUMBA_NUM_THREADS=1 python benchmarks/bench_tree_bound.py paired [--trees 24]
    NUMBA_NUM_THREADS=1 python benchmarks/bench_tree_bound.py tiny [--cases 4]
    NUMBA_NUM_THREADS=1 python benchmarks/bench_tree_bound.py contexts [--scheme greedy --vocab 3000]
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np
from _common import header

from mdsd_ot.trees import (
    certified_rules,
    draft_tree,
    enumerate_trees,
    expected_tokens,
    mean_upper_bound,
    toy_models,
    upper_bound,
    valid_verifiers,
)

V = 152_064
SHAPE = "4,2,2,1"
SETTINGS = [(3.0, 1.0), (4.0, 1.0), (6.0, 1.0), (4.0, 0.5), (4.0, 2.0)]


def _softmax(z):
    e = np.exp(z - z.max())
    return e / e.sum()


class Laws:
    """LLM-like laws per path: target ``softmax(s z)``, draft ``softmax(s z + noise e)``."""

    def __init__(self, seed: int, scale: float, noise: float, vocab: int = V):
        self.seed, self.scale, self.noise, self.vocab = seed, scale, noise, vocab
        self.memo: dict = {}

    def pair(self, path):
        path = tuple(path)
        if path not in self.memo:
            rng = np.random.default_rng([self.seed, len(path), *path])
            z = self.scale * rng.standard_normal(self.vocab)
            e = self.noise * rng.standard_normal(self.vocab)
            self.memo[path] = (_softmax(z), _softmax(z + e))
        return self.memo[path]

    def target(self, paths):
        return np.array([self.pair(w)[0] for w in paths])

    def draft(self, paths):
        return np.array([self.pair(w)[1] for w in paths])


def _mean_se(x) -> tuple[float, float]:
    """Mean and standard error of the mean of the values ``x``."""
    x = np.asarray(x, dtype=float)
    return float(x.mean()), float(x.std(ddof=1) / math.sqrt(x.size))


def tree_of(seed: int, scale: float, noise: float, scheme: str = "with_replacement"):
    laws = Laws(seed, scale, noise)
    return draft_tree(SHAPE, scheme, laws.draft, np.random.default_rng(seed), target=laws.target)


def cost(trees: int) -> str:
    x = np.random.default_rng(0).random(V)
    lines = [
        header(f"Tree dual: cost per {SHAPE} tree at V = {V:,} (ratio to np.argsort of a V-vector)"),
        "| scheme | rule | argsorts per tree (median) | range | ms per tree (median) |",
        "|---|---|---|---|---|",
    ]
    sort_ms = []
    for scheme in ("with_replacement", "without_replacement", "greedy", "top_n"):
        ratios: dict = {}
        for i in range(trees):
            tree = tree_of(100 + i, 4.0, 1.0, scheme)
            for rule in certified_rules(scheme):
                if i == 0:
                    upper_bound(tree, rule)  # numba compilation, first use
                around = []
                for _ in range(2):
                    t0 = time.perf_counter()
                    np.argsort(x)
                    around.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                upper_bound(tree, rule)
                took = time.perf_counter() - t0
                for _ in range(2):
                    t0 = time.perf_counter()
                    np.argsort(x)
                    around.append(time.perf_counter() - t0)
                s = float(np.median(around))
                sort_ms.append(s * 1e3)
                ratios.setdefault(rule, []).append((took / s, took * 1e3))
        for rule, rs in ratios.items():
            r = np.array([a for a, _ in rs])
            ms = np.array([b for _, b in rs])
            lines.append(
                f"| {scheme} | {rule} | {np.median(r):.1f} | {r.min():.1f}-{r.max():.1f} "
                f"| {np.median(ms):.0f} |"
            )
    lines.append("")
    lines.append(
        f"np.argsort of a V-vector: median {np.median(sort_ms):.1f} ms over the loop; "
        f"{trees} trees per scheme"
    )
    return "\n".join(lines)


VERIFIERS = ("optimal", "traversal", "lookahead")  # node-wise optimal, the two tree-level ones that apply


def sandwich(trees: int) -> str:
    rules = certified_rules("with_replacement")
    lines = [
        header(
            f"Tree dual: the sandwich on {trees} random {SHAPE} trees per setting, V = {V:,}, i.i.d. drafts"
        ),
        "| scale, noise | "
        + " | ".join(rules + list(VERIFIERS))
        + " | best bound - best verifier (paired) | width |",
        "|---|" + "---|" * (len(rules) + len(VERIFIERS) + 2),
    ]
    for scale, noise in SETTINGS:
        vals: dict = {}
        t0 = time.time()
        for i in range(trees):
            tree = tree_of(10_000 * int(10 * scale) + 100 * int(10 * noise) + i, scale, noise)
            for rule in rules:
                vals.setdefault(rule, []).append(upper_bound(tree, rule))
            for name in VERIFIERS:
                vals.setdefault(name, []).append(expected_tokens(tree, name))
        vals = {k: np.asarray(v) for k, v in vals.items()}
        stat = {k: _mean_se(v) for k, v in vals.items()}
        bound = min(rules, key=lambda r: stat[r][0])
        best = max(VERIFIERS, key=lambda n: stat[n][0])
        diff = vals[bound] - vals[best]  # paired over the same trees
        d_mean, d_se = _mean_se(diff)
        cells = [f"{stat[k][0]:.3f} ± {stat[k][1]:.3f}" for k in (*rules, *VERIFIERS)]
        lines.append(
            f"| {scale:g}, {noise:g} | "
            + " | ".join(cells)
            + f" | {d_mean:+.3f} ± {d_se:.3f} ({bound} - {best}) | {stat[bound][0] / stat[best][0] - 1:.1%} |"
        )
        print(f"# {scale}, {noise}: {time.time() - t0:.0f} s", flush=True)
    lines.append("")
    lines.append(
        "Mean ± standard error over the trees (every rule on the same trees as the verifiers); the paired "
        "column is the per-tree difference of the lowest rule and the best verifier (by mean), mean ± s.e."
    )
    return "\n".join(lines)


def paired(trees: int) -> str:
    lines = [
        header(f"Tree dual: each rule minus subtree on the same {SHAPE} trees, V = {V:,} ({trees} per row)"),
        "| scheme | scale, noise | rule | subtree mean | rule - subtree (paired) | time / subtree's |",
        "|---|---|---|---|---|---|",
    ]
    for scheme in ("with_replacement", "without_replacement"):
        rules = [r for r in certified_rules(scheme) if r != "subtree"]
        for scale, noise in SETTINGS:
            base, diff, ratio = [], {r: [] for r in rules}, {r: [] for r in rules}
            for i in range(trees):
                tree = tree_of(20_000 * int(10 * scale) + 100 * int(10 * noise) + i, scale, noise, scheme)
                t0 = time.perf_counter()
                b = upper_bound(tree, "subtree")
                tb = time.perf_counter() - t0
                base.append(b)
                for rule in rules:
                    t0 = time.perf_counter()
                    v = upper_bound(tree, rule)
                    ratio[rule].append((time.perf_counter() - t0) / tb)
                    diff[rule].append(v - b)
            m = float(np.mean(base))
            for rule in rules:
                d, se = _mean_se(diff[rule])
                lines.append(
                    f"| {scheme} | {scale:g}, {noise:g} | {rule} | {m:.3f} | {d:+.3f} ± {se:.3f} "
                    f"| {np.median(ratio[rule]):.2f} |"
                )
            print(f"# {scheme} {scale}, {noise} done", flush=True)
    lines.append("")
    lines.append("The first tree of a run also pays the cuts' first compilation inside subtree's time.")
    return "\n".join(lines)


#: (V, shape, cases per scheme, relative to --cases) of the tiny battery
TINY_PLAN = [(3, "1,1", 1), (4, "1,1", 1), (3, "1,1,1", 1), (3, "2,1", 3), (4, "2,1", 3), (3, "2,2", 3),
             (4, "2,2", 1), (3, "3,1", 3), (4, "3,1", 2), (3, "2,1,1", 3)]  # fmt: skip


def tiny(cases: int) -> str:
    from mdsd_ot.trees.optimum import solve_tree_lp

    rng = np.random.default_rng(2026)
    rules = certified_rules("with_replacement")
    gaps: dict = {}
    below: dict = {}
    worst = 0.0
    for V, shape, k in TINY_PLAN:
        for scheme in ("with_replacement", "without_replacement"):
            names = [n for n in valid_verifiers(scheme, shape=shape) if n != "naive"]
            for _ in range(k * cases):
                seed = int(rng.integers(1 << 30))
                temp, noise = float(rng.choice([0.7, 1.0, 1.4])), float(rng.choice([0.5, 1.0, 1.5, 2.5]))
                target, draft = toy_models(V, seed, temp, noise)
                e = enumerate_trees(target, draft, shape, scheme)
                opt = solve_tree_lp(e)
                if not opt.success:
                    continue
                chain = all(b == 1 for b in e.shape.branching)
                groups = [(shape, scheme), ("chains" if chain else "trees", scheme), ("all", "both")]
                for rule in rules:
                    g = mean_upper_bound(e, rule) / opt.value - 1
                    worst = min(worst, g)
                    for grp in groups:
                        gaps.setdefault(grp, {}).setdefault(rule, []).append(g)
                if e.n_trees() <= 5000:
                    best = max(math.fsum(pr * expected_tokens(t, n) for t, pr in e.trees()) for n in names)
                    for grp in groups:
                        below.setdefault(grp, []).append(1 - best / opt.value)
    lines = [
        header("Tree dual: tightness at V = 3-4, mean over every drafted tree / the LP optimum - 1"),
        "| group | cases | " + " | ".join(rules) + " | optimum over best verifier |",
        "|---|---|" + "---|" * (len(rules) + 1),
    ]
    for grp, by_rule in gaps.items():
        n = len(by_rule[rules[0]])
        cells = [f"{100 * np.median(by_rule[r]):.2f} / {100 * max(by_rule[r]):.2f}" for r in rules]
        b = below.get(grp)
        ver = f"{100 * np.median(b):.2f} / {100 * max(b):.2f}" if b else "-"
        lines.append(f"| {grp[0]} {grp[1]} | {n} | " + " | ".join(cells) + f" | {ver} |")
    lines.append("")
    lines.append(
        f"median / max in %; most negative gap of any rule: {worst:.1e} (never below the optimum "
        f"beyond rounding); the last column is 1 - best verifier / optimum"
    )
    return "\n".join(lines)


CONTEXTS = [(2.0, 1.0), (3.0, 2.0), (1.0, 0.5), (4.0, 1.0)]


def contexts(trees: int, scheme: str, vocab: int) -> str:
    lines = [
        header(
            f"Tree dual: certified rules at fixed contexts, {trees} {SHAPE} {scheme} trees each, "
            f"V = {vocab:,}"
        ),
        "| context (scale, noise) | rule | rule mean | best verifier (mean) | rule - best (paired) | z |",
        "|---|---|---|---|---|---|",
    ]
    rules = certified_rules(scheme)
    names = [
        n
        for n in valid_verifiers(scheme, shape=SHAPE)
        if n in ("optimal", "traversal", "lookahead", "greedy")
    ]
    for k, (scale, noise) in enumerate(CONTEXTS):
        laws = Laws(1000 + k, scale, noise, vocab=vocab)
        vals: dict = {}
        for i in range(trees):
            tree = draft_tree(SHAPE, scheme, laws.draft, np.random.default_rng([k, i]), target=laws.target)
            for rule in rules:
                vals.setdefault(rule, []).append(upper_bound(tree, rule))
            for name in names:
                vals.setdefault(name, []).append(expected_tokens(tree, name))
        vals = {key: np.asarray(v) for key, v in vals.items()}
        best = max(names, key=lambda n: vals[n].mean())
        for rule in rules:
            d, se = _mean_se(vals[rule] - vals[best])
            z = d / se if se > 0 else math.inf
            lines.append(
                f"| {scale:g}, {noise:g} | {rule} | {vals[rule].mean():.4f} "
                f"| {best} ({vals[best].mean():.4f}) | {d:+.4f} ± {se:.4f} | {z:+.1f} |"
            )
        print(f"# context {k} done", flush=True)
    lines.append("")
    lines.append("Mean ± standard error over the trees; z = mean / standard error of the paired difference.")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=("cost", "sandwich", "paired", "tiny", "contexts"))
    ap.add_argument("--scheme", default="greedy", help="contexts: the draft scheme")
    ap.add_argument("--vocab", type=int, default=3000, help="contexts: the vocabulary size")
    ap.add_argument("--trees", type=int, default=None)
    ap.add_argument("--cases", type=int, default=4)
    a = ap.parse_args()
    if a.what == "cost":
        print(cost(a.trees or 6))
    elif a.what == "tiny":
        print(tiny(a.cases))
    elif a.what == "contexts":
        print(contexts(a.trees or 4000, a.scheme, a.vocab))
    elif a.what == "paired":
        print(paired(a.trees or 24))
    else:
        print(sandwich(a.trees or 24))


if __name__ == "__main__":
    main()

"""The lookahead tree verifier at full vocabulary: its cost per tree and its value against node-wise
``optimal`` and ``traversal`` (docs/performance.md#the-lookahead-verifier-benchmarksbench_lookaheadpy).

Trees of shape [4, 2, 2, 1] (45 nodes, 29 internal), i.i.d. drafts, V = 152,064. At every path ``u``
the target is ``softmax(s z_u)`` and the draft ``softmax(s z_u + noise e_u)``, ``z_u, e_u`` standard
normal vectors drawn from a seed and the path (LLM-like: a sharp head, a long tail; the draft a noisy
copy of the target).

* **Cost** (``--cost-trees``, CPU time of this process, interleaved per tree): the exact value of one
  tree by node-wise ``optimal`` and by each lookahead variant, each on a fresh copy of the tree (its
  own ``prepare`` per internal node), and by ``lookahead`` after node-wise ``optimal`` on the same tree
  (the decoder's case: the node-wise ``prepare`` is cached per path and shared), as a ratio to one
  ``np.argsort`` of a V-vector timed in the same loop (median of three per tree); with ``--target``,
  also one forward of that model over a 16-node tree (``bench_trees.py``'s baseline), CPU, one thread.
* **Sampling cost** (``--sampling-trees``): one ``verify_tree`` by each driver of the report's driven
  runs on a fresh tree, CPU milliseconds: the verification a real decoder pays per call.
* **Before and after** (``--paired-trees N``): one ``lookahead`` verification per fresh tree with the
  plain numpy routes the library used before round 4, session 6 (numpy's unstable ``argsort`` for the
  optimal verifier's order, ``searchsorted`` and ``bincount`` for the value order's tables) and with
  the library's own, alternated per tree in one process, CPU ms; the emitted tokens must agree.
* **Tie orders** (``--tie-orders N``): on trees from bf16-rounded logits, the exact values of
  node-wise ``optimal`` and ``lookahead`` with ties of ``q/p`` in token-index order and in numpy's
  unstable order, and the root's one-step acceptance of both against ``alpha*``.
* **Sampling check** (``--sampling-check N``): each driver's mean emitted tokens over N verifications
  of one tree per setting against its exact value, as a z-score.
* **Value** (``--trees`` per setting): exact tokens per call of ``optimal``, ``traversal`` and every
  lookahead variant on the same trees, mean +- standard error over the trees, and the paired
  differences (mean +- s.e.).

    NUMBA_NUM_THREADS=1 python benchmarks/bench_lookahead.py [--trees 48] [--cost-trees 5] [--target DIR]
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent / "tests"))  # the old table route (oracles.py)
from _common import header  # noqa: E402

from mdsd_ot.trees import DraftTree, draft_tree, expected_tokens  # noqa: E402
from mdsd_ot.trees.verifiers.lookahead import LookaheadVerifier  # noqa: E402

V = 152_064
SHAPE = "4,2,2,1"
SETTINGS = [(3.0, 1.0), (4.0, 1.0), (6.0, 1.0), (4.0, 0.5), (4.0, 2.0)]
VARIANTS = {
    "lookahead": None,  # the registry's default instance
    "value order, no orbit average": LookaheadVerifier(order="value", symmetric=False),
    "soc (draft order)": LookaheadVerifier(order="draft", symmetric=False),
    "soc scaled": LookaheadVerifier(coupling="scaled", order="draft", symmetric=False),
}

#: The drivers of the tree report's driven runs, by the shape they drove.
DRIVERS = {SHAPE: ("rrs", "optimal", "traversal", "lookahead"), "1x4": ("block",)}


def softmax(z):
    e = np.exp(z - z.max())
    return e / e.sum()


def bf16(z):
    """``z`` rounded to bfloat16 (to nearest, ties to even) and back: logits as a bf16 model gives them."""
    b = z.astype(np.float32).view(np.uint32)
    b = (b + np.uint32(0x7FFF) + ((b >> np.uint32(16)) & np.uint32(1))) & np.uint32(0xFFFF0000)
    return b.view(np.float32).astype(np.float64)


class Laws:
    """Target and draft laws by path, drawn from a seed and the path (memoised); ``rounded``: the
    logits rounded to bfloat16 first (many tokens then share their ratio ``q/p`` exactly)."""

    def __init__(self, seed, scale, noise, rounded=False):
        self.seed, self.scale, self.noise, self.memo = seed, scale, noise, {}
        self.round = bf16 if rounded else (lambda z: z)

    def __call__(self, path):
        if path not in self.memo:
            rng = np.random.default_rng([self.seed, len(path), *path])
            z, e = rng.standard_normal(V), rng.standard_normal(V)
            target, draft = self.round(self.scale * z), self.round(self.scale * z + self.noise * e)
            self.memo[path] = (softmax(target), softmax(draft))
        return self.memo[path]

    def target(self, paths):
        return np.array([self(tuple(p))[0] for p in paths])

    def draft(self, paths):
        return np.array([self(tuple(p))[1] for p in paths])


def make_tree(seed, scale, noise):
    laws = Laws(seed, scale, noise)
    return draft_tree(
        SHAPE, "with_replacement", laws.draft, np.random.default_rng([seed, 99]), target=laws.target
    )


def fresh(tree):
    """The same drafted tree with no cached verifier state."""
    copy = DraftTree(tree.shape, tree.scheme, tree.tokens, tree.parent, tree.q, checked=True)
    return copy.set_target(tree.p, checked=True)


def cpu(fn):
    t0 = time.process_time()
    out = fn()
    return time.process_time() - t0, out


def argsort_time(rng):
    a = rng.random(V)
    ts = []
    for _ in range(3):
        t, _ = cpu(lambda: np.argsort(a))
        ts.append(t)
    return float(np.median(ts))


def cost(n_trees, target=None):
    rng = np.random.default_rng(0)
    forward = None
    if target:  # one 1.5B target forward over 1 pending + 16 tree positions, as bench_trees.py times it
        from bench_trees import target_forward_time

        forward, _ = target_forward_time(target, 64, 1)
    rows = []
    for i in range(n_trees):
        tree = make_tree(1000 + i, 4.0, 1.0)
        a0 = argsort_time(rng)
        t_opt, _ = cpu(lambda: expected_tokens(fresh(tree), "optimal"))
        row = {"optimal": t_opt}
        for name, ver in VARIANTS.items():
            t, _ = cpu(lambda: expected_tokens(fresh(tree), ver or name))
            row[name] = t
        shared = fresh(tree)
        expected_tokens(shared, "optimal")
        row["lookahead after optimal"], _ = cpu(lambda: expected_tokens(shared, "lookahead"))
        a1 = argsort_time(rng)
        base = float(np.median([a0, a1]))
        rows.append({k: v / base for k, v in row.items()} | {"argsort ms": 1e3 * base})
        print(f"tree {i}: " + ", ".join(f"{k} {v:.1f}" for k, v in rows[-1].items()), flush=True)
    keys = [k for k in rows[0] if k != "argsort ms"]
    print("\n| per [4,2,2,1] tree (29 internal nodes) | argsorts, median over trees | per internal node |")
    print("|---|---|---|")
    for k in keys:
        m = float(np.median([r[k] for r in rows]))
        print(f"| {k} | {m:.1f} | {m / 29:.2f} |")
    base = float(np.median([r["argsort ms"] for r in rows]))
    print(f"| (one argsort of {V:,} floats, ms) | {base:.2f} | |")
    if forward is not None:
        ms = 1e3 * forward
        print(f"| (one target forward, CPU ms, 1 thread) | {ms:.0f} = {ms / base:.0f} argsorts | |")


def sampling_cost(n_trees):
    """CPU milliseconds of one verification by each driver of the report's driven runs, as a decoder
    pays it per call: ``verify_tree`` on a fresh copy of the tree (its own ``prepare`` per node it
    visits), on [4,2,2,1] i.i.d. trees and, for ``block``, on 1 x 4 chains."""
    from mdsd_ot.trees import verify_tree

    times = {(shape, name): [] for shape, names in DRIVERS.items() for name in names}
    for i in range(-1, n_trees):  # tree -1: a warm-up (first calls compile), not timed
        for shape, names in DRIVERS.items():
            laws = Laws(3001 + i, 4.0, 1.0)
            tree = draft_tree(
                shape, "with_replacement", laws.draft, np.random.default_rng([i + 1, 98]), target=laws.target
            )
            for name in names:
                t, _ = cpu(lambda: verify_tree(fresh(tree), name, np.random.default_rng(i + 1)))
                if i >= 0:
                    times[shape, name].append(t)
    print("\n| one verification per call (verify_tree, fresh tree) | CPU ms, mean | median | min - max |")
    print("|---|---|---|---|")
    for (shape, name), ts in times.items():
        ms = 1e3 * np.array(ts)
        spread = f"{ms.min():.0f} - {ms.max():.0f}"
        print(f"| {name} on {shape} | {ms.mean():.0f} | {np.median(ms):.0f} | {spread} |")


def paired_old_routes(n_trees):
    """CPU ms of one ``lookahead`` verification on fresh trees, with the old numpy routes patched in
    (``np.argsort`` of the chain keys; the tables' ``searchsorted`` + ``bincount``) and without,
    alternated per tree; the geometric mean of the per-tree ratios."""
    from oracles import ratio_bin_sums_slow as old_bins  # the tables' numpy route before the kernel

    import mdsd_ot._kernels.verifiers as kernels
    import mdsd_ot.verifiers.optimal as optimal
    from mdsd_ot._kernels.optimal import chain_keys
    from mdsd_ot.trees import verify_tree

    def old_order(p, q, scratch):
        return np.argsort(chain_keys(p, q, np.empty(p.size)))

    routes = {"before": (old_order, old_bins), "now": (optimal.chain_token_order, kernels.ratio_bin_sums)}
    times = {k: [] for k in routes}
    for i in range(-1, n_trees):  # tree -1: a warm-up of both, not timed
        laws = Laws(3001 + i, 4.0, 1.0)
        tree = draft_tree(
            SHAPE, "with_replacement", laws.draft, np.random.default_rng([i + 1, 98]), target=laws.target
        )
        tokens = set()
        for name in list(routes)[:: 1 if i % 2 else -1]:
            optimal.chain_token_order, kernels.ratio_bin_sums = routes[name]
            t, out = cpu(lambda: verify_tree(fresh(tree), "lookahead", np.random.default_rng(i + 1)))
            tokens.add(tuple(out))
            if i >= 0:
                times[name].append(t)
        optimal.chain_token_order, kernels.ratio_bin_sums = routes["now"]
        if len(tokens) != 1:
            raise AssertionError(f"tree {i}: the two routes emitted different tokens: {tokens}")
    ms = {k: 1e3 * np.array(v) for k, v in times.items()}
    ratio = float(np.exp(np.mean(np.log(ms["before"] / ms["now"]))))
    print(f"\n| lookahead on [4,2,2,1], {n_trees} fresh trees | CPU ms, mean | median |")
    print("|---|---|---|")
    for k, v in ms.items():
        print(f"| {k} | {v.mean():.0f} | {np.median(v):.0f} |")
    print(f"| before / now, geometric mean per tree | {ratio:.2f}x | |")


def tie_orders(n_trees):
    """On trees whose logits are rounded to bfloat16 (ties of ``q/p`` abound): the exact values of
    node-wise ``optimal`` and ``lookahead`` with the optimal verifier's ties in token-index order (the
    library) and in the order of numpy's unstable ``argsort`` (the library before), and the root's
    one-step acceptance of both against the dual's ``alpha*``: another tie order is another optimal
    coupling (the same ``alpha*``), whose tree values differ."""
    import mdsd_ot.verifiers.optimal as optimal
    from mdsd_ot import optimal_acceptance
    from mdsd_ot._kernels.optimal import chain_keys
    from mdsd_ot.verifiers import get_verifier

    def numpy_order(p, q, scratch):
        return np.argsort(chain_keys(p, q, np.empty(p.size)))

    routes = {"index order": optimal.chain_token_order, "numpy's order": numpy_order}
    print(
        "\n| bf16-rounded tree | distinct q/p at the root | optimal: numpy's - index order | "
        "lookahead: the same | root acceptance - alpha*, each order (n = 4) |"
    )
    print("|---|---|---|---|---|")
    for i in range(n_trees):
        laws = Laws(4000 + i, 4.0, 1.0, rounded=True)
        tree = draft_tree(SHAPE, "with_replacement", laws.draft, np.random.default_rng(i), target=laws.target)
        p, q = tree.node_pair(0)
        alpha = optimal_acceptance(p, q, 4).value
        values, gaps = {}, []
        for name, route in routes.items():
            optimal.chain_token_order = route
            values[name] = [expected_tokens(fresh(tree), v) for v in ("optimal", "lookahead")]
            gaps.append(get_verifier("optimal").prepare(p, q, 4).acceptance() - alpha)
        optimal.chain_token_order = routes["index order"]
        d = [a - b for a, b in zip(values["numpy's order"], values["index order"])]
        distinct = np.unique(q / p).size
        gap_text = ", ".join(f"{g:+.1e}" for g in gaps)
        print(f"| {i} | {distinct:,} of {V:,} | {d[0]:+.4f} | {d[1]:+.4f} | {gap_text} |")


def sampling_check(n_draws):
    """Each driver's sampler against its exact value at full vocabulary: on one [4,2,2,1] i.i.d. tree
    (``block``: one 1 x 4 chain) per setting, the mean tokens of ``n_draws`` verifications (the
    prepared state reused) against ``expected_tokens``, as a z-score (the report's driven runs sample
    at this V)."""
    from mdsd_ot.trees import verify_tree

    print(f"\n| setting (scale, noise) | driver | exact | sampled, {n_draws:,} verifications | z |")
    print("|---|---|---|---|---|")
    for (k, (scale, noise)), (shape, names) in itertools.product(
        enumerate(SETTINGS + [(2.0, 1.0)]), DRIVERS.items()
    ):
        laws = Laws(500 + k, scale, noise)
        tree = draft_tree(shape, "with_replacement", laws.draft, np.random.default_rng(k), target=laws.target)
        for name in names:
            exact = expected_tokens(tree, name)
            rng = np.random.default_rng(10 + k)
            x = np.array([len(verify_tree(tree, name, rng)) for _ in range(n_draws)])
            se = x.std(ddof=1) / np.sqrt(n_draws)
            if se == 0.0:  # every verification emitted the same count: it must be the exact value
                z_text = "exact" if x[0] == exact else "DIFFERS"
            else:
                z_text = f"{(x.mean() - exact) / se:+.2f}"
            got = f"{x.mean():.4f} ± {se:.4f}"
            print(f"| {scale:g}, {noise:g} | {name} on {shape} | {exact:.4f} | {got} | {z_text} |")


def value(n_trees, settings):
    names = ["optimal", "traversal"] + list(VARIANTS)
    print(
        "\n| scale, noise | trees | " + " | ".join(names) + " | lookahead - optimal | lookahead - traversal |"
    )
    print("|" + "---|" * (len(names) + 4))
    for scale, noise in settings:
        vals = {n: [] for n in names}
        for i in range(n_trees):
            tree = make_tree(7000 + i, scale, noise)
            for n in names:
                vals[n].append(expected_tokens(tree, VARIANTS.get(n) or n))
        arr = {n: np.array(v) for n, v in vals.items()}

        def ms(x):
            return f"{x.mean():.3f} +- {x.std(ddof=1) / np.sqrt(x.size):.3f}"

        cells = [ms(arr[n]) for n in names]
        d1, d2 = arr["lookahead"] - arr["optimal"], arr["lookahead"] - arr["traversal"]
        rel = 100 * d1.mean() / arr["optimal"].mean()
        cells += [f"{ms(d1)} ({rel:+.1f}%)", ms(d2)]
        print(f"| {scale:g}, {noise:g} | {n_trees} | " + " | ".join(cells) + " |", flush=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trees", type=int, default=48, help="trees per setting for the value table")
    ap.add_argument("--cost-trees", type=int, default=5, help="trees for the cost table")
    ap.add_argument("--sampling-trees", type=int, default=5, help="trees for the sampling-cost table")
    ap.add_argument("--sampling-check", type=int, default=0, help="verifications per tree (e.g. 20000)")
    ap.add_argument("--paired-trees", type=int, default=0, help="trees for the before/after table")
    ap.add_argument("--tie-orders", type=int, default=0, help="bf16-rounded trees for the tie-order table")
    ap.add_argument("--no-scaled", action="store_true", help="leave out the 'soc scaled' variant")
    ap.add_argument("--target", default=None, help="target model folder: time one forward in the same run")
    args = ap.parse_args(argv)
    if args.no_scaled:
        VARIANTS.pop("soc scaled")
    print(header("The lookahead verifier at V = 152,064"))
    if args.cost_trees:
        cost(args.cost_trees, args.target)
    if args.sampling_trees:
        sampling_cost(args.sampling_trees)
    if args.paired_trees:
        paired_old_routes(args.paired_trees)
    if args.tie_orders:
        tie_orders(args.tie_orders)
    if args.sampling_check:
        sampling_check(args.sampling_check)
    if args.trees:
        value(args.trees, SETTINGS)


if __name__ == "__main__":
    main()

"""Verification overhead per target call: the exact recursion of every verifier on one 4 x 4 draft
tree at V = 151,936 (Qwen2.5's vocabulary), as a ratio to one target forward of the same tree.

Every node holds an LLM-like (p, q) pair; the tree is drafted with each scheme that fits a 4 x 4 tree
(i.i.d., sequential without replacement, greedy, top-n) and every verifier valid for it is evaluated
exactly (:func:`mdsd_ot.trees.expected_tokens`), plus the node-alpha heuristic: the per-scheme total
is the overhead of one decoding call (a call's tree is drafted by one scheme); the sum over the four
schemes is printed too. The baseline is one
forward of the real target over prompt + tree (tree attention mask, KV cache of the prompt), measured
in the same run, when ``--target`` (or ``$MODELS``) names the model folder; otherwise the absolute time
is reported and the script says so. Each quantity is the best of ``--repeat`` runs after a warm-up,
timed in CPU time (``time.process_time``) as well as wall time: the ratio is CPU over CPU, so other
processes on a shared machine do not bias it (the baseline runs on ``--threads`` torch threads, 1 by
default, and the recursion on one core).

Tree-level verifiers (``--tree-level-only`` for their rows alone): block verification of a 1 x 4
chain and traversal verification of a 4 x 4 and a 4,2,2,1 tree, each drafted by every scheme it accepts,
against the same target forward and, always (no model needed), against the scheme's own node-wise
verifier on the same tree.

    NUMBA_NUM_THREADS=1 python benchmarks/bench_trees.py [--target $MODELS/qwen2.5-coder-1.5b-instruct]
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
from _common import header, llm_like_pair

from mdsd_ot.trees import DraftTree, expected_tokens, node_alpha_heuristic, parse_shape, valid_verifiers

V = 151_936
SCHEMES = ("with_replacement", "without_replacement", "greedy", "top_n")


def build_tree(scheme, rng, temperature, shape="4x4"):
    """A drafted tree (4 x 4 by default) whose every node has its own LLM-like (p, q) pair."""
    from mdsd_ot.drafts import get_scheme

    shape = parse_shape(shape)
    tokens, parent, qs, ps, level = [-1], [-1], [], [], [0]
    pairs = {}
    for b in shape.branching:
        nxt = []
        for v in level:
            p, q = llm_like_pair(V, rng, temperature=temperature)
            pairs[v] = p
            qs.append(q)
            for x in get_scheme(scheme).sample(q, b, rng).tolist():
                tokens.append(x)
                parent.append(v)
                nxt.append(len(tokens) - 1)
        level = nxt
    for v in level:
        pairs[v] = llm_like_pair(V, rng, temperature=temperature)[0]
    ps = np.stack([pairs[v] for v in range(len(tokens))])
    return DraftTree(shape, scheme, tokens, parent, np.stack(qs), ps)


def _measured(scheme):
    """What the decoder evaluates on a tree of this scheme: every valid verifier that runs at full V
    (the LP-only ``optimal`` is left out: the decoder skips it beyond DECODE_OPTIMAL_MAX_V), then the
    node-alpha heuristic."""
    from mdsd_ot.decode.runner import runs_at

    return [v for v in valid_verifiers(scheme) if runs_at(v, scheme, V)] + ["node-alpha heuristic"]


def _evaluate(tree, name):
    tree._prepared.clear()  # nothing reused across repetitions or verifiers
    return node_alpha_heuristic(tree) if name == "node-alpha heuristic" else expected_tokens(tree, name)


def time_recursions(temperature, rng, repeat):
    """``(scheme, name, best CPU seconds, best wall seconds, value)``: best of ``repeat`` runs each,
    after a warm-up of every measured quantity on another tree (first calls load compiled kernels)."""
    out = []
    for scheme in SCHEMES:
        warm = build_tree(scheme, rng, temperature)
        for name in _measured(scheme):
            _evaluate(warm, name)
        tree = build_tree(scheme, rng, temperature)
        for name in _measured(scheme):
            cpu, wall = [], []
            for _ in range(repeat):
                c0, t0 = time.process_time(), time.perf_counter()
                value = _evaluate(tree, name)
                cpu.append(time.process_time() - c0)
                wall.append(time.perf_counter() - t0)
            out.append((scheme, name, min(cpu), min(wall), value))
    return out


#: Tree-level verifiers (docs/math.md#tree-level-verification): (verifier, shape) rows, each drafted by
#: every scheme of SCHEMES the verifier accepts on that shape.
TREE_LEVEL_ROWS = (("block", "1x4"), ("traversal", "4x4"), ("traversal", "4,2,2,1"))


def time_tree_level(temperature, rng, repeat):
    """``(verifier, shape, scheme, reference, best CPU s, best wall s, value, reference CPU s, reference
    value)``: each tree-level verifier's exact expected tokens on a freshly drafted tree, and the scheme's
    own node-wise verifier (``reference_verifier``; ``naive`` for top_n) on the same tree, an in-run
    baseline that needs no model. Best of ``repeat`` after a warm-up on another tree."""
    from mdsd_ot.drafts import get_scheme

    def best(tree, name):
        cpu, wall = [], []
        for _ in range(repeat):
            tree._prepared.clear()
            c0, t0 = time.process_time(), time.perf_counter()
            value = expected_tokens(tree, name)
            cpu.append(time.process_time() - c0)
            wall.append(time.perf_counter() - t0)
        return min(cpu), min(wall), value

    out = []
    for name, shape in TREE_LEVEL_ROWS:
        for scheme in SCHEMES:
            if name not in valid_verifiers(scheme, shape=shape):
                continue
            ref = get_scheme(scheme).reference_verifier
            warm = build_tree(scheme, rng, temperature, shape)
            expected_tokens(warm, name)
            expected_tokens(warm, ref)
            tree = build_tree(scheme, rng, temperature, shape)
            cpu, wall, value = best(tree, name)
            ref_cpu, _, ref_value = best(tree, ref)
            out.append((name, shape, scheme, ref, cpu, wall, value, ref_cpu, ref_value))
    return out


def target_forward_time(path, prompt_tokens, threads, repeat=3):
    """Best CPU and best wall seconds of one target forward over 1 pending + 16 tree positions."""
    import torch
    from transformers import AutoModelForCausalLM

    from mdsd_ot.decode.models import TreeLM

    torch.set_num_threads(threads)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    lm = TreeLM(model)
    rng = np.random.default_rng(0)
    paths = [(int(a),) + (int(b),) * d for a in rng.integers(0, 1000, 4) for b in [7] for d in range(4)]
    cpu, wall = [], []
    for _ in range(repeat):
        lm.reset(rng.integers(0, 1000, prompt_tokens).tolist())
        lm.forward([])  # the prompt into the cache, as in decoding
        lm.commit([5])  # one committed token pending, as after a call
        c0, t0 = time.process_time(), time.perf_counter()
        lm.forward(paths)  # 1 pending + 16 tree positions
        cpu.append(time.process_time() - c0)
        wall.append(time.perf_counter() - t0)
    del model, lm
    return min(cpu), min(wall)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", default=None, help="target model folder for the baseline forward")
    ap.add_argument("--prompt-tokens", type=int, default=150)
    ap.add_argument("--repeat", type=int, default=3, help="best of this many runs per quantity")
    ap.add_argument("--threads", type=int, default=1, help="torch threads of the baseline forward")
    ap.add_argument(
        "--tree-level-only",
        action="store_true",
        help="only the tree-level verifiers' rows (block, traversal)",
    )
    args = ap.parse_args()
    target = args.target
    if target is None and os.environ.get("MODELS"):
        target = os.path.join(os.environ["MODELS"], "qwen2.5-coder-1.5b-instruct")
    base = None
    if target and os.path.isdir(target):
        base = target_forward_time(target, args.prompt_tokens, args.threads)
    print(header("Exact tree recursion of every verifier, V = 151,936"))
    print(
        f"best of {args.repeat} runs per quantity, CPU time (time.process_time) and wall time; ratios "
        f"are CPU time over CPU time (robust to other processes on the machine)\n"
    )
    if base is None:
        print("no target model given (--target or $MODELS): absolute times only, no ratio\n")
    else:
        print(
            f"baseline: one forward of the 1.5B target (fp32, {args.threads} torch thread(s)) over "
            f"1 + 16 tree positions on a {args.prompt_tokens}-token KV cache: "
            f"{base[0] * 1e3:.0f} ms CPU, {base[1] * 1e3:.0f} ms wall\n"
        )
    rng = np.random.default_rng(0)
    if not args.tree_level_only:
        node_wise_table(rng, args.repeat, base)
    tree_level_table(rng, args.repeat, base)


def _ratio(cpu, base, bold=False):
    if not base:
        return "-"
    return f"**{cpu / base[0]:.3f}x**" if bold else f"{cpu / base[0]:.3f}x"


def tree_level_table(rng, repeat, base):
    print(
        "\n### Tree-level verifiers (exact expected tokens of one drafted tree)\n\nbaselines measured in the "
        "same run: one target forward (when a model is given) and the scheme's own node-wise verifier on the "
        "same tree (always)\n"
    )
    print(
        "| T | verifier | tree | scheme | CPU (ms) | wall (ms) | CPU / target forward CPU "
        "| node-wise reference | CPU / reference CPU | tokens per call | reference tokens |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for T in (0.3, 1.0):
        for name, shape, scheme, ref, cpu, wall, value, ref_cpu, ref_value in time_tree_level(T, rng, repeat):
            print(
                f"| {T} | {name} | {shape} | {scheme} | {cpu * 1e3:.1f} | {wall * 1e3:.1f} "
                f"| {_ratio(cpu, base)} | {ref} | {cpu / ref_cpu:.2f}x | {value:.3f} | {ref_value:.3f} |"
            )


def node_wise_table(rng, repeat, base):
    print("| T | scheme | verifier | CPU (ms) | wall (ms) | CPU / target forward CPU | tokens per call |")
    print("|---|---|---|---|---|---|---|")

    def ratio(cpu, bold=False):
        return _ratio(cpu, base, bold)

    for T in (0.3, 1.0):
        rows = time_recursions(T, rng, repeat)
        for scheme, name, cpu, wall, value in rows:
            times = f"{cpu * 1e3:.1f} | {wall * 1e3:.1f}"
            print(f"| {T} | {scheme} | {name} | {times} | {ratio(cpu)} | {value:.3f} |")
        for scheme in SCHEMES:  # one call's overhead: its tree has one scheme
            cpu = sum(r[2] for r in rows if r[0] == scheme)
            wall = sum(r[3] for r in rows if r[0] == scheme)
            times = f"{cpu * 1e3:.0f} | {wall * 1e3:.0f}"
            print(f"| {T} | {scheme} | all (one call) | {times} | {ratio(cpu, True)} | |")
        cpu, wall = sum(r[2] for r in rows), sum(r[3] for r in rows)
        print(f"| {T} | all four schemes | all | {cpu * 1e3:.0f} | {wall * 1e3:.0f} | {ratio(cpu)} | |")


if __name__ == "__main__":
    main()

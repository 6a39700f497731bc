"""Verification overhead per target call: the exact recursion of every verifier on one 4 x 4 draft
tree at V = 151,936 (Qwen2.5's vocabulary), as a ratio to one target forward of the same tree.

Every node holds an LLM-like (p, q) pair; the tree is drafted with each scheme that fits a 4 x 4 tree
(i.i.d., sequential without replacement, greedy, top-n) and every verifier valid for it is evaluated
exactly (:func:`mdsd_ot.trees.expected_tokens`), plus the node-bound estimate. The baseline is one
forward of the real target over prompt + tree (tree attention mask, KV cache of the prompt), measured
in the same run, when ``--target`` (or ``$MODELS``) names the model folder; otherwise the absolute time
is reported and the script says so.

    python benchmarks/bench_trees.py [--target $MODELS/qwen2.5-coder-1.5b-instruct] [--prompt-tokens 150]
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
from _common import header, llm_like_pair

from mdsd_ot.trees import DraftTree, bound_estimate, expected_tokens, parse_shape, valid_verifiers

V = 151_936
SCHEMES = ("with_replacement", "without_replacement", "greedy", "top_n")


def build_tree(scheme, rng, temperature):
    """A drafted 4 x 4 tree whose every node has its own LLM-like (p, q) pair."""
    from mdsd_ot.drafts import get_scheme

    shape = parse_shape("4x4")
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


def time_recursions(temperature, rng):
    out = []
    for scheme in SCHEMES:
        tree = build_tree(scheme, rng, temperature)
        names = [v for v in valid_verifiers(scheme) if v != "optimal"]
        expected_tokens(build_tree(scheme, rng, temperature), names[0])  # warm-up (first calls compile)
        for name in names:
            tree._prepared.clear()
            t0 = time.perf_counter()
            value = expected_tokens(tree, name)
            out.append((scheme, name, time.perf_counter() - t0, value))
        tree._prepared.clear()
        t0 = time.perf_counter()
        value = bound_estimate(tree)
        out.append((scheme, "bound estimate", time.perf_counter() - t0, value))
    return out


def target_forward_time(path, prompt_tokens, repeat=3):
    import torch
    from transformers import AutoModelForCausalLM

    from mdsd_ot.decode.models import TreeLM

    torch.set_num_threads(int(os.environ.get("BENCH_THREADS", "2")))
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    lm = TreeLM(model)
    rng = np.random.default_rng(0)
    paths = [(int(a),) + (int(b),) * d for a in rng.integers(0, 1000, 4) for b in [7] for d in range(4)]
    times = []
    for _ in range(repeat):
        lm.reset(rng.integers(0, 1000, prompt_tokens).tolist())
        lm.forward([])  # the prompt into the cache, as in decoding
        lm.commit([5])  # one committed token pending, as after a call
        t0 = time.perf_counter()
        lm.forward(paths)  # 1 pending + 16 tree positions
        times.append(time.perf_counter() - t0)
    return min(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", default=None, help="target model folder for the baseline forward")
    ap.add_argument("--prompt-tokens", type=int, default=150)
    args = ap.parse_args()
    target = args.target
    if target is None and os.environ.get("MODELS"):
        target = os.path.join(os.environ["MODELS"], "qwen2.5-coder-1.5b-instruct")
    base = None
    if target and os.path.isdir(target):
        base = target_forward_time(target, args.prompt_tokens)
    print(header("Exact tree recursion of every verifier, 4 x 4 tree, V = 151,936"))
    if base is None:
        print("no target model given (--target or $MODELS): absolute times only, no ratio\n")
    else:
        print(
            f"baseline: one forward of the 1.5B target over 1 + 16 tree positions on a "
            f"{args.prompt_tokens}-token KV cache: {base * 1e3:.0f} ms\n"
        )
    rng = np.random.default_rng(0)
    print("| T | scheme | verifier | time (ms) | / target forward | tokens per call |")
    print("|---|---|---|---|---|---|")
    for T in (0.3, 1.0):
        total = 0.0
        for scheme, name, dt, value in time_recursions(T, rng):
            total += dt
            ratio = f"{dt / base:.3f}x" if base else "-"
            print(f"| {T} | {scheme} | {name} | {dt * 1e3:.1f} | {ratio} | {value:.3f} |")
        ratio = f"{total / base:.2f}x" if base else "-"
        print(f"| {T} | all | all | {total * 1e3:.0f} | {ratio} | |")


if __name__ == "__main__":
    main()

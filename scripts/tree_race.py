#!/usr/bin/env python
"""Speculative decoding against plain decoding, timed side by side (docs/results/trees.md, "Speedup").

The report's driven runs time their forwards per call, and their speedup divides by plain decoding's
cost from a separate measurement (``t_T(1)`` of ``scripts/tree_cost.py``), whose repeats vary by up to
40% on a shared virtual machine. This script measures both in one run: for every prompt it decodes the
same number of new tokens with the target alone (``plain``: one forward per token, the law at the
temperature, one draw) and with each speculative method (``DRIVER@TREE``: the draft tree, one target
forward over it, the laws, the driver's verification on the fresh tree; nothing else: no exact values),
back to back in an order that rotates from prompt to prompt, so that a slow spell of the machine
falls on every method alike. Each method decodes each prompt from an empty cache with its own
generator, seeded by ``(--seed, the prompt's index, the method's position in --methods)``: the same
``--methods`` list reproduces a run's tokens, another list gives a method other draws. The first prompt
is decoded once untimed first (compilation, caches).

    python scripts/tree_race.py run OUT.jsonl [--prompts humaneval] [--subset 64] [--temperature 0.7]
        [--tokens 16] [--methods plain block@1x4 traversal@4,2,2,1 ...] [--threads 2]
        [--dtype bfloat16] [--target DIR --draft DIR]
    python scripts/tree_race.py show OUT.jsonl

``run`` appends one JSON line per (prompt, method) as it finishes and skips those already in OUT
(resume by running it again). ``show`` prints per method the tokens per call, the wall milliseconds
per generated token (all prompts pooled, and the median prompt) and the speedup over ``plain``
paired by prompt: the geometric mean over prompts of plain's seconds per token over the method's,
with a 95% t interval (on the logarithms); also over the calls after each prompt's first, which
processes the prompt (prefill: two models' for speculative decoding, one for plain), the rate a long
generation approaches.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from prepare_qwen_models import default_models_dir  # noqa: E402
from tree_cost import DRAFT, TARGET, _cpu  # noqa: E402

#: The report's driven runs: each driver on the tree it drove (i.i.d. drafts).
METHODS = ("plain", "block@1x4", "rrs@4,2,2,1", "traversal@4,2,2,1", "lookahead@4,2,2,1")
SCHEME = "with_replacement"


def parse_method(spec: str):
    """``"plain"`` -> None; ``"DRIVER@TREE"`` -> ``(driver, TreeShape)`` (``ValueError`` otherwise)."""
    from mdsd_ot.trees import parse_shape, valid_verifiers

    if spec == "plain":
        return None
    driver, sep, tree = spec.partition("@")
    if not sep or not driver or not tree:
        raise ValueError(f"a method is 'plain' or DRIVER@TREE (e.g. traversal@4,2,2,1), got {spec!r}")
    shape = parse_shape(tree)
    if driver not in valid_verifiers(SCHEME, shape=shape):
        raise ValueError(
            f"{driver!r} is not a valid verifier of {SCHEME} drafts on {shape.label}; valid: "
            f"{', '.join(valid_verifiers(SCHEME, shape=shape))}"
        )
    return driver, shape


def _decoded(made: list, calls: list, call_tokens: list) -> dict:
    """The fields of one prompt's row: the tokens made, and each call's wall seconds and tokens kept."""
    return {
        "tokens": len(made),
        "calls": len(calls),
        "seconds": math.fsum(calls),
        "call_seconds": calls,
        "call_tokens": call_tokens,
        "token_ids": made,
    }


def decode_plain(target_lm, prompt, tokens: int, T: float, rng, eos=None) -> dict:
    """Plain decoding: one target forward per token, its law at ``T``, one inverse-CDF draw."""
    from mdsd_ot.backends.torch import to_distribution
    from mdsd_ot.decode.runner import _np
    from mdsd_ot.verifiers.base import sample_index

    target_lm.reset(prompt)
    made, calls = [], []
    while len(made) < tokens:
        t0 = time.perf_counter()
        root, _ = target_lm.forward([])
        y = sample_index(_np(to_distribution(root[None], temperature=T))[0], rng.random())
        target_lm.commit([y])
        calls.append(time.perf_counter() - t0)
        made.append(y)
        if y == eos:
            break
    return _decoded(made, calls, [1] * len(calls))


def decode_speculative(target_lm, draft_lm, prompt, tokens: int, T: float, driver, shape, rng, eos=None):
    """Speculative decoding by ``driver`` on ``shape`` (i.i.d. drafts): per call the draft tree, the
    target's forward over it, its laws and ``verify_tree``; the split of each call's time recorded.
    Each distinct node is forwarded and its law computed once (as the report's decoder does)."""
    from mdsd_ot.decode.runner import draft_laws, target_laws
    from mdsd_ot.trees import draft_tree, verify_tree

    target_lm.reset(prompt)
    draft_lm.reset(prompt)
    draft = draft_laws(draft_lm, {"temperature": T})
    made, calls, kept_per_call, parts = [], [], [], {"draft": 0.0, "target": 0.0, "verify": 0.0}
    while len(made) < tokens:
        t0 = time.perf_counter()
        tree = draft_tree(shape, SCHEME, draft, rng)
        t1 = time.perf_counter()
        tree.set_target(target_laws(target_lm, tree, {"temperature": T}))
        t2 = time.perf_counter()
        emitted = verify_tree(tree, driver, rng)
        if eos in emitted:
            emitted = emitted[: emitted.index(eos) + 1]
        kept = emitted[: tokens - len(made)]
        target_lm.commit(kept)
        draft_lm.commit(kept)
        t3 = time.perf_counter()
        for key, dt in zip(parts, (t1 - t0, t2 - t1, t3 - t2)):
            parts[key] += dt
        calls.append(t3 - t0)
        kept_per_call.append(len(kept))
        made.extend(kept)
        if eos in kept:
            break
    return _decoded(made, calls, kept_per_call) | {f"{k}_seconds": v for k, v in parts.items()}


def _done(out: Path) -> set:
    if not out.exists():
        return set()
    return {(r["id"], r["method"]) for r in map(json.loads, out.read_text(encoding="utf-8").splitlines())}


def run(args) -> int:
    import numpy as np

    from mdsd_ot.decode.models import TreeLM
    from mdsd_ot.runs.inputs import load_models, load_prompts, record_ids

    try:
        methods = {spec: parse_method(spec) for spec in args.methods}
    except ValueError as exc:
        print(f"tree_race.py: {exc}", file=sys.stderr)
        return 2
    if "plain" not in methods:
        print("tree_race.py: the methods must include 'plain' (the speedups' baseline)", file=sys.stderr)
        return 2
    records = load_prompts(args.prompts)[: args.subset]
    out = Path(args.out)
    done = _done(out)
    todo = [(k, rec) for k, rec in enumerate(records) if any((rec["id"], m) not in done for m in methods)]
    print(f"{len(records) - len(todo)} of {len(records)} prompts done; {len(todo)} to go", flush=True)
    if not todo:
        return 0
    target, draft, tokenizer = load_models(
        args.target, args.draft, device="cpu", dtype=args.dtype, threads=args.threads
    )
    target_lm, draft_lm = TreeLM(target), TreeLM(draft)
    eos = getattr(tokenizer, "eos_token_id", None)

    def decode(spec, prompt, rng):
        if methods[spec] is None:
            return decode_plain(target_lm, prompt, args.tokens, args.temperature, rng, eos)
        driver, shape = methods[spec]
        return decode_speculative(
            target_lm, draft_lm, prompt, args.tokens, args.temperature, driver, shape, rng, eos
        )

    cpu = _cpu()["model_name"]
    warm, _ = record_ids(todo[0][1], tokenizer)
    for spec in methods:  # untimed: first calls compile kernels and fill caches
        decode(spec, warm, np.random.default_rng(0))
    names = list(methods)
    out.parent.mkdir(parents=True, exist_ok=True)
    for k, rec in todo:
        prompt, _ = record_ids(rec, tokenizer)
        order = names[k % len(names) :] + names[: k % len(names)]  # rotate who goes first
        for spec in order:
            if (rec["id"], spec) in done:
                continue
            rng = np.random.default_rng([args.seed, k, names.index(spec)])
            row = {"id": rec["id"], "method": spec, "T": args.temperature, **decode(spec, prompt, rng)}
            row.update(threads=args.threads, dtype=args.dtype, cpu=cpu, loadavg1=os.getloadavg()[0])
            with out.open("a", encoding="utf-8") as fh:
                fh.write(json.dumps(row) + "\n")
        print(f"{rec['id']} done", flush=True)
    return 0


def _ci_log(ratios: list) -> tuple:
    """Geometric mean of ``ratios`` and its 95% t interval (on the logarithms)."""
    from mdsd_ot.intervals import t_quantile

    logs = [math.log(r) for r in ratios]
    mean = statistics.fmean(logs)
    half = (
        t_quantile(len(logs)) * statistics.stdev(logs) / math.sqrt(len(logs)) if len(logs) > 1 else math.nan
    )
    return math.exp(mean), math.exp(mean - half), math.exp(mean + half)


def _seconds_per_token(row: dict, after_first: bool) -> float | None:
    """A row's wall seconds per token, over every call or over the calls after the first (the first
    call also processes the prompt); None where no token follows the first call."""
    if not after_first:
        return row["seconds"] / row["tokens"]
    tokens = sum(row["call_tokens"][1:])
    return math.fsum(row["call_seconds"][1:]) / tokens if tokens else None


def _speedup(plain: dict, got: dict, after_first: bool) -> str:
    ratios = []
    for i in got:
        a, b = _seconds_per_token(plain[i], after_first), _seconds_per_token(got[i], after_first)
        if a is not None and b is not None:
            ratios.append(a / b)
    g, lo, hi = _ci_log(ratios)
    return f"{g:.2f} ({lo:.2f}-{hi:.2f})"


def summary(rows: list) -> list[str]:
    """The ``show`` table (module docstring) from the rows of one run."""
    by = {}
    for r in rows:
        by.setdefault(r["method"], {})[r["id"]] = r
    if "plain" not in by:
        raise ValueError("no 'plain' rows: the speedups need the baseline")
    plain = by["plain"]
    lines = [
        "| method | prompts | tokens per call | ms per token (pooled) | median prompt | speedup over plain, "
        "paired by prompt (95% CI) | the same after the first call | draft / target / verify ms per call |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for method, got in by.items():
        got = {i: r for i, r in got.items() if i in plain}
        toks = sum(r["tokens"] for r in got.values())
        calls = sum(r["calls"] for r in got.values())
        secs = math.fsum(r["seconds"] for r in got.values())
        median = statistics.median(_seconds_per_token(r, False) for r in got.values())
        if method == "plain":
            speed, steady, split = "1", "1", ""
        else:
            speed, steady = _speedup(plain, got, False), _speedup(plain, got, True)
            split = " / ".join(
                f"{1000 * math.fsum(r[f'{k}_seconds'] for r in got.values()) / calls:.0f}"
                for k in ("draft", "target", "verify")
            )
        lines.append(
            f"| {method} | {len(got)} | {toks / calls:.2f} | {1000 * secs / toks:.1f} | "
            f"{1000 * median:.1f} | {speed} | {steady} | {split} |"
        )
    loads = [r["loadavg1"] for r in rows]
    cpus = sorted({r.get("cpu", "CPU not recorded") for r in rows})
    lines.append("")
    lines.append(
        f"T = {rows[0]['T']:g}, {rows[0]['threads']} thread(s), {rows[0]['dtype']}, {' / '.join(cpus)}; load "
        f"average during the run: median {statistics.median(loads):.2f}, max {max(loads):.2f}"
    )
    return lines


def show(args) -> int:
    try:
        rows = [json.loads(line) for line in Path(args.out).read_text(encoding="utf-8").splitlines()]
        print("\n".join(summary(rows)))
    except (OSError, ValueError, KeyError) as exc:
        print(f"tree_race.py show: {exc}", file=sys.stderr)
        return 1
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        epilog=__doc__.split("\n", 2)[2],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="decode and append rows to OUT")
    r.add_argument("out")
    r.add_argument("--target", default=str(default_models_dir() / TARGET))
    r.add_argument("--draft", default=str(default_models_dir() / DRAFT))
    r.add_argument("--prompts", default="humaneval")
    r.add_argument("--subset", type=int, default=64, help="the first N prompts (the driven runs' 64)")
    r.add_argument("--temperature", type=float, default=0.7)
    r.add_argument("--tokens", type=int, default=16, help="new tokens per prompt (the report's 16)")
    r.add_argument("--methods", nargs="+", default=list(METHODS), help="plain and DRIVER@TREE ...")
    r.add_argument("--threads", type=int, default=2)
    r.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float32"))
    r.add_argument("--seed", type=int, default=0)
    s = sub.add_parser("show", help="print the table of OUT")
    s.add_argument("out")
    args = parser.parse_args(argv)
    if args.cmd == "run":
        for name in ("subset", "tokens", "threads"):
            if getattr(args, name) < 1:
                parser.error(f"--{name} must be >= 1, got {getattr(args, name)}")
        if not args.temperature > 0:
            parser.error(f"--temperature must be > 0, got {args.temperature}")
        return run(args)
    return show(args)


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python
"""The effect of bfloat16 forwards on the tree report: laws, alpha* and tokens per call, fp32 vs bf16.

At a sample of the report's call contexts (prompt + the tokens decoded before that call, read from
the committed rows), one union forest is drafted (bf16 draft, as in the run); then both models are
run in float32 and in bfloat16 over the same nodes, and we record

* the total variation between the fp32 and bf16 laws at every node (target and draft);
* alpha* of the root (with replacement, n = 4) under each precision;
* every verifier's exact tokens per call on the same drafted trees under each precision, and what
  that does to the paired differences the report interprets (``paired_summary``);
* the CPU time of the draft and target forwards in each precision (same positions, same machine).

    HF_HUB_OFFLINE=1 python scripts/tree_dtype_effect.py --models $MODELS --rows docs/results/trees2/main \\
        --samples 48 --out docs/results/trees2/dtype_effect.json

One precision's pair is loaded at a time (``--batch`` calls' laws are held between the two), and the
verifiers' values are computed with no model loaded, so that it fits beside little else on 24 GiB.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from study_rows import load_rows  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", required=True, help="folder holding the two model folders")
    parser.add_argument("--rows", default="docs/results/trees", help="committed rows (their contexts)")
    parser.add_argument("--samples", type=int, default=24)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch", type=int, default=8, help="calls whose laws are held at once")
    parser.add_argument("--out", default="dtype_effect.json")
    args = parser.parse_args(argv)

    import torch
    from transformers import AutoModelForCausalLM

    from mdsd_ot import optimal_acceptance
    from mdsd_ot.backends.torch import to_distribution
    from mdsd_ot.decode import DecodeConfig
    from mdsd_ot.decode.models import TreeLM
    from mdsd_ot.decode.runner import forest_paths, runs_at, union_cells
    from mdsd_ot.study.collection import _record_ids, load_prompts
    from mdsd_ot.trees import draft_forest, expected_tokens

    torch.set_num_threads(args.threads)
    rows = load_rows(args.rows)
    cfg = json.loads((Path(args.rows) / "config.json").read_text())["config"]
    config = DecodeConfig(**{k: v for k, v in cfg.items() if k in DecodeConfig.__dataclass_fields__})
    config.prompts = "humaneval"
    config = config.validate()
    from transformers import AutoTokenizer

    folder = Path(args.models)
    tok = AutoTokenizer.from_pretrained(str(folder / "qwen2.5-coder-1.5b-instruct"))
    prompts = {r["id"]: r for r in load_prompts("humaneval")}
    drive = [r for r in rows if "emitted" in r]
    rng = np.random.default_rng(0)
    picks = rng.choice(len(drive), size=min(args.samples, len(drive)), replace=False)
    out = {"samples": [], "config": {"trees": config.trees, "schemes": config.schemes}}

    names = {"target": "qwen2.5-coder-1.5b-instruct", "draft": "qwen2.5-coder-0.5b-instruct"}

    def load(dt):
        """One precision's pair (the other pair is freed first: four models do not fit beside a run)."""
        kind = getattr(torch, dt)
        return {
            role: TreeLM(AutoModelForCausalLM.from_pretrained(str(folder / name), dtype=kind).eval())
            for role, name in names.items()
        }

    def laws_of(models, context, T, every, internal):
        """Target laws at every node, draft laws at every internal node, and the forwards' CPU time."""
        laws, cpu = {}, {}
        for role, paths in (("target", every), ("draft", internal)):
            lm = models[role]
            lm.reset(context)
            t0 = time.process_time()
            root, lg = lm.forward([p for p in paths if p])
            cpu[role] = time.process_time() - t0
            law = to_distribution(torch.cat([root[None], lg]).float(), temperature=T).double().numpy()
            laws[role] = {p: law[k].astype(np.float32) for k, p in enumerate(paths)}  # float32 to fit
        return laws, cpu

    def forests_and_laws(batch):
        """Each call's union forest drafted with the bf16 draft (as in the run), then each precision's
        laws over its nodes; one precision's pair is loaded at a time and freed before the next."""
        calls = []
        models = load("bfloat16")
        for i in batch:
            call = drive[i]
            before = [
                t
                for r in sorted(drive, key=lambda r: r["call"])
                if r["record"] == call["record"] and r["T"] == call["T"] and r["call"] < call["call"]
                for t in r["tokens"]
            ]
            context = list(_record_ids(prompts[call["record"]], tok)[0]) + before  # the decoder's prompt ids
            T = call["T"]
            dlm = models["draft"]
            dlm.reset(context)

            def draft(paths, lm=dlm, T=T):
                if list(paths) == [()]:
                    root, _ = lm.forward([])
                    return to_distribution(root[None], temperature=T).numpy()
                _, lg = lm.forward(paths)
                return to_distribution(lg, temperature=T).numpy()

            forest = draft_forest(config.forest(), draft, np.random.default_rng(i))
            every, internal = forest_paths(forest), forest_paths(forest, internal=True)
            laws, cpu = laws_of(models, context, T, every, internal)
            calls.append((call, forest, every, internal, {"bfloat16": laws}, {"bfloat16": cpu}, context))
        del models
        models = load("float32")
        for call, _, every, internal, laws, cpu, context in calls:
            laws["float32"], cpu["float32"] = laws_of(models, context, call["T"], every, internal)
        del models
        return calls

    def compare(call, forest, every, internal, laws, cpu):
        """One call's record: law distances, alpha* and every verifier's value under both precisions."""
        tv = {
            role: [
                0.5 * float(np.abs(laws["float32"][role][p].astype(float) - laws["bfloat16"][role][p]).sum())
                for p in ps
            ]
            for role, ps in (("target", every), ("draft", internal))
        }

        def law(dt, role, path):
            x = laws[dt][role][path].astype(float)
            return x / x.sum()

        alpha = {dt: optimal_acceptance(law(dt, "target", ()), law(dt, "draft", ()), 4).value for dt in laws}
        values: dict = {}
        flipped: set = set()
        for dt in ("float32", "bfloat16"):
            for t in forest:
                t.q = np.stack([law(dt, "draft", t.path(v)) for v in range(t.n_internal)])
                t.set_target(np.stack([law(dt, "target", t.path(v)) for v in range(t.tokens.size)]))
                t._prepared.clear()
            for tree, scheme, sub, _ in union_cells(config, forest):
                for name in config.verifiers_for(scheme, tree):
                    if not runs_at(name, scheme, sub.vocab):  # as the decoder: no per-node LP at full V
                        continue
                    try:
                        value = expected_tokens(sub, name)
                    except ValueError:
                        # top_n / greedy trees hold the top tokens of the bf16 draft law; where the
                        # float32 law ranks them otherwise the tree is not one of its drafts
                        flipped.add(f"{tree}/{scheme}")
                        continue
                    values.setdefault(f"{tree}/{scheme}/{name}", {})[dt] = value
        values = {k: v for k, v in values.items() if len(v) == 2 and k.rsplit("/", 1)[0] not in flipped}
        diffs = [abs(v["float32"] - v["bfloat16"]) for v in values.values()]
        return {
            "record": call["record"],
            "T": call["T"],
            "call": call["call"],
            "nodes": len(every),
            "cells_compared": len({k.rsplit("/", 1)[0] for k in values}),
            "cells_whose_top_tokens_differ_in_fp32": sorted(flipped),
            "tv_target_median": float(np.median(tv["target"])),
            "tv_target_max": max(tv["target"]),
            "tv_draft_median": float(np.median(tv["draft"])),
            "tv_draft_max": max(tv["draft"]),
            "alpha_star_n4": alpha,
            "tokens_per_call_abs_diff_mean": float(np.mean(diffs)),
            "tokens_per_call_abs_diff_max": max(diffs),
            "tokens_per_call_mean": {dt: float(np.mean([v[dt] for v in values.values()])) for dt in laws},
            "values": values,
            "cpu_s": {f"{r}:{d}": cpu[d][r] for d in cpu for r in cpu[d]},
        }

    # batches of --batch calls: a batch's float32 laws of both models are what is held beside the run
    order = picks.tolist()
    for b in range(0, len(order), args.batch):
        calls = forests_and_laws(order[b : b + args.batch])
        while calls:  # each call's float64 laws and prepared verifiers are freed after it
            call, forest, every, internal, laws, cpu, _ = calls.pop(0)
            out["samples"].append(compare(call, forest, every, internal, laws, cpu))
            print(json.dumps({k: v for k, v in out["samples"][-1].items() if k != "values"}), flush=True)
    s = out["samples"]
    cpu_sum = {k: sum(x["cpu_s"][k] for x in s) for k in s[0]["cpu_s"]}
    out["summary"] = {
        "samples": len(s),
        "tv_target_median": float(np.median([x["tv_target_median"] for x in s])),
        "tv_target_max": max(x["tv_target_max"] for x in s),
        "tv_draft_median": float(np.median([x["tv_draft_median"] for x in s])),
        "tv_draft_max": max(x["tv_draft_max"] for x in s),
        "alpha_star_abs_diff_max": max(
            abs(x["alpha_star_n4"]["float32"] - x["alpha_star_n4"]["bfloat16"]) for x in s
        ),
        "tokens_per_call_abs_diff_mean": float(np.mean([x["tokens_per_call_abs_diff_mean"] for x in s])),
        "tokens_per_call_abs_diff_max": max(x["tokens_per_call_abs_diff_max"] for x in s),
        "tokens_per_call_mean_fp32_minus_bf16": float(
            np.mean([x["tokens_per_call_mean"]["float32"] - x["tokens_per_call_mean"]["bfloat16"] for x in s])
        ),
        "target_cpu_fp32_over_bf16": cpu_sum["target:float32"] / cpu_sum["target:bfloat16"],
        "draft_cpu_fp32_over_bf16": cpu_sum["draft:float32"] / cpu_sum["draft:bfloat16"],
    }
    out["summary"]["paired_differences"] = paired_summary(s)
    print(json.dumps(out["summary"], indent=1))
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    return 0


def paired_summary(samples: list[dict]) -> dict:
    """What bf16 does to the differences the report interprets: for every comparison on the same
    calls (two verifiers of one cell; two schemes of one shape under the same verifier), its value
    under float32 minus its value under bfloat16, per sampled call. Per comparison, the mean of that
    change over the calls holding it, with a 95% t interval over calls; pooled, the median and
    largest absolute change against the median absolute difference itself."""
    from itertools import combinations

    from mdsd_ot.intervals import t_quantile

    change: dict = {}
    size: list = []
    for x in samples:
        vals = x["values"]
        cells: dict = {}
        for key, v in vals.items():
            tree, scheme, name = key.split("/")
            cells.setdefault((tree, scheme), {})[name] = v
        pairs = [
            (f"{tree}/{scheme}: {a} - {b}", vs[a], vs[b])
            for (tree, scheme), vs in cells.items()
            for a, b in combinations(sorted(vs), 2)
        ]
        pairs += [  # schemes compared under traversal, valid for every scheme
            (f"{tree}: {s1} - {s2} (traversal)", cells[tree, s1]["traversal"], cells[tree, s2]["traversal"])
            for (tree, s1), (tree2, s2) in combinations(sorted(cells), 2)
            if tree == tree2 and "traversal" in cells[tree, s1] and "traversal" in cells[tree2, s2]
        ]
        for label, a, b in pairs:
            d32, d16 = a["float32"] - b["float32"], a["bfloat16"] - b["bfloat16"]
            change.setdefault(label, []).append(d32 - d16)
            size.append(abs(d16))
    flat = np.abs(np.concatenate([np.asarray(v) for v in change.values()]))
    per = {}
    for label, v in change.items():
        v = np.asarray(v)
        half = float(t_quantile(v.size) * v.std(ddof=1) / np.sqrt(v.size)) if v.size > 1 else None
        per[label] = {"mean": float(v.mean()), "ci95": half, "calls": int(v.size)}  # None: one call
    excl = [k for k, r in per.items() if r["ci95"] is not None and abs(r["mean"]) > r["ci95"]]
    worst = max(per, key=lambda k: abs(per[k]["mean"]))
    return {
        "comparisons": len(per),
        "change_abs_median": float(np.median(flat)),
        "change_abs_max": float(flat.max()),
        "difference_abs_median_bf16": float(np.median(size)),
        "largest_mean_change": {"comparison": worst, **per[worst]},
        "intervals_excluding_zero": len(excl),
        "per_comparison": per,
    }


if __name__ == "__main__":
    sys.exit(main())

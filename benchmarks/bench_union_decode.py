"""Cost of one target call of a union run against separate runs of every (shape, scheme) cell.

A union run (docs/math.md#union-trees) drafts one forest per call and evaluates every cell on it; the
baseline, measured in the same run on the same prompts, gives every cell its own decode (one draft
pass and one target forward per cell and call, ``--per-cell``). Reported: CPU time per call of each
(``time.process_time``, robust to other processes), the ratio, and the same for fp32 vs bf16 forwards.

    HF_HUB_OFFLINE=1 python benchmarks/bench_union_decode.py --target $MODELS/qwen2.5-coder-1.5b-instruct \\
        --draft $MODELS/qwen2.5-coder-0.5b-instruct --prompts 2 --max-new-tokens 8
"""

from __future__ import annotations

import argparse
import time

import numpy as np


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", required=True)
    parser.add_argument("--draft", required=True)
    parser.add_argument("--prompts", type=int, default=2, help="the first K HumanEval problems")
    parser.add_argument("--max-new-tokens", type=int, default=8)
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--dtypes", default="bfloat16,float32")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from mdsd_ot.decode import DecodeConfig, decode_prompt
    from mdsd_ot.decode.models import TreeLM
    from mdsd_ot.decode.runner import decode_prompt_union
    from mdsd_ot.study.collection import _record_ids, load_prompts

    torch.set_num_threads(args.threads)
    tok = AutoTokenizer.from_pretrained(args.target)
    records = load_prompts("humaneval")[: args.prompts]
    base = dict(
        trees=["1x4", "2x4", "4x4", "4x3", "4,2,2,1"],
        schemes=["with_replacement", "without_replacement", "greedy", "top_n"],
        temperatures=[args.temperature],
        max_new_tokens=args.max_new_tokens,
    )
    print("| dtype | mode | calls | CPU s per call | ratio to union |\n|---|---|---|---|---|")
    for dtype in args.dtypes.split(","):
        tlm = TreeLM(AutoModelForCausalLM.from_pretrained(args.target, dtype=getattr(torch, dtype)).eval())
        dlm = TreeLM(AutoModelForCausalLM.from_pretrained(args.draft, dtype=getattr(torch, dtype)).eval())
        union = DecodeConfig(**base, dtype=dtype).validate()
        cells = DecodeConfig(**base, dtype=dtype, union=False).validate()
        warm = records[0]
        decode_prompt_union(
            tlm, dlm, _record_ids(warm, tok)[0][:32], union, args.temperature, np.random.default_rng(9)
        )
        res = {}
        for mode in ("union", "per-cell"):
            t0, calls = time.process_time(), 0
            for k, rec in enumerate(records):
                ids = _record_ids(rec, tok)[0]
                if mode == "union":
                    rows = decode_prompt_union(
                        tlm, dlm, ids, union, args.temperature, np.random.default_rng(k)
                    )
                    calls += sum(1 for r in rows if "emitted" in r)
                else:
                    for c, cell in enumerate(cells.cells()):
                        rows = decode_prompt(tlm, dlm, ids, cells, cell, np.random.default_rng([k, c]))
                        calls += len(rows)
            res[mode] = ((time.process_time() - t0), calls)
        # per union call, every cell gets one value; the separate runs need one call per cell
        per_union = res["union"][0] / res["union"][1]
        per_cell_call = res["per-cell"][0] / res["per-cell"][1]
        n_cells = len(cells.cells())
        print(f"| {dtype} | union (every cell) | {res['union'][1]} | {per_union:.2f} | 1 |")
        print(
            f"| {dtype} | separate, one cell | {res['per-cell'][1]} | {per_cell_call:.2f} | "
            f"{per_cell_call * n_cells / per_union:.2f} for all {n_cells} cells |"
        )
        del tlm, dlm
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

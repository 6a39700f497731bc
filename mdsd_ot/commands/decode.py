"""``mdsd-ot decode``: multi-step speculative decoding with draft trees on a real target/draft pair."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from . import _ray
from ._inputs import add_sampling_list

HELP = "tree decoding on a target/draft pair: tokens per target call of every verifier (exact), resumable"


def add_arguments(parser):
    parser.add_argument("--target", required=True, help="target model: local folder or hub name")
    parser.add_argument("--draft", required=True, help="draft model: local folder or hub name")
    parser.add_argument("--tokenizer", default=None, help="tokenizer source (default: --target)")
    parser.add_argument("--prompts", default="humaneval", help="'humaneval', a .jsonl or a text file")
    parser.add_argument("--out", default="decode_out", help="results folder")
    parser.add_argument(
        "--trees",
        default="1x4 2x4 4x4 4x3 4,2,2,1",
        help="tree shapes separated by spaces: KxL (K chains of length L) or b1,b2,... per depth",
    )
    add_sampling_list(parser, default="with_replacement", what="draft schemes of the trees")
    parser.add_argument("--temperatures", default="0.3,0.7,1.0", help="comma-separated")
    parser.add_argument("--verifiers", default=None, help="comma-separated (default: every valid one)")
    parser.add_argument(
        "--driver",
        default=None,
        help="verifier whose sample continues decoding (default: the scheme's own verifier, e.g. rrs for "
        "with_replacement; traversal may drive)",
    )
    parser.add_argument(
        "--heuristic",
        action="store_true",
        help="also record the node-alpha* heuristic (neither a bound nor an estimate of the optimum)",
    )
    parser.add_argument("--no-bound", action="store_true", help=argparse.SUPPRESS)  # the old default's off
    parser.add_argument(
        "--per-cell",
        action="store_true",
        help="decode every (tree, scheme) cell on its own continuation instead of one union run per "
        "temperature (one target forward per cell and call)",
    )
    parser.add_argument(
        "--drive",
        default=None,
        help="TREE/SCHEME whose sample continues a union run (default: the largest tree, first scheme)",
    )
    parser.add_argument("--max-new-tokens", type=int, default=64, help="tokens decoded per prompt")
    parser.add_argument("--max-records", type=int, default=None, help="first K prompts only (default: all)")
    parser.add_argument(
        "--top-k", type=int, default=None, help="keep the k most likely tokens (default: no truncation)"
    )
    parser.add_argument(
        "--top-p", type=float, default=None, help="keep the top-p nucleus (default: no truncation)"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of drafting and verification")
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda, ...")
    parser.add_argument(
        "--dtype",
        default="float32",
        choices=("float32", "bfloat16", "float16"),
        help="weight dtype the models load in",
    )
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default 2)")
    parser.add_argument(
        "--shard", default=None, help="i/N: decode every N-th prompt from i (default: all prompts)"
    )
    parser.add_argument(
        "--cost-ratio",
        type=float,
        default=None,
        help="draft/target forward cost for the speedup model (default: measured)",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    _ray.add_arguments(parser)  # --ray [ADDRESS], --shards, --ray-cpus/-gpus/-memory/-retries


def run(args) -> int:
    from .. import _store
    from ..decode import DecodeConfig, run_shard, write_report
    from ..decode.report import check_cost_ratio
    from .study import _floats, check_device_option

    check_cost_ratio(args.cost_ratio)  # before anything runs
    _ray.check(args)
    _check_trees(args.trees)
    split = lambda text: [x.strip() for x in text.split(",") if x.strip()]  # noqa: E731
    config = DecodeConfig(
        target=args.target,
        draft=args.draft,
        tokenizer=args.tokenizer,
        prompts=args.prompts,
        trees=args.trees.split(),
        schemes=split(args.schemes),
        temperatures=_floats(args.temperatures),
        verifiers=None if args.verifiers is None else split(args.verifiers),
        driver=args.driver,
        bound=args.heuristic,
        union=not args.per_cell,
        drive=args.drive,
        max_new_tokens=args.max_new_tokens,
        max_records=args.max_records,
        top_k=args.top_k,
        top_p=args.top_p,
        seed=args.seed,
        device=args.device,
        dtype=args.dtype,
        threads=args.threads,
    ).validate()
    check_device_option(args, "mdsd-ot decode")
    t0 = time.time()
    if args.ray is not None:
        return _run_on_ray(config, args, t0)
    with _store.one_line_warnings("mdsd-ot decode"):
        run_shard(config, args.shard, args.out, progress=not args.no_progress)
        whole = args.shard is None or (Path(args.out) / "summary.json").exists()  # "0/1" is whole too
        if whole and args.cost_ratio is not None:
            write_report(args.out, cost_ratio=args.cost_ratio)
        if args.shard is not None:  # a shard writes no summary: its ratio is kept for the merge
            from ..decode.report import record_cost_ratio

            record_cost_ratio(args.out, args.cost_ratio)
    print(f"decode written to {args.out} in {time.time() - t0:.1f} s")
    if args.shard is None:
        print((Path(args.out) / "summary.md").read_text(encoding="utf-8"))
    return 0


def _check_trees(text: str) -> None:
    """Each tree of ``--trees`` readable; else the error says how several trees are written."""
    from ..trees.shape import parse_shape

    for spec in text.split():
        try:
            parse_shape(spec)
        except ValueError as exc:
            raise ValueError(
                f"--trees {text!r}: {exc}; several trees are separated by spaces, e.g. --trees '2x3 4,2'"
            ) from None


def _run_on_ray(config, args, t0) -> int:
    """``--ray``: every shard as a Ray task, merged into ``--out`` (README: Scaling out)."""
    from dataclasses import replace

    from .. import _store
    from ..decode import write_report

    # a worker's current folder is not ours: local paths go absolute
    local = {k: _ray.absolute(getattr(config, k)) for k in ("target", "draft", "tokenizer")}
    if str(config.prompts).lower() not in ("humaneval", "human-eval", "human_eval"):
        local["prompts"] = _ray.absolute(config.prompts)
    from ..runs.inputs import check_token_ids, load_prompts, model_vocab

    records = load_prompts(config.prompts)  # refused here, not on every worker
    vocabs = [v for v in (model_vocab(config.target), model_vocab(config.draft)) if v is not None]
    if vocabs:
        check_token_ids(records, min(vocabs))
    out = _ray.run("decode", replace(config, **local), args, "mdsd-ot decode")
    if out is None:
        return 2
    if args.cost_ratio is not None:
        with _store.one_line_warnings("mdsd-ot decode"):
            write_report(out, cost_ratio=args.cost_ratio)
    print(f"decode written to {out} in {time.time() - t0:.1f} s")
    print((out / "summary.md").read_text(encoding="utf-8"))
    return 0

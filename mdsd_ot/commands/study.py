"""``mdsd-ot study``: bounds and verifiers on (p, q) pairs from a real target/draft pair of LMs."""

from __future__ import annotations

import sys
import time
from dataclasses import replace

from . import _ray
from ._inputs import add_sampling_list

HELP = "run the real-model study (target/draft causal LMs, prompts, temperatures, n, schemes)"


def _floats(text):
    try:
        return [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"expected comma-separated numbers, got {text!r}") from None


def _ints(text):
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"expected comma-separated integers, got {text!r}") from None


def _names(text):
    return [x.strip() for x in text.split(",") if x.strip()]


def add_arguments(parser):
    from ..plots import in_family_order
    from ..verifiers import DEFAULT_SAMPLES, DEFAULT_VERIFIERS

    parser.add_argument("--target", required=True, help="target model: local folder or hub name")
    parser.add_argument("--draft", required=True, help="draft model: local folder or hub name")
    parser.add_argument("--tokenizer", default=None, help="tokenizer source (default: --target)")
    parser.add_argument(
        "--prompts",
        default="humaneval",
        help="'humaneval', a .jsonl file (prompt[/completion] or *_ids fields) "
        "or a text file with one prompt per line (default: humaneval)",
    )
    parser.add_argument("--out", default="study_out", help="study folder (default: study_out)")
    parser.add_argument("--temperatures", default="0.3,0.5,0.7,1.0", help="comma-separated")
    parser.add_argument("--n", default="2,3,4", help="numbers of drafts, comma-separated")
    add_sampling_list(
        parser,
        default="with_replacement,without_replacement,greedy",
        what="draft schemes whose bounds to evaluate",
    )
    parser.add_argument(
        "--verifiers",
        default=",".join(in_family_order(DEFAULT_VERIFIERS)),
        help="verifier names, comma-separated ('' for none)",
    )
    parser.add_argument(
        "--top-k",
        type=int,
        default=None,
        help="keep the k most likely tokens of p and q (default: no truncation)",
    )
    parser.add_argument(
        "--top-p", type=float, default=None, help="keep the top-p nucleus of p and q (default: no truncation)"
    )
    parser.add_argument("--max-records", type=int, default=None, help="first K prompts only (default: all)")
    parser.add_argument(
        "--max-positions-per-record",
        type=int,
        default=None,
        help="first M continuation positions of each prompt only (default: all)",
    )
    parser.add_argument(
        "--continuation",
        choices=("given", "sample"),
        default="given",
        help="teacher-force the given continuations or sample them from the target",
    )
    parser.add_argument(
        "--max-new-tokens", type=int, default=64, help="--continuation sample: tokens sampled per prompt"
    )
    parser.add_argument(
        "--sample-temperature",
        type=float,
        default=1.0,
        help="--continuation sample: temperature of the sampling",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of sampling and Monte Carlo")
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:1, ...")
    parser.add_argument(
        "--dtype",
        default="float32",
        choices=("float32", "bfloat16", "float16"),
        help="weight dtype the models load in",
    )
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default 2)")
    parser.add_argument(
        "--bound-backend",
        choices=("auto", "numpy", "torch"),
        default="auto",
        help="auto: the torch plan on an accelerator, numpy on CPU (faster there)",
    )
    parser.add_argument(
        "--every",
        default="",
        help="evaluate expensive methods at every K-th position only, e.g. "
        "'bound:without_replacement@3=8,verifier:rrs_without_replacement=4'",
    )
    parser.add_argument(
        "--mc-samples",
        type=int,
        default=None,
        help=f"Monte Carlo draft tuples for verifiers without an exact form (default: {DEFAULT_SAMPLES})",
    )
    parser.add_argument(
        "--shard", default=None, help="i/N: process every N-th prompt from i (default: all prompts)"
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    _ray.add_arguments(parser)  # --ray [ADDRESS], --shards, --ray-cpus/-gpus/-memory/-retries


def check_device_option(args, prefix: str) -> None:
    """``--device`` before anything is loaded or written (one line, exit status 2): the name always,
    and without ``--ray`` that this process can use it (with ``--ray`` the workers' devices count, not
    the driver's). ``--no-progress`` also silences transformers' loading bars."""
    import importlib.util

    from ..runs.inputs import check_device, check_model_dependencies
    from ..runs.shards import quiet_model_loading

    if args.no_progress:
        quiet_model_loading()
    if args.ray is None:
        check_model_dependencies(prefix)  # before the folder is made
        check_device(args.device)
    elif importlib.util.find_spec("torch") is not None:  # a driver without torch: the workers check it
        check_device(args.device, available=False)


def run(args) -> int:
    from .. import _store
    from ..study import StudyConfig
    from ..study.job import StudyJob, run_shard

    _ray.check(args)
    config = StudyConfig(
        temperatures=_floats(args.temperatures),
        ns=_ints(args.n),
        schemes=_names(args.schemes),
        verifiers=_names(args.verifiers),
        top_k=args.top_k,
        top_p=args.top_p,
        max_records=args.max_records,
        max_positions_per_record=args.max_positions_per_record,
        continuation=args.continuation,
        max_new_tokens=args.max_new_tokens,
        sample_temperature=args.sample_temperature,
        seed=args.seed,
        bound_backend=args.bound_backend,
        every=args.every,
        mc_samples=args.mc_samples,
    ).validate()
    check_device_option(args, "mdsd-ot study")
    job = StudyJob(
        target=args.target,
        draft=args.draft,
        config=config,
        prompts=args.prompts,
        tokenizer=args.tokenizer,
        dtype=args.dtype,
        device=args.device,
        threads=args.threads,
        meta={"argv": sys.argv},
    )
    t0 = time.time()
    if args.ray is not None:  # workers may not share this folder as theirs: absolute local paths
        local = {k: _ray.absolute(getattr(job, k)) for k in ("target", "draft", "tokenizer")}
        if str(job.prompts).lower() not in ("humaneval", "human-eval", "human_eval"):
            local["prompts"] = _ray.absolute(job.prompts)
        out = _ray.run("study", replace(job, **local), args, "mdsd-ot study")
        if out is None:
            return 2
    else:
        with _store.one_line_warnings("mdsd-ot study"):
            out = run_shard(job, args.shard, args.out, progress=not args.no_progress)
    print(f"study written to {out} in {time.time() - t0:.1f} s")
    if args.shard is None and (out / "summary.md").exists():  # unsharded, or merged from Ray
        print((out / "summary.md").read_text(encoding="utf-8"))
    return 0

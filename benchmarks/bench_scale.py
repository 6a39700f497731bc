"""Cost model of scaling a study out: positions per CPU-hour, one process against Ray (README,
"Scaling out").

Part 1 (always): two tiny randomly initialised causal LMs with the Qwen2.5 vocabulary (V = 151,936)
stand in for real models, so that the time is the evaluation's at a real vocabulary size. The
same study runs once in one process (one torch thread) and once on a local Ray cluster of
``--cpus`` CPUs (one CPU per task, four shards per CPU); the speed-up is the ratio of the two
measured in this run, and the merged summary must equal the single-process one byte for byte.

Part 2 (``--models DIR``, a folder holding ``qwen2.5-coder-1.5b-instruct`` and
``qwen2.5-coder-0.5b-instruct``): a handful of positions of the real pair in one process, split
into model loading, forward passes (teacher forcing) and evaluation, for the study's default
parameters (4 temperatures, n = 2, 3, 4, every bound and verifier).

Run: ``python benchmarks/bench_scale.py [--cpus 2] [--models DIR]`` (needs the torch and ray
extras; part 1 about two minutes on 2 cores, part 2 about as long again).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from _common import header  # noqa: E402

V = 151_936
# part 2: short code prompts with their continuations (tokenised by the real tokenizer)
CODE = [
    (
        "def mean(xs):\n    ",
        '"""Arithmetic mean of a non-empty list."""\n    return sum(xs) / len(xs)\n',
    ),
    (
        "def is_palindrome(s: str) -> bool:\n    ",
        "s = ''.join(c.lower() for c in s if c.isalnum())\n    return s == s[::-1]\n",
    ),
]


def tiny_lm(seed, folder: Path):
    import torch
    import transformers

    torch.manual_seed(seed)
    cfg = transformers.Qwen2Config(
        vocab_size=V,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=256,
    )
    model = transformers.AutoModelForCausalLM.from_config(cfg)
    with torch.no_grad():
        model.lm_head.weight.mul_(20.0)
    with contextlib.redirect_stderr(open(os.devnull, "w")):
        model.save_pretrained(folder)


def part1(tmp: Path, cpus: int, prompts: int, positions: int) -> list[str]:
    import ray

    from mdsd_ot import scale, study
    from mdsd_ot.study.job import StudyJob, run_shard

    tiny_lm(1, tmp / "target")
    tiny_lm(2, tmp / "draft")
    rng = np.random.default_rng(0)
    records = [
        {
            "id": f"r{i}",
            "prompt_ids": rng.integers(0, V, 8).tolist(),
            "completion_ids": rng.integers(0, V, positions).tolist(),
        }
        for i in range(prompts)
    ]
    config = study.StudyConfig(
        temperatures=[1.0],
        ns=[2, 3],
        verifiers=["naive", "rrs", "spectr", "greedy", "spechub"],
    )
    job = StudyJob(str(tmp / "target"), str(tmp / "draft"), config, records, device="cpu", threads=1)
    # warm-up in this process (numba's cached kernels, torch), on a throw-away folder
    warm = StudyJob(job.target, job.draft, config, records[:1], device="cpu", threads=1)
    run_shard(warm, None, tmp / "warm", progress=False, log=None)

    t0, c0 = time.perf_counter(), time.process_time()
    run_shard(job, None, tmp / "single", progress=False, log=None)
    t_single, c_single = time.perf_counter() - t0, time.process_time() - c0

    t0 = time.perf_counter()
    ray.init(num_cpus=cpus, include_dashboard=False, log_to_driver=False)
    t_init = time.perf_counter() - t0
    times, cpu = [], []
    for name in ("ray-cold", "ray-warm"):  # the second run finds the workers and their models ready
        t0 = time.perf_counter()
        scale.run_sharded("study", job, tmp / name, num_cpus=1, progress=False)
        times.append(time.perf_counter() - t0)
        log = [e for f in (tmp / name / scale.SHARDS).glob("shard-*") for e in scale.shard_log(f)]
        cpu.append(sum(e.get("cpu_s", 0.0) for e in log))
    t_cold, t_warm = times
    n_shards = len(list((tmp / "ray-cold" / scale.SHARDS).glob("shard-*")))
    ray.shutdown()
    t0, c0 = time.perf_counter(), time.process_time()
    run_shard(job, None, tmp / "single-again", progress=False, log=None)
    t_single = min(t_single, time.perf_counter() - t0)  # the machine is shared: the better of two
    c_single = min(c_single, time.process_time() - c0)

    same = all(
        (tmp / "single" / f).read_bytes() == (tmp / run / f).read_bytes()
        for f in ("summary.md", "summary.csv", "summary.json")
        for run in ("ray-cold", "ray-warm")
    )
    n_pos = prompts * positions

    def line(run, t, c):
        return (
            f"| {run} | {t:.1f} | {t_single / t:.2f}x | {c:.1f} | {3600 * n_pos / c:,.0f} | "
            f"{c_single / c:.2f} |"
        )

    return [
        f"### Part 1: tiny stand-in models at V = {V:,} ({n_pos} positions x T = 1, n = 2, 3, "
        f"3 bounds + 5 verifiers)",
        "",
        "| run | wall (s) | wall speed-up | CPU (s) | positions per CPU-hour | CPU efficiency |",
        "|---|---|---|---|---|---|",
        line("one process, 1 thread (better of two runs)", t_single, c_single),
        line(f"Ray, {cpus} CPUs, {n_shards} shards: first run (workers start, load models)", t_cold, cpu[0]),
        line(f"Ray, {cpus} CPUs, {n_shards} shards: next run (workers and models reused)", t_warm, cpu[1]),
        "",
        f"CPU: process time of the single process, and the sum over the Ray tasks (each task's "
        f"worker process; the driver and Ray's own daemons are not counted). Starting the local "
        f"Ray cluster: {t_init:.1f} s (not included). Merged summaries byte-identical to the "
        f"single-process one: {'yes' if same else 'NO'}. Load average (1 min) at the end: "
        f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs (the wall speed-up needs idle CPUs).",
        "",
    ]


def part2(models: Path, tmp: Path, positions: int) -> list[str]:
    import torch

    from mdsd_ot import study

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    clock = time.process_time  # CPU seconds: the machine is shared, wall time is not the cost
    t0 = clock()
    target, draft, tok = study.load_models(
        str(models / "qwen2.5-coder-1.5b-instruct"),
        str(models / "qwen2.5-coder-0.5b-instruct"),
        device="cpu",
        threads=1,
    )
    t_load = clock() - t0
    records = [{"id": f"c{i}", "prompt": p, "completion": c} for i, (p, c) in enumerate(CODE)]
    config = study.StudyConfig(max_positions_per_record=positions)
    # forward passes alone (the same teacher forcing the study does)
    t0 = clock()
    n_pos = 0
    for rec in records:
        a, b = study._record_ids(rec, tok)
        b = b[:positions]
        with torch.no_grad():
            study.teacher_forcing_logits(target, draft, a, b)
        n_pos += len(b)
    t_fwd = clock() - t0
    w0, t0 = time.perf_counter(), clock()
    study.run_study(target, draft, records, tmp / "real", config, tokenizer=tok, progress=False)
    t_all, wall = clock() - t0, time.perf_counter() - w0
    t_eval = max(t_all - t_fwd, 0.0)
    rows = n_pos * len(config.temperatures)
    per_pos = t_all / n_pos
    return [
        f"### Part 2: the real Qwen2.5-Coder pair, {n_pos} positions x {len(config.temperatures)} "
        f"temperatures (study defaults), one process, 1 thread",
        "",
        "| step | CPU seconds | per position | per position x temperature |",
        "|---|---|---|---|",
        f"| load both models (once per worker) | {t_load:.1f} | - | - |",
        f"| forward passes (target + draft, teacher forcing) | {t_fwd:.1f} | {t_fwd / n_pos:.3f} | - |",
        f"| evaluation (every bound and verifier) | {t_eval:.1f} | {t_eval / n_pos:.3f} | "
        f"{t_eval / rows:.3f} |",
        f"| total per position | | {per_pos:.3f} | |",
        "",
        f"Positions per CPU-hour (one thread, all four temperatures): {3600 / per_pos:,.0f} "
        f"(study wall time {wall:.0f} s for {t_all:.0f} CPU-s on this shared machine).",
        "",
    ]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpus", type=int, default=2, help="CPUs of the local Ray cluster")
    parser.add_argument("--prompts", type=int, default=8, help="part 1: prompts")
    parser.add_argument("--positions", type=int, default=5, help="part 1: positions per prompt")
    parser.add_argument("--models", default=os.environ.get("MODELS"), help="part 2: folder of the real pair")
    parser.add_argument("--real-positions", type=int, default=8, help="part 2: positions per prompt")
    parser.add_argument("--no-part1", action="store_true", help="part 2 only")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    out = [header("Scaling out: positions per CPU-hour")]
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        if not args.no_part1:
            out += part1(tmp, args.cpus, args.prompts, args.positions)
        if args.models:
            out += part2(Path(args.models), tmp, args.real_positions)
    print("\n".join(out))


if __name__ == "__main__":
    main()

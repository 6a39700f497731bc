"""Cost model of scaling the tree decoder out: target calls per CPU-hour, one process against Ray
(README, "Scaling out").

Part 1 (always): two tiny randomly initialised causal LMs with the Qwen2.5 vocabulary (V = 151,936)
stand in for real models, so that the time is the decoder's own work at a real vocabulary size
(laws of every tree node, each verifier's exact expectation, the bound estimate, sampling). The same
run decodes once in one process (one torch thread) and twice on a local Ray cluster of ``--cpus``
CPUs (one CPU per task, four shards per CPU; the second run finds the workers and their models
ready); the merged rows must equal the single-process ones (timings aside).

Part 2 (``--models DIR``, a folder holding ``qwen2.5-coder-1.5b-instruct`` and
``qwen2.5-coder-0.5b-instruct``): a few target calls of the real pair in one process, split into
drafting (draft forwards per depth), the target's tree forward, and the exact evaluation.

Run: ``python benchmarks/bench_scale_decode.py [--cpus 2] [--models DIR]`` (needs the torch and ray
extras; part 1 about two minutes on 2 cores, part 2 about two more).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from _common import header  # noqa: E402
from bench_scale import V, tiny_lm  # noqa: E402

TREES = ["2x4", "4,2,2,1"]
TIMINGS = ("t_draft", "t_target", "t_exact")


def _rows(folder):
    from mdsd_ot import _store

    return sorted(
        json.dumps({k: v for k, v in r.items() if k not in TIMINGS}, sort_keys=True)
        for r in _store.read_rows(folder)
    )


def part1(tmp: Path, cpus: int, prompts: int, new_tokens: int) -> list[str]:
    import ray

    from mdsd_ot import _store, scale
    from mdsd_ot.decode import DecodeConfig, run_shard

    tiny_lm(1, tmp / "target")
    tiny_lm(2, tmp / "draft")
    rng = np.random.default_rng(0)
    records = [{"id": f"r{i}", "prompt_ids": rng.integers(0, V, 8).tolist()} for i in range(prompts)]
    config = DecodeConfig(
        target=str(tmp / "target"),
        draft=str(tmp / "draft"),
        prompts=records,
        trees=TREES,
        temperatures=[1.0],
        max_new_tokens=new_tokens,
        device="cpu",
        threads=1,
    )
    # warm-up in this process (numba's cached kernels, torch), on a throw-away folder
    warm = DecodeConfig(**{**config.__dict__, "prompts": records[:1], "max_new_tokens": 2})
    run_shard(warm, None, tmp / "warm", progress=False)

    t0, c0 = time.perf_counter(), time.process_time()
    run_shard(config, None, tmp / "single", progress=False)
    t_single, c_single = time.perf_counter() - t0, time.process_time() - c0
    calls = len(_store.read_rows(tmp / "single"))

    t0 = time.perf_counter()
    ray.init(num_cpus=cpus, include_dashboard=False, log_to_driver=False)
    t_init = time.perf_counter() - t0
    times, cpu = [], []
    for name in ("ray-cold", "ray-warm"):
        t0 = time.perf_counter()
        scale.run_sharded("decode", config, tmp / name, num_cpus=1, progress=False)
        times.append(time.perf_counter() - t0)
        log = [e for f in (tmp / name / scale.SHARDS).glob("shard-*") for e in scale.shard_log(f)]
        cpu.append(sum(e.get("cpu_s", 0.0) for e in log))
    t_cold, t_warm = times
    n_shards = len(list((tmp / "ray-cold" / scale.SHARDS).glob("shard-*")))
    ray.shutdown()
    t0, c0 = time.perf_counter(), time.process_time()
    run_shard(config, None, tmp / "single-again", progress=False)
    t_single = min(t_single, time.perf_counter() - t0)  # the machine is shared: the better of two
    c_single = min(c_single, time.process_time() - c0)
    same = all(_rows(tmp / "single") == _rows(tmp / run) for run in ("ray-cold", "ray-warm"))

    def line(run, t, c):
        rate = 3600 * calls / c
        return f"| {run} | {t:.1f} | {t_single / t:.2f}x | {c:.1f} | {rate:,.0f} | {c_single / c:.2f} |"

    return [
        f"### Part 1: tiny stand-in models at V = {V:,} ({prompts} prompts, trees {' '.join(TREES)}, "
        f"T = 1, {new_tokens} new tokens: {calls} target calls; every valid verifier + bound)",
        "",
        "| run | wall (s) | wall speed-up | CPU (s) | target calls per CPU-hour | CPU efficiency |",
        "|---|---|---|---|---|---|",
        line("one process, 1 thread (better of two runs)", t_single, c_single),
        line(f"Ray, {cpus} CPUs, {n_shards} shards: first run (workers start, load models)", t_cold, cpu[0]),
        line(f"Ray, {cpus} CPUs, {n_shards} shards: next run (workers and models reused)", t_warm, cpu[1]),
        "",
        f"CPU: process time of the single process, and the sum over the Ray tasks (the driver and "
        f"Ray's daemons not counted). Starting the local Ray cluster: {t_init:.1f} s (not included). "
        f"Merged rows equal to the single-process ones (timings aside): {'yes' if same else 'NO'}. "
        f"Load average (1 min) at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs.",
        "",
    ]


def part2(models: Path, new_tokens: int) -> list[str]:
    from mdsd_ot import study
    from mdsd_ot.decode import DecodeConfig, decode_prompt
    from mdsd_ot.decode.models import TreeLM

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
    prompt = tok("def fibonacci(n):\n    ", add_special_tokens=False)["input_ids"]
    config = DecodeConfig(trees=TREES, temperatures=[0.7], max_new_tokens=new_tokens).validate()
    tlm, dlm = TreeLM(target), TreeLM(draft)
    warm = DecodeConfig(trees=TREES, temperatures=[0.7], max_new_tokens=1).validate()
    for tree in TREES:  # first calls (kernels, torch's first forwards) not counted
        decode_prompt(tlm, dlm, prompt, warm, (0.7, tree, "with_replacement"), np.random.default_rng(1))
    out = []
    for tree in TREES:
        rng = np.random.default_rng(0)
        t0, w0 = clock(), time.perf_counter()
        rows = decode_prompt(tlm, dlm, prompt, config, (0.7, tree, "with_replacement"), rng)
        cpu, wall = clock() - t0, time.perf_counter() - w0
        parts = {k: sum(r[k] for r in rows) / wall for k in TIMINGS}  # shares of the wall time
        tau = np.mean([r["emitted"] for r in rows])
        out.append(
            f"| {tree} | {len(rows)} | {tau:.2f} | {cpu / len(rows):.2f} | {3600 * len(rows) / cpu:,.0f} | "
            f"{parts['t_draft']:.0%} / {parts['t_target']:.0%} / {parts['t_exact']:.0%} |"
        )
    return [
        f"### Part 2: the real Qwen2.5-Coder pair, one prompt, T = 0.7, {new_tokens} new tokens per "
        f"tree, with_replacement drafts, every valid verifier + bound, one process, 1 thread",
        "",
        "| tree | target calls | tokens per call | CPU s per call | target calls per CPU-hour | "
        "draft / target / exact (share of wall) |",
        "|---|---|---|---|---|---|",
        *out,
        "",
        f"Loading both models (once per worker): {t_load:.1f} CPU-s.",
        "",
    ]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpus", type=int, default=2, help="CPUs of the local Ray cluster")
    parser.add_argument("--prompts", type=int, default=8, help="part 1: prompts")
    parser.add_argument("--new-tokens", type=int, default=8, help="part 1: new tokens per prompt and tree")
    parser.add_argument("--models", default=os.environ.get("MODELS"), help="part 2: folder of the real pair")
    parser.add_argument("--real-new-tokens", type=int, default=32, help="part 2: new tokens per tree")
    parser.add_argument("--no-part1", action="store_true", help="part 2 only")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    out = [header("Scaling out the tree decoder: target calls per CPU-hour")]
    with tempfile.TemporaryDirectory() as tmp:
        if not args.no_part1:
            out += part1(Path(tmp), args.cpus, args.prompts, args.new_tokens)
        if args.models:
            out += part2(Path(args.models), args.real_new_tokens)
    print("\n".join(out))


if __name__ == "__main__":
    main()

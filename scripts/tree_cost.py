#!/usr/bin/env python
"""Measured cost of tree decoding: a forward's time against its number of positions, and the speedup
model that uses it (docs/results/trees.md, "Speedup with measured costs").

The first edition of the report modelled a call's cost as ``1 + D c`` target forwards, as if verifying
a tree of any size cost one plain decoding step. On a CPU a forward's time grows with its positions,
so this script measures it and the model becomes

.. math::

    S = \\frac{\\tau \\; t_T(1)}{\\sum_{d=0}^{D-1} t_D(w_d) + t_T(P + N)}

with ``tau`` the cell's tokens per target call, ``t_T(n)`` / ``t_D(n)`` the measured time of one
target / draft forward over ``n`` new positions (on a context of the report's length), ``P`` the
tokens emitted by the previous call (processed again at the start of the next: ``P = tau``),
``w_0 = P`` and ``w_d = b_1 ... b_d`` the nodes drafted at depth ``d`` (one draft forward per
depth), ``N`` the tree's nodes (nominal: i.i.d. drafts that repeat a token share a position, so this
is an upper bound on the cost) and ``t_T(1)`` the cost of plain decoding (the target alone, one
token per forward). Times between measured sizes are interpolated linearly; outside them the model
refuses (``ValueError``).

Subcommands::

    python scripts/tree_cost.py measure [--out docs/results/trees2/cost.json] [--reps 5]
    python scripts/tree_cost.py show [docs/results/trees2/cost.json]

``measure`` loads the report's pair (``scripts/prepare_qwen_models.py``; ``$MODELS``) in bfloat16
and times forwards of ``n`` positions for every size, draft and target interleaved in a shuffled
order, ``--reps`` rounds, after one untimed warm-up per size, on a fixed context (a HumanEval prompt
repeated to ``--context`` tokens). Each measurement records its wall and CPU seconds and the 1-minute
load average (``/proc/loadavg``); the summary takes medians. It refuses, as ``run_tree_report.sh``
does, on a CPU without native bfloat16 matmuls.

Why one thread and CPU seconds by default: on a machine whose two cores are shared with other jobs,
a two-thread forward's wall time (and even its CPU time: its threads wait for each other) varies by
several times from one measurement to the next, while a one-thread forward's CPU time does not (on
this project's machines under a load average of 10-12, it grew smoothly with the positions). The
model reads these CPU seconds, a load-free cost of one core; the report's runs use two threads,
which shortens large forwards more than small ones, so on a quiet two-core machine the measured-cost
speedups of big trees are, if anything, slightly pessimistic. ``--threads 2 --basis wall`` measures
the other way on a quiet machine.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = ROOT / "docs" / "results" / "trees2" / "cost.json"
SIZES = (1, 2, 3, 4, 5, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 160, 192)
TARGET = "qwen2.5-coder-1.5b-instruct"
DRAFT = "qwen2.5-coder-0.5b-instruct"


# ----------------------------------------------------------------------------------------- the model
def _interp(table: dict, n: float, what: str) -> float:
    """Piecewise-linear time at ``n`` positions from ``{positions: seconds}`` (no extrapolation)."""
    xs = sorted(table)
    if not (xs[0] <= n <= xs[-1]):
        raise ValueError(
            f"{what}: {n:g} positions lie outside the measured sizes {xs[0]}..{xs[-1]}; "
            f"measure larger sizes (scripts/tree_cost.py measure --sizes ...)"
        )
    for lo, hi in zip(xs, xs[1:]):
        if lo <= n <= hi:
            f = (n - lo) / (hi - lo)
            return table[lo] * (1.0 - f) + table[hi] * f
    return table[xs[-1]]


def medians(cost: dict) -> dict:
    """``{"target": {n: seconds}, "draft": {n: seconds}}``: the median of every (model, size), in the
    file's ``basis``: ``"cpu"`` (CPU seconds of the process, the default of ``measure``) or ``"wall"``."""
    key = "median_cpu_s" if cost.get("basis", "wall") == "cpu" else "median_s"
    out: dict = {"target": {}, "draft": {}}
    for m in cost["medians"]:
        out[m["model"]][int(m["positions"])] = float(m[key])
    return out


def call_cost(shape, cost: dict, pending: float) -> tuple[float, float]:
    """``(draft seconds, target seconds)`` of one call on ``shape`` (see the module docstring).

    Parameters
    ----------
    shape : str or TreeShape
        ``"4x4"``, ``"4,2,2,1"``, ...
    cost : dict
        As loaded from ``cost.json``.
    pending : float
        Tokens emitted by the previous call (``P``; the cell's tokens per call).
    """
    from mdsd_ot.trees import parse_shape

    s = parse_shape(shape)
    med = medians(cost)
    widths, level = [pending], 1
    for b in s.branching[:-1]:  # K x L chains read as (K, 1, ..., 1): K nodes per depth
        level *= b
        widths.append(level)
    draft = math.fsum(_interp(med["draft"], w, f"draft forward on {s.label}") for w in widths)
    target = _interp(med["target"], pending + s.size, f"target forward on {s.label}")
    return draft, target


def measured_speedup(tau: float, shape, cost: dict) -> float:
    """Speedup over plain decoding with measured forward costs (module docstring).

    ``tau * t_T(1) / (draft + target)`` with :func:`call_cost` at ``pending = tau``.
    """
    if not (tau >= 1.0 and math.isfinite(tau)):
        raise ValueError(f"tokens per call must be a finite number >= 1, got {tau!r}")
    draft, target = call_cost(shape, cost, tau)
    plain = medians(cost)["target"][1]
    return tau * plain / (draft + target)


# ------------------------------------------------------------------------------------ measurement
def _loadavg() -> float:
    try:
        return float(Path("/proc/loadavg").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return float("nan")


def _cpu() -> dict:
    name, flags = platform.processor() or "", set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and not name:
                name = line.split(":", 1)[1].strip()
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
    except OSError:
        pass
    return {
        "model_name": name,
        "cores": os.cpu_count(),
        "avx512_bf16": "avx512_bf16" in flags,
        "amx_bf16": "amx_bf16" in flags,
    }


class _Timer:
    """One model's forwards of ``n`` new positions on a fixed cached context."""

    def __init__(self, model, context_ids):
        from mdsd_ot.decode.models import TreeLM

        self.lm = TreeLM(model)
        self.lm.reset(context_ids[:-1])
        self.lm.forward([])  # prefill: the context is cached once
        self.base = self.lm.committed
        self.last = int(context_ids[-1])
        self.vocab = int(model.get_output_embeddings().weight.shape[0])

    def time(self, n: int) -> tuple[float, float]:
        """Seconds of one forward over ``n`` positions: the last context token (pending) and ``n - 1``
        distinct tree nodes at depth 1 (a forward's cost depends on its positions, not on the tree's
        shape: the attention mask is dense). The cache is cut back to the context afterwards.
        Returns ``(wall seconds, CPU seconds of this process)``."""
        lm = self.lm
        lm.pending = [self.last]
        paths = [(t,) for t in range(1000, 1000 + n - 1)]
        t0, c0 = time.perf_counter(), time.process_time()
        lm.forward(paths)
        dt, dc = time.perf_counter() - t0, time.process_time() - c0
        lm.cache.crop(-n)  # back to the context: the next forward sees the same length
        lm.committed, lm.slots, lm.tree_len, lm.pending = self.base, {}, 0, []
        return dt, dc


def matmul_seconds(torch, rounds: int = 5) -> dict:
    """CPU seconds (best of ``rounds``, interleaved) of the MLP matmul of the 1.5B target, a 64 x 1536
    by 1536 x 8960 product, in float32 and bfloat16, and their ratio."""
    a = {dt: torch.randn(64, 1536).to(dt) for dt in (torch.float32, torch.bfloat16)}
    b = {dt: torch.randn(1536, 8960).to(dt) for dt in (torch.float32, torch.bfloat16)}
    best = {torch.float32: math.inf, torch.bfloat16: math.inf}
    for dt in best:
        a[dt] @ b[dt]  # warm-up
    for _ in range(rounds):
        for dt in best:
            t0 = time.process_time()
            for _ in range(10):
                a[dt] @ b[dt]
            best[dt] = min(best[dt], (time.process_time() - t0) / 10)
    return {
        "shape": "64x1536 @ 1536x8960",
        "float32_cpu_s": best[torch.float32],
        "bfloat16_cpu_s": best[torch.bfloat16],
        "bfloat16_over_float32": best[torch.bfloat16] / best[torch.float32],
    }


def measure(args) -> int:
    sys.path.insert(0, str(ROOT))
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from mdsd_ot.backends.torch import cpu_matmul_slowdown
    from mdsd_ot.runs.inputs import SLOW_DTYPE_RATIO, load_prompts

    if args.dtype == "bfloat16" and not args.force:
        slow = cpu_matmul_slowdown("bfloat16")
        if slow > SLOW_DTYPE_RATIO:
            print(
                f"tree_cost.py: bfloat16 matmuls are {slow:.0f}x slower than float32 on this CPU (no "
                "AVX512-BF16/AMX): the costs would not be the report's; use such a machine or --force",
                file=sys.stderr,
            )
            return 2
    models = Path(args.models).expanduser()
    torch.set_num_threads(args.threads)
    dtype = getattr(torch, args.dtype)
    tok = AutoTokenizer.from_pretrained(str(models / TARGET))
    prompt = load_prompts("humaneval")[0]["prompt"]
    ids = tok(prompt, add_special_tokens=False)["input_ids"]
    ids = (ids * (args.context // max(len(ids), 1) + 1))[: args.context]
    timers = {}
    for role, name in (("target", TARGET), ("draft", DRAFT)):
        model = AutoModelForCausalLM.from_pretrained(str(models / name), dtype=dtype).eval()
        timers[role] = _Timer(model, ids)
    sizes = [int(x) for x in args.sizes.split(",")]
    for role in timers:  # warm-up: one untimed forward per size
        for n in sizes:
            timers[role].time(n)
    rng = random.Random(args.seed)
    rows = []
    for rep in range(args.reps):
        order = [(role, n) for role in timers for n in sizes]
        rng.shuffle(order)
        for role, n in order:
            load = _loadavg()
            dt, dc = timers[role].time(n)
            rows.append(
                {
                    "rep": rep,
                    "model": role,
                    "positions": n,
                    "seconds": dt,
                    "cpu_seconds": dc,
                    "loadavg1": load,
                }
            )
        print(f"round {rep + 1}/{args.reps} done (load {_loadavg():.2f})", flush=True)
    med = []
    for role in timers:
        for n in sizes:
            xs = [r["seconds"] for r in rows if r["model"] == role and r["positions"] == n]
            ld = [r["loadavg1"] for r in rows if r["model"] == role and r["positions"] == n]
            med.append(
                {
                    "model": role,
                    "positions": n,
                    "median_s": statistics.median(xs),
                    "median_cpu_s": statistics.median(
                        r["cpu_seconds"] for r in rows if r["model"] == role and r["positions"] == n
                    ),
                    "min_s": min(xs),
                    "max_s": max(xs),
                    "median_loadavg1": statistics.median(ld),
                }
            )
    out = {
        "what": "seconds of one forward over n new positions on a cached context (scripts/tree_cost.py)",
        "target": TARGET,
        "draft": DRAFT,
        "dtype": args.dtype,
        "threads": args.threads,
        "context_tokens": len(ids),
        "cpu": _cpu(),
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
        "created": time.strftime("%Y-%m-%d %H:%M:%S %z"),
        "reps": args.reps,
        "basis": args.basis,
        "matmul": matmul_seconds(torch),
        "medians": med,
        "measurements": rows,
    }
    dest = Path(args.out)
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    print(f"written {dest}")
    show_cost(out)
    return 0


def slope_ms(cost: dict, role: str, lo: int = 16, hi: int = 192) -> float:
    """Least-squares milliseconds per extra position of ``role``'s medians between ``lo`` and ``hi``."""
    pts = [(n, s) for n, s in medians(cost)[role].items() if lo <= n <= hi]
    if len(pts) < 2:
        return float("nan")
    mx = sum(n for n, _ in pts) / len(pts)
    my = sum(s for _, s in pts) / len(pts)
    num = sum((n - mx) * (s - my) for n, s in pts)
    den = sum((n - mx) ** 2 for n, _ in pts)
    return 1000.0 * num / den


def show_cost(cost: dict) -> None:
    med = medians(cost)
    loads = [r["loadavg1"] for r in cost["measurements"]]
    print(
        f"{cost['cpu']['model_name']} ({cost['cpu']['cores']} cores), {cost['dtype']}, "
        f"{cost['threads']} thread(s), model basis {cost.get('basis', 'wall')}, "
        f"context {cost['context_tokens']} tokens, {cost['reps']} rounds; "
        f"load average during the measurements: median {statistics.median(loads):.2f}, "
        f"max {max(loads):.2f}"
    )
    wall = medians(dict(cost, basis="wall"))
    cpu = medians(dict(cost, basis="cpu")) if "median_cpu_s" in cost["medians"][0] else None
    print(
        "| positions | target wall (ms) | draft wall (ms) | target CPU (ms) | draft CPU (ms) "
        f"| draft / target ({cost.get('basis', 'wall')}) |"
    )
    print("|---|---|---|---|---|---|")
    for n in sorted(med["target"]):
        t, d = med["target"][n], med["draft"].get(n, float("nan"))
        wt, wd = wall["target"][n], wall["draft"].get(n, float("nan"))
        ct = cpu["target"][n] if cpu else float("nan")
        cd = cpu["draft"].get(n, float("nan")) if cpu else float("nan")
        print(
            f"| {n} | {1000 * wt:.1f} | {1000 * wd:.1f} | {1000 * ct:.1f} | {1000 * cd:.1f} | {d / t:.3f} |"
        )
    print(
        f"slope between 16 and 192 positions ({cost.get('basis', 'wall')}): target "
        f"{slope_ms(cost, 'target'):.2f} ms, draft {slope_ms(cost, 'draft'):.2f} ms per position"
    )
    if "matmul" in cost:
        mm = cost["matmul"]
        print(
            f"matmul {mm['shape']}: float32 {1000 * mm['float32_cpu_s']:.2f} ms, bfloat16 "
            f"{1000 * mm['bfloat16_cpu_s']:.2f} ms of CPU "
            f"(bfloat16 / float32 = {mm['bfloat16_over_float32']:.3f})"
        )


def main(argv=None) -> int:
    from prepare_qwen_models import default_models_dir

    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        epilog=__doc__.split("\n", 2)[2],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("measure", help="time the forwards and write cost.json")
    m.add_argument("--out", default=str(DEFAULT_OUT))
    m.add_argument("--models", default=str(default_models_dir()))
    m.add_argument("--reps", type=int, default=5)
    m.add_argument("--sizes", default=",".join(map(str, SIZES)))
    m.add_argument("--context", type=int, default=256, help="cached context length in tokens")
    m.add_argument("--threads", type=int, default=1, help="torch threads (default 1: see the docstring)")
    m.add_argument(
        "--basis",
        default="cpu",
        choices=("cpu", "wall"),
        help="which times the speedup model reads: CPU seconds (default) or wall seconds",
    )
    m.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float32"))
    m.add_argument("--seed", type=int, default=0)
    m.add_argument("--force", action="store_true", help="measure even without native bfloat16")
    s = sub.add_parser("show", help="print a cost.json as a table")
    s.add_argument("cost", nargs="?", default=str(DEFAULT_OUT))
    args = parser.parse_args(argv)
    if args.cmd == "measure":
        for name in ("reps", "context", "threads"):
            if getattr(args, name) < 1:
                parser.error(f"--{name} must be >= 1, got {getattr(args, name)}")
        return measure(args)
    try:
        show_cost(json.loads(Path(args.cost).read_text(encoding="utf-8")))
    except (OSError, ValueError, KeyError) as exc:
        print(f"tree_cost.py show: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python
"""Checks of the accelerator paths, for a GPU machine with no network: one script, one results file.

1. **torch backend** (``mdsd_ot.backends.torch.sorted_prefix_bound``) on the device against
   ``mdsd_ot.optimal_acceptance`` on the CPU, for LLM-like and adversarial pairs, every sampling
   the backend covers (agreement to 1e-12);
2. **evaluation plan** batched on the device (``mdsd_ot.study.evaluation.evaluate_rows``,
   ``backend="torch"``) against the numpy plan on the CPU (every key, to 1e-12);
3. **decoder**: tree forwards of a tiny random Qwen2 model on the device against plain forwards
   (to 1e-4 in float32), and a union decode run (``mdsd_ot.decode.run_decode``) on the device;
4. **cost of one decoder call** with randomly initialised models of the real Qwen2.5-Coder 1.5B /
   0.5B architectures (configurations written below; no weights travel): one union forest of the
   report's shapes and schemes drafted and verified, timed in bfloat16 and float32.

Usage (the whole run should take under 5 minutes on one GPU)::

    python scripts/device_check.py --out device_results.json            # on the GPU machine
    python scripts/device_check.py --device cpu --quick --out /tmp/x.json  # a smoke run here

Every check records ``ok`` and its largest difference; the exit status is 1 when any check fails.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
import traceback
from pathlib import Path

import numpy as np

#: The real pair's architectures (from the models' config.json; vocabulary 151,936, untied heads).
ARCH = {
    "target-1.5b": dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28,
                        num_attention_heads=12, num_key_value_heads=2),
    "draft-0.5b": dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                       num_attention_heads=14, num_key_value_heads=2),
}  # fmt: skip
VOCAB = 151_936
TOL = 1e-12


def _pairs(V, count, seed):
    """LLM-like pairs (softmax of correlated Gaussian logits at several temperatures) and a few
    adversarial ones (zeros, a near one-hot draft)."""
    rng = np.random.default_rng(seed)
    out = []
    for k in range(count):
        z = rng.standard_normal(V) * 3
        p = np.exp((z - z.max()) / 1.0)
        w = z + rng.standard_normal(V) * 0.7
        T = (0.3, 0.7, 1.0, 0.05)[k % 4]
        q = np.exp((w - w.max()) / T)
        if k % 5 == 3:
            p[rng.choice(V, V // 10, replace=False)] = 0.0
        out.append((p / p.sum(), q / q.sum()))
    return out


def check_backend(torch, device, V, count):
    from mdsd_ot import optimal_acceptance
    from mdsd_ot.backends.torch import sorted_prefix_bound

    worst, cases = 0.0, 0
    for sampling, ns in (("with_replacement", (1, 2, 4, 8)), ("without_replacement", (2,))):
        pairs = _pairs(V, count, 1)
        P = torch.tensor(np.stack([p for p, _ in pairs]), device=device)
        Q = torch.tensor(np.stack([q for _, q in pairs]), device=device)
        for n in ns:
            got = sorted_prefix_bound(P, Q, n, sampling).value.detach().cpu().numpy()
            for (p, q), g in zip(pairs, got):
                ref = optimal_acceptance(p, q, n, sampling=sampling).value
                worst = max(worst, abs(float(g) - ref))
                cases += 1
    return {"ok": worst <= TOL, "max_abs_diff": worst, "cases": cases}


def check_plan(torch, device, V, count):
    from mdsd_ot.study.evaluation import evaluate_rows

    pairs = _pairs(V, count, 2)
    P = np.stack([p for p, _ in pairs])
    Q = np.stack([q for _, q in pairs])
    kw = dict(ns=[2, 3, 4], schemes=["with_replacement", "without_replacement", "greedy"],
              verifiers=["naive", "rrs", "spectr", "greedy"])  # fmt: skip
    ref = evaluate_rows(P, Q, backend="numpy", **kw)
    got = evaluate_rows(torch.tensor(P, device=device), torch.tensor(Q, device=device), backend="torch", **kw)
    worst, keys = 0.0, 0
    for a, b in zip(ref, got):
        for k, v in a.items():
            if isinstance(v, float):
                if b.get(k) is None:
                    return {"ok": False, "missing": k}
                worst = max(worst, abs(v - b[k]))
                keys += 1
    return {"ok": worst <= TOL, "max_abs_diff": worst, "values": keys}


def check_decoder(torch, device):
    import tempfile

    from transformers import AutoModelForCausalLM, Qwen2Config

    from mdsd_ot import _store
    from mdsd_ot.decode import DecodeConfig, run_decode
    from mdsd_ot.decode.models import TreeLM

    def tiny(seed):
        torch.manual_seed(seed)
        cfg = Qwen2Config(
            vocab_size=32, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
        )  # fmt: skip
        return AutoModelForCausalLM.from_config(cfg).to(device).eval()

    target, draft = tiny(1), tiny(2)
    lm = TreeLM(target)
    prompt = [1, 5, 7, 2, 9]
    lm.reset(prompt)
    paths = [(3,), (4,), (3, 8), (4, 8), (3, 8, 1)]
    root, rows = lm.forward(paths)
    worst = 0.0
    with torch.inference_mode():
        for path, row in [((), root), *zip(paths, rows)]:
            plain = target(input_ids=torch.tensor([prompt + list(path)], device=device)).logits[0, -1]
            worst = max(worst, float((plain - row).abs().max()))
    config = DecodeConfig(trees=["1x2", "2x2", "2,2"], schemes=["with_replacement", "greedy"],
                          temperatures=[0.8], max_new_tokens=6, device=str(device)).validate()  # fmt: skip
    records = [{"id": "r0", "prompt_ids": [3, 1, 4]}]
    with tempfile.TemporaryDirectory() as tmp:
        out = run_decode(target, draft, records, Path(tmp) / "run", config, progress=False)
        n_rows = len(_store.read_rows(out))
    return {"ok": worst <= 1e-4 and n_rows > 0, "max_abs_logit_diff": worst, "union_rows": n_rows}


def decoder_call_cost(torch, device, dtypes, layers_scale=1.0, repeat=2):
    """One union call (draft forest + target forward + every cell's exact values) with random models
    of the real architectures; seconds per phase (synchronised), per dtype."""
    from transformers import AutoModelForCausalLM, Qwen2Config

    from mdsd_ot.decode import DecodeConfig
    from mdsd_ot.decode.models import TreeLM
    from mdsd_ot.decode.runner import decode_prompt_union

    out = {}
    for dtype in dtypes:
        models = {}
        for name, arch in ARCH.items():
            arch = dict(arch, num_hidden_layers=max(1, int(arch["num_hidden_layers"] * layers_scale)))
            cfg = Qwen2Config(
                vocab_size=VOCAB, max_position_embeddings=4096, tie_word_embeddings=False, **arch
            )
            torch.manual_seed(0)
            model = AutoModelForCausalLM.from_config(cfg)
            models[name] = model.to(device=device, dtype=getattr(torch, dtype))
            models[name].eval()
        config = DecodeConfig(
            trees=["1x4", "2x4", "4x4", "4x3", "4,2,2,1"],
            schemes=["with_replacement", "without_replacement", "greedy", "top_n"],
            temperatures=[0.7], max_new_tokens=1, dtype=dtype,
        ).validate()  # fmt: skip
        tlm, dlm = TreeLM(models["target-1.5b"]), TreeLM(models["draft-0.5b"])
        prompt = list(range(100, 250))
        times = []
        for r in range(repeat):
            rows = decode_prompt_union(tlm, dlm, prompt, config, 0.7, np.random.default_rng(r))
            drive = [x for x in rows if "emitted" in x][0]
            times.append({k: drive[k] for k in ("t_draft", "t_target", "t_exact", "positions")})
        out[dtype] = {"calls": times, "layers_scale": layers_scale}
        del models, tlm, dlm
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", help="cuda (default), cuda:1, cpu (smoke run)")
    parser.add_argument("--out", default="device_results.json", help="results file (JSON)")
    parser.add_argument("--quick", action="store_true", help="small sizes (a CPU smoke run)")
    args = parser.parse_args(argv)
    import torch

    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("device_check: CUDA is not available here; use --device cpu --quick for a smoke run")
        return 2
    V, count = (2_000, 4) if args.quick else (VOCAB, 16)
    results = {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor(),
        "torch": torch.__version__,
        "python": sys.version.split()[0],
        "checks": {},
    }
    failed = False
    steps = [
        ("torch_backend", lambda: check_backend(torch, device, V, count)),
        ("evaluation_plan", lambda: check_plan(torch, device, V, count)),
        ("decoder_tiny", lambda: check_decoder(torch, device)),
        (
            "decoder_call_cost",
            lambda: decoder_call_cost(
                torch,
                device,
                ["bfloat16"] if args.quick else ["bfloat16", "float32"],
                layers_scale=1 / 28 if args.quick else 1.0,
                repeat=1 if args.quick else 2,
            ),
        ),
    ]
    for name, fn in steps:
        t0 = time.perf_counter()
        try:
            res = fn()
        except Exception as exc:  # recorded, and the run goes on to the next check
            trace = traceback.format_exc()[-2000:]
            res = {"ok": False, "error": f"{type(exc).__name__}: {exc}", "trace": trace}
        res["seconds"] = round(time.perf_counter() - t0, 2)
        results["checks"][name] = res
        failed |= res.get("ok") is False
        print(f"{name}: {json.dumps({k: v for k, v in res.items() if k != 'trace'})}", flush=True)
        Path(args.out).write_text(json.dumps(results, indent=1) + "\n")
    print(f"results written to {args.out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

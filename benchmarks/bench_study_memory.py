"""Peak memory and time of a long study: 10,000 positions at V = 151,936 (memory must stay bounded).

Two tiny randomly initialised causal LMs with the Qwen2.5 vocabulary size stand in for real models
(their weights are ~5 MB, so the resident memory is the pipeline's own). Positions are streamed to
``positions.jsonl``; the full-vocabulary distributions are never kept. Prints a Markdown table with
the peak RSS after the models are loaded, after 1,000 positions and after 10,000 positions.

Run: ``python benchmarks/bench_study_memory.py`` (a few minutes on 2 cores; needs the torch extra).
"""

from __future__ import annotations

import resource
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from _common import header  # noqa: E402

V = 151_936


def tiny_lm(seed):
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
    return model.eval()


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def main():
    from mdsd_ot import study

    rng = np.random.default_rng(0)
    target, draft = tiny_lm(1), tiny_lm(2)
    cfg = study.StudyConfig(
        temperatures=[1.0],
        ns=[2],
        verifiers=["rrs", "spectr"],
        schemes=["with_replacement", "without_replacement", "greedy"],
    )
    rows = [
        header("Study memory: 10,000 positions at V = 151,936"),
        "| positions | wall (s) | peak RSS (MiB) |",
        "|---|---|---|",
        f"| 0 (models loaded) | - | {peak_rss_mib():.0f} |",
    ]
    with tempfile.TemporaryDirectory() as tmp:
        for total in (1_000, 10_000):
            records = [
                {
                    "id": f"r{i}",
                    "prompt_ids": rng.integers(0, V, 8).tolist(),
                    "completion_ids": rng.integers(0, V, 100).tolist(),
                }
                for i in range(total // 100)
            ]
            t0 = time.perf_counter()
            out = study.run_study(target, draft, records, Path(tmp) / f"s{total}", cfg, progress=False)
            wall = time.perf_counter() - t0
            count = sum(1 for _ in open(out / "positions.jsonl"))
            rows.append(f"| {count:,} | {wall:.0f} | {peak_rss_mib():.0f} |")
    print("\n".join(rows))


if __name__ == "__main__":
    main()

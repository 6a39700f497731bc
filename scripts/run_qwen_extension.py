#!/usr/bin/env python
"""Extension run of the real study: n = 1, conditional Poisson and sequential n = 3, 4, per position.

``mdsd-ot study`` evaluates the bounds of ``mdsd_ot.study.SCHEMES`` (with replacement, sequential
without replacement, greedy); the conditional-Poisson scheme (an n-subset drawn with probability
proportional to the product of its q values, the draft law whose optimal acceptance Hu et al.'s
dynamic program computes) is not among them, nor is n = 1, and the main run
(``scripts/run_qwen_study.sh``) leaves out the sequential bound for n = 3, 4. This script runs the
same pipeline as the study on the same positions (the first 54 HumanEval problems, one
teacher-forced forward pass per problem and model, ``to_distribution`` in float64 over the full
vocabulary, :func:`mdsd_ot.study.evaluate_rows` for the values) and writes a study folder of the
same format (checksummed rows, resumable, mergeable with ``mdsd-ot merge``). Each row holds:

* ``bound:with_replacement@1``: the n = 1 optimum ``sum_y min(p, q) = 1 - TV(p, q)`` (every scheme
  coincides at n = 1), and ``tv``: ``0.5 * sum_y |p - q|`` computed directly, as a check;
* ``bound:with_replacement@2``: recomputed to check, row by row, that the two runs saw the same
  (p, q) (the analyses compare it with the main run's value);
* ``bound:conditional_poisson@2`` at every position;
* ``bound:conditional_poisson@3``, ``@4`` and ``bound:without_replacement@3``, ``@4`` (sequential)
  at every ``--every``-th position only (``pos % K == 0``; default 10: the positions where the main
  run evaluates RSD for n = 3, 4 by Monte Carlo, so that those values meet their bound, paired).
  At every position they would double the run's time (the sequential scan for n = 3, 4 takes
  about 0.1 s per call at V = 151,936).

Every bound goes through ``mdsd_ot.optimal_acceptance`` (n = 1, 2 with replacement: the batched
torch scan, re-checked against it at the first position of each problem) and is stored only when
its certificate re-check passed. Usage (two shards, one thread each, then a merge)::

    python scripts/run_qwen_extension.py --models "$MODELS" --shard 0/2 --out RUN/shard0 &
    python scripts/run_qwen_extension.py --models "$MODELS" --shard 1/2 --out RUN/shard1 &
    wait
    mdsd-ot merge RUN/shard0 RUN/shard1 --out RUN/merged

``MODELS`` is the folder written by ``scripts/prepare_qwen_models.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mdsd_ot import _store, study  # noqa: E402

TARGET = "qwen2.5-coder-1.5b-instruct"
DRAFT = "qwen2.5-coder-0.5b-instruct"
TEMPERATURES = (0.3, 0.5, 0.7, 0.9, 1.0)
CP_NS = (2, 3, 4)
WOR_NS = (3, 4)


def every(k: int) -> dict:
    """Subsampling (``mdsd_ot.study.parse_every``): n = 3, 4 at positions ``pos % k == 0`` only."""
    return {f"bound:{s}@{n}": k for s in ("conditional_poisson", "without_replacement") for n in (3, 4)}


def identity(models: str, records, k_every: int) -> dict:
    """What determines a row (compared when a folder is resumed or merged)."""
    return {
        "target": _store.fingerprint_path(os.path.join(models, TARGET), role="target"),
        "draft": _store.fingerprint_path(os.path.join(models, DRAFT), role="draft"),
        "tokenizer": None,
        "dtype": "float32",
        "prompts": {
            "digest": _store.digest_of(records),
            "count": len(records),
            "describe": f"{len(records)} prompts from humaneval",
        },
        "temperatures": list(TEMPERATURES),
        "rows": [
            "bound:with_replacement@1",
            "bound:with_replacement@2",
            *(f"bound:without_replacement@{n}" for n in WOR_NS),
            *(f"bound:conditional_poisson@{n}" for n in CP_NS),
            "tv",
        ],
        "every": every(k_every),
        "top_k": None,
        "top_p": None,
        "continuation": "given",
    }


def rows_of_record(rec, target, draft, tok, k_every: int) -> list[str]:
    from mdsd_ot.backends.torch import to_distribution

    a, b = study._record_ids(rec, tok)
    if not b:
        return []
    lt, ld = study.teacher_forcing_logits(target, draft, a, b)
    lines = []
    for T in TEMPERATURES:
        P = to_distribution(lt, temperature=T)
        Q = to_distribution(ld, temperature=T)
        tv = (0.5 * (P - Q).abs().sum(-1)).tolist()
        parts = [
            study.evaluate_rows(
                P, Q, ns=[1, 2], schemes=["with_replacement"], verifiers=[], backend="auto", check=True
            ),
            study.evaluate_rows(
                P,
                Q,
                ns=list(WOR_NS),
                schemes=["without_replacement"],
                verifiers=[],
                backend="numpy",
                every=every(k_every),
            ),
            study.evaluate_rows(
                P,
                Q,
                ns=list(CP_NS),
                schemes=["conditional_poisson"],
                verifiers=[],
                backend="numpy",
                every=every(k_every),
            ),
        ]
        for j in range(len(b)):
            row = {"record": rec["id"], "pos": j, "token": int(b[j]), "T": float(T)}
            errors = {}
            for part in parts:
                errors.update(part[j].pop("errors", {}))
                row.update(part[j])
            row["tv"] = float(tv[j])
            if errors:
                row["errors"] = errors
            lines.append(json.dumps(row))
        del P, Q
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", required=True, help="folder of scripts/prepare_qwen_models.py")
    parser.add_argument("--out", required=True, help="study folder for this shard")
    parser.add_argument("--shard", default="0/1", help="i/N: every N-th problem from i (default 0/1)")
    parser.add_argument("--max-records", type=int, default=54, help="first problems (default 54)")
    parser.add_argument(
        "--every", type=int, default=10, help="n = 3, 4 bounds at positions pos %% K == 0 only (default 10)"
    )
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    args = parser.parse_args(argv)
    i_shard, n_shard = (int(x) for x in args.shard.split("/"))
    records = study.load_prompts("humaneval")
    mine = [r for k, r in enumerate(records[: args.max_records]) if k % n_shard == i_shard]
    folder = _store.ResultsFolder(
        args.out,
        kind="study",
        identity=identity(args.models, records, args.every),
        shard=f"{i_shard}/{n_shard}",
        expected=len(mine),
        info={
            "provenance": {
                "script": "scripts/run_qwen_extension.py",
                "max_records": args.max_records,
                "every": args.every,
            }
        },
    )
    with folder:
        todo = [r for r in mine if r["id"] not in folder.done]
        print(f"shard {args.shard}: {len(mine)} problems, {len(todo)} to compute", flush=True)
        if not todo:
            return 0
        target, draft, tok = study.load_models(
            os.path.join(args.models, TARGET),
            os.path.join(args.models, DRAFT),
            device="cpu",
            threads=args.threads,
        )
        t0, n_pos = time.time(), 0
        for k, rec in enumerate(todo, 1):
            lines = rows_of_record(rec, target, draft, tok, args.every)
            folder.append(rec["id"], lines)
            n_pos += len(lines) // len(TEMPERATURES)
            print(f"{k}/{len(todo)} {rec['id']}: {n_pos} positions, {time.time() - t0:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

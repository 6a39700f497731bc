"""Tiny random causal LMs for trying ``mdsd-ot study``, ``decode`` and ``merge`` offline.

:func:`tiny_lm` builds a randomly initialised Hugging Face causal LM from a configuration (no
download, no tokenizer: the vocabulary is the token ids ``0 .. V-1``); the test suite builds its
models with it. :func:`write_tiny_models` (``mdsd-ot tiny-models DIR``) saves a target, a draft
that is the target with perturbed weights (so that their next-token laws are close but differ, as
for a real pair), and a prompts file of token ids whose continuations are sampled from the target.
Every number these models give is meaningless as a result about language models; the commands run
on them exactly as on real ones. torch and transformers are imported inside the functions.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

__all__ = ["tiny_lm", "save_tiny_lm", "write_tiny_models"]


def tiny_lm(
    vocab: int,
    *,
    seed: int | None = 0,
    kind: str = "qwen2",
    hidden: int = 16,
    intermediate: int = 32,
    layers: int = 1,
    heads: int = 2,
    kv_heads: int = 1,
    max_positions: int = 64,
    spread: float | None = None,
):
    """A tiny causal LM in eval mode, built from a transformers configuration.

    Parameters
    ----------
    vocab : int
        Vocabulary size (token ids ``0 .. vocab-1``).
    seed : int or None
        ``torch.manual_seed(seed)`` first (None: continue torch's current random state).
    kind : {"qwen2", "llama"}
        The architecture.
    hidden, intermediate, layers, heads, kv_heads, max_positions : int
        Sizes of the configuration.
    spread : float or None
        Multiply the output layer's weights by it, so that the next-token distributions are far
        from uniform (None: the initialisation as drawn).
    """
    from .backends.torch import require_torch

    torch = require_torch()
    try:
        import transformers
    except ImportError as exc:
        from .backends import install_hint

        raise ImportError("tiny models need transformers; " + install_hint("torch")) from exc

    if seed is not None:
        torch.manual_seed(seed)
    configs = {"qwen2": transformers.Qwen2Config, "llama": transformers.LlamaConfig}
    if kind not in configs:
        raise ValueError(f"unknown kind {kind!r}; choose one of {sorted(configs)}")
    cfg = configs[kind](
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=intermediate,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        max_position_embeddings=max_positions,
    )
    model = transformers.AutoModelForCausalLM.from_config(cfg)
    if spread is not None:
        with torch.no_grad():
            model.lm_head.weight.mul_(spread)
    return model.eval()


def save_tiny_lm(model, folder) -> None:
    """``model.save_pretrained(folder)`` without transformers' messages on stderr.

    Parameters
    ----------
    model : transformers.PreTrainedModel
    folder : str or os.PathLike
        Where to save it.
    """
    with open(os.devnull, "w") as devnull, contextlib.redirect_stderr(devnull):
        model.save_pretrained(folder)


def _sample(model, prompt, length: int, gen) -> list[int]:
    import torch

    ids = list(prompt)
    with torch.inference_mode():
        for _ in range(length):
            logits = model(input_ids=torch.tensor([ids])).logits[0, -1].double()
            ids.append(int(torch.multinomial(torch.softmax(logits, -1), 1, generator=gen)))
    return ids[len(prompt) :]


def write_tiny_models(
    folder,
    *,
    vocab: int = 64,
    prompts: int = 4,
    prompt_length: int = 8,
    completion_length: int = 12,
    noise: float = 0.3,
    seed: int = 0,
) -> dict:
    """Write ``target/``, ``draft/`` and ``prompts.jsonl`` into ``folder``.

    Parameters
    ----------
    folder : path-like
        Created if missing; ``target`` and ``draft`` in it must not exist yet.
    vocab : int
        Vocabulary size shared by the two models (>= 2).
    prompts, prompt_length, completion_length : int
        Number of prompts, and token ids per prompt and per continuation (sampled from the target
        at temperature 1 with a seeded generator).
    noise : float
        The draft is the target with every weight ``w`` replaced by ``w + noise * std(w) * N(0, 1)``.
    seed : int
        Seeds the weights, the perturbation, the prompts and the continuations.

    Returns
    -------
    dict
        ``{"target": path, "draft": path, "prompts": path}``.
    """
    for name, value, low in (
        ("vocab", vocab, 2),
        ("prompts", prompts, 1),
        ("prompt_length", prompt_length, 1),
        ("completion_length", completion_length, 1),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    if not (isinstance(noise, (int, float)) and noise >= 0):
        raise ValueError(f"noise must be a number >= 0, got {noise!r}")
    folder = Path(folder)
    paths = {"target": folder / "target", "draft": folder / "draft", "prompts": folder / "prompts.jsonl"}
    for key in ("target", "draft"):
        if paths[key].exists():
            raise FileExistsError(f"{paths[key]} exists already; choose a new folder or remove it")
    from .backends.torch import require_torch

    torch = require_torch()
    # room for the prompt, the continuation and what decode generates beyond it
    max_positions = max(256, 4 * (prompt_length + completion_length))
    target = tiny_lm(vocab, seed=seed, hidden=32, intermediate=64, layers=2, heads=4, kv_heads=2,
                     max_positions=max_positions, spread=20.0)  # fmt: skip
    draft = tiny_lm(vocab, seed=seed, hidden=32, intermediate=64, layers=2, heads=4, kv_heads=2,
                    max_positions=max_positions, spread=20.0)  # fmt: skip
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for w in draft.parameters():
            if w.numel() > 1 and float(w.std()) > 0:
                w.add_(noise * float(w.std()) * torch.randn(w.shape, generator=gen, dtype=w.dtype))
    folder.mkdir(parents=True, exist_ok=True)
    save_tiny_lm(target, paths["target"])
    save_tiny_lm(draft, paths["draft"])
    lines = []
    for i in range(prompts):
        prompt = torch.randint(0, vocab, (prompt_length,), generator=gen).tolist()
        completion = _sample(target, prompt, completion_length, gen)
        lines.append(json.dumps({"id": f"tiny/{i}", "prompt_ids": prompt, "completion_ids": completion}))
    paths["prompts"].write_text("\n".join(lines) + "\n", encoding="utf-8")
    return paths

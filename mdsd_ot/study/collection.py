"""Collection: the target and draft distributions at every position (teacher forcing).

Prompts and models come from the runs wing (:mod:`mdsd_ot.runs.inputs`, re-exported here). torch
and transformers are imported inside the functions."""

from __future__ import annotations

# the inputs are the runs wing's (shared with the decoder); their old names stay reachable here
from ..runs.inputs import (  # noqa: F401
    _from_pretrained,  # noqa: F401
    check_model_dependencies,
    load_models,
    load_prompts,
)
from ..runs.inputs import check_record_ids as _check_record_ids  # noqa: F401
from ..runs.inputs import device_of as _device  # noqa: F401
from ..runs.inputs import record_ids as _record_ids  # noqa: F401
from ..runs.inputs import torch_module as _torch
from ..runs.inputs import vocab_size as _vocab  # noqa: F401


def sample_continuation(
    model, prompt_ids, max_new_tokens: int, temperature: float, seed: int, eos_token_id=None
) -> list[int]:
    """Sample a continuation from ``model`` token by token (KV cache, explicit torch.Generator)."""
    torch = _torch()
    from ..backends.torch import to_distribution

    dev = next(model.parameters()).device
    gen = torch.Generator(device="cpu").manual_seed(int(seed))
    ids = torch.tensor([prompt_ids], device=dev)
    out, past = [], None
    import inspect

    # transformers >= 5 names the KV cache argument ``cache``; older versions ``past_key_values``
    params = inspect.signature(model.forward).parameters
    cache_arg = "cache" if "cache" in params else "past_key_values"
    with torch.inference_mode():
        for _ in range(max_new_tokens):
            res = model(input_ids=ids, use_cache=True, **{cache_arg: past})
            past = getattr(res, "cache", None)
            if past is None:
                past = getattr(res, "past_key_values", None)
            probs = to_distribution(res.logits[0, -1], temperature=temperature).cpu()
            tok = int(torch.multinomial(probs, 1, generator=gen))
            out.append(tok)
            if eos_token_id is not None and tok == eos_token_id:
                break
            ids = torch.tensor([[tok]], device=dev)
    return out


def teacher_forcing_logits(target_model, draft_model, prompt_ids, continuation_ids):
    """One forward pass per model over prompt + continuation; logits predicting each continuation token.

    Returns
    -------
    (target_logits, draft_logits) : torch.Tensor, shape (L, V), on the models' device
        Row ``j`` is the distribution of continuation token ``j`` given everything before it.
    """
    torch = _torch()
    if not prompt_ids:
        raise ValueError("the prompt must contain at least one token")
    La, Lb = len(prompt_ids), len(continuation_ids)
    dev = next(target_model.parameters()).device
    ids = torch.tensor([list(prompt_ids) + list(continuation_ids)], device=dev)
    out = []
    with torch.inference_mode():
        for model in (target_model, draft_model):
            logits = model(input_ids=ids.to(next(model.parameters()).device)).logits
            out.append(logits[0, La - 1 : La - 1 + Lb].detach())
    if out[0].shape[-1] != out[1].shape[-1]:
        raise ValueError(
            f"target and draft have different vocabularies ({out[0].shape[-1]} vs "
            f"{out[1].shape[-1]} logits); a speculative pair must share one tokenizer"
        )
    return out[0], out[1].to(out[0].device)

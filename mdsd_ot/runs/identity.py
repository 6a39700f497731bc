"""Identity of a run: what determines its rows, as recorded in a results folder's ``config.json``.

The pieces shared by the study (:func:`mdsd_ot.study.study_identity`) and the decoder
(:func:`mdsd_ot.decode.decode_identity`): models and tokenizers (files by content, hub names by
name, in-memory ones by their weights) and prompts (sha256 of the records). Each application adds
its own parameters (``config.key()``); the dicts' keys and their order are a stored format
(``tests/test_identity_compat.py``).
"""

from __future__ import annotations

import hashlib
import json
import os

from .. import _store
from .inputs import torch_module

__all__ = ["model_identity", "tokenizer_identity", "identify", "prompts_identity"]


def model_identity(model) -> dict:
    """Identity of an in-memory model: sha256 of its configuration and of every parameter's bytes.

    Used by :func:`mdsd_ot.study.run_study` and :func:`mdsd_ot.decode.run_decode` when they are given
    models rather than files (the command line
    identifies the model files instead, before loading them:
    :func:`mdsd_ot._store.fingerprint_path`).

    Parameters
    ----------
    model : torch.nn.Module
        With ``parameters()`` (and optionally ``config.to_dict()``).

    Returns
    -------
    dict
        ``{"digest", "describe"}``.
    """
    torch = torch_module()
    h = hashlib.sha256()
    cfg = getattr(model, "config", None)
    if cfg is not None and hasattr(cfg, "to_dict"):
        conf = {
            k: v
            for k, v in cfg.to_dict().items()
            if not k.startswith("_") and k not in ("transformers_version", "name_or_path")
        }
        h.update(json.dumps(conf, sort_keys=True, default=str).encode("utf-8"))
    count, dtypes = 0, set()
    with torch.no_grad():
        for p in model.parameters():
            t = p.detach()
            if t.device.type != "cpu":
                t = t.cpu()
            t = t.contiguous().reshape(-1)
            h.update(f"{t.dtype}{tuple(p.shape)};".encode("ascii"))
            h.update(t.view(torch.uint8).numpy())
            count += t.numel()
            dtypes.add(str(t.dtype).replace("torch.", ""))
    digest = h.hexdigest()
    return {
        "digest": digest,
        "describe": f"in-memory {type(model).__name__} ({count:,} "
        f"parameters, {'/'.join(sorted(dtypes))}, sha256 {digest[:12]})",
    }


def tokenizer_identity(tokenizer) -> dict | None:
    """Identity of an in-memory tokenizer (its serialisation, else its vocabulary).

    Parameters
    ----------
    tokenizer : tokenizer or None

    Returns
    -------
    dict or None
        ``{"digest", "describe"}``; None for None.
    """
    if tokenizer is None:
        return None
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None and hasattr(backend, "to_str"):
        text = backend.to_str()
    elif hasattr(tokenizer, "get_vocab"):
        text = json.dumps(sorted(tokenizer.get_vocab().items()))
    else:
        text = type(tokenizer).__name__
    special = getattr(tokenizer, "all_special_tokens", None)
    digest = _store.digest_of([text, list(special or [])])
    return {"digest": digest, "describe": f"in-memory {type(tokenizer).__name__} (sha256 {digest[:12]})"}


def identify(thing, role, previous=None):
    """Identity of a model or tokenizer: a path or hub name (:func:`mdsd_ot._store.fingerprint_path`),
    an in-memory model (:func:`model_identity`) or tokenizer (:func:`tokenizer_identity`); None for
    None. ``previous``: the entry recorded earlier, to skip re-hashing unchanged files.

    Parameters
    ----------
    thing : str, os.PathLike, model, tokenizer or None
    role : str
        ``"target"``, ``"draft"`` or ``"tokenizer"``, for messages.
    previous : dict or None

    Returns
    -------
    dict or None
        ``{"digest", "describe", ...}``; only ``digest`` is compared.
    """
    if thing is None:
        return None
    if isinstance(thing, (str, os.PathLike)):
        return _store.fingerprint_path(thing, role=role, previous=previous)
    if hasattr(thing, "parameters"):
        return model_identity(thing)
    return tokenizer_identity(thing)


def prompts_identity(records, source: str | None = None) -> dict:
    """``{"digest", "count", "describe"}`` of the prompt records (sha256 of their content and ids);
    ``source`` (where they came from) appears in ``describe`` only.

    Parameters
    ----------
    records : iterable of dict
        Prompt records.
    source : str or None

    Returns
    -------
    dict
    """
    records = list(records)
    digest = _store.digest_of(records)
    where = "" if source is None else f" from {source}"
    return {
        "digest": digest,
        "count": len(records),
        "describe": f"{len(records)} prompts{where} (sha256 {digest[:12]})",
    }

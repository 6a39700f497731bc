"""Tree decoding over a target/draft pair: one call at a time, rows streamed per prompt, resume, shards.

A union run (the default, :func:`decode_prompt_union`, docs/math.md#union-trees) decodes each prompt
once per temperature for every (tree, scheme) cell at once:

1. draft one forest level by level (one batched draft forward per depth, :class:`.models.TreeLM`):
   one tree of the union shape per scheme with nested draws, each shape's own tree for the others;
2. one target forward over every distinct node (tree attention mask) gives ``p`` at every node;
3. every cell's tree (a first-children sub-tree of its union tree, or its own tree) gets every valid
   verifier's exact expected tokens (:func:`mdsd_ot.trees.expected_tokens`, node-wise and tree-level),
   the per-call values of the certified tree-dual rules (``upper:<rule>``,
   :func:`mdsd_ot.trees.upper_bound`: their means over calls bound every valid verifier from above),
   and, with ``bound=True``, the node-alpha* heuristic;
4. decoding continues along the driving cell's verifier sample (:func:`mdsd_ot.trees.verify_tree`).

A per-cell run (``union=False``, :func:`decode_prompt`) does the same for one cell at a time, with
its own continuation.

A call's row records ``emitted``, the number of tokens the driving verifier's sample produced (up to
the first EOS): the sampled block efficiency. The continuation never exceeds ``max_new_tokens``: the
last call's ``tokens`` keep only what fits, and ``truncated`` (present when positive) counts the
tokens left out, so ``len(tokens) == emitted - truncated``.

One JSON row per target call goes to ``positions.jsonl`` of a results folder (:mod:`mdsd_ot._store`:
one writer, identity, checksummed rows, resume, shards, merge), all of a prompt's rows at once.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np

from .. import _store
from .._config import DECODE_OPTIMAL_MAX_V
from .._memory import release_freed_memory
from .._validate import check_probabilities
from ..drafts import SCHEMES
from ..keys import exact_key, upper_key
from ..runs import runner as _runs
from ..runs.identity import identify, prompts_identity
from ..runs.inputs import (
    check_record_ids,
    check_token_ids,
    load_prompts,
    model_vocab,
    models_of,
    models_vocab,
    record_ids,
)
from ..runs.shards import parse_shard, shard_records
from ..runs.shards import progress as progress_bar
from ..trees import (
    default_rule,
    draft_forest,
    draft_tree,
    expected_tokens,
    first_children,
    node_alpha_heuristic,
    parse_shape,
    upper_bound,
    verify_tree,
)
from .config import DecodeConfig, driver_for

__all__ = [
    "decode_prompt",
    "decode_prompt_union",
    "run_decode",
    "run_shard",
    "decode_identity",
    "open_decode",
    "merge",
    "runs_at",
]

KIND = "decode"

#: Row fields that are measurements of the machine, not results: two runs of a record may differ in them.
TIMING_FIELDS = ("t_draft", "t_target", "t_exact")


def _np(t):
    return t.detach().to("cpu").numpy()


def _laws_of_distinct(paths, laws_of):
    """``laws_of(distinct paths)`` spread back to ``paths``: a path drafted twice (i.i.d. drafts) has
    its law computed once (a row's law does not depend on the other rows of the batch)."""
    distinct = list(dict.fromkeys(tuple(int(t) for t in p) for p in paths))
    laws = laws_of(distinct)
    if len(distinct) == len(paths):
        return laws
    where = {p: i for i, p in enumerate(distinct)}
    return laws[[where[tuple(int(t) for t in p)] for p in paths]]


def draft_laws(draft_lm, dist: dict):
    """The draft's laws for :func:`mdsd_ot.trees.draft_tree`: ``draft(paths) -> (len(paths), V)``
    float64 laws of the nodes ``paths`` (``[()]``: the root, after the pending committed tokens), from
    forwards of the :class:`~mdsd_ot.decode.models.TreeLM` ``draft_lm`` at ``dist``
    (``temperature``, ``top_k``, ``top_p`` of :func:`mdsd_ot.backends.torch.to_distribution`)."""
    from ..backends.torch import to_distribution

    def draft(paths):
        if list(paths) == [()]:
            root, _ = draft_lm.forward([])
            return _np(to_distribution(root[None], **dist))
        return _laws_of_distinct(paths, lambda d: _np(to_distribution(draft_lm.forward(d)[1], **dist)))

    return draft


def forward_laws(target_lm, paths, dist: dict, vocab: int) -> np.ndarray:
    """The target's float64 laws at the distinct node ``paths`` (the root ``()`` first), from one forward
    of the :class:`~mdsd_ot.decode.models.TreeLM` ``target_lm`` over the others, at ``dist``
    (:func:`draft_laws`); ``ValueError`` when the target's vocabulary is not the draft's ``vocab``."""
    from ..backends.torch import require_torch, to_distribution

    torch = require_torch()
    root, logits = target_lm.forward(paths[1:])
    if vocab != root.shape[-1]:
        raise ValueError(
            f"target and draft have different vocabularies ({root.shape[-1]} vs {vocab} logits); "
            f"a speculative pair must share one tokenizer"
        )
    return _np(to_distribution(torch.cat([root[None], logits], dim=0), **dist))


def target_laws(target_lm, tree, dist: dict) -> np.ndarray:
    """The target's laws at every node of the drafted ``tree`` (root first): :func:`forward_laws` of its
    distinct nodes, a node drafted twice sharing its row."""
    paths = [tree.path(v) for v in range(tree.tokens.size)]
    return _laws_of_distinct(paths, lambda distinct: forward_laws(target_lm, distinct, dist, tree.vocab))


def runs_at(verifier, scheme, vocab: int, *, shape=None) -> bool:
    """Whether the decoder evaluates ``verifier`` exactly on trees of ``scheme`` at vocabulary ``vocab``.

    Asked of the verifier, not of its name: a verifier with a ``covers(sampling)`` method (the
    ``optimal`` verifier) that does not cover ``scheme`` would solve an LP per node (over every draft
    set), so it runs only up to :data:`mdsd_ot._config.DECODE_OPTIMAL_MAX_V` tokens; every other
    verifier, and ``optimal`` where its scheme has a full-vocabulary construction
    (``DraftScheme.optimal_at_full_v``; docs/math.md#optimal-verifier-full-v), runs at any size. A
    tree-level verifier with a ``covers(scheme, shape)`` method (``lookahead``, whose nodes use the
    optimal verifier) is asked the same way, with the tree's shape.

    Parameters
    ----------
    verifier : str or Verifier
        Verifier name or alias (node-wise or tree-level), or a :class:`Verifier`.
    scheme : str
        Draft scheme name.
    vocab : int
        Vocabulary size V.
    shape : TreeShape, str or None
        The tree's shape, for tree-level verifiers (None: any shape).

    Returns
    -------
    bool

    >>> runs_at("optimal", "with_replacement", 151_936), runs_at("optimal", "without_replacement", 151_936)
    (True, False)
    """
    from ..trees import TREE_VERIFIERS, canonical_verifier
    from ..verifiers import get_verifier

    name = canonical_verifier(verifier) if isinstance(verifier, str) else None
    if name in TREE_VERIFIERS:  # O(N V) per tree at any vocabulary, unless its nodes need an LP
        covers = getattr(TREE_VERIFIERS[name], "covers", None)
        return covers is None or covers(scheme, shape) or int(vocab) <= DECODE_OPTIMAL_MAX_V
    v = get_verifier(verifier)
    covers = getattr(v, "covers", None)
    if covers is None or covers(scheme):
        return True
    return int(vocab) <= DECODE_OPTIMAL_MAX_V


def decode_prompt(
    target_lm, draft_lm, prompt_ids, config: DecodeConfig, cell, rng, *, eos=None, record="", on_call=None
) -> list[dict]:
    """Decode one prompt in one cell ``(T, tree, scheme)``; one row per target call.

    ``target_lm`` / ``draft_lm`` are :class:`.models.TreeLM`; ``rng`` a numpy Generator (all the
    randomness: drafts and verification).

    Parameters
    ----------
    target_lm, draft_lm : TreeLM
        Target and draft models sharing a vocabulary (``ValueError`` otherwise).
    prompt_ids : list of int
        The prompt's token ids.
    config : DecodeConfig
        Validated configuration (``max_new_tokens``, ``top_k``, ``top_p``, ``driver``, ``bound``, ...).
    cell : tuple
        ``(T, tree, scheme)``: temperature, tree shape label and draft scheme name.
    rng : numpy.random.Generator
    eos : int or None
        End-of-sequence token id: decoding stops after emitting it.
    record : str
        Prompt id written into every row.
    on_call : callable or None
        ``on_call(row)`` after each target call.

    Returns
    -------
    list of dict
        One row per target call.
    """
    from ..backends.torch import require_torch

    require_torch()
    T, tree_label, scheme = cell
    shape = parse_shape(tree_label)
    driver = driver_for(scheme, config.driver)
    names = config.verifiers_for(scheme, shape)
    dist = dict(temperature=T, top_k=config.top_k, top_p=config.top_p)
    target_lm.reset(prompt_ids)
    draft_lm.reset(prompt_ids)
    draft = draft_laws(draft_lm, dist)
    rows, made, call = [], 0, 0
    while made < config.max_new_tokens:
        t0 = time.perf_counter()
        tree = draft_tree(shape, scheme, draft, rng)
        t1 = time.perf_counter()
        tree.set_target(target_laws(target_lm, tree, dist))
        t2 = time.perf_counter()
        row = {"record": record, "T": T, "tree": tree_label, "scheme": scheme, "call": call, "driver": driver}
        for name in names:
            if not runs_at(name, scheme, tree.vocab, shape=tree.shape):
                continue
            try:
                row[exact_key(name)] = expected_tokens(tree, name)
            except (ValueError, RuntimeError) as exc:  # recorded, never silent
                row[exact_key(name)] = None
                row.setdefault("errors", {})[name] = " ".join(str(exc).split())[:200]
        _upper_values(row, tree, scheme)
        if config.bound:
            try:
                # alpha* of every node: by the torch evaluation plan, batched on the models' device when
                # that is an accelerator; optimal_acceptance node by node on CPU
                row["bound"] = node_alpha_heuristic(tree, backend="auto", device=target_lm.device)
            except (ValueError, RuntimeError) as exc:
                row["bound"] = None
                row.setdefault("errors", {})["bound"] = " ".join(str(exc).split())[:200]
        t3 = time.perf_counter()
        emitted = verify_tree(tree, driver, rng)
        if eos is not None and eos in emitted:
            emitted = emitted[: emitted.index(eos) + 1]
        kept = emitted[: config.max_new_tokens - made]  # never more than max_new_tokens in all
        if len(kept) < len(emitted):
            row["truncated"] = len(emitted) - len(kept)
        row.update(
            emitted=len(emitted),
            tokens=kept,
            draft_forwards=shape.depth,
            t_draft=t1 - t0,
            t_target=t2 - t1,
            t_exact=t3 - t2,
        )
        rows.append(row)
        if on_call is not None:
            on_call(row)
        release_freed_memory()  # the call's laws and tables are freed: their pages back to the system
        made += len(kept)
        call += 1
        if made >= config.max_new_tokens or (eos is not None and emitted[-1] == eos):
            break
        target_lm.commit(kept)
        draft_lm.commit(kept)
    return rows


#: The tree-dual rules every call records per cell (``upper:<rule>``), besides the scheme's default
#: (:func:`mdsd_ot.trees.default_rule`): ``one_level`` costs one alpha* at the root and has almost no
#: spread per call; the default uses the whole tree (docs/math.md#the-tree-dual).
DECODE_UPPER_RULES = ("one_level",)


def upper_rules(scheme: str) -> list[str]:
    """The tree-dual rules a decode row records for ``scheme``: its default rule, then
    :data:`DECODE_UPPER_RULES`.

    Parameters
    ----------
    scheme : str
        Draft scheme name.

    Returns
    -------
    list of str

    >>> upper_rules("with_replacement"), upper_rules("top_n")
    (['subtree', 'one_level'], ['top_n', 'one_level'])
    """
    return list(dict.fromkeys([default_rule(scheme), *DECODE_UPPER_RULES]))


def _upper_values(row, tree, scheme):
    """Each recorded tree-dual rule's value on ``tree`` into ``row`` (``upper:<rule>``); a failure is
    recorded under ``errors``, never silent."""
    for rule in upper_rules(scheme):
        key = upper_key(rule)
        try:
            row[key] = upper_bound(tree, rule)
        except (ValueError, RuntimeError) as exc:
            row[key] = None
            row.setdefault("errors", {})[key] = " ".join(str(exc).split())[:200]


def _exact_values(row, tree, names, scheme, config):
    """Every verifier's exact expected tokens on ``tree``, the tree-dual rules' values (and the
    heuristic when asked) into ``row``; a failure is recorded under ``errors``, never silent."""
    for name in names:
        if not runs_at(name, scheme, tree.vocab, shape=tree.shape):
            continue
        try:
            row[exact_key(name)] = expected_tokens(tree, name)
        except (ValueError, RuntimeError) as exc:
            row[exact_key(name)] = None
            row.setdefault("errors", {})[name] = " ".join(str(exc).split())[:200]
    _upper_values(row, tree, scheme)
    if config.bound:
        try:
            row["bound"] = node_alpha_heuristic(tree)
        except (ValueError, RuntimeError) as exc:
            row["bound"] = None
            row.setdefault("errors", {})["bound"] = " ".join(str(exc).split())[:200]


def forest_paths(forest, *, internal: bool = False) -> list[tuple]:
    """The distinct node paths of a drafted forest (every node, or only the internal ones, whose draft
    laws were read), by depth then path: the order of the target forward over the forest."""
    paths = {t.path(v) for t in forest for v in range(t.n_internal if internal else t.tokens.size)}
    return sorted(paths, key=lambda p: (len(p), p))


def union_cells(config: DecodeConfig, forest, *, memo=None):
    """``(tree label, scheme, tree, union)`` for every (tree, scheme) cell of ``config``, in the
    configuration's order, from the forest drafted for :meth:`DecodeConfig.forest`: a scheme with
    nested draws reads its cell on the first-children sub-tree of its union tree (``union`` names that
    tree, e.g. ``"4,2,2,1/with_replacement"``), any other scheme its own tree (``union`` is None)."""
    specs = config.forest()
    for tree_label in config.trees:
        for scheme in config.schemes:
            if SCHEMES[scheme].nested_draws:
                k = next(i for i, (_, s) in enumerate(specs) if s == scheme)
                tree = first_children(forest[k], tree_label, memo=memo)
                yield tree_label, scheme, tree, f"{specs[k][0]}/{scheme}"
            else:
                yield tree_label, scheme, forest[specs.index((tree_label, scheme))], None


def decode_prompt_union(
    target_lm, draft_lm, prompt_ids, config: DecodeConfig, T, rng, *, eos=None, record="", on_call=None
) -> list[dict]:
    """Decode one prompt at temperature ``T`` for every (tree, scheme) cell at once (``config.union``).

    Each target call drafts :meth:`DecodeConfig.forest` (one union tree per scheme with nested draws,
    the own trees of the other schemes) with one draft forward per depth over all of them, runs one
    target forward over every distinct node, evaluates every cell exactly (a cell of a nested scheme on
    the first-children sub-tree of its union tree, docs/math.md#union-trees) and continues along the
    ``drive`` cell's ``driver`` sample. One row per (call, cell); the driving cell's row carries the
    sample (``emitted``, ``tokens``) and the call's timings; ``union`` names the tree a value came from.

    Parameters
    ----------
    target_lm, draft_lm : TreeLM
        Target and draft models sharing a vocabulary (``ValueError`` otherwise).
    prompt_ids : list of int
        The prompt's token ids.
    config : DecodeConfig
        Validated union configuration (``config.union``).
    T : float
        Temperature.
    rng : numpy.random.Generator
    eos : int or None
        End-of-sequence token id: decoding stops after emitting it.
    record : str
        Prompt id written into every row.
    on_call : callable or None
        ``on_call(row)`` with the driving cell's row after each target call.

    Returns
    -------
    list of dict
        One row per (target call, cell).
    """
    from ..backends.torch import require_torch

    require_torch()
    drive = config.drive_cell()
    driver = config.driver
    specs = config.forest()
    dist = dict(temperature=T, top_k=config.top_k, top_p=config.top_p)
    depth = max(parse_shape(t).depth for t, _ in specs)
    target_lm.reset(prompt_ids)
    draft_lm.reset(prompt_ids)
    draft = draft_laws(draft_lm, dist)
    rows, made, call = [], 0, 0
    while made < config.max_new_tokens:
        t0 = time.perf_counter()
        memo: dict = {}
        forest = draft_forest(specs, draft, rng, memo=memo)
        t1 = time.perf_counter()
        every = forest_paths(forest)  # distinct, the root first (sorted by length)
        laws = forward_laws(target_lm, every, dist, forest[0].vocab)
        laws = check_probabilities(laws, "target laws", ndim=2)  # once for the whole forest
        laws /= laws.sum(axis=1, keepdims=True)
        where = {p: k for k, p in enumerate(every)}
        for t in forest:
            t.set_target(laws[[where[t.path(v)] for v in range(t.tokens.size)]], checked=True)
        t2 = time.perf_counter()
        call_rows, drive_tree = [], None
        for tree_label, scheme, tree, union in union_cells(config, forest, memo=memo):
            row = {
                "record": record,
                "T": T,
                "tree": tree_label,
                "scheme": scheme,
                "call": call,
                "driver": driver,
                "drive": config.drive,
                "union": union,
            }
            _exact_values(row, tree, config.verifiers_for(scheme, tree_label), scheme, config)
            if (tree_label, scheme) == drive:
                drive_tree, drive_row = tree, row
            call_rows.append(row)
        t3 = time.perf_counter()
        emitted = verify_tree(drive_tree, driver, rng)
        if eos is not None and eos in emitted:
            emitted = emitted[: emitted.index(eos) + 1]
        kept = emitted[: config.max_new_tokens - made]
        if len(kept) < len(emitted):
            drive_row["truncated"] = len(emitted) - len(kept)
        drive_row.update(
            emitted=len(emitted),
            tokens=kept,
            draft_forwards=depth,
            positions=len(every),
            t_draft=t1 - t0,
            t_target=t2 - t1,
            t_exact=t3 - t2,
        )
        rows.extend(call_rows)
        if on_call is not None:
            on_call(drive_row)
        release_freed_memory()  # the forest's laws and every cell's tables are freed: pages back
        made += len(kept)
        call += 1
        if made >= config.max_new_tokens or (eos is not None and emitted[-1] == eos):
            break
        target_lm.commit(kept)
        draft_lm.commit(kept)
    return rows


# ------------------------------------------------------------------------------ folders, identity
def decode_identity(config: DecodeConfig, records, *, target, draft, tokenizer=None, previous=None) -> dict:
    """Everything that determines a row: models (file contents, or in-memory weights), tokenizer,
    prompts (sha256 of the records) and :meth:`DecodeConfig.key`.

    Parameters
    ----------
    config : DecodeConfig
    records : iterable of dict
        Prompt records.
    target, draft : str, os.PathLike or model
        Model folders or hub names, or in-memory models.
    tokenizer : str, os.PathLike, tokenizer or None
        None (or the target's own path): the target's tokenizer.
    previous : dict or None
        An identity recorded earlier, to skip re-hashing unchanged files.

    Returns
    -------
    dict
        ``target``, ``draft``, ``tokenizer``, ``prompts`` and the entries of :meth:`DecodeConfig.key`.
    """
    prev = previous or {}
    if tokenizer is not None and isinstance(tokenizer, str) and tokenizer == target:
        tokenizer = None  # the target's own tokenizer spelled out: the same run
    records = list(records)
    ident = {
        "target": identify(target, "target", prev.get("target")),
        "draft": identify(draft, "draft", prev.get("draft")),
        "tokenizer": identify(tokenizer, "tokenizer", prev.get("tokenizer")),
        "prompts": prompts_identity(records),
    }
    ident.update(config.key())
    recorded = prev.get("verifiers", ident["verifiers"])
    if recorded != ident["verifiers"] and config.same_verifiers(recorded):
        ident["verifiers"] = recorded  # another spelling of the same verifiers in every cell: same run
    return ident


_shard = parse_shard


def _mine(records, config, i, n):
    return shard_records(records, config.max_records, i, n)


def open_decode(out, config: DecodeConfig, records, *, identity: dict, shard=None, meta=None):
    """Open (create or resume) a decode folder for writing: lock, identity check, verified rows.

    Parameters
    ----------
    out : str or os.PathLike
        The results folder.
    config : DecodeConfig
    records : list of dict
        All prompt records (the shard's count is what the folder expects).
    identity : dict
        :func:`decode_identity` of the run.
    shard : str, pair of int or None
        ``"i/N"``; None: everything.
    meta : dict or None
        Provenance recorded in ``config.json``.

    Returns
    -------
    mdsd_ot._store.ResultsFolder
        Open for writing; close it (or use it as a context manager).
    """
    i, n = _shard(shard)
    info = {
        "config": {k: v for k, v in asdict(config).items() if k != "prompts"},
        "provenance": dict(meta or {}),
    }
    return _runs.open_folder(
        out, kind=KIND, identity=identity, shard=(i, n), expected=len(_mine(records, config, i, n)), info=info
    )


def _progress(total, initial, desc):
    return progress_bar(total, desc, initial)


def run_decode(
    target_model,
    draft_model,
    records,
    out,
    config: DecodeConfig | None = None,
    *,
    tokenizer=None,
    shard=None,
    progress: bool = True,
    identity: dict | None = None,
    meta: dict | None = None,
) -> Path:
    """Decode every prompt of this shard (resuming a folder that holds the same run) and write the report.

    Parameters
    ----------
    target_model, draft_model : transformers causal LMs sharing a tokenizer (None when nothing is left)
    records : list of dict
        Prompt records (:func:`mdsd_ot.study.load_prompts`; ``prompt_ids`` or text with a tokenizer).
    out : path or open ResultsFolder
    config : DecodeConfig
    shard : "i/N" or None
    identity : dict or None
        Default: :func:`decode_identity` of the in-memory models.
    """
    config = (config or DecodeConfig()).validate()
    records = list(records)
    check_record_ids(records)
    if target_model is not None and draft_model is not None:  # ids every model can read, up front
        check_token_ids(records, models_vocab(target_model, draft_model))

    def open_new():
        ident = identity
        if ident is None:
            ident = decode_identity(
                config,
                records,
                target=target_model,
                draft=draft_model,
                tokenizer=tokenizer,
                previous=(_store.peek_config(out) or {}).get("identity"),
            )
        return open_decode(out, config, records, identity=ident, shard=shard, meta=meta)

    with _runs.folder_for(out, open_new) as folder:
        i, n = _shard(folder.shard)
        mine, todo = _runs.remaining(folder, records, config.max_records)
        if todo:
            if target_model is None or draft_model is None:
                raise TypeError(f"{len(todo)} prompts are left to decode: pass the models")
            from .models import TreeLM

            tlm, dlm = TreeLM(target_model), TreeLM(draft_model)
            eos = getattr(tokenizer, "eos_token_id", None) if tokenizer is not None else None
            bar = _progress(len(mine), len(mine) - len(todo), f"decode {i}/{n}") if progress else None
            cells = config.temperatures if config.union else config.cells()
            counts = {"calls": 0, "tokens": 0}
            t_start = time.time()

            def compute(item):
                k, rec = item
                prompt, _ = record_ids(rec, tokenizer)
                lines = []
                for c, cell in enumerate(cells):
                    rng = np.random.default_rng([config.seed, k, c])
                    if config.union:
                        rows = decode_prompt_union(
                            tlm, dlm, prompt, config, cell, rng, eos=eos, record=rec["id"]
                        )
                    else:
                        rows = decode_prompt(tlm, dlm, prompt, config, cell, rng, eos=eos, record=rec["id"])
                    for row in rows:
                        lines.append(json.dumps(row))
                        if "emitted" in row:
                            counts["calls"] += 1
                            counts["tokens"] += row["emitted"]
                return rec["id"], lines

            def postfix():
                calls, dt = counts["calls"], max(time.time() - t_start, 1e-9)
                return {
                    "calls": calls,
                    "tokens_per_call": f"{counts['tokens'] / max(calls, 1):.2f}",
                    "calls_per_s": f"{calls / dt:.2f}",
                }

            _runs.run_records(folder, todo, compute, bar=bar, postfix=postfix)
        if n == 1:
            from .report import write_report

            write_report(folder.path)
    return folder.path


def run_shard(
    config: DecodeConfig, shard, out_dir, *, progress: bool = True, models=None, previous=None
) -> None:
    """Decode one shard ``"i/N"`` of ``config``'s prompts into ``out_dir``: a plain function for
    schedulers (Ray, Slurm, a shell loop). It loads the models itself, and resumes from the rows
    already in ``out_dir`` (same identity, else refused); merge the shards with :func:`merge`.

    ``models(config) -> (target, draft, tokenizer)`` replaces the loading (a per-process cache,
    :mod:`mdsd_ot.decode.job`); ``previous``, an identity recorded earlier for the same model files,
    skips re-hashing those unchanged (the folder's own recorded identity comes first).

    Parameters
    ----------
    config : DecodeConfig or dict
        The run (or a dict of its fields); ``ValueError`` without ``target`` and ``draft``.
    shard : str, pair of int or None
        ``"i/N"``; None: everything.
    out_dir : str or os.PathLike
        The shard's results folder.
    progress : bool
        Show a progress bar.
    models : callable or None
        ``models(config) -> (target, draft, tokenizer)``; None: load them with :func:`models_of`.
    previous : dict or None
        An identity recorded earlier for the same model files.
    """
    import sys

    config = (
        DecodeConfig(**asdict(config)).validate()
        if isinstance(config, DecodeConfig)
        else DecodeConfig(**config).validate()
    )
    if config.target is None or config.draft is None:
        raise ValueError("run_shard needs config.target and config.draft (model folders or hub names)")
    records = load_prompts(config.prompts)
    vocabs = [v for v in (model_vocab(config.target), model_vocab(config.draft)) if v is not None]
    if vocabs:  # local model folders: the ids are checked before any model is loaded or folder made
        check_token_ids(records, min(vocabs))
    previous = (_store.peek_config(out_dir) or {}).get("identity") or previous
    identity = decode_identity(
        config,
        records,
        target=config.target,
        draft=config.draft,
        tokenizer=config.tokenizer,
        previous=previous,
    )
    meta = {"target": config.target, "draft": config.draft, "prompts": str(config.prompts), "argv": sys.argv}
    with open_decode(out_dir, config, records, identity=identity, shard=shard, meta=meta) as folder:
        i, n = _shard(folder.shard)
        left = [r for _, r in _mine(records, config, i, n) if r["id"] not in folder.done]
        target = draft = tok = None
        if left and models is not None:
            target, draft, tok = models(config)
        elif left:
            target, draft, tok = models_of(config)
        run_decode(target, draft, records, folder, config, tokenizer=tok, progress=progress)


def merge(sources, dest, *, title: str = "mdsd_ot tree decoding (merged)", cost_ratio=None) -> Path:
    """Combine decode folders (shards, resumed runs) of one identity into ``dest`` and write its report
    (``mdsd-ot merge`` on decode folders).

    The same rules as the study's merge (:func:`mdsd_ot._store.merge_folders`): ``dest`` may not be
    a source nor the folder of a run (``StoreError``); sources of different identities are refused
    naming each difference (``IdentityMismatch``), so are study folders; missing shards, damaged or
    unfinished records and sources still being written are warned about; a record present in several
    sources is kept once (first wins); copies of a record that differ only in their timings
    (:data:`TIMING_FIELDS`) are the same rows. ``cost_ratio`` as in :func:`.report.write_report`;
    without it, a ratio every source's summary was written with (``--cost-ratio`` on every shard)
    is kept, else the merged rows' measured one.

    Parameters
    ----------
    sources : iterable of path
        Decode folders of one identity.
    dest : str or os.PathLike
        Folder to write.
    title : str
        Heading of the merged ``summary.md``.
    cost_ratio : float or None
        Draft/target forward cost ratio of the report.

    Returns
    -------
    pathlib.Path
        ``dest``.
    """
    from .report import check_cost_ratio, given_cost_ratio, write_report

    cost_ratio = check_cost_ratio(cost_ratio)  # before anything is written
    dest = Path(dest)
    if cost_ratio is None:
        cost_ratio = given_cost_ratio(sources)
    _store.merge_folders(
        sources,
        dest,
        kind=KIND,
        finalize=lambda d: write_report(d, title=title, cost_ratio=cost_ratio),
        ignore_fields=TIMING_FIELDS,
    )
    return dest

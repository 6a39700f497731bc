"""Running a study: identity, resume, sharding and merge, on the runs wing (:mod:`mdsd_ot.runs`) and
the storage layer :mod:`mdsd_ot._store`."""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path

from .. import _store
from ..runs import runner as _runs
from ..runs.identity import identify as _identify
from ..runs.identity import model_identity, prompts_identity, tokenizer_identity  # noqa: F401
from ..runs.inputs import check_record_ids as _check_record_ids
from ..runs.inputs import check_token_ids as _check_token_ids
from ..runs.inputs import models_vocab as _models_vocab
from ..runs.inputs import record_ids as _record_ids
from ..runs.shards import parse_shard as _parse_shard
from ..runs.shards import progress as _progress
from ..runs.shards import shard_records
from .collection import sample_continuation, teacher_forcing_logits
from .config import StudyConfig
from .evaluation import evaluate_rows
from .report import write_report


def _shard_records(records, config: StudyConfig, i_shard: int, n_shard: int) -> list:
    """The records of one shard: index ``i`` mod ``N`` among the first ``max_records``."""
    return [r for _, r in shard_records(records, config.max_records, i_shard, n_shard)]


def remaining_records(folder: _store.ResultsFolder, records, config: StudyConfig) -> tuple:
    """(records of the folder's shard, those not finished yet) for an open study folder."""
    mine, todo = _runs.remaining(folder, records, config.max_records)
    return [r for _, r in mine], [r for _, r in todo]


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
        A tokenizer identified as the target itself (``--tokenizer`` spelling out the target) is
        recorded as ``None`` too: the identity stores what an option resolves to, so a resume or merge
        that spells out a default is the same study.
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
    target_id = _identify(target, "target", prev.get("target"))
    tokenizer_id = _identify(tokenizer, "tokenizer", prev.get("tokenizer") or prev.get("target"))
    if (
        tokenizer_id is not None
        and target_id is not None
        and tokenizer_id.get("digest") == target_id.get("digest")
    ):
        tokenizer_id = None  # the target's own files, spelled out: what the default resolves to
    ident = {
        "target": target_id,
        "draft": _identify(draft, "draft", prev.get("draft")),
        "tokenizer": tokenizer_id,
        "dtype": dtype,
        "prompts": prompts_identity(records, prompts),
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
    return _runs.open_folder(
        out,
        kind="study",
        identity=identity,
        shard=(i_shard, n_shard),
        expected=len(_shard_records(records, config, i_shard, n_shard)),
        info=info,
    )


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
    if target_model is not None and draft_model is not None:  # ids every model can read, up front
        _check_token_ids(records, _models_vocab(target_model, draft_model))
    if isinstance(out, _store.ResultsFolder):
        if shard is not None and "{}/{}".format(*_parse_shard(shard)) != out.shard:
            raise ValueError(f"shard {shard} does not match the open folder's shard {out.shard}")

    def open_new():
        return open_study(
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

    with _runs.folder_for(out, open_new) as folder:
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
    return folder.path


def _compute(target_model, draft_model, records, todo, folder, config, tokenizer, bar) -> None:
    """Evaluate the ``todo`` records and append each one's rows to ``folder`` when it is done."""
    from ..backends.torch import to_distribution

    index = {r["id"]: k for k, r in enumerate(records)}
    eos = getattr(tokenizer, "eos_token_id", None) if tokenizer is not None else None
    check = config.bound_backend == "auto"
    done = {"positions": 0}
    t_start = time.time()

    def compute(rec):
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
                        json.dumps({"record": rec["id"], "pos": j, "token": int(b[j]), "T": float(T), **v})
                    )
                del P, Q
            del lt, ld
        done["positions"] += len(b)
        return rec["id"], lines

    def postfix():
        rate = done["positions"] / max(time.time() - t_start, 1e-9)
        return {"positions": done["positions"], "pos_per_s": f"{rate:.2f}"}

    _runs.run_records(folder, todo, compute, bar=bar, postfix=postfix)


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

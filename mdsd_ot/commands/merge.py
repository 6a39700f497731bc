"""``mdsd-ot merge``: combine results folders (shards, resumed runs) of a study or of a tree-decoding
run into one folder with its report. The kind is read from the sources' ``config.json``."""

from __future__ import annotations

HELP = "merge study or decode shard folders into one folder with summary tables and plots"

#: Default report title per folder kind.
TITLES = {"study": "mdsd_ot study (merged)", "decode": "mdsd_ot tree decoding (merged)"}


def add_arguments(parser):
    parser.add_argument(
        "sources", nargs="+", help="folders written by 'mdsd-ot study' or by 'mdsd-ot decode' (one kind)"
    )
    parser.add_argument("--out", required=True, help="destination folder")
    parser.add_argument(
        "--title",
        default=None,
        help="report title (default: 'mdsd_ot study (merged)' or 'mdsd_ot tree decoding (merged)')",
    )
    parser.add_argument(
        "--cost-ratio",
        type=float,
        default=None,
        help="decode folders: draft/target forward cost for the speedup model (default: measured)",
    )


def _kind(folder) -> str:
    """The kind of results folder ``folder`` is (``StoreError`` naming it if it is not one)."""
    from .. import _store

    return _store.read_config(folder).get("kind") or "study"


def run(args) -> int:
    from .. import _store

    kind = _kind(args.sources[0])  # every source must be of this kind: merge_folders checks it
    if kind not in TITLES:
        raise ValueError(f"{args.sources[0]} holds a {kind!r} folder; mdsd-ot merge combines {list(TITLES)}")
    title = TITLES[kind] if args.title is None else args.title
    with _store.one_line_warnings("mdsd-ot merge"):
        if kind == "decode":
            from ..decode import merge

            dest = merge(args.sources, args.out, title=title, cost_ratio=args.cost_ratio)
        else:
            if args.cost_ratio is not None:
                raise ValueError("--cost-ratio applies to decode folders only (a study has no speedup model)")
            from ..study import merge

            dest = merge(args.sources, args.out, title=title)
    print((dest / "summary.md").read_text(encoding="utf-8"))
    print(f"merged {len(args.sources)} {kind} folders into {dest}")
    return 0

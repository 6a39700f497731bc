"""``mdsd-ot merge``: combine study folders (shards, resumed runs) into one report."""

from __future__ import annotations

HELP = "merge study shard folders into one folder with summary tables and plots"


def add_arguments(parser):
    parser.add_argument("sources", nargs="+", help="study folders written by 'mdsd-ot study'")
    parser.add_argument("--out", required=True, help="destination folder")
    parser.add_argument("--title", default="mdsd_ot study (merged)", help="report title")


def run(args) -> int:
    from .. import _store
    from ..study import merge

    with _store.one_line_warnings("mdsd-ot merge"):
        dest = merge(args.sources, args.out, title=args.title)
    print((dest / "summary.md").read_text())
    print(f"merged {len(args.sources)} folders into {dest}")
    return 0

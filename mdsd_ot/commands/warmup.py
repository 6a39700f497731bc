"""``mdsd-ot warmup``: compile every numba kernel family now (:func:`mdsd_ot.warmup`)."""

from __future__ import annotations

HELP = "compile every kernel family now (a few minutes, once per installation), with progress"


def add_arguments(parser):
    from .._compile import FAMILIES

    parser.add_argument(
        "--families",
        default=None,
        metavar="LIST",
        help=f"comma-separated, of {', '.join(FAMILIES)} (default: all)",
    )
    parser.add_argument(
        "--list",
        action="store_true",
        help="compile nothing: list the families, their cost and whether cached",
    )


def run(args) -> int:
    import sys

    from ..warmup import warmup

    results = warmup(args.families, dry_run=args.list, file=sys.stderr)
    if args.list:
        width = max(len(r.family) for r in results)
        print(f"{'family'.ljust(width)}  {'cached':6}  estimate (s)")
        for r in results:
            print(f"{r.family.ljust(width)}  {'yes' if r.cached else 'no':6}  {r.estimate}")
    return 0

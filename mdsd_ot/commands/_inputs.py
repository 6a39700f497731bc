"""Arguments and input loading shared by ``mdsd-ot bound`` and ``mdsd-ot compare``."""

from __future__ import annotations

from ..drafts import SCHEMES

INPUT_HELP = (
    'file with p and q (.npz with arrays p and q; .json object {"p": [...], "q": [...]} or [[p], [q]]; '
    ".npy of shape (2, V); text with two lines), or two files, one distribution each "
    "(.npy, .json list, or text of numbers separated by spaces/commas)"
)


def add_input_arguments(parser) -> None:
    parser.add_argument("inputs", nargs="+", metavar="FILE", help=INPUT_HELP)
    parser.add_argument("--n", type=int, default=2, help="number of drafts (default 2)")
    parser.add_argument(
        "--normalize", action="store_true", help="rescale p and q to sum to one instead of rejecting them"
    )
    parser.add_argument("--json", action="store_true", help="print machine-readable JSON instead of a table")


def load_inputs(args):
    """``(p, q)`` from ``args.inputs`` (one or two files)."""
    from ..io import load_pair

    if len(args.inputs) > 2:
        raise ValueError(f"expected one file (p and q) or two files (p, then q); got {len(args.inputs)}")
    return load_pair(*args.inputs)


def parse_samplings(text: str) -> list[str]:
    """Comma-separated scheme names or aliases (any case), or ``all``; canonical names, no repeats."""
    from .._validate import choices_text
    from ..drafts import SCHEME_ALIASES, get_scheme

    if text.strip().lower() == "all":
        return list(SCHEMES)
    names = [get_scheme(s.strip()).name for s in text.split(",") if s.strip()]
    if not names:
        raise ValueError(f"no sampling given; choose from {choices_text(SCHEMES, SCHEME_ALIASES)} or 'all'")
    return list(dict.fromkeys(names))

"""Arguments and input loading shared by ``mdsd-ot bound`` and ``mdsd-ot compare``."""

from __future__ import annotations

import argparse
import sys

from ..drafts import SCHEMES

INPUT_HELP = (
    'file with p and q (.npz with arrays p and q; .json object {"p": [...], "q": [...]} or [[p], [q]]; '
    ".npy of shape (2, V); text with two lines), or two files, one distribution each "
    "(.npy, .json list, or text of numbers separated by spaces/commas)"
)


def add_input_arguments(parser) -> None:
    parser.add_argument("inputs", nargs="*", metavar="FILE", help=INPUT_HELP + "; or use --p and --q")
    parser.add_argument(
        "--p",
        default=None,
        metavar="LIST",
        help="target distribution inline, e.g. --p 0.5,0.3,0.2 (logits: --p=-1,2) (default: read FILE)",
    )
    parser.add_argument(
        "--q",
        default=None,
        metavar="LIST",
        help="draft distribution inline, e.g. --q 0.2,0.3,0.5 (default: read FILE)",
    )
    parser.add_argument("--n", type=int, default=2, help="number of drafts (default 2)")
    parser.add_argument(
        "--normalize", action="store_true", help="rescale p and q to sum to one instead of rejecting them"
    )
    group = parser.add_argument_group(
        "logits in (mdsd_ot.to_distribution: temperature, then top-k, then top-p, then a float64 softmax)"
    )
    group.add_argument(
        "--logits", action="store_true", help="the inputs are logits (any real numbers), not probabilities"
    )
    group.add_argument(
        "--temperature",
        type=float,
        default=None,
        help="T > 0 applied to both inputs (logits / T; probabilities: p**(1/T) renormalised) (default: 1)",
    )
    group.add_argument("--top-k", type=int, default=None, help="keep the k most likely tokens (default: all)")
    group.add_argument(
        "--top-p", type=float, default=None, help="keep the smallest nucleus of mass >= top-p (default: all)"
    )
    parser.add_argument("--json", action="store_true", help="print machine-readable JSON instead of a table")


def _inline(text: str, name: str):
    """Numbers separated by commas or spaces (``--p``/``--q``)."""
    import numpy as np

    parts = [x for x in text.replace(",", " ").split() if x]
    try:
        values = np.array([float(x) for x in parts])
    except ValueError:
        raise ValueError(f"--{name} must be numbers separated by commas, got {text!r}") from None
    if values.size == 0:
        raise ValueError(f"--{name} is empty; give the probabilities, e.g. --{name} 0.5,0.5")
    return values


def load_inputs(args):
    """``(p, q)`` from ``args.inputs`` (one or two files) or ``--p/--q``, converted from logits (and
    by temperature, top-k and top-p) when asked."""
    from ..io import load_pair

    inline = getattr(args, "p", None) is not None or getattr(args, "q", None) is not None
    if inline:
        if args.inputs:
            raise ValueError("give p and q either as FILE(s) or with --p/--q, not both")
        if args.p is None or args.q is None:
            raise ValueError("--p and --q go together; give both")
        p, q = _inline(args.p, "p"), _inline(args.q, "q")
    elif not args.inputs:
        raise ValueError("give p and q: a FILE (or two), or --p 0.5,0.3,0.2 --q 0.2,0.3,0.5")
    elif len(args.inputs) > 2:
        raise ValueError(f"expected one file (p and q) or two files (p, then q); got {len(args.inputs)}")
    else:
        p, q = load_pair(*args.inputs)
    return _converted(args, p, q)


def _converted(args, p, q):
    logits = getattr(args, "logits", False)
    T, k, top = (getattr(args, a, None) for a in ("temperature", "top_k", "top_p"))
    if not logits and T is None and k is None and top is None:
        return p, q
    from .._validate import check_pair
    from ..logits import to_distribution

    if len(p) != len(q):  # the shape first, before any conversion
        check_pair(p, q)
    kind = "logits" if logits else "probs"
    normalize = bool(getattr(args, "normalize", False))
    options = dict(temperature=1.0 if T is None else T, top_k=k, top_p=top, kind=kind, normalize=normalize)
    out = []
    for x, name in ((p, "p"), (q, "q")):
        try:
            out.append(to_distribution(x, **options))
        except ValueError as exc:
            raise ValueError(f"{name}: {exc}") from None
    return out[0], out[1]


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


class _RenamedOption(argparse.Action):
    """An option's old name: stores its value as the new one does and says once, on stderr, which
    name replaces it (``const``)."""

    def __call__(self, parser, namespace, values, option_string=None):
        print(
            f"{parser.prog}: {option_string} is deprecated; use {self.const} (same values)", file=sys.stderr
        )
        setattr(namespace, self.dest, values)


def add_sampling_list(parser, *, default: str, what: str) -> None:
    """``--sampling LIST`` (comma-separated draft schemes, the registry's names in its help), stored as
    ``args.schemes``; ``--schemes``, its name before the options were unified, is still accepted."""
    parser.add_argument(
        "--sampling",
        dest="schemes",
        default=default,
        metavar="LIST",
        help=f"{what}, comma-separated, of {', '.join(SCHEMES)} (default: {default})",
    )
    parser.add_argument(
        "--schemes",
        dest="schemes",
        action=_RenamedOption,
        const="--sampling",
        default=argparse.SUPPRESS,
        help="deprecated name of --sampling (same values, same default)",
    )

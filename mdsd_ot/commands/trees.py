"""``mdsd-ot trees``: every valid tree verifier against the exact optimum (toy models or laws from a file)."""

from __future__ import annotations

import sys

from .._config import (
    TREE_COMPARE_MAX_TREES,
    TREE_NOTE_SECONDS,
    TREE_OPTIMUM_MAX_CLASSES,
    TREE_OPTIMUM_MAX_COLUMNS,
    TREE_SECONDS_PER_COLUMN,
    TREE_SECONDS_PER_TREE,
)

HELP = "exact tokens per call of every valid tree verifier against the optimum over all of them (toy models)"

LAWS_HELP = (
    'JSON file {"target": {context: law}, "draft": {context: law}}: a context is its token ids joined '
    'by commas ("" the empty one, "0,2"), "*" the law at every context not listed; replaces the toy models'
)


def add_arguments(parser):
    parser.add_argument(
        "--shape", default="2,1", help="tree shape: 'KxL' chains or 'b1,b2,...' (default 2,1)"
    )
    parser.add_argument(
        "--sampling",
        default="with_replacement",
        help="draft scheme: with_replacement, without_replacement, greedy, hub, conditional_poisson, top_n "
        "(default with_replacement)",
    )
    parser.add_argument(
        "--verifiers", default=None, help="comma-separated verifier names (default: every valid one)"
    )
    # the toy models' options default to None, so that one given with --laws is refused, not ignored
    parser.add_argument("--vocab", type=int, default=None, help="toy models: vocabulary size (default 3)")
    parser.add_argument("--seed", type=int, default=None, help="toy models: seed of their laws (default 0)")
    parser.add_argument(
        "--temperature",
        type=float,
        default=None,
        help="toy models: the draft's temperature relative to the target's logits (default 1.0)",
    )
    parser.add_argument(
        "--noise",
        type=float,
        default=None,
        help="toy models: scale of the noise added to the target's logits for the draft (default 1.0)",
    )
    parser.add_argument("--laws", default=None, metavar="FILE", help=LAWS_HELP + " (default: the toy models)")
    parser.add_argument(
        "--max-classes",
        type=int,
        default=TREE_OPTIMUM_MAX_CLASSES,
        metavar="N",
        help="refuse more path-set classes of drafted trees than this (the LP's tree blocks; default "
        "%(default)s)",
    )
    parser.add_argument(
        "--max-trees",
        type=int,
        default=TREE_COMPARE_MAX_TREES,
        metavar="N",
        help="refuse more ordered drafted trees than this (each verifier runs on each; default %(default)s)",
    )
    parser.add_argument(
        "--max-columns",
        type=int,
        default=TREE_OPTIMUM_MAX_COLUMNS,
        metavar="N",
        help="refuse a causal LP of more columns than this (default %(default)s)",
    )
    parser.add_argument("--json", action="store_true", help="print machine-readable JSON instead of a table")


def run(args) -> int:
    import json

    from ..trees.compare import compare_tree
    from ..trees.enumerate import laws_from_json, toy_models

    for flag, value in (("--max-classes", args.max_classes), ("--max-trees", args.max_trees)):
        if value < 1:
            raise ValueError(f"{flag} must be >= 1, got {value}")
    if args.max_columns < 1:
        raise ValueError(f"--max-columns must be >= 1, got {args.max_columns}")
    _check_fixed_n(args.shape, args.sampling)
    toy = {
        "--vocab": args.vocab,
        "--seed": args.seed,
        "--temperature": args.temperature,
        "--noise": args.noise,
    }
    if args.laws is not None:
        given = [flag for flag, value in toy.items() if value is not None]
        if given:
            raise ValueError(
                f"{', '.join(given)} {'sets' if len(given) == 1 else 'set'} the toy models, which --laws "
                f"replaces; drop {'it' if len(given) == 1 else 'them'} (the vocabulary is the length of "
                f"the file's laws)"
            )
        payload = _read_laws(args.laws)
        target, draft = laws_from_json(payload, source=args.laws)
        _check_reach(target, draft, args)
        vocab, support, target_support = _file_vocab(payload)
        source = f"laws from {args.laws}"
    else:
        args.vocab = 3 if args.vocab is None else args.vocab
        args.seed = 0 if args.seed is None else args.seed
        args.temperature = 1.0 if args.temperature is None else args.temperature
        args.noise = 1.0 if args.noise is None else args.noise
        target, draft = toy_models(args.vocab, args.seed, args.temperature, args.noise)
        vocab = support = target_support = args.vocab
        source = (
            f"toy models: V = {args.vocab}, seed {args.seed}, draft temperature {args.temperature:g}, "
            f"noise {args.noise:g}"
        )
    _check_size(args, vocab, support, target_support)
    table = compare_tree(
        target,
        draft,
        args.shape,
        args.sampling,
        verifiers=args.verifiers,
        max_classes=args.max_classes,
        max_trees=args.max_trees,
    )
    if args.json:
        out = json.loads(table.to_json())
        out["models"] = source
        print(json.dumps(out))
    else:
        print(source)
        print(table)
    return 0


def _read_laws(path) -> dict:
    """The JSON of a laws file; a key twice in one object is refused (``json`` keeps the last)."""
    import json

    def pairs(items):
        seen = {}
        for key, value in items:
            if key in seen:
                raise ValueError(f"{path}: key {key!r} appears twice in one object; keep one")
            seen[key] = value
        return seen

    with open(path, encoding="utf-8") as f:
        try:
            return json.load(f, object_pairs_hook=pairs)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}: not valid JSON ({exc})") from None
        except RecursionError:
            raise ValueError(f"{path}: cannot be read (nested too deeply)") from None


def _check_reach(target, draft, args) -> None:
    """Refuse a laws file that lists a context no drafted tree of the shape can reach (a typo, a law
    meant for another shape): it would be silently ignored."""
    from ..trees.enumerate import unreachable_contexts

    bad = unreachable_contexts(target, draft, args.shape, args.sampling)
    if bad:
        name, key, why = bad[0]
        more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
        raise ValueError(
            f'{args.laws}: "{name}" context {key!r} cannot occur: {why}{more}; remove it or use the '
            f"shape it was written for"
        )


def _file_vocab(payload) -> tuple:
    """``(V, draft support, target support)`` of a laws file: its vocabulary (the length of its laws)
    and the most tokens any one draft (target) law gives positive probability."""
    vocab, support = 0, {}
    for name in ("target", "draft"):
        support[name] = 0
        for law in payload[name].values():
            if isinstance(law, list):
                vocab = max(vocab, len(law))
                positive = sum(1 for x in law if isinstance(x, (int, float)) and x > 0)
                support[name] = max(support[name], positive)
    return vocab, support["draft"], support["target"]


def _check_size(args, vocab: int, support: int, target_support: int) -> None:
    """Estimate the work before any law is read (:func:`mdsd_ot.trees.estimate_tree_size`): refuse what
    is over a limit, note on stderr what will take a while.

    The estimate counts every token of positive probability at every context (``support`` of them):
    exact for the toy models, an upper bound for a file whose laws have smaller supports, so a
    refusal names the flag that lets the enumeration count the real classes."""
    from ..trees.enumerate import estimate_tree_size
    from ..trees.shape import parse_shape

    shape = parse_shape(args.shape)
    vocab = max(vocab, 2)  # a smaller file is refused by the laws' own checks
    size = estimate_tree_size(
        shape,
        args.sampling,
        vocab,
        draft_support=min(max(support, 1), vocab),
        target_support=min(max(target_support, 1), vocab),
    )
    exact = args.laws is None
    where = f"shape {shape.label} under {args.sampling!r} at V = {vocab}"
    hedge = "" if exact else " at most (if every law of the file had the largest support of any)"

    def too_many(what, count, flag, limit, advice):
        raise ValueError(
            f"{where}: {count:,} {what}{hedge}, more than {flag} {limit:,}; {advice}, or raise {flag} "
            f"if you can afford it"
        )

    smaller = "use a smaller --vocab or --shape" if exact and vocab > 2 else "use a smaller --shape"
    if size.classes > args.max_classes:
        too_many(
            "path-set classes of drafted trees",
            size.classes,
            "--max-classes",
            args.max_classes,
            smaller + _fitting_schemes(shape, args.sampling, vocab, support, args.max_classes),
        )
    if size.lp_columns > args.max_columns:
        too_many("causal-LP columns", size.lp_columns, "--max-columns", args.max_columns, smaller)
    if size.ordered_trees > args.max_trees:
        too_many("ordered drafted trees", size.ordered_trees, "--max-trees", args.max_trees, smaller)
    seconds = size.lp_columns * TREE_SECONDS_PER_COLUMN + size.ordered_trees * TREE_SECONDS_PER_TREE
    if seconds > TREE_NOTE_SECONDS:
        print(
            f"mdsd-ot trees: note: {where}: {_count(size.classes, 'path-set class')}, "
            f"{_count(size.lp_columns, 'LP column')}, {_count(size.ordered_trees, 'ordered tree')}{hedge}: "
            f"roughly {seconds:.0f} s of CPU",
            file=sys.stderr,
            flush=True,
        )


def _fitting_schemes(shape, scheme: str, vocab: int, support: int, limit: int) -> str:
    """``", or --sampling X (N classes)"`` for the other schemes under the limit (never ``scheme``)."""
    from ..trees.enumerate import _SCHEME_FIT_ORDER, estimate_tree_size

    fits = []
    for name in _SCHEME_FIT_ORDER:
        if name == scheme:
            continue
        try:
            n = estimate_tree_size(shape, name, vocab, draft_support=min(max(support, 1), vocab)).classes
        except ValueError:
            continue
        if n <= limit:
            fits.append(f"{name} ({_count(n, 'class')})")
    return f", or --sampling {' / '.join(fits)}" if fits else ""


def _count(n: int, what: str) -> str:
    """``"1 class"``, ``"2,400 classes"``."""
    if n == 1:
        return f"1 {what}"
    return f"{n:,} {what}{'es' if what.endswith('s') else 's'}"


def _check_fixed_n(shape, sampling) -> None:
    """A scheme with a fixed number of drafts (hub: 2) drafts that many children at every depth: say
    which depth of ``shape`` has another branching (instead of the scheme's "got n=1")."""
    from ..drafts import get_scheme
    from ..trees.shape import parse_shape

    scheme, tree = get_scheme(sampling), parse_shape(shape)
    fixed = scheme.fixed_n
    bad = [(d, b) for d, b in enumerate(tree.branching, 1) if fixed is not None and b != fixed]
    if bad:
        d, b = bad[0]
        raise ValueError(
            f"the {scheme.name!r} scheme drafts exactly {fixed} children per node, but tree {shape} "
            f"(branching {','.join(map(str, tree.branching))}) has {b} per node at depth {d}; use "
            f"{','.join([str(fixed)] * tree.depth)} or another --sampling"
        )

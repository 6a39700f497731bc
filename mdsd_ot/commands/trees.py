"""``mdsd-ot trees``: every valid tree verifier against the exact optimum (toy models or laws from a file)."""

from __future__ import annotations

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
    parser.add_argument("--vocab", type=int, default=3, help="toy models: vocabulary size (default 3)")
    parser.add_argument("--seed", type=int, default=0, help="toy models: seed of their laws (default 0)")
    parser.add_argument(
        "--temperature",
        type=float,
        default=1.0,
        help="toy models: the draft's temperature relative to the target's logits (default 1.0)",
    )
    parser.add_argument(
        "--noise",
        type=float,
        default=1.0,
        help="toy models: scale of the noise added to the target's logits for the draft (default 1.0)",
    )
    parser.add_argument("--laws", default=None, metavar="FILE", help=LAWS_HELP + " (default: the toy models)")
    parser.add_argument("--json", action="store_true", help="print machine-readable JSON instead of a table")


def run(args) -> int:
    import json

    from ..trees.compare import compare_tree
    from ..trees.enumerate import laws_from_json, toy_models

    if args.laws is not None:
        with open(args.laws, encoding="utf-8") as f:
            try:
                payload = json.load(f)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{args.laws}: not valid JSON ({exc})") from None
        target, draft = laws_from_json(payload)
        source = f"laws from {args.laws}"
    else:
        target, draft = toy_models(args.vocab, args.seed, args.temperature, args.noise)
        source = (
            f"toy models: V = {args.vocab}, seed {args.seed}, draft temperature {args.temperature:g}, "
            f"noise {args.noise:g}"
        )
    _check_fixed_n(args.shape, args.sampling)
    table = compare_tree(target, draft, args.shape, args.sampling, verifiers=args.verifiers)
    if args.json:
        out = json.loads(table.to_json())
        out["models"] = source
        print(json.dumps(out))
    else:
        print(source)
        print(table)
    return 0


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

"""``mdsd-ot bound``: the optimal acceptance rate alpha* for a target/draft pair read from files."""
from __future__ import annotations

import json

from ._inputs import add_input_arguments, load_inputs, parse_samplings

HELP = "optimal acceptance rate alpha* of n-draft speculative decoding for p and q read from files"


def add_arguments(parser):
    add_input_arguments(parser)
    parser.add_argument(
        "--sampling",
        default="with_replacement",
        help="draft scheme(s), comma-separated, or 'all' (default with_replacement); one of "
        "with_replacement, without_replacement, greedy, hub, conditional_poisson",
    )
    parser.add_argument(
        "--method", default="auto", help="solver: auto, dual, lp, cvxpy or bruteforce (default auto)"
    )


def run(args) -> int:
    from .. import optimal_acceptance
    from .._validate import check_pair

    p, q = load_inputs(args)
    p, q = check_pair(p, q, normalize=args.normalize)
    results = [
        optimal_acceptance(p, q, args.n, sampling=s, method=args.method)
        for s in parse_samplings(args.sampling)
    ]
    if args.json:
        out = {
            "n": args.n,
            "V": int(p.size),
            "results": [
                {
                    "sampling": r.sampling,
                    "value": r.value,
                    "subset": r.subset.tolist(),
                    "method": r.method,
                    "success": r.success,
                    "message": r.message,
                }
                for r in results
            ],
        }
        print(json.dumps(out))
    else:
        print(f"n = {args.n} drafts, V = {p.size} tokens")
        width = max(len(r.sampling) for r in results)
        for r in results:
            subset = r.subset.tolist()
            shown = subset if len(subset) <= 12 else subset[:12] + ["..."]
            print(
                f"{r.sampling.ljust(width)}  alpha* = {r.value:.9f}  ({r.method}; {r.message}; "
                f"|H| = {len(subset)}, H = {shown})"
            )
    return 0 if all(r.success for r in results) else 1

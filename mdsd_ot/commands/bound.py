"""``mdsd-ot bound``: the optimal acceptance rate alpha* for a target/draft pair read from files."""

from __future__ import annotations

import json

from ._inputs import add_input_arguments, load_inputs, parse_samplings

HELP = "optimal acceptance rate alpha* of n-draft speculative decoding for p and q read from files"


def add_arguments(parser):
    from ..api import METHOD_ALIASES, METHODS
    from ..drafts import SCHEME_ALIASES, SCHEMES

    add_input_arguments(parser)
    parser.add_argument(
        "--sampling",
        default="with_replacement",
        help=f"draft scheme(s), comma-separated, or 'all'; one of {', '.join(SCHEMES)} (aliases: "
        + ", ".join(f"{a} = {t}" for a, t in SCHEME_ALIASES.items())
        + "; any case); 'all' skips the schemes that cannot run for this n (hub needs n = 2) with a note",
    )
    parser.add_argument(
        "--method",
        default="auto",
        help=f"solver: {', '.join(METHODS)} ("
        + ", ".join(f"{a} = {t}" for a, t in METHOD_ALIASES.items())
        + ")",
    )


def run(args) -> int:
    from .. import METHODS, optimal_acceptance
    from .._validate import check_choice, check_n, check_pair
    from ..api import METHOD_ALIASES

    p, q = load_inputs(args)
    p, q = check_pair(p, q, normalize=args.normalize)
    check_n(args.n)
    method = check_choice(args.method, "method", METHODS, METHOD_ALIASES)
    every = args.sampling.strip().lower() == "all"
    results, skipped = [], []
    for s in parse_samplings(args.sampling):
        try:
            results.append(optimal_acceptance(p, q, args.n, sampling=s, method=method))
        except ValueError as exc:
            if not every:  # a scheme named explicitly must run
                raise
            skipped.append((s, " ".join(str(exc).split())))
    if not results:
        raise ValueError("no draft scheme can run: " + "; ".join(f"{s}: {why}" for s, why in skipped))
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
                    "status": r.status,
                    "message": r.message,
                }
                for r in results
            ],
            "skipped": [{"sampling": s, "reason": why} for s, why in skipped],
        }
        print(json.dumps(out))
    else:
        print(f"n = {args.n} drafts, V = {p.size} tokens")
        width = max(len(r.sampling) for r in results)
        for r in results:
            subset = r.subset.tolist()
            if len(subset) <= 12:
                shown = "[" + ", ".join(map(str, subset)) + "]"
            else:
                shown = (
                    "["
                    + ", ".join(map(str, subset[:12]))
                    + f", ...] (12 of {len(subset)} shown; --json: all)"
                )
            # success only says that H attains the value (an upper bound on alpha*), not optimality
            status = "value attained by H, re-checked" if r.success else r.message
            print(
                f"{r.sampling.ljust(width)}  alpha* = {r.value:.9f}  ({r.method}; {status}; "
                f"|H| = {len(subset)}, H = {shown})"
            )
        for s, why in skipped:
            print(f"skipped {s}: {why}")
    return 0 if all(r.success for r in results) else 1

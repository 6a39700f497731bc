"""``mdsd-ot compare``: published verifiers against the optimal acceptance of their draft scheme."""

from __future__ import annotations

from ._inputs import add_input_arguments, load_inputs

HELP = "acceptance of published verifiers (naive, rrs, spectr, ...) against the optimal bound"


def add_arguments(parser):
    from ..verifiers import ALIASES, DEFAULT_SAMPLES, VERIFIERS

    add_input_arguments(parser)
    parser.add_argument(
        "--verifiers",
        default=None,
        help="comma-separated verifier names (default: every verifier that can run); from "
        + ", ".join(VERIFIERS)
        + " (aliases: "
        + ", ".join(f"{a} = {t}" for a, t in ALIASES.items())
        + "; any case)",
    )
    parser.add_argument(
        "--sampling",
        default=None,
        help="run every verifier under this draft scheme (only those valid for it) "
        "(default: each verifier's own scheme)",
    )
    parser.add_argument(
        "--samples",
        type=int,
        default=None,
        help=f"Monte Carlo draft tuples (>= 2) where no exact formula applies (default: {DEFAULT_SAMPLES})",
    )
    parser.add_argument("--seed", type=int, default=0, help="Monte Carlo seed (default 0)")


def run(args) -> int:
    from ..compare import compare
    from ..verifiers import DEFAULT_SAMPLES

    p, q = load_inputs(args)
    table = compare(
        p,
        q,
        args.n,
        verifiers=args.verifiers,
        sampling=args.sampling,
        samples=args.samples if args.samples is not None else DEFAULT_SAMPLES,
        rng=args.seed,
        normalize=args.normalize,
    )
    print(table.to_json() if args.json else str(table))
    return 0

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
    group = parser.add_argument_group(
        "truncated logprobs (mdsd_ot.optimal_acceptance_top_k: alpha* of every completion lies in "
        "[lower, upper])"
    )
    group.add_argument(
        "--top-k-logprobs",
        nargs=2,
        default=None,
        metavar=("TARGET_JSON", "DRAFT_JSON"),
        help="two responses of an OpenAI-compatible server for the same text, the target's then the draft's "
        "(chat: choices[0].logprobs.content[i].top_logprobs; completions: choices[0].logprobs.top_logprobs); "
        "tokens are matched by their text, position by position; prints [lower, upper] per position and a "
        "summary (sampling: with_replacement, without_replacement or all) (default: read FILE or --p/--q)",
    )
    group.add_argument(
        "--vocab-size",
        type=int,
        default=None,
        help="with --top-k-logprobs: the vocabulary size the missing masses spread over (default: any size)",
    )


def run(args) -> int:
    from .. import METHODS, optimal_acceptance
    from .._validate import check_choice, check_n, check_pair
    from ..api import METHOD_ALIASES

    if args.top_k_logprobs is not None:
        return _run_top_k(args)
    if args.vocab_size is not None:
        raise ValueError("--vocab-size goes with --top-k-logprobs")
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


def _run_top_k(args) -> int:
    """``--top-k-logprobs TARGET DRAFT``: bounds per position from two logprob responses."""
    import math

    from .._validate import check_n
    from ..top_k import TOP_K_SAMPLINGS, optimal_acceptance_top_k, read_top_logprobs

    clash = [
        flag
        for flag, given in (
            ("FILE", bool(args.inputs)),
            ("--p/--q", args.p is not None or args.q is not None),
            ("--logits", args.logits),
            ("--temperature", args.temperature is not None),
            ("--top-k", args.top_k is not None),
            ("--top-p", args.top_p is not None),
            ("--normalize", args.normalize),
            ("--method", args.method != "auto"),
        )
        if given
    ]
    if clash:
        raise ValueError(
            f"--top-k-logprobs reads both distributions from its two files; drop {', '.join(clash)} (the "
            f"logprobs are of whatever distribution the server sampled from)"
        )
    n = check_n(args.n)
    if args.sampling.strip().lower() == "all":
        samplings = list(TOP_K_SAMPLINGS)
    else:
        samplings = parse_samplings(args.sampling)
        for name in samplings:
            if name not in TOP_K_SAMPLINGS:
                raise ValueError(
                    f"--top-k-logprobs bounds --sampling with_replacement, without_replacement or all; got "
                    f"{name!r} (with unknown masses its drafts are not determined by the lists)"
                )
    target_path, draft_path = args.top_k_logprobs
    target = read_top_logprobs(target_path)
    draft = read_top_logprobs(draft_path)
    if len(target) != len(draft):
        raise ValueError(
            f"{target_path} has {len(target)} positions and {draft_path} {len(draft)}; give the two runs "
            f"of the same text (generate with one model, then score that text with the other)"
        )
    rows, skipped = [], 0
    for i, ((t_tok, p), (d_tok, q)) in enumerate(zip(target, draft)):
        if t_tok is not None and d_tok is not None and t_tok != d_tok:
            raise ValueError(
                f"position {i}: {target_path} has token {t_tok!r} and {draft_path} {d_tok!r}; the two files "
                f"must score the same text"
            )
        if p is None or q is None:
            skipped += 1
            continue
        row = {
            "position": i,
            "token": t_tok if t_tok is not None else d_tok,
            "k_target": len(p),
            "k_draft": len(q),
        }
        for s in samplings:
            try:
                b = optimal_acceptance_top_k(
                    list(p),
                    list(p.values()),
                    list(q),
                    list(q.values()),
                    n,
                    sampling=s,
                    vocab_size=args.vocab_size,
                )
            except ValueError as exc:
                raise ValueError(f"position {i}: {' '.join(str(exc).split())}") from None
            row["target_missing"], row["draft_missing"] = b.target_missing, b.draft_missing
            row[s] = {
                "lower": b.lower,
                "upper": b.upper,
                "lower_attained": b.lower_attained,
                "upper_attained": b.upper_attained,
            }
        rows.append(row)
    if not rows:
        raise ValueError(f"no position of {target_path} and {draft_path} has top logprobs in both files")
    summary = {}
    for s in samplings:
        lo = [r[s]["lower"] for r in rows]
        up = [r[s]["upper"] for r in rows]
        summary[s] = {
            "mean_lower": math.fsum(lo) / len(rows),
            "mean_upper": math.fsum(up) / len(rows),
            "mean_width": math.fsum(u - v for u, v in zip(up, lo)) / len(rows),
            "max_width": max(u - v for u, v in zip(up, lo)),
        }
    if args.json:
        print(
            json.dumps(
                {
                    "n": n,
                    "vocab_size": args.vocab_size,
                    "positions": rows,
                    "skipped": skipped,
                    "summary": summary,
                }
            )
        )
        return 0
    vocab = "any size" if args.vocab_size is None else f"{args.vocab_size:,} tokens"
    print(
        f"alpha* bounds from top-k logprobs: n = {n} drafts, {len(rows)} positions (target {target_path}, "
        f"draft {draft_path}), vocabulary of {vocab}; every completion of the missing masses has alpha* in "
        f"[lower, upper]"
    )
    head = f"{'pos':>4}  {'token':<14} {'k':>5}  {'missing p':>9}  {'missing q':>9}"
    head += "".join(f"  {s + ' [lower, upper]':<40}" for s in samplings)
    print(head)
    for r in rows:
        line = (
            f"{r['position']:>4}  {repr(r['token'])[:14]:<14} {r['k_target']:>2}/{r['k_draft']:<2}  "
            f"{r['target_missing']:>9.2e}  {r['draft_missing']:>9.2e}"
        )
        for s in samplings:
            interval = f"[{r[s]['lower']:.6f}, {r[s]['upper']:.6f}]"
            line += f"  {interval:<40}"
        print(line)
    for s in samplings:
        m = summary[s]
        what = (
            "both ends exact and attained"
            if s == "with_replacement" or n == 1
            else "lower: the infimum over completions; upper: a valid bound"
        )
        print(
            f"{s}: mean lower {m['mean_lower']:.6f}, mean upper {m['mean_upper']:.6f}, mean width "
            f"{m['mean_width']:.6f}, widest {m['max_width']:.6f} ({what})"
        )
    if skipped:
        print(f"skipped {skipped} positions without top logprobs in both files")
    return 0

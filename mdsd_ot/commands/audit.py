"""``mdsd-ot audit``: is a verifier lossless? Run it on every draft tuple and test its output law.

``TARGET`` is ``module:function`` (an importable module, the current folder included),
``path/to/file.py:function``, or the name of a verifier of the registry (e.g. ``rrs``, ``specinfer``).
The function is called as ``verify(p, q, drafts, rng) -> token`` (see :func:`mdsd_ot.audit.audit`).

With ``--tree`` the target is a tree verifier: ``verify(tree, rng) -> list of tokens`` (sampled
calls), or with ``--law`` ``law(tree) -> {tuple of tokens: probability}`` (exact), or a registry
verifier name (``traversal``, ``gbv``, ``block``, ``rrs``, ...: exact). It runs on the audit's own toy
model pairs (or ``--laws FILE.json``) for every ``--shape`` and ``--sampling`` scheme and compares the
law of the first ``--k`` streamed tokens of chained calls with the target's
(:func:`mdsd_ot.audit.audit_tree`).

Exit status: 0 when the audit finds no evidence of bias at ``--level`` (``--tree``, exact: the law
equals the target's to ``--tol``), 1 when it finds the verifier biased (not lossless), 2 for bad
arguments or inputs, or when the verifier raises (any exception, ``SystemExit`` and ``GeneratorExit``
included: a verify calling ``sys.exit(0)`` must not read as "lossless") or returns something that is
not a token (a float, a bool, an object whose ``.token`` or ``__index__`` raises) or, with ``--tree``,
not a path of the tree plus one token: one line on stderr naming the exception and the draft tuple
(``--tree``: the model pair, shape, scheme, context and drafted tree).
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import sys
from pathlib import Path

from ._inputs import INPUT_HELP, load_inputs

HELP = (
    "audit a verifier verify(p, q, drafts, rng) -> token: is its output law exactly p? (small V); "
    "--tree: a tree verifier over chained calls"
)


def add_arguments(parser):
    from ..audit import DEFAULT_MAX_TUPLES, DEFAULT_TREE_TRIALS, DEFAULT_TRIALS

    parser.add_argument(
        "target",
        metavar="TARGET",
        help="module:function, path/to/file.py:function, or a registry verifier name",
    )
    parser.add_argument("inputs", nargs="*", metavar="FILE", help=INPUT_HELP + "; or use --p and --q")
    parser.add_argument("--p", default=None, help="target distribution inline, e.g. 0.5,0.3,0.2,0")
    parser.add_argument("--q", default=None, help="draft distribution inline, e.g. 0.1,0.2,0.3,0.4")
    parser.add_argument("--n", type=int, default=2, help="number of drafts")
    parser.add_argument(
        "--sampling",
        default=None,
        help="draft scheme the verifier assumes (default: a registry verifier's own "
        "scheme, else with_replacement); --tree: comma-separated schemes (default with_replacement)",
    )
    parser.add_argument(
        "--trials",
        type=int,
        default=None,
        help=f"stratified sample size; tuple t runs max(min-runs, ceil(trials * P(t))) times (default "
        f"{DEFAULT_TRIALS:,}); --tree: sampled streams per case (default {DEFAULT_TREE_TRIALS:,})",
    )
    parser.add_argument("--min-runs", type=int, default=10, help="fewest runs per draft tuple")
    parser.add_argument(
        "--level",
        type=float,
        default=0.01,
        help="significance level of the verdict; the TV upper bound holds with confidence 1 - level",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the per-tuple generators")
    parser.add_argument(
        "--backend",
        choices=("numpy", "torch"),
        default="numpy",
        help="what verify receives: numpy arrays and a numpy Generator, or torch "
        "tensors and a torch.Generator",
    )
    parser.add_argument(
        "--reference",
        default="auto",
        help="registry verifier the draft tuples are compared with to locate a bias "
        "('auto': the library's verifier of the scheme; 'none': skip)",
    )
    parser.add_argument("--top", type=int, default=5, help="draft tuples to list")
    parser.add_argument(
        "--max-tuples",
        type=int,
        default=DEFAULT_MAX_TUPLES,
        help="largest number of draft tuples to enumerate",
    )
    parser.add_argument(
        "--normalize", action="store_true", help="rescale p and q to sum to one instead of rejecting them"
    )
    parser.add_argument("--json", action="store_true", help="print machine-readable JSON")
    tree = parser.add_argument_group(
        "tree verifiers (--tree)",
        "TARGET is verify(tree, rng) -> tokens, law(tree) -> {tokens: probability} with --law, or a "
        "registry verifier name; the audit's own toy model pairs (or --laws) replace p and q",
    )
    tree.add_argument(
        "--tree",
        action="store_true",
        help="audit a tree verifier: the law of the first --k tokens of chained calls against the target's",
    )
    tree.add_argument(
        "--law",
        action="store_true",
        help="TARGET is law(tree) -> {tuple of tokens: probability} (exact audit); "
        "default: verify(tree, rng)",
    )
    tree.add_argument(
        "--shape",
        action="append",
        default=None,
        help="tree shape, 'KxL' or 'b1,b2,...'; repeat for several (default 2x2)",
    )
    tree.add_argument(
        "--mode",
        choices=("auto", "exact", "sample"),
        default="auto",
        help="exact (needs a law: --law or a registry name) or sample; auto: exact when a law is given",
    )
    tree.add_argument("--k", type=int, default=None, help="first streamed tokens checked (default 3)")
    tree.add_argument("--vocab", type=int, default=3, help="vocabulary of the toy model pairs (default 3)")
    tree.add_argument(
        "--laws",
        default=None,
        metavar="FILE",
        help='one model pair from a JSON file {"target": {context: law}, "draft": {...}} (as mdsd-ot trees '
        "--laws) instead of the toy pairs",
    )
    tree.add_argument(
        "--tol",
        type=float,
        default=None,
        help="exact mode: largest deviation still called lossless (default 1e-12)",
    )
    tree.add_argument(
        "--no-optimum",
        action="store_true",
        help="skip the exact tree optimum (an LP per case) beside the tokens per call",
    )


def _inline(text: str, name: str):
    import numpy as np

    parts = [x for x in text.replace(",", " ").split() if x]
    try:
        values = np.array([float(x) for x in parts])
    except ValueError:
        raise ValueError(f"--{name} must be numbers separated by commas, got {text!r}") from None
    if values.size == 0:
        raise ValueError(f"--{name} is empty; give the probabilities, e.g. --{name} 0.5,0.5")
    return values


def load_callable(spec: str):
    """The callable named by ``module:function``, ``file.py:function`` or a registry name."""
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError("TARGET must look like module:function, file.py:function or a verifier name")
    if ":" not in spec:
        from ..audit import registry_verify
        from ..verifiers import ALIASES, VERIFIERS

        if spec not in VERIFIERS and spec not in ALIASES:
            raise ValueError(
                f"TARGET {spec!r} is neither module:function nor a registry verifier "
                f"({', '.join(sorted([*VERIFIERS, *ALIASES]))})"
            )
        return registry_verify(spec)
    where, attr = spec.rsplit(":", 1)
    try:
        if where.endswith(".py") or "/" in where or "\\" in where:
            path = Path(where)
            if not path.is_file():
                raise FileNotFoundError(f"no such file: {path}")
            module_spec = importlib.util.spec_from_file_location(path.stem, path)
            module = importlib.util.module_from_spec(module_spec)
            module_spec.loader.exec_module(module)
        else:
            if "" not in sys.path and str(Path.cwd()) not in sys.path:
                sys.path.insert(0, str(Path.cwd()))  # like python -m: modules in the current folder
            module = importlib.import_module(where)
    except FileNotFoundError:
        raise
    except ModuleNotFoundError as exc:
        raise ValueError(f"cannot import module {where!r}: {exc}") from None
    except Exception as exc:  # the user's module failed while loading
        raise ValueError(f"importing {where!r} raised {type(exc).__name__}: {exc}") from None
    obj = module
    for part in attr.split("."):
        if not part or not hasattr(obj, part):
            raise ValueError(f"{where!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise TypeError(f"{spec} is a {type(obj).__name__}, not a callable verify(p, q, drafts, rng)")
    return obj


def _load_target(spec: str):
    """A registry verifier name (node-wise or tree-level) as is, else the callable it names."""
    if isinstance(spec, str) and ":" not in spec:
        from ..trees.tree import canonical_verifier

        return canonical_verifier(spec.strip())
    return load_callable(spec)


def _run_tree(args) -> int:
    from .._config import LAW_TOL
    from ..audit import DEFAULT_TREE_K, DEFAULT_TREE_TRIALS, VerifierError, audit_tree

    if args.inputs or args.p is not None or args.q is not None:
        raise ValueError(
            "--tree audits on its own toy model pairs (or --laws FILE.json); p and q (FILE, --p, --q) are "
            "for the one-step audit"
        )
    target = _load_target(args.target)
    pairs = None
    if args.laws is not None:
        from ..trees.enumerate import laws_from_json

        with open(args.laws, encoding="utf-8") as f:
            try:
                payload = json.load(f)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{args.laws}: not valid JSON ({exc})") from None
        pairs = [(Path(args.laws).name, *laws_from_json(payload))]
    trials = DEFAULT_TREE_TRIALS if args.trials is None else args.trials
    try:
        result = audit_tree(
            target,
            args.shape or ["2x2"],
            args.sampling or "with_replacement",
            kind="law" if args.law else "verify",
            mode=args.mode,
            k=DEFAULT_TREE_K if args.k is None else args.k,
            pairs=pairs,
            vocab=args.vocab,
            seed=args.seed,
            trials=trials,
            level=args.level,
            tol=LAW_TOL if args.tol is None else args.tol,
            optimum=not args.no_optimum,
        )
    except VerifierError as exc:
        raise ValueError(f"{args.target}: {exc}") from exc
    print(json.dumps(result.to_dict()) if args.json else str(result))
    return 0 if result.lossless else 1


def run(args) -> int:
    from ..audit import DEFAULT_TRIALS, VerifierError, audit

    if args.tree:
        return _run_tree(args)
    tree_only = [
        flag
        for flag, given in (
            ("--law", args.law),
            ("--shape", args.shape is not None),
            ("--mode", args.mode != "auto"),
            ("--k", args.k is not None),
            ("--laws", args.laws is not None),
            ("--tol", args.tol is not None),
            ("--no-optimum", args.no_optimum),
        )
        if given
    ]
    if tree_only:
        raise ValueError(f"{', '.join(tree_only)} audit tree verifiers: add --tree")
    verify = load_callable(args.target)
    if args.p is not None or args.q is not None:
        if args.inputs:
            raise ValueError("give p and q either as FILE(s) or with --p/--q, not both")
        if args.p is None or args.q is None:
            raise ValueError("--p and --q go together; give both")
        p, q = _inline(args.p, "p"), _inline(args.q, "q")
    elif args.inputs:
        p, q = load_inputs(args)
    else:
        raise ValueError("give p and q: a FILE (or two), or --p 0.5,0.3,0.2 --q 0.2,0.3,0.5")
    sampling = args.sampling or getattr(verify, "default_sampling", None) or "with_replacement"
    reference = None if args.reference.strip().lower() == "none" else args.reference
    try:
        result = audit(
            verify,
            p,
            q,
            args.n,
            sampling=sampling,
            trials=DEFAULT_TRIALS if args.trials is None else args.trials,
            min_runs=args.min_runs,
            level=args.level,
            seed=args.seed,
            backend=args.backend,
            max_tuples=args.max_tuples,
            top=args.top,
            reference=reference,
            normalize=args.normalize,
        )
    except VerifierError as exc:
        raise ValueError(f"{args.target}: {exc}") from exc
    print(json.dumps(result.to_dict()) if args.json else str(result))
    return 0 if result.lossless else 1

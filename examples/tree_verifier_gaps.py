"""Every tree verifier of the library against the exact tree optimum, at tiny vocabularies.

Run ``python examples/tree_verifier_gaps.py`` (about half a minute on one CPU core; ``--seeds 1`` for
half). For each model pair of the audit's battery (:func:`mdsd_ot.audit.tree_audit_pairs`: near,
sharp, mismatched, ties, equal and Sun et al.'s pair, for each seed), each shape and each scheme,
:func:`mdsd_ot.trees.compare_tree` gives every valid verifier's exact tokens per call (averaged over
every drafted tree) and the optimum over all valid verifiers (the causal LP). The table gives, per
verifier, the gap ``optimum - tokens`` over the cases where it applies: mean, median, largest, and in
how many cases it attains the optimum (gap <= 1e-9). Node-wise verifiers are one group (each case
counts the best of them). Any tree verifier registered later (e.g. ``lookahead``) appears by itself.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from mdsd_ot.audit import tree_audit_pairs
from mdsd_ot.trees import TREE_VERIFIERS, compare_tree, parse_shape

#: (shape, scheme): chains, K x L trees of i.i.d. paths, one branching tree; i.i.d. and without replacement
CASES = [
    ("1x2", "with_replacement"),
    ("1x3", "with_replacement"),
    ("2x1", "with_replacement"),
    ("3x1", "with_replacement"),
    ("2x2", "with_replacement"),
    ("2,2", "with_replacement"),
    ("2x1", "without_replacement"),
    ("2x2", "without_replacement"),
    ("2,2", "without_replacement"),
]


def gaps(seeds: int = 2, vocab: int = 3) -> dict:
    """``{verifier: [(pair, shape, scheme, gap), ...]}`` (``"node-wise (best)"`` for the best node-wise
    verifier of each case)."""
    out: dict = {}
    for seed in range(seeds):
        for name, target, draft in tree_audit_pairs(vocab, seed):
            for shape, scheme in CASES:
                if scheme == "without_replacement" and target(()).size < max(parse_shape(shape).branching):
                    continue
                table = compare_tree(target, draft, shape, scheme)
                node = [r for r in table if r.kind == "node-wise"]
                rows = [("node-wise (best)", min(r.gap for r in node))] if node else []
                rows += [(r.verifier, r.gap) for r in table if r.kind == "tree-level"]
                for verifier, gap in rows:
                    out.setdefault(verifier, []).append((f"{name}/{seed}", shape, scheme, max(gap, 0.0)))
    return out


#: column -> which (shape, scheme) cases it gathers
GROUPS = {
    "chains 1x2, 1x3": lambda shape, scheme: shape.startswith("1x"),
    "K x L i.i.d., K >= 2": lambda shape, scheme: (
        "x" in shape and not shape.startswith("1x") and scheme == "with_replacement"
    ),
    "2,2 i.i.d.": lambda shape, scheme: shape == "2,2" and scheme == "with_replacement",
    "without replacement": lambda shape, scheme: scheme == "without_replacement",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=2, help="battery seeds (6 pairs each)")
    parser.add_argument("--vocab", type=int, default=3, help="vocabulary of the battery (Sun's pair: 2)")
    args = parser.parse_args()
    start = time.perf_counter()
    table = gaps(args.seeds, args.vocab)
    print(f"battery: tree_audit_pairs(vocab={args.vocab}, seed) for seed < {args.seeds}; cases {CASES}")
    print("gap = optimum - tokens per call: mean / largest (cases at the optimum of cases)")
    print("| verifier | " + " | ".join(GROUPS) + " |")
    print("|---" * (len(GROUPS) + 1) + "|")
    for verifier in ["node-wise (best)", *TREE_VERIFIERS]:
        cells = []
        for keep in GROUPS.values():
            g = np.array([r[3] for r in table.get(verifier, []) if keep(r[1], r[2])])
            if g.size == 0:
                cells.append("-")
            else:
                cells.append(f"{g.mean():.3f} / {g.max():.3f} ({int(np.sum(g <= 1e-9))} of {g.size})")
        print(f"| {verifier} | " + " | ".join(cells) + " |")
    print(f"({time.perf_counter() - start:.1f} s)")


if __name__ == "__main__":
    main()

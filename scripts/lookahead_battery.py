"""The tiny-V battery of tree verifiers against the exact tree optimum (docs/tree-decoding.md).

Random toy model pairs (``trees.toy_models``: V = 3-4, draft temperature 0.4-1.4, noise 0.5-2.5, so
sharp and mismatched drafts included), shapes 2,1 / 3,1 / 2,2 / 2,1,1 and the chains 1,1 / 1,1,1,
i.i.d. drafts and drafts without replacement. For every case: the causal-LP optimum
(``trees.tree_optimum``'s solver, with its re-checks) and the exact tokens per call of every verifier,
averaged over every ordered drafted tree (``TreeEnumeration.trees``, each tree's exact value).
Printed: per shape and scheme, the median / max gap to the optimum (``1 - value / OPT``, %) of
node-wise ``optimal``, ``traversal``, the best library verifier chosen per case (``block`` included on
chains) and the lookahead variants; how often each variant beats the best library verifier and falls
below ``optimal`` or ``traversal`` (beyond 1e-12), and the worst such difference.

    python scripts/lookahead_battery.py                 # 4 cases per group, 64 cases
    python scripts/lookahead_battery.py --per-group 6 --jsonl out.jsonl
"""

from __future__ import annotations

import argparse
import json
import math
import time

import numpy as np

from mdsd_ot.trees import enumerate_trees, expected_tokens, toy_models, valid_verifiers
from mdsd_ot.trees.optimum import solve_tree_lp
from mdsd_ot.trees.verifiers.lookahead import LookaheadVerifier

#: the lookahead variants evaluated (name -> verifier)
VARIANTS = {
    "lookahead": LookaheadVerifier(),  # the registry's default: value order, orbit average
    "soc": LookaheadVerifier(order="draft", symmetric=False),
    "soc_scaled": LookaheadVerifier(coupling="scaled", order="draft", symmetric=False),
    "value_no_orbit": LookaheadVerifier(order="value", symmetric=False),
    "quality": LookaheadVerifier(order="quality"),
    "rsd_scaled": LookaheadVerifier(coupling="scaled", one_step="rrs_without_replacement"),
}

#: (V, shape) groups, each under both schemes
GROUPS = [(3, "2,1"), (4, "2,1"), (3, "3,1"), (4, "3,1"), (3, "2,2"), (3, "2,1,1"), (3, "1,1"), (3, "1,1,1")]
SCHEMES = {"iid": "with_replacement", "wor": "without_replacement"}
TEMPERATURES = (0.4, 0.7, 1.0, 1.4)
NOISES = (0.5, 1.0, 1.5, 2.5)
FLOOR = 1e-12


def cases(per_group: int, seed: int):
    rng = np.random.default_rng(seed)
    for rep in range(per_group):
        for sch in SCHEMES:
            for V, shape in GROUPS:
                yield dict(
                    V=V,
                    shape=shape,
                    scheme=sch,
                    seed=int(rng.integers(1 << 30)),
                    temperature=float(rng.choice(TEMPERATURES)),
                    noise=float(rng.choice(NOISES)),
                )


def _key(case):
    return json.dumps([case[k] for k in ("V", "shape", "scheme", "seed", "temperature", "noise")])


def run_case(case, variants, cache):
    target, draft = toy_models(
        case["V"], seed=case["seed"], temperature=case["temperature"], noise=case["noise"]
    )
    e = enumerate_trees(target, draft, case["shape"], SCHEMES[case["scheme"]], max_classes=20000)
    known = cache.get(_key(case))
    if known is None:
        lp = solve_tree_lp(e)
        if not lp.success:
            raise RuntimeError(f"the LP failed its re-check: {lp.message} ({case})")
        library = [n for n in valid_verifiers(e.scheme, shape=e.shape) if n != "lookahead"]
        names = library + list(variants)
    else:
        names = list(variants)
    terms = {n: [] for n in names}
    names = [n for n in names if n not in variants or variants[n].why_not(e.shape, e.scheme.name) is None]
    terms = {n: [] for n in names}
    for tree, prob in e.trees(max_trees=200_000):
        for n in names:
            terms[n].append(prob * expected_tokens(tree, variants.get(n, n)))
    vals = {n: math.fsum(t) for n, t in terms.items()}
    vals.update({n: None for n in variants if n not in vals})
    if known is None:
        known = cache[_key(case)] = dict(opt=lp.value, library={n: vals[n] for n in library})
    return dict(case, opt=known["opt"], library=known["library"], **{n: vals[n] for n in variants})


def summarize(records, variants):
    def gap(r, value):
        return None if value is None else 100.0 * (1.0 - value / r["opt"])

    def cell(values):
        values = [x for x in values if x is not None]
        return f"{np.median(values):.2f} / {np.max(values):.2f}" if values else "-"

    groups = {}
    for r in records:
        kind = "chains" if set(r["shape"].split(",")) == {"1"} else "trees"
        keys = [(r["shape"], r["scheme"]), (f"all {kind}", r["scheme"])]
        keys += [(f"all {kind}", "both"), ("all", "both")]
        for key in keys:
            groups.setdefault(key, []).append(r)
    head = ["shape", "scheme", "cases", "optimal", "traversal", "best library"] + list(variants)
    head += [f"{v} > best lib" for v in variants] + [f"{v} < optimal, traversal" for v in variants]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    floors = {v: (np.inf, np.inf) for v in variants}
    for key in sorted(groups, key=lambda k: (k[0].startswith("all"), k[0] == "all", k[0], k[1])):
        rs = groups[key]
        best = [max(r["library"].values()) for r in rs]
        row = [key[0], key[1], str(len(rs))]
        row.append(cell([gap(r, r["library"]["optimal"]) for r in rs]))
        row.append(cell([gap(r, r["library"]["traversal"]) for r in rs]))
        row.append(cell([gap(r, b) for r, b in zip(rs, best)]))
        row += [cell([gap(r, r[v]) for r in rs]) for v in variants]
        for v in variants:
            have = [(r, b) for r, b in zip(rs, best) if r[v] is not None]
            row.append(f"{sum(r[v] > b + FLOOR for r, b in have)}/{len(have)}" if have else "-")
        for v in variants:
            have = [r for r in rs if r[v] is not None]
            lib = [(r[v], r["library"]) for r in have]
            below = sum(x < b["optimal"] - FLOOR or x < b["traversal"] - FLOOR for x, b in lib)
            row.append(f"{below}/{len(have)}" if have else "-")
        print("| " + " | ".join(row) + " |")
    for r in records:
        for v in variants:
            if r[v] is None:
                continue
            a, b = floors[v]
            floors[v] = (min(a, r[v] - r["library"]["optimal"]), min(b, r[v] - r["library"]["traversal"]))
    for v, (a, b) in floors.items():
        print(f"{v}: min over cases of (value - optimal) = {a:+.2e}, (value - traversal) = {b:+.2e}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--per-group", type=int, default=4, help="cases per (V, shape, scheme) group")
    ap.add_argument("--seed", type=int, default=4242)
    ap.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated names of VARIANTS")
    ap.add_argument("--jsonl", default=None, help="also write one JSON record per case here")
    ap.add_argument("--groups", default=None, help="only these groups ('V:shape;V:shape')")
    ap.add_argument("--schemes", default="iid,wor", help="comma-separated: iid, wor")
    ap.add_argument("--cache", default=None, help="JSON file of the optimum and library values per case")
    args = ap.parse_args(argv)
    variants = {n: VARIANTS[n] for n in args.variants.split(",") if n}
    if args.groups:
        keep = {tuple(g.split(":")) for g in args.groups.split(";")}
        GROUPS[:] = [(V, s) for V, s in GROUPS if (str(V), s) in keep]
    records = []
    out = open(args.jsonl, "w") if args.jsonl else None
    cache = {}
    if args.cache:
        try:
            with open(args.cache) as fh:
                cache = json.load(fh)
        except FileNotFoundError:
            pass
    schemes = args.schemes.split(",")
    for case in cases(args.per_group, args.seed):
        if case["scheme"] not in schemes:
            continue
        t0 = time.perf_counter()
        r = run_case(case, variants, cache)
        if args.cache:
            with open(args.cache, "w") as fh:
                json.dump(cache, fh)
        records.append(r)
        if out:
            out.write(json.dumps(r) + "\n")
            out.flush()
        gaps = " ".join(f"{v} {100 * (1 - r[v] / r['opt']):.2f}" for v in variants if r[v] is not None)
        best = 100 * (1 - max(r["library"].values()) / r["opt"])
        print(
            f"V={r['V']} {r['shape']:6s} {r['scheme']} T={r['temperature']} noise={r['noise']}: "
            f"best library {best:.2f}, {gaps} ({time.perf_counter() - t0:.1f} s)",
            flush=True,
        )
    summarize(records, variants)


if __name__ == "__main__":
    main()

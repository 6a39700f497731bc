#!/usr/bin/env python
"""Tables of the tree-decoding report (docs/results/trees.md) from the committed rows.

    python scripts/tree_report.py docs/results/trees > docs/results/trees/tables.md

Sections: tokens per target call of every (temperature, shape, scheme, verifier) with intervals
clustered by problem; the weighting (per call against per problem); the driver's sampled tokens
against its exact value (paired); paired differences on the same calls with their two-sided p-values
(block vs token-level RRS on the chain, traversal vs the scheme's node-wise verifier on trees, without
vs with replacement, greedy vs i.i.d. and vs without replacement), relative gains; the figures the
report compares with published claims; the wall time per machine; the speedup model at the measured
draft/target cost ratio and, when ``docs/results/trees2/cost.json`` exists, with measured forward costs
(``scripts/tree_cost.py``). Every number comes from the rows (``scripts/tree_rows.py`` verifies them
against SHA256SUMS first).

The second edition's columns (``exact:lookahead``, ``exact:gbv``, the certified rules ``upper:<rule>``)
get four more sections at the end: the certified sandwich per cell (``mdsd_ot.decode.report.sandwich``)
with a per-scheme summary of the widths; paired comparisons of lookahead (against traversal and
node-wise optimal), gbv (against traversal and block) and the bound rules (the scheme's default rule
against one_level); the same under per-problem weighting; and checks of what the theory forbids (a
rule's mean below a verifier's, lookahead below node-wise optimal, identities call by call). On rows
without those columns (the first edition) each of the four says so in one line, and everything
before them is unchanged:

    scripts/write_tree_report.sh trees2    # docs/results/trees2/tables.md from docs/results/trees2/main
"""

from __future__ import annotations

import json
import math
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from study_rows import load_rows  # noqa: E402

from mdsd_ot.decode.report import (  # noqa: E402
    format_sandwich,
    format_table,
    measured_cost_ratio,
    sandwich,
    summarize,
)
from mdsd_ot.intervals import cluster_mean_ci, interval_note, t_quantile  # noqa: E402
from mdsd_ot.trees import parse_shape  # noqa: E402

#: The scheme's own node-wise verifier, the baseline traversal is compared with.
NODE_WISE = {"with_replacement": "rrs", "without_replacement": "rrs_without_replacement", "top_n": "naive",
             "greedy": "greedy"}  # fmt: skip


def _fmt(mean, ci, p=None):
    text = f"{mean:+.3f} ± {ci:.3f}" if ci == ci else f"{mean:+.3f}"
    return text if p is None else f"{text} (p {_fmt_p(p)})"


def _fmt_p(p):
    return "< 0.001" if p < 0.001 else f"= {p:.3f}" if p < 0.01 else f"= {p:.2f}"


def p_value(mean, ci, clusters):
    """Two-sided p-value of the clustered t-test of ``mean = 0`` (``ci`` = t(G-1) * se)."""
    from scipy.stats import t

    if clusters < 2 or not ci > 0:
        return float("nan")
    se = ci / t_quantile(clusters)
    return float(2.0 * t.sf(abs(mean) / se, clusters - 1))


def call_index(rows) -> dict:
    """``{(record, T, call, tree, scheme): row}``: what :func:`paired` looks calls up in (built once
    and passed as ``index=`` when many comparisons read the same rows)."""
    index = {}
    for r in rows:
        index[(r["record"], r["T"], r["call"], r["tree"], r["scheme"])] = r
    return index


def paired(rows, left, right, *, per_problem: bool = False, index=None):
    """Mean of left - right over the calls where both exist, clustered by problem, with its interval,
    the number of calls and problems and the two-sided p-value: ``{T: (mean, ci, calls, G, p)}``.

    ``left`` / ``right``: ``(tree, scheme, key)``; the two values of one call come from the rows of
    the same (record, T, call). ``per_problem``: each problem weighs 1 (the mean of its calls'
    differences), with a t interval over problems, instead of each call weighing 1. ``index``:
    :func:`call_index` of ``rows`` (built here when None)."""
    index = call_index(rows) if index is None else index
    out = {}
    for (rec, T, call, tree, scheme), r in index.items():
        if (tree, scheme) != left[:2]:
            continue
        other = index.get((rec, T, call, right[0], right[1]))
        if other is None or r.get(left[2]) is None or other.get(right[2]) is None:
            continue
        out.setdefault(T, []).append((r[left[2]] - other[right[2]], rec))
    res = {}
    for T, v in sorted(out.items()):
        if per_problem:
            by: dict = {}
            for d, g in v:
                by.setdefault(g, []).append(d)
            v = [(math.fsum(ds) / len(ds), g) for g, ds in by.items()]
        mean, ci = cluster_mean_ci([d for d, _ in v], [g for _, g in v])
        G = len({g for _, g in v})
        res[T] = (mean, ci, len(v), G, p_value(mean, ci, G))
    return res


def _comparison_line(label, res, temps):
    """One line of a comparison table (None when no call carries both values)."""
    if res and all(abs(res[T][0]) < 1e-9 for T in res):
        return f"| {label} | " + " | ".join("0 (equal up to rounding)" for _ in temps) + " |"
    if res:
        return (
            f"| {label} | "
            + " | ".join(_fmt(res[T][0], res[T][1], res[T][4]) if T in res else "" for T in temps)
            + " |"
        )
    return None


def _comparison_head(temps):
    return ["| comparison (same calls) | " + " | ".join(f"T={T:g}" for T in temps) + " |",
            "|---|" + "---|" * len(temps)]  # fmt: skip


def comparisons(rows, *, per_problem: bool = False, collect=None, index=None):
    trees = sorted({r["tree"] for r in rows}, key=lambda t: parse_shape(t).size)
    schemes = sorted({r["scheme"] for r in rows})
    temps = sorted({r["T"] for r in rows})
    lines = _comparison_head(temps)
    index = call_index(rows) if index is None else index

    def add(label, left, right):
        res = paired(rows, left, right, per_problem=per_problem, index=index)
        if collect is not None:
            collect.update({(label, T): v for T, v in res.items()})
        line = _comparison_line(label, res, temps)
        if line is not None:
            lines.append(line)

    for tree in trees:
        if parse_shape(tree).is_chains and parse_shape(tree).branching[0] == 1:
            for s in ("with_replacement",):
                add(f"{tree} {s}: block - rrs", (tree, s, "exact:block"), (tree, s, "exact:rrs"))
    for tree in trees:
        for s in schemes:
            base = NODE_WISE.get(s)
            if base:
                add(
                    f"{tree} {s}: traversal - {base}",
                    (tree, s, "exact:traversal"),
                    (tree, s, f"exact:{base}"),
                )
    for tree in trees:
        add(
            f"{tree}: without - with replacement (traversal)",
            (tree, "without_replacement", "exact:traversal"),
            (tree, "with_replacement", "exact:traversal"),
        )
        add(
            f"{tree}: greedy - with replacement (traversal)",
            (tree, "greedy", "exact:traversal"),
            (tree, "with_replacement", "exact:traversal"),
        )
        add(
            f"{tree}: greedy - without replacement (traversal)",
            (tree, "greedy", "exact:traversal"),
            (tree, "without_replacement", "exact:traversal"),
        )
        add(
            f"{tree}: greedy (greedy verifier) - without replacement (rrs_without_replacement)",
            (tree, "greedy", "exact:greedy"),
            (tree, "without_replacement", "exact:rrs_without_replacement"),
        )
    return "\n".join(lines)


def relative_gains(rows):
    """Traversal over the scheme's node-wise verifier, in percent of the node-wise mean (same calls),
    for the i.i.d. and without-replacement trees with several children per node, and the range."""
    table = {(t["T"], t["tree"], t["scheme"], t["method"]): t["mean"] for t in summarize(rows)}
    trees = sorted({r["tree"] for r in rows}, key=lambda t: parse_shape(t).size)
    temps = sorted({r["T"] for r in rows})
    lines = [
        "| tree | scheme | " + " | ".join(f"T={T:g}" for T in temps) + " |",
        "|---|---|" + "---|" * len(temps),
    ]
    gains = []
    for tree in trees:
        if parse_shape(tree).branching[0] == 1:
            continue  # one chain: traversal is block verification (the table above)
        for scheme in ("with_replacement", "without_replacement"):
            base = NODE_WISE[scheme]
            res = paired(rows, (tree, scheme, "exact:traversal"), (tree, scheme, f"exact:{base}"))
            cells = []
            for T in temps:
                m = table.get((T, tree, scheme, f"exact:{base}"))
                if T not in res or not m:
                    cells.append("")
                    continue
                g = 100.0 * res[T][0] / m
                gains.append(g)
                cells.append(f"{g:+.2f}%")
            lines.append(f"| {tree} | {scheme} (traversal / {base}) | " + " | ".join(cells) + " |")
    if gains:
        lines.append("")
        lines.append(f"Range over these cells: {min(gains):+.2f}% to {max(gains):+.2f}%.")
    return "\n".join(lines)


def weighting(rows, limit: int = 12):
    """Per-call means (each call weighs 1, the report's tables) against per-problem means (each
    problem weighs 1: the mean of its calls' values, averaged over problems, with a t interval over
    problems), for every (T, tree, scheme, method); the largest differences and the maximum."""
    cells: dict = {}
    for r in rows:
        for k, v in r.items():
            if v is None or not (k.startswith("exact:") or k == "emitted"):
                continue
            key = (r["T"], r["tree"], r["scheme"], k)
            cells.setdefault(key, {}).setdefault(r["record"], []).append(float(v))
    out = []
    for key, per in cells.items():
        allv = [v for vs in per.values() for v in vs]
        per_call = math.fsum(allv) / len(allv)
        means = [math.fsum(vs) / len(vs) for vs in per.values()]
        G = len(means)
        per_prob = math.fsum(means) / G
        sd = statistics.stdev(means) if G > 1 else float("nan")
        ci = t_quantile(G) * sd / math.sqrt(G) if G > 1 else float("nan")
        out.append((key, per_call, per_prob, ci, per_prob - per_call))
    out.sort(key=lambda x: -abs(x[4]))
    lines = [
        "| T | tree | scheme | method | per call | per problem | per problem - per call |",
        "|---|---|---|---|---|---|---|",
    ]
    for (T, tree, scheme, k), pc, pp, ci, d in out[:limit]:
        name = "sampled" if k == "emitted" else k.split(":", 1)[1]
        lines.append(f"| {T:g} | {tree} | {scheme} | {name} | {pc:.3f} | {pp:.3f} ± {ci:.3f} | {d:+.3f} |")
    diffs = [abs(x[4]) for x in out]
    lines.append("")
    lines.append(
        f"{len(out)} (T, tree, scheme, method) means; |per problem - per call|: largest "
        f"{max(diffs):.3f}, median {statistics.median(diffs):.3f}, "
        f"{sum(d >= 0.05 for d in diffs)} of {len(diffs)} at 0.05 or more."
    )
    return "\n".join(lines), out


_ZERO = 1e-9  # a mean difference below this is rounding (the rows' values agree to ~1e-12)


def _moves(by_call, by_problem):
    """``(keys, moves, flips)`` of two weightings' paired differences (``{key: (mean, ci, calls, G,
    p)}``): the keys both hold whose per-call mean is not 0 up to rounding, ``(|per problem - per
    call|, key)`` largest first, and the keys whose significance at the 5% level differs, or whose
    sign differs where either is significant."""
    keys = [k for k in by_call if k in by_problem and abs(by_call[k][0]) >= _ZERO]
    moves = sorted(((abs(by_problem[k][0] - by_call[k][0]), k) for k in keys), reverse=True)
    flips = [
        k for k in keys
        if (by_call[k][4] < 0.05) != (by_problem[k][4] < 0.05)
        or (by_call[k][0] > 0) != (by_problem[k][0] > 0) and min(by_call[k][4], by_problem[k][4]) < 0.05
    ]  # fmt: skip
    return keys, moves, flips


def _flip_lines(flips, by_call, by_problem) -> list[str]:
    """One line per key of ``flips``, sorted: the difference per call and per problem."""
    out = []
    for k in sorted(flips):
        a, b = by_call[k], by_problem[k]
        out.append(
            f"- {k[0]}, T = {k[1]:g}: per call {_fmt(a[0], a[1], a[4])}, per problem {_fmt(b[0], b[1], b[4])}"
        )
    return out


def weighting_of_differences(by_call, by_problem):
    """How much the paired differences move between the two weightings: the largest change, and the
    comparisons whose sign or significance at the 5% level differs."""
    keys, moves, flips = _moves(by_call, by_problem)
    out = [
        f"{len(keys)} paired differences; |per problem - per call|: median "
        f"{statistics.median(m for m, _ in moves):.3f}, largest {moves[0][0]:.3f} ({moves[0][1][0]}, "
        f"T = {moves[0][1][1]:g}); differences between verifiers on the same tree (no scheme comparison): "
        "largest " + f"{max(m for m, k in moves if ' - with' not in k[0] and ' - without' not in k[0]):.3f}."
    ]
    signs = [k for k in keys if (by_call[k][0] > 0) != (by_problem[k][0] > 0)]
    if signs:
        low = min(min(by_call[k][4], by_problem[k][4]) for k in signs)
        out.append(
            f"The sign differs in {len(signs)} of them, all with p >= {math.floor(low * 100) / 100:.2f}."
        )
    out.append(f"Sign or significance at the 5% level differs in {len(flips)} of them:")
    out += _flip_lines(flips, by_call, by_problem)
    return "\n".join(out)


def sampled_vs_exact(rows):
    """The driving cell's sampled tokens (``emitted``, before the last call's cut) minus its exact
    value of the driver, paired per call, clustered by problem, with the two-sided p-value."""
    per: dict = {}
    for r in rows:
        if "emitted" in r and r.get(f"exact:{r['driver']}") is not None:
            per.setdefault(r["T"], []).append((r["emitted"] - r[f"exact:{r['driver']}"], r["record"]))
    lines = ["| T | sampled - exact (driver) | calls | problems |", "|---|---|---|---|"]
    for T, v in sorted(per.items()):
        mean, ci = cluster_mean_ci([d for d, _ in v], [g for _, g in v])
        G = len({g for _, g in v})
        lines.append(f"| {T:g} | {_fmt(mean, ci, p_value(mean, ci, G))} | {len(v)} | {G} |")
    return "\n".join(lines)


#: The one problem run on the AVX2-only machine before run_tree_report.sh refused such CPUs (its
#: median target forward took 55 s); the first 84 problems of done.txt ran on the Intel AMX machines
#: (this one excepted), the rest on the AMD EPYC with AVX512-BF16 (git history of docs/results/trees).
AVX2_RECORDS = ("HumanEval/83",)
AMX_FIRST = 84
FIRST_EDITION = Path(__file__).resolve().parent.parent / "docs" / "results" / "trees"
#: Any other folder's rows do not say which machine ran them: one line for all its calls.
UNRECORDED = "not recorded in the rows (all calls)"


def wall_time(folder, rows):
    """Wall time of the calls per machine (the rows' own timings: draft + target + exact values)."""
    order = [json.loads(line)["id"] for line in (Path(folder) / "done.txt").read_text().splitlines() if line]
    first = Path(folder).resolve() == FIRST_EDITION  # the machines above are the first edition's history
    where = {}
    for i, rec in enumerate(order):
        where[rec] = (
            ("AVX2" if rec in AVX2_RECORDS else "AMX" if i < AMX_FIRST else "AVX512-BF16")
            if first
            else UNRECORDED
        )
    calls: dict = {}
    for r in rows:
        if "emitted" in r:
            calls.setdefault(where[r["record"]], []).append(r)
    lines = [
        "| machine | problems | calls | hours of calls | median call (s) | draft | target | exact values "
        "| 90th percentile (s) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name in ("AMX", "AVX2", "AVX512-BF16", UNRECORDED):
        cs = calls.get(name, [])
        if not cs:
            continue
        tot = sorted(r["t_draft"] + r["t_target"] + r["t_exact"] for r in cs)
        q = statistics.quantiles(tot, n=10, method="inclusive")[-1]
        med = {k: statistics.median(r[k] for r in cs) for k in ("t_draft", "t_target", "t_exact")}
        lines.append(
            f"| {name} | {len({r['record'] for r in cs})} | {len(cs)} | {math.fsum(tot) / 3600:.2f} | "
            f"{statistics.median(tot):.2f} | {med['t_draft']:.2f} | {med['t_target']:.2f} | "
            f"{med['t_exact']:.2f} | {q:.1f} |"
        )
    return "\n".join(lines)


def literature(rows):
    """The figures the report sets against published claims, from the rows."""
    table = {(t["T"], t["tree"], t["scheme"], t["method"]): t for t in summarize(rows)}
    lines = []

    def get(T, tree, scheme, method):
        t = table.get((T, tree, scheme, method))
        return None if t is None else t["mean"]

    for T in sorted({r["T"] for r in rows}):
        one = get(T, "1x4", "with_replacement", "exact:rrs")
        spectr = get(T, "4x4", "with_replacement", "exact:spectr")
        rrs = get(T, "4x4", "with_replacement", "exact:rrs")
        block = get(T, "1x4", "with_replacement", "exact:block")
        if None in (one, spectr, rrs, block):
            continue
        lines.append(
            f"- T = {T:g}: one 4-token draft (1x4, rrs) {one:.3f}; 4x4 i.i.d. spectr {spectr:.3f} "
            f"({100 * (spectr / one - 1):+.1f}%), rrs {rrs:.3f} ({100 * (rrs / one - 1):+.1f}%); "
            f"1x4 block {block:.3f} ({100 * (block / one - 1):+.1f}% over token-level)"
        )
    ceiling = {}
    for r in rows:
        if "emitted" in r:
            cap = parse_shape(r["tree"]).depth + 1
            ceiling.setdefault(r["T"], []).append(r["emitted"] == cap)
    lines.append(
        "- calls of the driver ([4,2,2,1], at most 5 tokens) that emitted 5 tokens: "
        + ", ".join(f"{100 * sum(v) / len(v):.1f}% at T = {T:g}" for T, v in sorted(ceiling.items()))
    )
    return "\n".join(lines)


def selected_per_problem(rows):
    """The report's selected rows with both weightings: per call (each call weighs 1) and per
    problem (each problem weighs 1)."""
    sel = [("1x4", "with_replacement", "rrs"), ("1x4", "with_replacement", "block"),
           ("4x4", "with_replacement", "rrs"), ("4x4", "with_replacement", "spectr"),
           ("4x4", "with_replacement", "optimal"), ("4x4", "with_replacement", "traversal"),
           ("4x4", "without_replacement", "traversal"), ("4,2,2,1", "with_replacement", "rrs"),
           ("4,2,2,1", "with_replacement", "optimal"), ("4,2,2,1", "with_replacement", "traversal"),
           ("4,2,2,1", "with_replacement", "sampled"), ("4,2,2,1", "without_replacement", "traversal"),
           ("4,2,2,1", "greedy", "greedy"), ("4,2,2,1", "top_n", "traversal")]  # fmt: skip
    _, out = weighting(rows, limit=0)
    index = {(k[0], k[1], k[2], "sampled" if k[3] == "emitted" else k[3].split(":", 1)[1]): (pc, pp, ci)
             for k, pc, pp, ci, _ in out}  # fmt: skip
    temps = sorted({r["T"] for r in rows})
    head = " | ".join(f"T={T:g} per call / per problem" for T in temps)
    lines = ["| tree | scheme | verifier | " + head + " |", "|---|---|---|" + "---|" * len(temps)]
    for tree, scheme, name in sel:
        cells = []
        for T in temps:
            v = index.get((T, tree, scheme, name))
            cells.append("" if v is None else f"{v[0]:.3f} / {v[1]:.3f}")
        lines.append(f"| {tree} | {scheme} | {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def measured_speedups(table, cost):
    """Speedup over plain decoding with measured forward costs (``scripts/tree_cost.py``), per cell
    at its best exact verifier and at the scheme's node-wise one."""
    from tree_cost import call_cost, measured_speedup

    best: dict = {}
    for t in table:
        if t["method"].startswith("exact:"):
            k = (t["T"], t["tree"], t["scheme"])
            if k not in best or t["mean"] > best[k]["mean"]:
                best[k] = t
    temps = sorted({k[0] for k in best})
    lines = [
        "| tree | scheme | best verifier | " + " | ".join(f"T={T:g}" for T in temps) + " | cost of a call "
        "(plain steps, at T=0.7) |",
        "|---|---|---|" + "---|" * len(temps) + "---|",
    ]
    keys = sorted({k[1:] for k in best}, key=lambda k: (parse_shape(k[0]).size, k[0], k[1]))
    plain = None
    for tree, scheme in keys:
        cells, names = [], set()
        for T in temps:
            t = best.get((T, tree, scheme))
            if t is None:
                cells.append("")
                continue
            names.add(t["method"].split(":", 1)[1])
            cells.append(f"{measured_speedup(t['mean'], tree, cost):.2f}")
        t07 = best.get((0.7, tree, scheme))
        steps = ""
        if t07 is not None:
            from tree_cost import medians

            plain = medians(cost)["target"][1]
            d, g = call_cost(tree, cost, t07["mean"])
            steps = f"{(d + g) / plain:.2f}"
        lines.append(
            f"| {tree} | {scheme} | {'/'.join(sorted(names))} | " + " | ".join(cells) + f" | {steps} |"
        )
    return "\n".join(lines)


# ------------------------------------------------------------------ the second edition's new columns

#: The second edition's new verifier columns (docs/math.md#lookahead-verification and
#: #greedy-multi-path-block-verification); the certified bound rules are every ``upper:<rule>``.
NEW_VERIFIERS = ("exact:lookahead", "exact:gbv")

#: The scheme's default certified rule (docs/math.md#the-tree-dual): ``top_n`` for top_n trees,
#: ``subtree`` for every random scheme; ``one_level`` is the rule every scheme also has.
DEFAULT_RULE = {"top_n": "upper:top_n"}


def new_columns(rows) -> list[str]:
    """The second edition's keys the rows carry: the new verifiers and the certified rules."""
    keys = {k for r in rows for k in r if k in NEW_VERIFIERS or k.startswith("upper:")}
    return sorted(keys)


def _cell_keys(rows) -> dict:
    """``{(tree, scheme): set of exact:/upper: keys}`` in report order (tree size, tree, scheme)."""
    keys: dict = {}
    for r in rows:
        keys.setdefault((r["tree"], r["scheme"]), set()).update(
            k for k in r if k.startswith(("exact:", "upper:")) and r[k] is not None
        )
    return dict(sorted(keys.items(), key=lambda kv: (parse_shape(kv[0][0]).size, kv[0])))


def _label(key):
    name = key.split(":", 1)[1]
    return "optimal (one-step)" if name == "optimal" else name


def _width(c) -> str:
    """A sandwich width with its interval (rounding noise shown as 0, as format_sandwich does)."""
    w = 0.0 if abs(c["width"]) < 5e-10 else c["width"]
    return f"{w:.3f} ± {c['width_ci95']:.3f}" if math.isfinite(c["width_ci95"]) else f"{w:.3f}"


def _zero_width(c) -> bool:
    return abs(c["width"]) < _ZERO and not c["width_ci95"] > _ZERO


def sandwich_summary(cells) -> str:
    """Per scheme and temperature (and over all temperatures): the median and the largest width
    relative to the best verifier over the cells, and the cells whose width is 0 up to rounding (the
    bound is attained: top_n trees), whose width's 95% interval includes 0 (the best verifier is
    optimal up to noise) or lies wholly below 0 (a bound below a verifier: impossible in the mean)."""
    lines = [
        "| scheme | T | cells | median width / best | largest width / best | width 0 up to rounding "
        "| width's interval includes 0 | wholly below 0 |",
        "|---|---|---|---|---|---|---|---|",
    ]
    schemes = sorted({c["scheme"] for c in cells})
    temps = sorted({c["T"] for c in cells})
    order = lambda c: (c["T"], parse_shape(c["tree"]).size, c["tree"])  # noqa: E731
    for scheme in schemes:
        for T in [*temps, None]:
            cs = sorted((c for c in cells if c["scheme"] == scheme and (T is None or c["T"] == T)), key=order)
            if not cs or (T is None and len(temps) == 1):
                continue

            def name(c, T=T):
                return c["tree"] if T is not None else f"{c['tree']} T={c['T']:g}"

            rel = [0.0 if _zero_width(c) else c["relative"] for c in cs]
            top = max(cs, key=lambda c: 0.0 if _zero_width(c) else c["relative"])
            zero = [name(c) for c in cs if _zero_width(c)]
            cover = [
                name(c) for c in cs
                if not _zero_width(c) and c["width"] - c["width_ci95"] <= 0.0 <= c["width"] + c["width_ci95"]
            ]  # fmt: skip
            below = [name(c) for c in cs if not _zero_width(c) and c["width"] + c["width_ci95"] < 0.0]

            def listed(names, cs=cs):
                return "every cell" if names and len(names) == len(cs) else ", ".join(names) or "none"

            lines.append(
                f"| {scheme} | {'all' if T is None else f'{T:g}'} | {len(cs)} | {statistics.median(rel):.1%} "
                f"| {max(rel):.1%}{f' ({name(top)})' if max(rel) > 0 else ''} | {listed(zero)} "
                f"| {listed(cover)} | {listed(below)} |"
            )
    return "\n".join(lines)


def new_comparisons(rows, *, per_problem: bool = False, collect=None, index=None) -> str:
    """Paired differences of the second edition's columns on the same calls, clustered by problem,
    with two-sided p-values: ``lookahead`` against ``traversal`` and node-wise ``optimal``, ``gbv``
    against ``traversal``, ``block`` and ``lookahead`` (where both exist), and each cell's default
    certified rule against the others (``upper:subtree - upper:one_level``). ``per_problem`` and
    ``collect`` as in :func:`comparisons`."""
    temps = sorted({r["T"] for r in rows})
    index = call_index(rows) if index is None else index
    groups = {"lookahead": [], "gbv": [], "rules": []}
    for (tree, scheme), keys in _cell_keys(rows).items():
        for new, group, others in (
            ("exact:lookahead", "lookahead", ("exact:traversal", "exact:optimal")),
            ("exact:gbv", "gbv", ("exact:traversal", "exact:block", "exact:lookahead")),
        ):
            if new in keys:
                groups[group] += [
                    (f"{tree} {scheme}: {_label(new)} - {_label(o)}", (tree, scheme, new), (tree, scheme, o))
                    for o in others
                    if o in keys
                ]
        rule = DEFAULT_RULE.get(scheme, "upper:subtree")
        if rule in keys:
            groups["rules"] += [
                (f"{tree} {scheme}: {rule} - {o}", (tree, scheme, rule), (tree, scheme, o))
                for o in sorted(k for k in keys if k.startswith("upper:") and k != rule)
            ]
    intro = {
        "lookahead": "`lookahead` against `traversal` and node-wise `optimal` (proved never below it in the "
        "mean over drafted trees, docs/math.md#lookahead-verification):",
        "gbv": "`gbv` (K x L cells) against `traversal`, `block` and `lookahead`:",
        "rules": "The certified bound rules of each cell (docs/math.md#the-tree-dual), the scheme's default "
        "rule minus the others (negative: the default is tighter):",
    }
    out = []
    for group, specs in groups.items():
        if not specs:
            out.append(
                f"No {group} columns in these rows." if group != "rules" else "No bound rules to compare."
            )
            continue
        lines = _comparison_head(temps)
        for label, left, right in specs:
            res = paired(rows, left, right, per_problem=per_problem, index=index)
            if collect is not None:
                collect.update({(label, T): v for T, v in res.items()})
            line = _comparison_line(label, res, temps)
            if line is not None:
                lines.append(line)
        out += [intro[group], "", *lines]
        out.append("")
    return "\n".join(out).rstrip("\n")


def per_problem_rows(rows) -> list[dict]:
    """One row per (problem, T, tree, scheme) holding the mean of each ``exact:`` / ``upper:`` value
    over the problem's calls that carry it: anything computed from these rows weighs each problem 1
    (a clustered interval over them, one value per problem, is the t interval over problems)."""
    groups: dict = {}
    for r in rows:
        g = groups.setdefault((r["record"], r["T"], r["tree"], r["scheme"], r.get("driver")), {})
        for k, v in r.items():
            if v is not None and k.startswith(("exact:", "upper:")):
                g.setdefault(k, []).append(float(v))
    return [
        {"record": rec, "T": T, "tree": tree, "scheme": scheme, "call": 0, "driver": driver,
         **{k: math.fsum(v) / len(v) for k, v in vals.items()}}
        for (rec, T, tree, scheme, driver), vals in groups.items()
    ]  # fmt: skip


def sandwich_weighting(by_call, by_problem, problem_table) -> str:
    """The sandwich of every cell under both weightings: per call (each call weighs 1) and per problem
    (each problem weighs 1; the best verifier and the rule chosen again from the per-problem means,
    ``problem_table`` = :func:`summarize` of :func:`per_problem_rows`). A verifier or rule whose
    per-problem mean equals the per-call choice's up to rounding (e.g. ``block`` and ``traversal`` on a
    chain) is not counted as another choice."""
    index = {(c["T"], c["tree"], c["scheme"]): c for c in by_problem}
    means = {(t["T"], t["tree"], t["scheme"], t["method"]): t["mean"] for t in problem_table}
    lines = [
        "| T | tree | scheme | best / rule (per call) | width per call | width per problem | per problem "
        "- per call |",
        "|---|---|---|---|---|---|---|",
    ]
    moves, changed = [], []
    for c in sorted(by_call, key=lambda c: (c["T"], parse_shape(c["tree"]).size, c["tree"], c["scheme"])):
        p = index.get((c["T"], c["tree"], c["scheme"]))
        if p is None:
            continue
        k = (c["T"], c["tree"], c["scheme"])
        same = abs(means[(*k, f"exact:{c['best']}")] - p["best_mean"]) < _ZERO and (
            abs(means[(*k, f"upper:{c['rule']}")] - p["bound"]) < _ZERO
        )
        if not same:
            changed.append(f"{c['tree']} {c['scheme']} T={c['T']:g} ({p['best']} / {p['rule']})")
        d = p["width"] - c["width"]
        moves.append((abs(d), c))
        other = "" if same else f" ({p['best']} / {p['rule']})"
        lines.append(
            f"| {c['T']:g} | {c['tree']} | {c['scheme']} | {c['best']} / {c['rule']} "
            f"| {_width(c)} | {_width(p)}{other} | {d:+.3f} |"
        )
    if moves:
        top = max(moves, key=lambda m: m[0])
        lines += [
            "",
            f"{len(moves)} cells; |width per problem - width per call|: median "
            f"{statistics.median(m for m, _ in moves):.3f}, largest {top[0]:.3f} ({top[1]['tree']} "
            f"{top[1]['scheme']}, T = {top[1]['T']:g}). Per-problem weighting picks another best verifier or "
            f"rule (not tied with the per-call one) in {len(changed)} cells"
            + (f": {', '.join(changed)}." if changed else "."),
        ]
    return "\n".join(lines)


def new_columns_weighting(rows, agg, limit: int = 8) -> str:
    """The new columns' means (``lookahead``, ``gbv``, every certified rule) per call against per
    problem (``agg``: :func:`per_problem_rows`), the largest differences first, as :func:`weighting`."""
    keys = set(new_columns(rows))
    per_call = {
        (t["T"], t["tree"], t["scheme"], t["method"]): t for t in summarize(rows) if t["method"] in keys
    }
    per_prob = {
        (t["T"], t["tree"], t["scheme"], t["method"]): t for t in summarize(agg) if t["method"] in keys
    }
    out = sorted(
        (
            (k, per_call[k], per_prob[k], per_prob[k]["mean"] - per_call[k]["mean"])
            for k in per_call
            if k in per_prob
        ),
        key=lambda x: -abs(x[3]),
    )
    if not out:
        return "No new columns in these rows."
    lines = [
        "| T | tree | scheme | method | per call | per problem | per problem - per call |",
        "|---|---|---|---|---|---|---|",
    ]
    for (T, tree, scheme, k), pc, pp, d in out[:limit]:
        lines.append(
            f"| {T:g} | {tree} | {scheme} | {k} | {pc['mean']:.3f} | {pp['mean']:.3f} ± {pp['ci95']:.3f} "
            f"| {d:+.3f} |"
        )
    diffs = [abs(x[3]) for x in out]
    lines += [
        "",
        f"{len(out)} (T, tree, scheme, method) means of the new columns; |per problem - per call|: largest "
        f"{max(diffs):.3f}, median {statistics.median(diffs):.3f}, {sum(d >= 0.05 for d in diffs)} of "
        f"{len(diffs)} at 0.05 or more.",
    ]
    return "\n".join(lines)


def moves_summary(by_call, by_problem) -> str:
    """How much the new paired differences move between the two weightings: the median and largest
    change, and the comparisons whose sign or significance at the 5% level differs."""
    keys, moves, flips = _moves(by_call, by_problem)
    if not keys:
        return "No paired differences of the new columns."
    out = [
        f"{len(keys)} paired differences of the new columns (those equal up to rounding left out); "
        f"|per problem - per call|: median {statistics.median(m for m, _ in moves):.3f}, largest "
        f"{moves[0][0]:.3f} ({moves[0][1][0]}, T = {moves[0][1][1]:g}). Sign or significance at the 5% "
        f"level differs in {len(flips)} of them" + (":" if flips else ".")
    ]
    out += _flip_lines(flips, by_call, by_problem)
    return "\n".join(out)


def checks(rows, table, index=None) -> str:
    """What the theory says the new columns must satisfy, checked on the rows.

    In the mean (each up to noise, so with the paired interval and p-value of every exception):
    every certified rule's mean is at least every valid verifier's (docs/math.md#the-tree-dual), and
    ``lookahead`` is at least node-wise ``optimal`` (docs/math.md#lookahead-verification). Call by
    call (the largest |difference| over the calls): ``lookahead`` and ``gbv`` equal ``block`` on
    chains, and on top_n trees ``lookahead`` and ``naive`` equal the ``top_n`` rule (the optimum).
    Also the rules whose mean exceeds the trivial bound depth + 1 (certified, but vacuous)."""
    index = call_index(rows) if index is None else index
    keys = _cell_keys(rows)
    best: dict = {}
    for t in table:
        if t["method"].startswith("exact:"):
            k = (t["T"], t["tree"], t["scheme"])
            if k not in best or t["mean"] > best[k]["mean"]:
                best[k] = t
    out = []
    below, tied, checked, vacuous = [], 0, 0, []
    for t in table:
        if not t["method"].startswith("upper:"):
            continue
        k = (t["T"], t["tree"], t["scheme"])
        b = best.get(k)
        if b is None:
            continue
        checked += 1
        if t["mean"] > parse_shape(t["tree"]).depth + 1:
            vacuous.append(f"{t['tree']} {t['scheme']} T={t['T']:g} {t['method']} {t['mean']:.3f}")
        if abs(t["mean"] - b["mean"]) < _ZERO:
            tied += 1
            continue
        if t["mean"] > b["mean"]:
            continue
        res = paired(rows, (k[1], k[2], t["method"]), (k[1], k[2], b["method"]), index=index)[k[0]]
        below.append(
            f"- {t['tree']} {t['scheme']} T={t['T']:g}: {t['method']} - {b['method']} "
            f"{_fmt(res[0], res[1], res[4])}"
        )
    out.append(
        f"Certified rule means against the best verifier's mean: {checked} (cell, rule) pairs, {tied} "
        f"equal up to rounding (top_n: the rule is the optimum), {len(below)} below"
        + (" (paired, same calls; a bound is certified in the mean, so only an interval wholly below 0 "
           "contradicts it):" if below else ".")
    )  # fmt: skip
    out += below
    low = []
    n_la = 0
    for (tree, scheme), ks in keys.items():
        if "exact:lookahead" in ks and "exact:optimal" in ks:
            for T, res in paired(rows, (tree, scheme, "exact:lookahead"), (tree, scheme, "exact:optimal"),
                                 index=index).items():  # fmt: skip
                n_la += 1
                if res[0] < -_ZERO:
                    low.append(
                        f"- {tree} {scheme} T={T:g}: lookahead - optimal {_fmt(res[0], res[1], res[4])}"
                    )
    out.append(
        f"lookahead - node-wise optimal (proved >= 0 in the mean over drafted trees): {n_la} (cell, T), "
        f"{len(low)} with a negative mean" + (":" if low else ".")
    )
    out += low
    ident = []
    for (tree, scheme), ks in keys.items():
        shape = parse_shape(tree)
        pairs = []
        if all(b == 1 for b in shape.branching):
            pairs += [(k, "exact:block") for k in NEW_VERIFIERS if k in ks and "exact:block" in ks]
        if scheme == "top_n" and "upper:top_n" in ks:
            pairs += [(k, "upper:top_n") for k in ("exact:lookahead", "exact:naive") if k in ks]
        for a, b in pairs:
            d = [
                abs(r[a] - r[b])
                for r in rows
                if (r["tree"], r["scheme"]) == (tree, scheme)
                and r.get(a) is not None
                and r.get(b) is not None
            ]
            if d:
                ident.append((max(d), f"{tree} {scheme}: {_label(a)} = {_label(b)}", len(d)))
    if ident:
        worst = max(ident)
        out.append(
            f"Identities call by call ({len(ident)}: lookahead and gbv = block on chains, lookahead and "
            f"naive = the top_n rule on top_n trees): largest |difference| {worst[0]:.1e} ({worst[1]}, "
            f"{worst[2]} calls)."
        )
    out.append(
        "Rule means above the trivial bound depth + 1 (certified but vacuous): "
        + (", ".join(vacuous) if vacuous else "none")
        + "."
    )
    return "\n".join(out)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    folder = Path(argv[0] if argv else "docs/results/trees")
    rows = load_rows(folder)
    table = summarize(rows)
    calls = sum(1 for r in rows if "emitted" in r)
    problems = len({r["record"] for r in rows})
    c = measured_cost_ratio(rows)
    print(
        f"{len(rows)} rows, {calls} target calls, {problems} problems. " + interval_note(problems, "problem")
    )
    print()
    print("## Tokens per target call\n")
    print(format_table(table))
    print()
    print("## Paired differences (tokens per call, same calls)\n")
    print(comparisons(rows))
    print()
    print("## Relative gain of traversal over the node-wise verifier (same calls)\n")
    print(relative_gains(rows))
    print()
    print("## Weighting: per call (the tables above) against per problem\n")
    print(weighting(rows)[0])
    print()
    print(selected_per_problem(rows))
    print()
    print(
        "Paired differences with each problem weighing 1 (the mean of its calls' differences; "
        "t interval over problems):\n"
    )
    by_call, by_problem = {}, {}
    comparisons(rows, collect=by_call)
    print(comparisons(rows, per_problem=True, collect=by_problem))
    print()
    print(weighting_of_differences(by_call, by_problem))
    print()
    print("## The driver's sampled tokens against its exact value (paired per call)\n")
    print(sampled_vs_exact(rows))
    print()
    print("## Figures compared with published claims\n")
    print(literature(rows))
    print()
    print("## Wall time of the calls per machine\n")
    print(wall_time(folder, rows))
    print()
    print(f"## Speedup model at the measured cost ratio c = {c:.3f} (the first edition's model)\n")
    print(
        format_table(
            [dict(t, mean=t["speedup"], ci95=float("nan")) for t in table if t["speedup"] is not None]
        )
    )
    for name in ("cost.json", "cost_wall2.json"):  # one-thread CPU seconds; two-thread wall seconds
        cost_file = Path(__file__).resolve().parent.parent / "docs" / "results" / "trees2" / name
        if cost_file.exists():
            measured_cost_section(json.loads(cost_file.read_text(encoding="utf-8")), name, table)
    second_edition(rows, table)
    return 0


def measured_cost_section(cost, name, table) -> None:
    """The speedup over plain decoding of every cell with the forward costs of ``name``."""
    print()
    title = "" if name == "cost.json" else f", {name}"  # the first file keeps its section's title
    print(f"## Speedup over plain decoding with measured forward costs (scripts/tree_cost.py{title})\n")
    from tree_cost import medians, slope_ms

    med = medians(cost)
    basis = {"cpu": "CPU seconds", "wall": "wall seconds"}[cost.get("basis", "wall")]
    print(
        f"Costs: {cost['cpu']['model_name']}, {cost['dtype']}, {cost['threads']} thread(s), {basis}, "
        f"context {cost['context_tokens']} tokens, median of {cost['reps']} interleaved rounds "
        f"(docs/results/trees2/{name}): target {1000 * med['target'][1]:.0f} ms for one position, "
        f"+{slope_ms(cost, 'target'):.1f} ms per position (least squares, 16-192 positions); draft "
        f"{1000 * med['draft'][1]:.0f} ms, +{slope_ms(cost, 'draft'):.1f} ms per position. Speedup = "
        "tokens per call x t_target(1) / (the call's draft forwards + its target forward over the "
        "pending tokens and the tree's nominal nodes), each cell at its best exact verifier; the last "
        "column is a call's cost in plain decoding steps (target forwards of one position). The verifiers' "
        "own cost per call is not included (measured at full vocabulary by benchmarks/bench_lookahead.py "
        "--sampling-trees: docs/performance.md)."
    )
    print()
    print(measured_speedups(table, cost))


def second_edition(rows, table) -> None:
    """The sections of the second edition's columns (lookahead, gbv, the certified rules); on rows
    without them (the first edition) each section says so in one line."""
    new = new_columns(rows)
    rules = [k for k in new if k.startswith("upper:")]
    index = call_index(rows)
    print()
    print("## Certified sandwich per cell (second edition)\n")
    cells = sandwich(rows, table) if rules else []
    if not cells:
        print("No certified bound column (upper:<rule>) in these rows: no sandwich.")
    else:
        print(
            "Per cell: the best verifier (highest mean), the certified rule whose interval ends lowest, and "
            "the width between them (the mean of the per-call differences rule - best, clustered by problem; "
            "docs/math.md#the-tree-dual). The mean optimum over all valid verifiers at the contexts reached "
            "lies in [best verifier, bound]; a rule is certified in the mean only, so a width's interval may "
            "reach below 0. Both choices are made on these means (the highest of several verifiers, the "
            "lowest of the rules), which can bias the width down where the candidates are close.\n"
        )
        print(format_sandwich(cells))
        print()
        print("Per scheme, the widths relative to the best verifier:\n")
        print(sandwich_summary(cells))
    print()
    print("## Paired comparisons of the new verifiers and bound rules (same calls)\n")
    if not new:
        print("No lookahead, gbv or certified-bound columns in these rows: nothing to compare.")
    else:
        by_call, by_problem = {}, {}
        print(new_comparisons(rows, collect=by_call, index=index))
    print()
    print("## The new columns under per-problem weighting\n")
    if not new:
        print("No lookahead, gbv or certified-bound columns in these rows: nothing to weigh.")
    else:
        agg = per_problem_rows(rows)
        if cells:
            print(
                "The sandwich with each problem weighing 1 (per-problem means; the best verifier and the "
                "rule chosen again from them, named where they differ; t interval over problems):\n"
            )
            agg_table = summarize(agg)
            cells_p = sandwich(agg, agg_table)
            print(sandwich_weighting(cells, cells_p, agg_table))
            print()
            print(sandwich_summary(cells_p))
            print()
        print("The new columns' means, largest differences first:\n")
        print(new_columns_weighting(rows, agg))
        print()
        print("Paired differences of the new columns with each problem weighing 1:\n")
        print(new_comparisons(rows, per_problem=True, collect=by_problem, index=index))
        print()
        print(moves_summary(by_call, by_problem))
    print()
    print("## Checks of the new columns\n")
    if not new:
        print("No lookahead, gbv or certified-bound columns in these rows: nothing to check.")
    else:
        print(checks(rows, table, index=index))


if __name__ == "__main__":
    sys.exit(main())

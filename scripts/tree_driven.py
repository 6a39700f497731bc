#!/usr/bin/env python
"""Does driving change the answer? A verifier decoded on its own against the same cell at the
traversal driver's positions (the second edition's driven runs, ``run_tree_report2.sh driven-*``).

    python scripts/tree_driven.py DRIVEN [DRIVEN ...] --main MAIN [--cost docs/results/trees2/cost.json]
        [--verify-ms rrs=5,optimal=63,...]

``DRIVEN``: decode folders (or committed row folders) of one cell each, decoded by one verifier;
``MAIN``: the union run whose driver is traversal on ``[4,2,2,1]`` i.i.d. (``docs/results/trees`` or
the second edition's ``main``). For every driven folder, temperature and verifier evaluated in both:
the per-problem mean tokens per call in the driven run minus the same cell's per-problem mean in the
main run, over the problems both hold, with a t interval over problems and its two-sided p-value
(paired by problem: the calls differ, the problems are the same). Then, per cell decoded by several
drivers, each pair of verifiers compared as each decodes on its own against the same comparison at the
traversal driver's positions (``head_to_head``). Also the driven run's sampled tokens against its own
exact value (paired per call), and its measured wall time per generated token (drafting and the target
forward; the exact values of every verifier, which decoding does not need, left out; the driver's
verification added with ``--verify-ms``) against plain decoding's (``t_T(1)`` of a two-thread
wall-time ``cost.json`` measured on the same machine, ``--cost``), the speedup a real decoder got.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from mdsd_ot.intervals import cluster_mean_ci, t_quantile  # noqa: E402


def _rows(folder: Path) -> list[dict]:
    if (folder / "SHA256SUMS").exists():
        from study_rows import load_rows

        return load_rows(folder)
    from mdsd_ot import _store

    return _store.read_rows(folder)


def _p(mean: float, ci: float, G: int) -> float:
    from scipy.stats import t

    if G < 2 or not ci > 0:
        return float("nan")
    return float(2.0 * t.sf(abs(mean) / (ci / t_quantile(G)), G - 1))


def _fmt(mean, ci, p) -> str:
    ptxt = "< 0.001" if p < 0.001 else f"= {p:.3f}" if p < 0.01 else f"= {p:.2f}"
    return f"{mean:+.3f} ± {ci:.3f} (p {ptxt})"


def per_problem(rows, T, tree, scheme, key) -> dict:
    """``{record: mean of key over its calls}`` of one cell."""
    out: dict = {}
    for r in rows:
        if r["T"] == T and r["tree"] == tree and r["scheme"] == scheme and r.get(key) is not None:
            out.setdefault(r["record"], []).append(float(r[key]))
    return {g: math.fsum(v) / len(v) for g, v in out.items()}


def _paired(d: dict, common: list) -> str:
    """Mean of the per-problem differences ``d`` over ``common`` with its t interval and p-value."""
    mean, ci = cluster_mean_ci([d[g] for g in common], common)
    return _fmt(mean, ci, _p(mean, ci, len(common)))


def compare(driven, main) -> list[str]:
    cell = {(r["tree"], r["scheme"]) for r in driven if "emitted" in r}
    if len(cell) != 1:
        raise ValueError(f"a driven folder decodes one cell; found {sorted(cell)}")
    tree, scheme = cell.pop()
    driver = next(r["driver"] for r in driven if "emitted" in r)
    temps = sorted({r["T"] for r in driven})
    keys = sorted(
        {k for r in driven if (r["tree"], r["scheme"]) == (tree, scheme) for k in r if k.startswith("exact:")}
    )
    lines = [
        f"### {tree} {scheme}, decoded by {driver}",
        "",
        "| verifier | " + " | ".join(f"T={T:g}: driven - at traversal's positions" for T in temps) + " |",
        "|---|" + "---|" * len(temps),
    ]
    for key in keys:
        cells = []
        for T in temps:
            a, b = per_problem(driven, T, tree, scheme, key), per_problem(main, T, tree, scheme, key)
            common = sorted(set(a) & set(b))
            if len(common) < 2:
                cells.append("")
                continue
            cells.append(f"{_paired({g: a[g] - b[g] for g in common}, common)}, {len(common)} problems")
        lines.append(f"| {key.split(':', 1)[1]} | " + " | ".join(cells) + " |")
    lines.append("")
    for T in temps:
        v = [
            (r["emitted"] - r[f"exact:{driver}"], r["record"])
            for r in driven
            if r["T"] == T and "emitted" in r and r.get(f"exact:{driver}") is not None
        ]
        if v:
            mean, ci = cluster_mean_ci([x for x, _ in v], [g for _, g in v])
            G = len({g for _, g in v})
            lines.append(
                f"- T = {T:g}: sampled - exact ({driver}), paired per call: {_fmt(mean, ci, _p(mean, ci, G))}"
            )
    return lines


def head_to_head(runs, main) -> list[str]:
    """Verifiers compared as each decodes on its own: for two driven runs of one cell, the per-problem
    mean of A's exact value at A's positions minus B's at B's positions (paired by problem: the same
    prompts, different calls), beside the same difference at the traversal driver's positions in
    ``main`` on the same problems, and their difference (does decoding on its own change the
    comparison?), each with a t interval over problems. ``runs``: the rows of each driven folder."""
    by_cell: dict = {}
    for rows in runs:
        head = next(r for r in rows if "emitted" in r)
        by_cell.setdefault((head["tree"], head["scheme"]), []).append((head["driver"], rows))
    lines = []
    for (tree, scheme), drivers in sorted(by_cell.items()):
        if len(drivers) < 2:
            continue
        temps = sorted({r["T"] for _, rows in drivers for r in rows})
        lines += [
            f"### {tree} {scheme}: each verifier decoding on its own, against traversal's positions",
            "",
            "| A - B | "
            + " | ".join(
                f"T={T:g}: own decodings | at traversal's positions | own - at positions" for T in temps
            )
            + " |",
            "|---|" + "---|---|---|" * len(temps),
        ]
        drivers.sort(key=lambda d: d[0])
        for i, (a, rows_a) in enumerate(drivers):
            for b, rows_b in drivers[i + 1 :]:
                cells = []
                for T in temps:
                    own_a = per_problem(rows_a, T, tree, scheme, f"exact:{a}")
                    own_b = per_problem(rows_b, T, tree, scheme, f"exact:{b}")
                    at_a = per_problem(main, T, tree, scheme, f"exact:{a}")
                    at_b = per_problem(main, T, tree, scheme, f"exact:{b}")
                    common = sorted(set(own_a) & set(own_b) & set(at_a) & set(at_b))
                    if len(common) < 2:
                        cells += ["", "", ""]
                        continue
                    own = {g: own_a[g] - own_b[g] for g in common}
                    same = {g: at_a[g] - at_b[g] for g in common}
                    cells += [_paired(d, common) for d in (own, same, {g: own[g] - same[g] for g in common})]
                lines.append(f"| {a} - {b} | " + " | ".join(cells) + " |")
        lines.append("")
    return lines


def wall_per_token(driven, cost, verify_ms=None) -> list[str]:
    """Wall seconds of drafting + the target forward per generated token, and the speedup over plain
    decoding at ``cost``'s ``t_T(1)``, beside the speedup the measured-cost model predicts for the
    run's own tokens per call (``tree_cost.measured_speedup``; it counts every drafted node as a
    position, so it is a lower bound where i.i.d. drafts repeat a token). The rows time drafting and
    the target forward, not the driver's own verification (the decoder verifies after computing every
    verifier's exact value, whose prepared state the driver reuses); ``verify_ms`` (``{driver: CPU
    milliseconds per call}``, measured on fresh trees by ``benchmarks/bench_lookahead.py``) adds it."""
    from tree_cost import _interp, call_cost, measured_speedup, medians

    # like for like only: the runs' two-thread wall seconds against a two-thread wall-time baseline
    same = cost and cost.get("basis", "wall") == "wall" and cost.get("threads") == 2
    target = medians(cost)["target"] if same else None
    plain = target[1] if same else None
    out = []
    for T in sorted({r["T"] for r in driven}):
        calls = [r for r in driven if r["T"] == T and "emitted" in r]
        toks = sum(len(r.get("tokens", [])) for r in calls)
        if not toks:
            continue
        extra = (verify_ms or {}).get(calls[0]["driver"], 0.0) / 1000.0
        secs = math.fsum(r["t_draft"] + r["t_target"] + extra for r in calls)
        per = secs / toks
        # robust to other jobs slowing some calls down: the median call over the mean tokens per call
        per_median = (
            (statistics.median(r["t_draft"] + r["t_target"] for r in calls) + extra) * len(calls) / toks
        )
        text = f"- T = {T:g}: {1000 * per:.1f} ms per generated token over {toks} tokens ({len(calls)} calls"
        text += f"; verification {1000 * extra:.0f} ms per call included)" if extra else ")"
        text += f", {1000 * per_median:.1f} ms at the median call"
        if plain:
            tau = sum(r["emitted"] for r in calls) / len(calls)
            model = measured_speedup(tau, calls[0]["tree"], cost)
            text += (
                f"; speedup over plain decoding {plain / per:.2f}, {plain / per_median:.2f} at the median "
                f"call (t_T(1) = {1000 * plain:.1f} ms; the model at {tau:.3f} tokens per call: {model:.2f})"
            )
            if all("positions" in r for r in calls):
                # the forwards as the model prices them, but at each call's recorded positions (the
                # distinct nodes + 1) plus the pending tokens, over the tokens kept: what the run would
                # cost if a call were its forwards (draft widths nominal) and its verification
                draft, _ = call_cost(calls[0]["tree"], cost, tau)
                priced = math.fsum(
                    draft + _interp(target, r["positions"] - 1 + tau, "target forward") + extra for r in calls
                )
                text += (
                    f"; forwards priced at the recorded positions: {1000 * priced / toks:.1f} ms per token"
                )
        elif cost:
            text += (
                " (no speedup: cost.json is not a two-thread wall-time measurement; measure the baseline "
                "on the run's machine with scripts/tree_cost.py measure --threads 2 --basis wall --out FILE "
                "and pass --cost FILE)"
            )
        out.append(text)
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("driven", nargs="+")
    parser.add_argument("--main", default=str(ROOT / "docs" / "results" / "trees"))
    parser.add_argument("--cost", default=str(ROOT / "docs" / "results" / "trees2" / "cost.json"))
    parser.add_argument(
        "--verify-ms",
        default="",
        help="driver=ms,...: each driver's verification per call (benchmarks/bench_lookahead.py), added",
    )
    args = parser.parse_args(argv)
    try:
        verify_ms = {k: float(v) for k, v in (x.split("=") for x in args.verify_ms.split(",") if x)}
    except ValueError:
        parser.error(f"--verify-ms takes comma-separated driver=milliseconds pairs, got {args.verify_ms!r}")
    main_rows = _rows(Path(args.main))
    cost = json.loads(Path(args.cost).read_text()) if Path(args.cost).exists() else None
    runs = []
    for folder in args.driven:
        rows = _rows(Path(folder))
        if not rows:
            print(f"{folder}: no finished problems yet")
            continue
        runs.append(rows)
        try:
            print("\n".join(compare(rows, main_rows)))
        except ValueError as exc:
            print(f"tree_driven.py: {folder}: {exc}", file=sys.stderr)
            return 1
        print("\n".join(wall_per_token(rows, cost, verify_ms)))
        print(f"({len({r['record'] for r in rows})} problems)")
        print()
    print("\n".join(head_to_head(runs, main_rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

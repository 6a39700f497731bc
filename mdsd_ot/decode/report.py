"""Summary of a decode folder: block efficiency per cell and verifier with clustered 95% intervals,
the certified upper bound per cell and the width of the sandwich [best verifier, bound], the SpecTr
speedup model, and two plots (vs temperature, vs tree size)."""

from __future__ import annotations

import csv
import io
import json
import math
import numbers
from pathlib import Path

from .. import _store
from ..intervals import cluster_mean_ci, interval_note  # noqa: F401  (the one interval formula, via the runs wing)
from ..keys import is_exact, is_upper, split_method
from ..runs.statistics import clustered_mean, values_of
from ..trees import parse_shape, speedup

__all__ = ["summarize", "sandwich", "write_report", "measured_cost_ratio"]


def _methods(rows) -> list[str]:
    keys = {k for r in rows for k in r if is_exact(k) or is_upper(k)}
    out = sorted(keys)
    if any("bound" in r for r in rows):
        out.append("bound")  # shown as "heuristic"
    out.append("sampled")
    return out


def _calls(rows) -> int:
    """Target calls: rows carrying a sample (one per call; in a union run one row per cell and call)."""
    return sum(1 for r in rows if "emitted" in r)


def _union_note(rows) -> str:
    drives = sorted({r["drive"] for r in rows if r.get("drive")})
    if not drives:
        return ""
    return (
        f" Union run (docs/math.md#union-trees): at every call one tree per scheme with nested draws "
        f"serves every shape as its first-children sub-tree; decoding follows {', '.join(drives)} "
        f"(verifier {', '.join(sorted({r['driver'] for r in rows if r.get('drive')}))}), and every other "
        f"cell's values are evaluated at the driving cell's call positions, not on continuations of "
        f"their own."
    )


def _proven_note(table) -> str:
    """What is proven about the best value per cell: on chains block verification is optimal among all
    valid verifiers (Sun et al. 2025); on deterministic top_n trees the membership verifier (naive) is
    (docs/math.md); elsewhere the best verifier measured is only the best known."""
    best: dict = {}
    for t in table:
        if is_exact(t["method"]):
            k = (t["T"], t["tree"], t["scheme"])
            if k not in best or t["mean"] > best[k]["mean"]:
                best[k] = t
    if not best:
        return ""
    lines = [
        "| T | tree | scheme | best verifier | tokens per call | optimal? |",
        "|---|---|---|---|---|---|",
    ]
    for (T, tree, scheme), t in sorted(
        best.items(), key=lambda kv: (kv[0][0], parse_shape(kv[0][1]).size, kv[0][1:])
    ):
        shape = parse_shape(tree)
        name = split_method(t["method"])[1]
        if scheme == "top_n" and name in ("naive", "lookahead"):  # both attain the top_n optimum
            why = "yes (membership is optimal on deterministic trees)"
        elif all(b == 1 for b in shape.branching) and name in ("block", "lookahead"):  # lookahead = block
            why = "yes (block verification is optimal on a chain)"
        else:
            why = "best known (no proven optimum at this size)"
        lines.append(f"| {T:g} | {tree} | {scheme} | {_method_label(name)} | {_fmt(t)} | {why} |")
    return "\n".join(lines)


def measured_cost_ratio(rows) -> float | None:
    """Cost of one draft forward relative to one target forward, from the rows' timings:
    ``sum(t_draft) / sum(draft_forwards)`` over ``sum(t_target) / calls`` (drafting includes the
    scheme's sampling; the target time includes converting logits to float64 laws).

    Parameters
    ----------
    rows : iterable of dict
        Decode rows.

    Returns
    -------
    float or None
        None when no row has timings (or the target time is zero).
    """
    rows = [r for r in rows if "t_draft" in r and r.get("draft_forwards")]
    if not rows:
        return None
    per_draft = math.fsum(r["t_draft"] for r in rows) / sum(r["draft_forwards"] for r in rows)
    per_target = math.fsum(r["t_target"] for r in rows) / len(rows)
    return per_draft / per_target if per_target > 0 else None


#: A shard run given ``--cost-ratio`` writes no summary (its rows are part of a run); it records the
#: ratio here, ``{"cost_ratio": c}``, for :func:`given_cost_ratio` (the merge) to find.
COST_RATIO_FILE = "cost_ratio.json"


def record_cost_ratio(out, cost_ratio: float | None) -> None:
    """Record the ``--cost-ratio`` a shard ran with in its folder (None: remove a stale record, the
    latest run measured)."""
    path = Path(out) / COST_RATIO_FILE
    if cost_ratio is None:
        path.unlink(missing_ok=True)
        return
    _store.atomic_write(path, json.dumps({"cost_ratio": float(cost_ratio)}), step=COST_RATIO_FILE)


def given_cost_ratio(folders) -> float | None:
    """The cost ratio every folder was given when all were given the same one (``--cost-ratio``): read
    from its summary (a whole run) or, for a shard, which writes none, from :data:`COST_RATIO_FILE`;
    else None (the merged rows' measured ratio applies)."""
    seen = set()
    for f in folders:
        path = Path(f) / "summary.json"
        if path.exists():
            table = json.loads(path.read_text())
            if not table or table[0].get("cost_ratio_source") != "given":
                return None
            seen.add(table[0]["cost_ratio"])
            continue
        try:
            seen.add(float(json.loads((Path(f) / COST_RATIO_FILE).read_text())["cost_ratio"]))
        except (OSError, ValueError, KeyError, TypeError):
            return None
    return seen.pop() if len(seen) == 1 else None


def check_cost_ratio(cost_ratio) -> float | None:
    """``cost_ratio`` as a float: None, or a finite number >= 0 (``ValueError`` / ``TypeError``
    otherwise: a NaN, infinite or negative ratio would print NaN or negative speedups)."""
    if cost_ratio is None:
        return None
    if isinstance(cost_ratio, bool) or not isinstance(cost_ratio, numbers.Real):
        raise TypeError(f"cost ratio must be a number, got {type(cost_ratio).__name__} {cost_ratio!r}")
    c = float(cost_ratio)
    if not (math.isfinite(c) and c >= 0.0):
        raise ValueError(
            f"cost ratio must be a finite number >= 0 (draft forward time / target forward time), got {c!r}"
        )
    return c


def summarize(rows, *, cost_ratio: float | None = None) -> list[dict]:
    """Mean tokens per target call per (T, tree, scheme, method) with a 95% interval clustered by prompt.

    Methods: ``exact:<verifier>`` (the exact recursion on every call's tree), ``upper:<rule>`` (a
    tree-dual rule, docs/math.md#the-tree-dual: its mean is a certified upper bound on every valid
    verifier at the contexts reached), ``bound`` (the node-alpha* heuristic, shown as ``heuristic``)
    and ``sampled`` (tokens the driving verifier actually emitted). ``speedup`` is the SpecTr model
    ``tau / (1 + D c)`` at ``cost_ratio`` (default: :func:`measured_cost_ratio`).

    Parameters
    ----------
    rows : iterable of dict
        Decode rows (one per target call and cell).
    cost_ratio : float or None
        Draft/target forward cost ratio ``c``; None: :func:`measured_cost_ratio` of ``rows``.

    Returns
    -------
    list of dict
        One per (T, tree, scheme, method), sorted by T and tree size: ``mean``, ``ci95``, ``calls``,
        ``records``, ``failed``, ``cost_ratio`` (and its source) and ``speedup`` (None without a ratio).
    """
    cost_ratio = check_cost_ratio(cost_ratio)
    c = measured_cost_ratio(rows) if cost_ratio is None else cost_ratio
    cells: dict = {}
    for r in rows:
        cells.setdefault((r["T"], r["tree"], r["scheme"]), []).append(r)
    table = []
    for (T, tree, scheme), rs in sorted(
        cells.items(), key=lambda kv: (kv[0][0], parse_shape(kv[0][1]).size, kv[0][1], kv[0][2])
    ):
        depth = parse_shape(tree).depth
        for method in _methods(rs):
            key = "emitted" if method == "sampled" else method
            vals, failed = values_of(rs, key)
            if not vals:
                continue
            mean, ci, count, records = clustered_mean(vals)
            table.append(
                {
                    "T": T,
                    "tree": tree,
                    "tree_size": parse_shape(tree).size,
                    "scheme": scheme,
                    "method": {"sampled": f"sampled:{rs[0]['driver']}", "bound": "heuristic"}.get(
                        method, method
                    ),
                    "mean": mean,
                    "ci95": ci,
                    "calls": count,
                    "records": records,
                    "failed": failed,
                    "cost_ratio": c,
                    "cost_ratio_source": "measured" if cost_ratio is None else "given",
                    "speedup": speedup(mean, depth, c) if c is not None else None,
                }
            )
    return table


def sandwich(rows, table=None) -> list[dict]:
    """Per (T, tree, scheme) cell: the best verifier, the certified bound and the width between them.

    The best verifier is the ``exact:<verifier>`` method with the highest mean; the bound is the
    ``upper:<rule>`` method with the lowest upper end of its interval (``mean + ci95``; each rule's
    mean is certified, so is the smaller of two, and ranking by the interval's end keeps a rule whose
    per-call values spread widely from being picked for a lucky low mean);
    the width is the clustered mean of the per-call differences ``upper:<rule> - exact:<best>`` over
    the calls that carry both (a paired difference: its interval is narrower than the two apart),
    ``relative`` that width over the best verifier's mean. Intervals are 95%, clustered by prompt.

    Parameters
    ----------
    rows : iterable of dict
        Decode rows.
    table : list of dict or None
        :func:`summarize` of ``rows`` (computed when None).

    Returns
    -------
    list of dict
        ``T``, ``tree``, ``scheme``, ``best``, ``best_mean``, ``best_ci95``, ``rule``, ``bound``,
        ``bound_ci95``, ``bound_calls``, ``width``, ``width_ci95``, ``relative``, ``calls``, ``records``;
        cells without both a verifier and a bound are left out.
    """
    rows = list(rows)
    table = summarize(rows) if table is None else table
    by_cell: dict = {}
    for t in table:
        by_cell.setdefault((t["T"], t["tree"], t["scheme"]), []).append(t)
    cells: dict = {}
    for r in rows:
        cells.setdefault((r["T"], r["tree"], r["scheme"]), []).append(r)
    out = []
    for key, entries in by_cell.items():
        exact = [t for t in entries if is_exact(t["method"])]
        upper = [t for t in entries if is_upper(t["method"])]
        if not exact or not upper:
            continue
        best = max(exact, key=lambda t: t["mean"])
        bound = min(upper, key=lambda t: t["mean"] + (t["ci95"] if math.isfinite(t["ci95"]) else 0.0))
        pairs = [
            (r[bound["method"]] - r[best["method"]], r["record"])
            for r in cells[key]
            if r.get(bound["method"]) is not None and r.get(best["method"]) is not None
        ]
        if not pairs:
            continue
        width, ci, count, records = clustered_mean(pairs)
        out.append(
            {
                "T": key[0],
                "tree": key[1],
                "scheme": key[2],
                "best": split_method(best["method"])[1],
                "best_mean": best["mean"],
                "best_ci95": best["ci95"],
                "rule": split_method(bound["method"])[1],
                "bound": bound["mean"],
                "bound_ci95": bound["ci95"],
                "bound_calls": bound["calls"],
                "width": width,
                "width_ci95": ci,
                "relative": width / best["mean"] if best["mean"] > 0 else math.nan,
                "calls": count,
                "records": records,
            }
        )
    return out


def format_sandwich(cells) -> str:
    """Markdown table of :func:`sandwich`: one line per cell."""
    lines = [
        "| T | tree | scheme | best verifier | tokens per call | certified bound (rule) | width "
        "| width / best | calls |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for c in sorted(cells, key=lambda c: (c["T"], parse_shape(c["tree"]).size, c["tree"], c["scheme"])):

        def ci(m, h):
            m = 0.0 if abs(m) < 5e-10 else m  # rounding noise is not shown as -0.000
            return f"{m:.3f} ± {h:.3f}" if math.isfinite(h) else f"{m:.3f}"

        lines.append(
            f"| {c['T']:g} | {c['tree']} | {c['scheme']} | {c['best']} "
            f"| {ci(c['best_mean'], c['best_ci95'])} "
            f"| {ci(c['bound'], c['bound_ci95'])} ({c['rule']}) | {ci(c['width'], c['width_ci95'])} "
            f"| {0.0 if abs(c['relative']) < 5e-10 else c['relative']:.1%} | {c['calls']} |"
        )
    return "\n".join(lines)


def _fmt(t) -> str:
    return f"{t['mean']:.3f} ± {t['ci95']:.3f}" if math.isfinite(t["ci95"]) else f"{t['mean']:.3f}"


def _method_label(method: str) -> str:
    """How a table names a method: the node-wise ``optimal`` verifier, optimal for one step at each
    node, is labelled so (it is not the optimum over tree verifiers)."""
    return f"{method} (one-step)" if method.split(":", 1)[-1] == "optimal" else method


def format_table(table) -> str:
    """Markdown: one line per (tree, scheme, method), one column per temperature."""
    temps = sorted({t["T"] for t in table})
    lines = [
        "| tree | scheme | method | " + " | ".join(f"T={T:g}" for T in temps) + " | calls |",
        "|---|---|---|" + "---|" * len(temps) + "---|",
    ]
    index = {(t["tree"], t["scheme"], t["method"], t["T"]): t for t in table}
    order = []
    for t in table:
        k = (t["tree"], t["scheme"], t["method"])
        if k not in order:
            order.append(k)
    order.sort(key=lambda k: (parse_shape(k[0]).size, k[0], k[1], k[2] == "heuristic", k[2]))
    for tree, scheme, method in order:
        cells = [index.get((tree, scheme, method, T)) for T in temps]
        calls = "/".join(str(c["calls"]) for c in cells if c)
        lines.append(
            f"| {tree} | {scheme} | {_method_label(method)} | "
            + " | ".join(_fmt(c) if c else "" for c in cells)
            + f" | {calls} |"
        )
    return "\n".join(lines)


def write_report(out, *, title: str = "mdsd_ot tree decoding", cost_ratio=None, plots: bool = True) -> dict:
    """Write ``summary.md/.csv/.json`` and the plots of a decode folder; return the paths written.

    Parameters
    ----------
    out : str or os.PathLike
        A decode folder (``ValueError`` if it holds no finished prompts).
    title : str
        Heading of ``summary.md``.
    cost_ratio : float or None
        As in :func:`summarize`.
    plots : bool
        Also write the plots (skipped without matplotlib).

    Returns
    -------
    dict
        ``{"md", "csv", "json", <plot names>...}`` -> path written.
    """
    out = Path(out)
    rows = _store.read_rows(out)
    if not rows:
        raise ValueError(f"{out} holds no finished prompts yet")
    table = summarize(rows, cost_ratio=cost_ratio)
    written = {}
    buf = io.StringIO()
    fields = list(table[0])
    w = csv.DictWriter(buf, fieldnames=fields, lineterminator="\n")
    w.writeheader()
    for t in table:
        w.writerow(t)
    _store.atomic_write(out / "summary.csv", buf.getvalue(), step="summary.csv")
    _store.atomic_write(out / "summary.json", json.dumps(table, indent=1), step="summary.json")
    c = table[0]["cost_ratio"]
    md = [
        f"# {title}",
        "",
        f"{_calls(rows)} target calls, {len({r['record'] for r in rows})} prompts. Tokens per target call "
        "(block efficiency): `exact:<verifier>` is the exact expectation on every drafted tree (all "
        "verifiers on the same trees), `sampled:<driver>` what decoding actually emitted"
        + (
            ", `heuristic` the node-alpha* recursion (each node at alpha* of its scheme: neither a bound "
            "nor an estimate of the optimum, docs/math.md#tree-bound-estimate)"
            if any("bound" in r for r in rows)
            else ""
        )
        + (
            ", `upper:<rule>` a certified tree-dual rule (docs/math.md#the-tree-dual): each call's value "
            "is not a bound, its mean over the calls is an upper bound on the mean tokens per call of "
            "every valid verifier at the contexts reached"
            if any(is_upper(k) for r in rows for k in r)
            else ""
        )
        + ". "
        + interval_note(len({r["record"] for r in rows}))
        + _union_note(rows),
        "",
        _proven_note(table),
        "",
    ]
    cells = sandwich(rows, table)
    if cells:
        md += [
            "Certified sandwich per cell: the best verifier measured, the certified bound whose interval "
            "ends lowest (its rule), and the width between them (mean of the per-call differences, "
            "clustered by prompt). The mean optimum over all valid verifiers at these contexts lies in "
            "[best verifier, bound]; a bound is certified in the mean only, so with few calls its "
            "interval (and the width's) can reach below the best verifier.",
            "",
            format_sandwich(cells),
            "",
        ]
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=list(cells[0]), lineterminator="\n")
        w.writeheader()
        for cell in cells:
            w.writerow(cell)
        _store.atomic_write(out / "sandwich.csv", buf.getvalue(), step="sandwich.csv")
        written["sandwich"] = out / "sandwich.csv"
    md += [format_table(table), ""]
    if c is not None:
        md.append(
            f"Speedup model (SpecTr): tokens per call / (1 + depth x c) with c = {c:.3f} "
            + ("(measured: draft forward / target forward time)" if cost_ratio is None else "(given)")
        )
        md.append("")
        md.append(
            format_table(
                [dict(t, mean=t["speedup"], ci95=float("nan")) for t in table if t["speedup"] is not None]
            )
        )
        md.append("")
    _store.atomic_write(out / "summary.md", "\n".join(md), step="summary.md")
    written.update(md=out / "summary.md", csv=out / "summary.csv", json=out / "summary.json")
    if plots:
        from ..plots import run_names, run_title

        prompts = len({r["record"] for r in rows})
        counts = f"{prompts} prompt{'' if prompts == 1 else 's'}, {_calls(rows):,} target calls"
        written.update(
            plot_summary(
                table,
                out,
                title=run_title(title, **run_names(out), counts=counts, value="mean tokens per target call"),
            )
        )
    return written


def plot_summary(table, out, *, title: str | None = None) -> dict:
    """``block_efficiency_vs_temperature.png`` (a panel per tree and scheme, a line per verifier; bars
    with one temperature) and ``block_efficiency_vs_tree_size.png`` (a panel per temperature and
    scheme, points per shape), drawn by :func:`mdsd_ot.plots.plot_decode` (fixed style per verifier,
    one shared legend) under ``title``; {} without matplotlib."""
    from .. import plots

    try:
        return plots.plot_decode(table, out, title=title)
    except ImportError:
        return {}

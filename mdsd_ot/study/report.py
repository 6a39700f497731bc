"""Report: summary tables (Markdown, CSV, JSON) and plots, written atomically."""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path

from .. import _store
from ..intervals import interval_note
from ..keys import is_bound, is_gap
from .statistics import summarize


def read_rows(out) -> list[dict]:
    """Rows of ``positions.jsonl`` of a study folder, restricted to verified finished records.

    A record whose rows are damaged, incomplete or duplicated is left out with a
    :class:`StudyWarning` naming it (resuming the study recomputes it).
    """
    return _store.read_rows(out)


def _cell(mean: float, half: float) -> str:
    """``mean ± half`` to 4 decimals; a value that rounds to zero is written 0.0000, never -0.0000."""
    m = f"{mean:.4f}"
    if m == "-0.0000":
        m = "0.0000"
    return f"{m} ± {half:.4f}" if math.isfinite(half) else m


def format_table(table, *, kind: str = "acceptance", order: str = "name") -> str:
    """A Markdown table: one line per method and n, one column per temperature (mean +- ci95).

    ``order="name"``: per n, the bounds then the verifiers by name (the study summaries);
    ``order="family"``: per n, each draft scheme's bound followed by the verifiers built for it, in
    registry order (the demo; :func:`mdsd_ot.plots.family`).
    """
    if order not in ("name", "family"):
        raise ValueError(f"unknown order {order!r}; choose 'name' or 'family'")
    want = is_gap if kind == "gap" else (lambda m: not is_gap(m))
    rows = [t for t in table if want(t["method"])]
    temps = sorted({t["T"] for t in rows})
    lines = [
        "| method | n | " + " | ".join(f"T={T:g}" for T in temps) + " |",
        "|---|---|" + "---|" * len(temps),
    ]
    index = {(t["method"], t["n"], t["T"]): t for t in rows}
    keys = []
    for t in rows:
        if (t["method"], t["n"]) not in keys:
            keys.append((t["method"], t["n"]))
    if order == "family":
        from ..plots import _order

        keys.sort(key=lambda mn: (mn[1], _order(mn[0])))
    else:
        keys.sort(key=lambda mn: (mn[1], not is_bound(mn[0]), mn[0]))
    for method, n in keys:
        cells = []
        for T in temps:
            t = index.get((method, n, T))
            cells.append("" if t is None else _cell(t["mean"], t["ci95"]))
        lines.append(f"| {method} | {n} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _fewer_clusters(table, n_rec: int) -> str:
    """A note when some cells rest on fewer prompts than the study has (their t has fewer degrees of
    freedom; the ``records`` column of summary.csv gives each cell's G)."""
    fewest = min((t["records"] for t in table), default=n_rec)
    if fewest >= n_rec:
        return ""
    return f" Cells evaluated on fewer prompts (down to {fewest}) use their own G (summary.csv: records)."


def write_report(out, *, title: str = "mdsd_ot study", plots: bool = True) -> dict:
    """Write ``summary.md/.csv/.json`` and the plots for a study folder; return the file paths."""
    out = Path(out)
    rows = read_rows(out)
    if not rows:
        raise ValueError(f"{out} holds no finished positions yet")
    table = summarize(rows)
    files = {}
    buf = io.StringIO(newline="")
    w = csv.DictWriter(buf, fieldnames=["method", "T", "n", "mean", "ci95", "count", "records", "failed"])
    w.writeheader()
    w.writerows(table)
    # every summary file replaces the previous one atomically (a kill leaves the old or the new)
    _store.atomic_write(out / "summary.csv", buf.getvalue(), step="summary.csv")
    files["csv"] = out / "summary.csv"
    _store.atomic_write(out / "summary.json", json.dumps(table, indent=1), step="summary.json")
    files["json"] = out / "summary.json"
    n_pos = len({(r["record"], r["pos"]) for r in rows})
    n_rec = len({r["record"] for r in rows})
    md = [
        f"# {title}",
        "",
        f"{n_pos} positions from {n_rec} prompts; mean acceptance per position. "
        + interval_note(n_rec, "prompt")
        + _fewer_clusters(table, n_rec),
        "",
        "## Acceptance",
        "",
        format_table(table),
        "",
        "## Gap to the bound of the verifier's own draft scheme",
        "",
        format_table(table, kind="gap"),
        "",
    ]
    _store.atomic_write(out / "summary.md", "\n".join(md), step="summary.md")
    files["md"] = out / "summary.md"
    if plots:
        from ..plots import run_names, run_title

        counts = f"{n_pos:,} positions from {n_rec} prompt{'' if n_rec == 1 else 's'}"
        files.update(
            plot_summary(
                table, out, title=run_title(title, **run_names(out), counts=counts, value="mean per position")
            )
        )
    return files


def plot_summary(table, out, *, title: str | None = None) -> dict:
    """Acceptance vs temperature (one panel per n) and gap to the bound, with the styles and shared
    legends of :mod:`mdsd_ot.plots` (:func:`~mdsd_ot.plots.plot_families`); {} without matplotlib."""
    from ..plots import plot_families

    try:
        return plot_families(table, out, title=title)
    except ImportError:
        return {}

"""Plots of a summary table (``mdsd-ot demo``, ``scripts/replot_summary.py``): one family per bound.

A *family* is a draft scheme's bound together with the verifiers built for that scheme (``naive``,
``rrs``, ``spectr`` and ``optimal`` with the with-replacement bound; ``rrs_without_replacement`` with
the without-replacement bound; ``greedy`` and ``spechub`` with the greedy bound). A family shares one
colour; the bound is a wide, pale solid line drawn underneath, and each verifier a thin line of its
own style and marker on top, so a verifier that reaches its bound (greedy, SpecHub) stays visible
instead of hiding it. A method evaluated at fewer positions than the others (a subsample, see
``mdsd-ot study --every``) is drawn with hollow markers and says so in the legend.

The input is the list of dicts of :func:`mdsd_ot.study.summarize` (keys ``method``, ``T``, ``n``,
``mean``, ``ci95``, ``count``); matplotlib is imported inside :func:`plot_families`.
"""

from __future__ import annotations

import math
from pathlib import Path

__all__ = ["plot_families", "family", "FAMILY_COLORS"]

#: Colour of each draft scheme's family (matplotlib's default cycle, fixed per scheme).
FAMILY_COLORS = {
    "with_replacement": "C0",
    "without_replacement": "C3",
    "greedy": "C2",
    "hub": "C2",
    "conditional_poisson": "C4",
}

_VERIFIER_ORDER = ("naive", "rrs", "spectr", "optimal", "rrs_without_replacement", "greedy", "spechub")
_STYLES = ("--", ":", "-.", (0, (5, 1, 1, 1, 1, 1)))
_MARKERS = ("s", "^", "v", "D", "x")


def family(method: str) -> str:
    """The draft scheme whose family ``method`` belongs to.

    ``method`` is ``"bound:<scheme>"``, ``"verifier:<name>"`` or ``"gap:<name>"``.

    >>> family("bound:greedy"), family("verifier:spechub"), family("gap:spectr")
    ('greedy', 'greedy', 'with_replacement')
    """
    kind, name = method.split(":", 1)
    if kind == "bound":
        return name
    from .study import verifier_scheme

    return verifier_scheme(name)


def _styles(methods) -> dict:
    """``method -> (color, linestyle, marker, is_bound)``, the same for a verifier and its gap."""
    out, used = {}, {}
    names = sorted(
        {m.split(":", 1)[1] for m in methods if not m.startswith("bound:")},
        key=lambda v: (_VERIFIER_ORDER.index(v) if v in _VERIFIER_ORDER else 99, v),
    )
    for name in names:
        fam = family(f"verifier:{name}")
        k = used.get(fam, 0)
        used[fam] = k + 1
        style = (FAMILY_COLORS.get(fam, "C7"), _STYLES[k % len(_STYLES)], _MARKERS[k % len(_MARKERS)], False)
        out[f"verifier:{name}"] = out[f"gap:{name}"] = style
    for m in methods:
        if m.startswith("bound:"):
            out[m] = (FAMILY_COLORS.get(family(m), "C7"), "-", "o", True)
    return out


def _subsampled(rows) -> dict:
    """``(method, n) -> (fewest positions, positions of the fullest method)`` where a method has fewer
    positions than the fullest one at the same n and temperature."""
    full = {}
    for t in rows:
        key = (t["n"], t["T"])
        full[key] = max(full.get(key, 0), int(t.get("count", 0)))
    out = {}
    for t in rows:
        total = full[(t["n"], t["T"])]
        count = int(t.get("count", total))
        if count < total:
            old = out.get((t["method"], t["n"]), (count, total))
            out[(t["method"], t["n"])] = (min(old[0], count), max(old[1], total))
    return out


def plot_families(table, out, *, title: str | None = None) -> dict:
    """Write ``acceptance_vs_temperature.png`` and ``gap_to_bound.png`` into ``out``.

    Parameters
    ----------
    table : list of dict
        Rows of :func:`mdsd_ot.study.summarize`.
    out : str or Path
        Existing folder.
    title : str or None
        Figure title.

    Returns
    -------
    dict
        ``{"acceptance_plot": path, "gap_plot": path}`` for the figures that had data ({} for an
        empty table).

    Raises
    ------
    ImportError
        When matplotlib is not installed (``pip install matplotlib``, or the ``plot`` extra).
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.lines import Line2D
    except ImportError:
        raise ImportError("plots need matplotlib: pip install matplotlib (the 'plot' extra)") from None
    out = Path(out)
    table = list(table)
    styles = _styles({t["method"] for t in table})
    files = {}
    for kind, fname, ylabel in (
        ("acceptance", "acceptance_vs_temperature.png", "mean acceptance"),
        ("gap", "gap_to_bound.png", "bound of its scheme - verifier acceptance"),
    ):
        rows = [t for t in table if t["method"].startswith("gap:") == (kind == "gap")]
        if not rows:
            continue
        ns = sorted({t["n"] for t in rows})
        sub = _subsampled(rows)
        methods = sorted(
            {t["method"] for t in rows}, key=lambda m: (family(m), not m.startswith("bound:"), m)
        )
        width = 4.2 * len(ns) + 3.4
        fig, axes = plt.subplots(1, len(ns), figsize=(width, 3.9), squeeze=False, sharey=True)
        drawn = set()
        for ax, n in zip(axes[0], ns):
            for method in methods:
                pts = sorted(
                    (t["T"], t["mean"], t["ci95"]) for t in rows if t["n"] == n and t["method"] == method
                )
                if not pts:
                    continue
                xs, ys, es = zip(*pts)
                color, ls, marker, is_bound = styles[method]
                hollow = (method, n) in sub
                ax.errorbar(
                    xs,
                    ys,
                    yerr=[e if math.isfinite(e) else 0.0 for e in es],
                    color=color,
                    ls=ls,
                    marker=marker,
                    ms=4 if not is_bound else 6,
                    lw=3.2 if is_bound else 1.2,
                    alpha=0.4 if is_bound else 1.0,
                    mfc="none" if hollow else color,
                    capsize=2,
                    elinewidth=0.6,
                    zorder=1 if is_bound else 3,
                )
                drawn.add(method)
            if kind == "gap":
                ax.axhline(0.0, color="0.5", lw=0.6)
            ax.set_title(f"n = {n}")
            ax.set_xlabel("temperature")
            ax.grid(alpha=0.3)
        axes[0][0].set_ylabel(ylabel)
        handles, texts = [], []
        for method in methods:
            if method not in drawn:
                continue
            color, ls, marker, is_bound = styles[method]
            parts = {}
            for n in ns:
                if (method, n) in sub:
                    parts.setdefault(sub[(method, n)], []).append(str(n))
            handles.append(
                Line2D(
                    [],
                    [],
                    color=color,
                    ls=ls,
                    marker=marker,
                    lw=3.2 if is_bound else 1.2,
                    alpha=0.4 if is_bound else 1.0,
                    mfc="none" if parts else color,
                )
            )
            label = method.split(":", 1)[1] if kind == "gap" else method
            if parts:
                label += "".join(
                    f"\n  subsample: {c:,} of {t:,} positions (n = {', '.join(k)})"
                    for (c, t), k in parts.items()
                )
            texts.append(label)
        right = 1 - 3.3 / width
        if title:
            fig.suptitle(title, fontsize=9)
        fig.tight_layout(rect=(0, 0, right, 1))
        fig.legend(
            handles, texts, fontsize=6.5, loc="center left", bbox_to_anchor=(right, 0.5), frameon=False
        )
        fig.savefig(out / fname, dpi=120)
        plt.close(fig)
        files[kind + "_plot"] = out / fname
    return files

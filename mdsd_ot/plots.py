"""Every figure of the package (``mdsd-ot demo``, ``study``, ``merge``, ``decode``): one style per
method, fixed across figures, and one shared legend per figure listing every drawn line.

A *family* is a draft scheme's bound together with the verifiers built for that scheme (``naive``,
``rrs``, ``spectr`` and ``optimal`` with the with-replacement bound; ``rrs_without_replacement`` with
the without-replacement bound; ``greedy`` and ``spechub`` with the greedy bound). A family shares one
colour (:data:`FAMILY_COLORS`); the bound is a wide, pale solid line drawn underneath, and each
verifier a thin line of its own fixed style and marker (:data:`VERIFIER_STYLES`) on top, so a verifier
that reaches its bound (greedy, SpecHub) stays visible instead of hiding it. The style of a method
does not depend on which other methods a figure holds: ``rrs`` looks the same in the demo, a study
and a decode figure. A method evaluated at fewer positions than the others (a subsample, see
``mdsd-ot study --every``) is drawn with hollow markers and says so in the legend.

Inputs are the summary tables of :func:`mdsd_ot.study.summarize` (keys ``method``, ``T``, ``n``,
``mean``, ``ci95``, ``count``) and of :func:`mdsd_ot.decode.report.summarize` (``T``, ``tree``,
``tree_size``, ``scheme``, ``method``, ``mean``, ``ci95``). matplotlib is imported inside the
functions; ``figure_*`` return the figures (for tests and notebooks), ``plot_*`` write PNG files
atomically.
"""

from __future__ import annotations

import io
import math
from pathlib import Path

from .keys import BOUND, VERIFIER, is_bound, is_exact, is_gap, method_key, split_method, verifier_scheme

__all__ = [
    "plot_families",
    "plot_decode",
    "figure_families",
    "figure_decode",
    "style",
    "family",
    "FAMILY_COLORS",
    "VERIFIER_STYLES",
]

#: Colour of each draft scheme's family (matplotlib's default cycle, fixed per scheme).
FAMILY_COLORS = {
    "with_replacement": "C0",
    "without_replacement": "C3",
    "greedy": "C2",
    "hub": "C2",
    "conditional_poisson": "C4",
    "top_n": "C5",
}

#: Line style and marker of each verifier (its colour is its family's).
VERIFIER_STYLES = {
    "naive": ("--", "s"),
    "rrs": (":", "^"),
    "spectr": ("-.", "v"),
    "optimal": ((0, (5, 1, 1, 1, 1, 1)), "D"),
    "rrs_without_replacement": ("--", "s"),
    "greedy": ("--", "s"),
    "spechub": (":", "^"),
}

_OTHER = ("C7", (0, (1, 2)), "x")  # a verifier outside the registry (e.g. an audited callable)
_VERIFIER_ORDER = tuple(VERIFIER_STYLES)


def family(method: str) -> str:
    """The draft scheme whose family ``method`` belongs to.

    ``method`` is ``"bound:<scheme>"``, ``"verifier:<name>"``, ``"gap:<name>"`` or ``"exact:<name>"``.

    Parameters
    ----------
    method : str

    Returns
    -------
    str
        A draft scheme name, or ``"other"`` for a verifier outside the registry.

    >>> family("bound:greedy"), family("verifier:spechub"), family("gap:spectr")
    ('greedy', 'greedy', 'with_replacement')
    """
    kind, name = split_method(method)
    if kind == BOUND:
        return name
    try:
        return verifier_scheme(name)
    except KeyError:
        return "other"


def style(method: str) -> tuple:
    """``(color, linestyle, marker, is_bound)`` of a method, the same in every figure.

    A verifier, its gap and its exact tree value (``exact:<name>``) share one style.

    Parameters
    ----------
    method : str
        ``"<kind>:<name>"`` (see :func:`family`).

    Returns
    -------
    tuple
        ``(color, linestyle, marker, is_bound)``: ``str, str, str, bool``.

    >>> style("verifier:rrs") == style("gap:rrs") == style("exact:rrs")
    True
    >>> style("bound:greedy")[0] == style("verifier:spechub")[0], style("bound:greedy")[1]
    (True, '-')
    """
    kind, name = split_method(method)
    if kind == BOUND:
        return (FAMILY_COLORS.get(name, "C7"), "-", "o", True)
    if name not in VERIFIER_STYLES:
        return (*_OTHER, False)
    ls, marker = VERIFIER_STYLES[name]
    return (FAMILY_COLORS.get(family(method_key(VERIFIER, name)), "C7"), ls, marker, False)


def _styles(methods) -> dict:
    """``method -> style(method)`` (kept for callers of the former per-figure assignment)."""
    return {m: style(m) for m in methods}


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


def _pyplot():
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ImportError("plots need matplotlib: pip install matplotlib (the 'plot' extra)") from None
    return plt


def _order(method: str):
    """Legend (and demo table) order: by family in scheme order, the bound first, then the verifiers
    in registry order."""
    name = split_method(method)[1]
    rank = _VERIFIER_ORDER.index(name) if name in _VERIFIER_ORDER else 99
    fam = family(method)
    fam_rank = list(FAMILY_COLORS).index(fam) if fam in FAMILY_COLORS else 99
    return (fam_rank, fam, not is_bound(method), rank, method)


def in_family_order(verifiers) -> tuple:
    """Verifier names in the order of the figures' legends and the family tables (:func:`_order`):
    by family in scheme order, then by :data:`VERIFIER_STYLES`; also the order the command line
    spells its default verifier lists in.

    >>> in_family_order(["greedy", "spechub", "rrs", "naive"])
    ('naive', 'rrs', 'greedy', 'spechub')
    """
    return tuple(sorted(verifiers, key=lambda name: _order(method_key(VERIFIER, name))))


def _draw(ax, xs, ys, es, method, hollow=False):
    color, ls, marker, is_bound = style(method)
    ax.errorbar(
        xs,
        ys,
        yerr=[e if math.isfinite(e) else 0.0 for e in es],
        color=color,
        ls=ls,
        marker=marker,
        ms=6 if is_bound else 4,
        lw=3.2 if is_bound else 1.2,
        alpha=0.4 if is_bound else 1.0,
        mfc="none" if hollow else color,
        capsize=2,
        elinewidth=0.6,
        zorder=1 if is_bound else 3,
        label=method,
    )


def _handle(method, hollow=False):
    from matplotlib.lines import Line2D

    color, ls, marker, is_bound = style(method)
    return Line2D(
        [],
        [],
        color=color,
        ls=ls,
        marker=marker,
        lw=3.2 if is_bound else 1.2,
        alpha=0.4 if is_bound else 1.0,
        mfc="none" if hollow else color,
    )


def _shared_legend(fig, handles, texts, width, title):
    right = 1 - 3.3 / width
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout(rect=(0, 0, right, 0.95 if title else 1))
    fig.legend(handles, texts, fontsize=6.5, loc="center left", bbox_to_anchor=(right, 0.5), frameon=False)


def figure_families(table, kind: str = "acceptance", *, title: str | None = None):
    """The acceptance (``kind="acceptance"``) or gap (``"gap"``) figure of a study summary, or None
    when the table has no such rows: one panel per n, x = temperature, one shared legend.

    Parameters
    ----------
    table : iterable of dict
        Study summary rows (``method``, ``n``, ``T``, ``mean``, ``ci95``).
    kind : str
        ``"acceptance"`` (bound and verifier rows) or ``"gap"`` (gap rows).
    title : str or None
        Figure title (suptitle); None: none.

    Returns
    -------
    matplotlib.figure.Figure or None
    """
    plt = _pyplot()
    rows = [t for t in table if is_gap(t["method"]) == (kind == "gap")]
    if not rows:
        return None
    ylabel = "bound of its scheme - verifier acceptance" if kind == "gap" else "mean acceptance"
    ns = sorted({t["n"] for t in rows})
    sub = _subsampled(rows)
    methods = sorted({t["method"] for t in rows}, key=_order)
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
            _draw(ax, xs, ys, es, method, hollow=(method, n) in sub)
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
        parts = {}
        for n in ns:
            if (method, n) in sub:
                parts.setdefault(sub[(method, n)], []).append(str(n))
        handles.append(_handle(method, hollow=bool(parts)))
        label = split_method(method)[1] if kind == "gap" else method
        if parts:
            label += "".join(
                f"\n  subsample: {c:,} of {t:,} positions (n = {', '.join(k)})" for (c, t), k in parts.items()
            )
        texts.append(label)
    _shared_legend(fig, handles, texts, width, title)
    return fig


def _save(fig, path: Path, dpi: int) -> None:
    """PNG bytes written atomically (a kill leaves the old file or the new one)."""
    from . import _store

    plt = _pyplot()
    png = io.BytesIO()
    fig.savefig(png, format="png", dpi=dpi)
    plt.close(fig)
    _store.atomic_write(path, png.getvalue(), step=path.name)


def plot_families(table, out, *, title: str | None = None) -> dict:
    """Write ``acceptance_vs_temperature.png`` and ``gap_to_bound.png`` into ``out``.

    Parameters
    ----------
    table : list of dict
        Rows of :func:`mdsd_ot.study.summarize`.
    out : str or Path
        Existing folder.
    title : str or None
        Figure title (name the data: models, prompts, positions).

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
    _pyplot()
    out = Path(out)
    table = list(table)
    files = {}
    for kind, fname in (("acceptance", "acceptance_vs_temperature.png"), ("gap", "gap_to_bound.png")):
        fig = figure_families(table, kind, title=title)
        if fig is None:
            continue
        _save(fig, out / fname, 120)
        files[kind + "_plot"] = out / fname
    return files


def _decode_method(t) -> str:
    """A decode row's method in the vocabulary of :func:`style`: ``exact:<v>`` stays, the node-bound
    estimate is the bound of the cell's scheme."""
    return method_key(BOUND, t["scheme"]) if t["method"] in ("bound", "heuristic") else t["method"]


def _decode_label(method: str) -> str:
    kind, name = split_method(method)
    if kind == BOUND:
        return f"node-alpha* heuristic ({name})"
    return name


#: The two decode figures: file name, x key, panel keys, x label.
DECODE_FIGURES = (
    ("block_efficiency_vs_temperature.png", "T", ("tree", "scheme"), "temperature"),
    ("block_efficiency_vs_tree_size.png", "tree_size", ("T", "scheme"), "draft tokens per tree"),
)


def figure_decode(table, which: int = 0, *, title: str | None = None):
    """Decode figure ``which`` of :data:`DECODE_FIGURES` (0: vs temperature, one panel per tree and
    scheme; 1: vs tree size, one panel per temperature and scheme), or None without exact rows.
    Lines: ``exact:<verifier>`` (the verifier's style) and the node-alpha* heuristic (the bound style
    of the cell's scheme); one shared legend.

    Parameters
    ----------
    table : list of dict
        Decode summary rows (:func:`mdsd_ot.decode.summarize`).
    which : int
        Index into :data:`DECODE_FIGURES` (0 or 1).
    title : str or None
        Figure title (suptitle); None: none.

    Returns
    -------
    matplotlib.figure.Figure or None
    """
    plt = _pyplot()
    rows = [t for t in table if is_exact(t["method"]) or t["method"] in ("bound", "heuristic")]
    if not rows:
        return None
    _, xkey, group, xlabel = DECODE_FIGURES[which]
    groups = sorted({tuple(t[g] for g in group) for t in rows}, key=str)
    k = len(groups)
    cols = min(k, 3)
    nrows = (k + cols - 1) // cols
    width = 4.5 * cols + 3.4
    fig, axes = plt.subplots(nrows, cols, figsize=(width, 3.4 * nrows), squeeze=False)
    drawn = set()
    for ax, key in zip(axes.flat, groups):
        cell = [t for t in rows if tuple(t[g] for g in group) == key]
        for method in sorted({_decode_method(t) for t in cell}, key=_order):
            pts = sorted((t[xkey], t["mean"], t["ci95"]) for t in cell if _decode_method(t) == method)
            xs, ys, es = zip(*pts)
            _draw(ax, xs, ys, es, method)
            drawn.add(method)
        ax.set_title(
            ", ".join(f"{g}={v:g}" if isinstance(v, float) else f"{v}" for g, v in zip(group, key)),
            fontsize=9,
        )
        ax.set_xlabel(xlabel)
        ax.set_ylabel("tokens per target call")
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[k:]:
        ax.axis("off")
    methods = sorted(drawn, key=_order)
    _shared_legend(fig, [_handle(m) for m in methods], [_decode_label(m) for m in methods], width, title)
    return fig


def plot_decode(table, out, *, title: str | None = None) -> dict:
    """Write the two decode figures (:data:`DECODE_FIGURES`) into ``out``; ``{file name: path}``
    ({} when the table has no exact rows). ``ImportError`` without matplotlib.

    Parameters
    ----------
    table : iterable of dict
        Decode summary rows (:func:`mdsd_ot.decode.summarize`).
    out : str or os.PathLike
        Existing folder to write the PNG files into.
    title : str or None
        Figure title (suptitle); None: none.

    Returns
    -------
    dict
        ``{file name: pathlib.Path}``.
    """
    _pyplot()
    out = Path(out)
    files = {}
    for which, (fname, *_rest) in enumerate(DECODE_FIGURES):
        fig = figure_decode(list(table), which, title=title)
        if fig is None:
            return {}
        _save(fig, out / fname, 110)
        files[fname] = out / fname
    return files

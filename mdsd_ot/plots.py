"""Every figure of the package (``mdsd-ot demo``, ``study``, ``merge``, ``decode``): one style per
method, fixed across figures, and one shared legend per figure naming every drawn series.

**Styles.** A *family* is a draft scheme's bound together with the node-wise verifiers built for that
scheme (``naive``, ``rrs``, ``spectr`` and ``optimal`` with the with-replacement bound;
``rrs_without_replacement`` with the without-replacement bound; ``greedy`` and ``spechub`` with the
greedy bound). A bound is a wide, pale solid line in its family's colour (:data:`FAMILY_COLORS`),
drawn underneath; each node-wise verifier a thin line of its own shade of that colour, its own dash
pattern and its own marker (:data:`VERIFIER_STYLES`), so that a verifier that reaches its bound
(greedy, SpecHub) stays visible on top of it. Tree-level verifiers (``mdsd_ot.trees.TREE_VERIFIERS``)
are solid thin lines in hues no family uses and with markers no node-wise verifier uses:
:data:`TREE_VERIFIER_STYLES` names ``block``, ``traversal``, ``gbv`` and ``lookahead``; any other
tree-level verifier of the registry gets, by its rank among the unnamed ones in registry order, the
next (colour, marker) pair of :data:`TREE_RULE_COLORS` x :data:`TREE_RULE_MARKERS` (five colours and
eight markers, coprime counts: 40 verifiers before a pair repeats), so a new verifier needs no edit
here. A style never depends on which other methods a figure holds: ``rrs`` looks the same in the
demo, a study and a decode figure. A method evaluated at fewer positions than the others (a
subsample, see ``mdsd-ot study --every``) is drawn with hollow markers and says so in the legend.

**Figures.** x = temperature: one line per method over the temperatures, each method's points shifted
sideways by a small fixed offset so that error bars do not hide each other; with a single
temperature the same figure is a bar chart (one bar per method, its value written above it). The
decode figure against tree size draws unconnected points per shape (a categorical axis, one tick per
shape with its number of draft tokens), since different shapes are not a series. Error bars are the
tables' 95% intervals, cut to the range the quantity can take (acceptance and gap in [0, 1], tokens
per target call in [1, depth + 1]): the true value lies in that range, so the cut interval covers it
whenever the full one does.

Inputs are the summary tables of :func:`mdsd_ot.study.summarize` (keys ``method``, ``T``, ``n``,
``mean``, ``ci95``, ``count``) and of :func:`mdsd_ot.decode.report.summarize` (``T``, ``tree``,
``tree_size``, ``scheme``, ``method``, ``mean``, ``ci95``). matplotlib is imported inside the
functions; ``figure_*`` return the figures (for tests and notebooks), ``plot_*`` write PNG files
atomically.
"""

from __future__ import annotations

import io
import math
import textwrap
from pathlib import Path

from .keys import BOUND, VERIFIER, is_bound, is_exact, is_gap, method_key, split_method, verifier_scheme

__all__ = [
    "plot_families",
    "plot_decode",
    "figure_families",
    "figure_decode",
    "style",
    "family",
    "is_tree_level",
    "run_title",
    "run_names",
    "FAMILY_COLORS",
    "VERIFIER_STYLES",
    "TREE_VERIFIER_STYLES",
    "TREE_RULE_COLORS",
    "TREE_RULE_MARKERS",
]

#: Colour of each draft scheme's family: its bound's colour, and the hue of its verifiers' shades.
FAMILY_COLORS = {
    "with_replacement": "#1f77b4",  # blue
    "without_replacement": "#d62728",  # red
    "greedy": "#2ca02c",  # green
    "hub": "#2ca02c",
    "conditional_poisson": "#9467bd",  # purple
    "top_n": "#8c564b",  # brown
}

#: Colour (a shade of its family's hue), line style and marker of each node-wise verifier.
VERIFIER_STYLES = {
    "naive": ("#6baed6", "--", "s"),  # light blue
    "rrs": ("#1f77b4", ":", "^"),  # blue
    "spectr": ("#08306b", "-.", "v"),  # navy
    "optimal": ("#5254a3", (0, (5, 1, 1, 1, 1, 1)), "D"),  # indigo
    "rrs_without_replacement": ("#d62728", "--", "d"),  # red
    "greedy": ("#2ca02c", "--", "<"),  # green
    "spechub": ("#00441b", ":", ">"),  # dark green
}

#: Colour, line style and marker of the named tree-level verifiers (hues and markers that no family
#: and no node-wise verifier uses).
TREE_VERIFIER_STYLES = {
    "block": ("#ff7f0e", "-", "P"),  # orange, filled plus
    "traversal": ("#e377c2", "-", "X"),  # pink, filled cross
    "gbv": ("#bcbd22", "-", "*"),  # olive, star
    "lookahead": ("#000000", "-", "h"),  # black, hexagon
}

#: Colours and markers of the other tree-level verifiers of the registry: the k-th of them (registry
#: order) gets ``TREE_RULE_COLORS[k % 5]`` and ``TREE_RULE_MARKERS[k % 8]``.
TREE_RULE_COLORS = (
    "#17becf",
    "#8c6d31",
    "#7b4173",
    "#e7ba52",
    "#9c9ede",
)  # cyan, ochre, plum, gold, lavender
TREE_RULE_MARKERS = ("p", "H", "8", "+", "1", "2", "3", "4")

_OTHER = ("#7f7f7f", (0, (1, 2)), "x")  # a verifier outside both registries (e.g. an audited callable)
_TREE_FAMILY = "tree-level"
_LINE_WIDTH = {True: 3.2, False: 1.2}  # bound / verifier
_INTERVAL = "error bars: 95% intervals clustered by {unit}"


def _tree_registry() -> tuple:
    from .trees.verifiers import TREE_VERIFIERS

    return tuple(TREE_VERIFIERS)


def is_tree_level(name: str) -> bool:
    """Whether ``name`` is a tree-level verifier (registry or :data:`TREE_VERIFIER_STYLES`) rather than
    a node-wise one.

    Parameters
    ----------
    name : str
        Verifier name (no ``kind:`` prefix).

    Returns
    -------
    bool

    >>> is_tree_level("block"), is_tree_level("rrs")
    (True, False)
    """
    if name in VERIFIER_STYLES:
        return False
    return name in TREE_VERIFIER_STYLES or name in _tree_registry()


def _tree_names() -> tuple:
    """Every styled tree-level name: the named ones, then the registry's others in registry order."""
    return tuple(TREE_VERIFIER_STYLES) + tuple(n for n in _tree_registry() if n not in TREE_VERIFIER_STYLES)


def _tree_style(name: str) -> tuple:
    if name in TREE_VERIFIER_STYLES:
        return TREE_VERIFIER_STYLES[name]
    others = [n for n in _tree_registry() if n not in TREE_VERIFIER_STYLES]
    k = others.index(name)
    return (TREE_RULE_COLORS[k % len(TREE_RULE_COLORS)], "-", TREE_RULE_MARKERS[k % len(TREE_RULE_MARKERS)])


def family(method: str) -> str:
    """The draft scheme whose family ``method`` belongs to.

    ``method`` is ``"bound:<scheme>"``, ``"verifier:<name>"``, ``"gap:<name>"`` or ``"exact:<name>"``.

    Parameters
    ----------
    method : str

    Returns
    -------
    str
        A draft scheme name, ``"tree-level"`` for a tree-level verifier, or ``"other"`` for a verifier
        outside both registries.

    >>> family("bound:greedy"), family("verifier:spechub"), family("gap:spectr"), family("exact:block")
    ('greedy', 'greedy', 'with_replacement', 'tree-level')
    """
    kind, name = split_method(method)
    if kind == BOUND:
        return name
    if is_tree_level(name):
        return _TREE_FAMILY
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
        ``(color, linestyle, marker, is_bound)``: ``str, str or tuple, str, bool``.

    >>> style("verifier:rrs") == style("gap:rrs") == style("exact:rrs")
    True
    >>> style("bound:greedy")[0] == style("verifier:greedy")[0], style("bound:greedy")[1]
    (True, '-')
    >>> style("exact:block")[:3]
    ('#ff7f0e', '-', 'P')
    """
    kind, name = split_method(method)
    if kind == BOUND:
        return (FAMILY_COLORS.get(name, "#7f7f7f"), "-", "o", True)
    if name in VERIFIER_STYLES:
        return (*VERIFIER_STYLES[name], False)
    if is_tree_level(name):
        return (*_tree_style(name), False)
    return (*_OTHER, False)


def _styles(methods) -> dict:
    """``method -> style(method)`` (kept for callers of the former per-figure assignment)."""
    return {m: style(m) for m in methods}


def run_title(
    what: str,
    *,
    target=None,
    draft=None,
    prompts=None,
    counts: str = "",
    value: str = "",
    unit: str = "prompt",
) -> str:
    """A figure title naming the data: models, prompts, counts, and what the points and error bars are.

    Parameters
    ----------
    what : str
        What was run (``"mdsd_ot study"``, ``"tree decoding"``, ...).
    target, draft : str or None
        Model names or paths (a path is shortened to its last part).
    prompts : str or None
        Prompt source (``"humaneval"``, a file: shortened to its name).
    counts : str
        E.g. ``"4 prompts, 30 target calls"``.
    value : str
        What a point or bar is (``"mean acceptance per position"``).
    unit : str
        The cluster of the intervals (``"prompt"``, ``"problem"``).

    Returns
    -------
    str
        Two lines.

    >>> print(run_title("study", target="m/big", draft="m/small", prompts="p/x.jsonl", counts="4 prompts",
    ...                 value="mean acceptance"))
    study: target big, draft small; prompts x.jsonl; 4 prompts
    mean acceptance; error bars: 95% intervals clustered by prompt
    """

    def short(name):
        return Path(str(name).rstrip("/\\")).name or str(name)

    head = what
    if target or draft:
        head += ": " + ", ".join(f"{r} {short(m)}" for r, m in (("target", target), ("draft", draft)) if m)
    for part in (f"prompts {short(prompts)}" if prompts else "", counts):
        if part:
            head += ("; " if ":" in head else ": ") + part
    second = (f"{value}; " if value else "") + _INTERVAL.format(unit=unit)
    return f"{head}\n{second}"


def run_names(folder) -> dict:
    """``target``, ``draft`` and ``prompts`` of a results folder as its ``config.json`` records them
    (the command's arguments, else the models' identity); {} where there is no readable config.

    Parameters
    ----------
    folder : str or os.PathLike
        A study or decode folder.

    Returns
    -------
    dict
        Keys among ``target``, ``draft``, ``prompts`` (for :func:`run_title`).
    """
    import json

    try:
        config = json.loads((Path(folder) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(config, dict):
        return {}
    found = {}
    for source in (config.get("identity"), config.get("config"), config.get("provenance")):
        if not isinstance(source, dict):
            continue
        for key in ("target", "draft", "prompts"):
            value = source.get(key)
            if isinstance(value, dict):  # an identity: "path (3 files, ...)"
                value = value.get("path") or str(value.get("describe", "")).split(" (")[0] or None
                if key == "prompts":
                    value = None  # the identity's digest; the source's name comes from provenance
            if isinstance(value, str) and value:
                found[key] = value
    return found


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
    """Legend (and demo table) order: by family in scheme order (tree-level verifiers after every
    scheme), the bound first, then the verifiers in registry order."""
    name = split_method(method)[1]
    fam = family(method)
    if fam == _TREE_FAMILY:
        names = _tree_names()
        rank = names.index(name) if name in names else 99
    else:
        rank = tuple(VERIFIER_STYLES).index(name) if name in VERIFIER_STYLES else 99
    families = [*FAMILY_COLORS, _TREE_FAMILY]
    fam_rank = families.index(fam) if fam in families else 99
    return (fam_rank, fam, not is_bound(method), rank, method)


def in_family_order(verifiers) -> tuple:
    """Verifier names in the order of the figures' legends and the family tables (:func:`_order`):
    by family in scheme order, then by :data:`VERIFIER_STYLES`; also the order the command line
    spells its default verifier lists in.

    >>> in_family_order(["greedy", "spechub", "rrs", "naive"])
    ('naive', 'rrs', 'greedy', 'spechub')
    """
    return tuple(sorted(verifiers, key=lambda name: _order(method_key(VERIFIER, name))))


def _yerr(ys, es, clips) -> list:
    """Lower and upper error-bar lengths: ``mean -+ ci95`` cut to each point's ``(lo, hi)`` range
    (never past the mean itself); no bar where the interval is not finite."""
    down, up = [], []
    for y, e, (lo, hi) in zip(ys, es, clips):
        if not math.isfinite(e):
            down.append(0.0)
            up.append(0.0)
            continue
        a, b = y - e, y + e
        if lo is not None:
            a = max(a, min(lo, y))
        if hi is not None:
            b = min(b, max(hi, y))
        down.append(y - a)
        up.append(b - y)
    return [down, up]


def _draw(ax, xs, ys, es, method, *, hollow=False, clips=None, line=True):
    color, ls, marker, is_bound = style(method)
    clips = clips or [(None, None)] * len(xs)
    ax.errorbar(
        xs,
        ys,
        yerr=_yerr(ys, es, clips),
        color=color,
        ls=ls if line else "none",
        marker=marker,
        ms=6 if is_bound else 5,
        lw=_LINE_WIDTH[is_bound],
        alpha=0.4 if is_bound else 1.0,
        mfc="none" if hollow else color,
        capsize=2,
        elinewidth=0.7,
        zorder=1 if is_bound else 3,
        label=method,
    )


def _handle(method, hollow=False, *, line=True, bar=False):
    color, ls, marker, is_bound = style(method)
    if bar:
        from matplotlib.patches import Patch

        return Patch(**_bar_look(method, hollow))
    from matplotlib.lines import Line2D

    return Line2D(
        [],
        [],
        color=color,
        ls=ls if line else "none",
        marker=marker,
        lw=_LINE_WIDTH[is_bound],
        alpha=0.4 if is_bound else 1.0,
        mfc="none" if hollow else color,
    )


def _bar_look(method, hollow=False) -> dict:
    """Face, edge and hatch of a method's bar: a bound pale, a verifier solid, a subsample hatched."""
    from matplotlib.colors import to_rgba

    color, _ls, _marker, is_bound = style(method)
    return {
        "facecolor": to_rgba(color, 0.35 if is_bound else 0.9),
        "edgecolor": color,
        "hatch": "////" if hollow else None,
        "linewidth": 1.0,
    }


def _bars(ax, slots, base, width=0.8):
    """One bar per ``(x, method, mean, ci95, hollow, clip)`` from ``base`` up, its value written
    above its error bar; the y range leaves room for the values."""
    top = base
    for x, method, y, e, hollow, clip in slots:
        down, up = _yerr([y], [e], [clip])
        ax.bar(x, y - base, bottom=base, width=width, label=method, **_bar_look(method, hollow))
        ax.errorbar([x], [y], yerr=[down, up], color="black", lw=0, elinewidth=0.8, capsize=2, zorder=4)
        ax.annotate(
            f"{y:.3f}",
            (x, y + up[0]),
            xytext=(0, 2),
            textcoords="offset points",
            ha="center",
            va="bottom",
            fontsize=5.5,
            rotation=90,
        )
        top = max(top, y + up[0])
    lo, hi = ax.get_ylim()
    ax.set_ylim(base, max(hi, top + 0.16 * (top - base)))


def _legend_width(texts) -> float:
    """Inches the shared legend needs at font size 6.5 (handle, padding and the longest line)."""
    longest = max((len(line) for t in texts for line in t.split("\n")), default=10)
    return 0.6 + 0.047 * longest


def _shared_legend(fig, handles, texts, title, legend_w):
    """The one legend in a column of ``legend_w`` inches at the right; the title (wrapped to the
    figure's width) in a band above the panels, laid out after them."""
    width, height = fig.get_size_inches()
    right = 1 - legend_w / width
    top = 1.0
    lines = []
    if title:
        chars = max(40, int(width * 14))
        lines = [w for part in title.split("\n") for w in (textwrap.wrap(part, chars) or [""])]
        top = 1 - (0.15 * len(lines) + 0.12) / height
    fig.tight_layout(rect=(0, 0, right, top))
    if lines:
        fig.suptitle("\n".join(lines), fontsize=8.5, y=1 - 0.06 / height, va="top")
    fig.legend(handles, texts, fontsize=6.5, loc="center left", bbox_to_anchor=(right, 0.5), frameon=False)


def _offsets(methods, span, share=0.12) -> dict:
    """A fixed sideways shift per method (its rank among the figure's methods) so that the error bars
    of methods at the same x stay apart: ``span / 100`` per method, at most ``share * span`` in all."""
    m = len(methods)
    step = span * min(0.01, share / max(m - 1, 1))
    return {meth: (i - (m - 1) / 2) * step for i, meth in enumerate(methods)}


def figure_families(table, kind: str = "acceptance", *, title: str | None = None):
    """The acceptance (``kind="acceptance"``) or gap (``"gap"``) figure of a study summary, or None
    when the table has no such rows: one panel per n, x = temperature (a bar chart when the table has
    one temperature), one shared legend.

    Parameters
    ----------
    table : iterable of dict
        Study summary rows (``method``, ``n``, ``T``, ``mean``, ``ci95``).
    kind : str
        ``"acceptance"`` (bound and verifier rows) or ``"gap"`` (gap rows).
    title : str or None
        Figure title (suptitle; name the data: :func:`run_title`); None: none.

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
    temps = sorted({t["T"] for t in rows})
    bars = len(temps) == 1
    sub = _subsampled(rows)
    methods = sorted({t["method"] for t in rows}, key=_order)
    labels = {}
    for method in methods:
        parts = {}
        for n in ns:
            if (method, n) in sub:
                parts.setdefault(sub[(method, n)], []).append(str(n))
        label = split_method(method)[1] if kind == "gap" else method
        labels[method] = (label, parts)
    texts = [
        label
        + "".join(
            f"\n  subsample: {c:,} of {t:,} positions (n = {', '.join(k)})" for (c, t), k in parts.items()
        )
        for label, parts in labels.values()
    ]
    legend_w = _legend_width(texts)
    panel_w = max(4.2, 0.32 * len(methods) + 1.2) if bars else 4.2
    fig, axes = plt.subplots(
        1, len(ns), figsize=(panel_w * len(ns) + legend_w, 4.6 if bars else 3.9), squeeze=False, sharey=True
    )
    shift = _offsets(methods, (temps[-1] - temps[0]) if len(temps) > 1 else 0.0)
    drawn = set()
    for ax, n in zip(axes[0], ns):
        slots = []
        for method in methods:
            pts = sorted(
                (t["T"], t["mean"], t["ci95"]) for t in rows if t["n"] == n and t["method"] == method
            )
            if not pts:
                continue
            drawn.add(method)
            xs, ys, es = zip(*pts)
            if bars:
                slots.append((len(slots), method, ys[0], es[0], (method, n) in sub, (0.0, 1.0)))
            else:
                xs = [x + shift[method] for x in xs]
                _draw(ax, xs, ys, es, method, hollow=(method, n) in sub, clips=[(0.0, 1.0)] * len(xs))
        if bars:
            _bars(ax, slots, 0.0)
            ax.set_xticks(range(len(slots)), [labels[m][0] for _x, m, *_ in slots], rotation=90, fontsize=6.5)
            ax.set_title(f"n = {n}, T = {temps[0]:g}")
            ax.set_xlim(-0.7, len(slots) - 0.3)
        else:
            ax.set_title(f"n = {n}")
            ax.set_xlabel("temperature")
            ax.set_xticks(temps)
        if kind == "gap":
            ax.axhline(0.0, color="0.5", lw=0.6)
        ax.grid(alpha=0.3, axis="y" if bars else "both")
    axes[0][0].set_ylabel(ylabel)
    keep = [i for i, m in enumerate(methods) if m in drawn]
    handles = [_handle(methods[i], hollow=bool(labels[methods[i]][1]), bar=bars) for i in keep]
    _shared_legend(fig, handles, [texts[i] for i in keep], title, legend_w)
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
        Figure title (name the data: models, prompts, positions; :func:`run_title`).

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
    if is_tree_level(name):
        return f"{name} (tree-level)"
    if name in VERIFIER_STYLES:
        return f"{name} (node-wise)"
    return name


#: The two decode figures: file name, x key, panel keys, x label.
DECODE_FIGURES = (
    ("block_efficiency_vs_temperature.png", "T", ("tree", "scheme"), "temperature"),
    ("block_efficiency_vs_tree_size.png", "tree_size", ("T", "scheme"), "tree shape (draft tokens per tree)"),
)


def _scheme_rank(scheme) -> tuple:
    names = list(FAMILY_COLORS)
    return (names.index(scheme) if scheme in names else len(names), str(scheme))


def _depth(tree) -> int:
    from .trees import parse_shape

    return parse_shape(tree).depth


def figure_decode(table, which: int = 0, *, title: str | None = None):
    """Decode figure ``which`` of :data:`DECODE_FIGURES`, or None without exact rows.

    0: tokens per call vs temperature, one row of panels per tree (by size) and one column per
    scheme; with a single temperature, a bar chart instead: one panel per scheme, one group of bars
    per tree shape, one bar per verifier (bars from 1, the fewest tokens a call emits). 1: vs tree
    shape, one row per temperature and one column per scheme, unconnected points per shape on a
    categorical axis (ticks ``shape (draft tokens)``). Series: ``exact:<verifier>`` (the verifier's
    style; legend ``<name> (node-wise)`` or ``<name> (tree-level)``) and the node-alpha* heuristic
    (the bound style of the cell's scheme); one shared legend. Intervals are cut to [1, depth + 1].

    Parameters
    ----------
    table : list of dict
        Decode summary rows (:func:`mdsd_ot.decode.summarize`).
    which : int
        Index into :data:`DECODE_FIGURES` (0 or 1).
    title : str or None
        Figure title (suptitle; :func:`run_title`); None: none.

    Returns
    -------
    matplotlib.figure.Figure or None
    """
    plt = _pyplot()
    rows = [t for t in table if is_exact(t["method"]) or t["method"] in ("bound", "heuristic")]
    if not rows:
        return None
    _, xkey, (rkey, ckey), xlabel = DECODE_FIGURES[which]
    schemes = sorted({t["scheme"] for t in rows}, key=_scheme_rank)
    temps = sorted({t["T"] for t in rows})
    shapes = sorted({t["tree"] for t in rows}, key=lambda tr: (_size(rows, tr), tr))
    bars = which == 0 and len(temps) == 1
    if bars:
        row_keys = [temps[0]]
        rkey = "T"
    elif which == 0:
        row_keys = shapes
    else:
        row_keys = temps
    methods = sorted({_decode_method(t) for t in rows}, key=_order)
    texts = [_decode_label(m) for m in methods]
    legend_w = _legend_width(texts)
    if bars:
        most = max(len({_decode_method(t) for t in rows if t["scheme"] == s}) for s in schemes)
        panel_w = max(3.6, 0.13 * most * len(shapes) + 1.4)
    elif which == 0:
        panel_w = 4.2
    else:
        panel_w = max(3.6, 0.75 * len(shapes) + 1.2)
    nrows, cols = len(row_keys), len(schemes)
    fig, axes = plt.subplots(
        nrows,
        cols,
        figsize=(panel_w * cols + legend_w, (4.2 if bars else 3.2) * nrows + 0.4),
        squeeze=False,
        sharey="row",
    )
    drawn = set()
    for r, rk in enumerate(row_keys):
        for c, scheme in enumerate(schemes):
            ax = axes[r][c]
            cell = [t for t in rows if t[rkey] == rk and t[ckey] == scheme]
            if not cell:
                ax.axis("off")
                continue
            here = [m for m in methods if any(_decode_method(t) == m for t in cell)]
            drawn.update(here)
            if which == 0:
                shift = _offsets(here, (temps[-1] - temps[0]) if len(temps) > 1 else 0.0)
            else:  # one category per shape: up to 8% of its width per method, 60% in all
                shift = _offsets(here, 8.0, share=0.075)
            if bars:
                _decode_bars(ax, cell, here, shapes)
                ax.set_title(f"{scheme} drafts, T = {rk:g}", fontsize=9)
                ax.set_xlabel("tree shape (draft tokens per tree)")
                if c == 0:
                    ax.set_ylabel("tokens per target call (bars from 1)")
                continue
            for method in here:
                pts = sorted(
                    (
                        t[xkey] if which == 0 else shapes.index(t["tree"]),
                        t["mean"],
                        t["ci95"],
                        _depth(t["tree"]),
                    )
                    for t in cell
                    if _decode_method(t) == method
                )
                xs, ys, es, depths = zip(*pts)
                xs = [x + shift[method] for x in xs]
                _draw(ax, xs, ys, es, method, clips=[(1.0, d + 1.0) for d in depths], line=which == 0)
            if which == 0:
                ax.set_title(f"tree {rk}, {scheme} drafts", fontsize=9)
                ax.set_xticks(temps)
            else:
                ax.set_title(f"T = {rk:g}, {scheme} drafts", fontsize=9)
                ax.set_xticks(range(len(shapes)), [f"{s}\n({_size(rows, s)})" for s in shapes], fontsize=7.5)
                ax.set_xlim(-0.6, len(shapes) - 0.4)
            ax.set_xlabel(xlabel)
            if c == 0:
                ax.set_ylabel("tokens per target call")
            ax.grid(alpha=0.3)
    keep = [i for i, m in enumerate(methods) if m in drawn]
    handles = [_handle(methods[i], line=which == 0, bar=bars) for i in keep]
    _shared_legend(fig, handles, [texts[i] for i in keep], title, legend_w)
    return fig


def _decode_bars(ax, cell, methods, shapes):
    """One group of bars per tree shape (ticks ``shape (draft tokens)``), one bar per method present
    there, in legend order."""
    width = 0.84 / len(methods)
    slots = []
    for g, shape in enumerate(shapes):
        group = [t for m in methods for t in cell if t["tree"] == shape and _decode_method(t) == m]
        for i, t in enumerate(group):
            x = g + (i - (len(group) - 1) / 2) * width
            slots.append((x, _decode_method(t), t["mean"], t["ci95"], False, (1.0, _depth(shape) + 1.0)))
    _bars(ax, slots, 1.0, width=width * 0.92)
    sizes = {t["tree"]: t["tree_size"] for t in cell}
    ax.set_xticks(range(len(shapes)), [f"{s}\n({sizes.get(s, '')})" for s in shapes], fontsize=7.5)
    ax.set_xlim(-0.55, len(shapes) - 0.45)
    ax.grid(alpha=0.3, axis="y")


def _size(rows, tree) -> int:
    for t in rows:
        if t["tree"] == tree:
            return int(t["tree_size"])
    raise KeyError(tree)


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
        Figure title (suptitle; :func:`run_title`); None: none.

    Returns
    -------
    dict
        ``{file name: pathlib.Path}``.
    """
    _pyplot()
    out = Path(out)
    table = list(table)
    files = {}
    for which, (fname, *_rest) in enumerate(DECODE_FIGURES):
        fig = figure_decode(table, which, title=title)
        if fig is None:
            return {}
        _save(fig, out / fname, 110)
        files[fname] = out / fname
    return files

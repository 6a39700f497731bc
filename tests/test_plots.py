"""The figures of :mod:`mdsd_ot.plots`, asserted on the matplotlib objects (not on pixels): every
verifier's style is its own and fixed, tree-level verifiers never look like node-wise ones, one
temperature gives bars, the tree-size figure has unconnected labelled points per shape, intervals are
cut to the quantity's range, and titles and legends name what is drawn."""

from __future__ import annotations

import json

import pytest

from mdsd_ot import VERIFIERS
from mdsd_ot.plots import (
    FAMILY_COLORS,
    TREE_VERIFIER_STYLES,
    is_tree_level,
    run_names,
    run_title,
    style,
)
from mdsd_ot.trees import TREE_VERIFIERS

mpl = pytest.importorskip("matplotlib")
from matplotlib.colors import to_hex  # noqa: E402


def _look(name):
    color, _ls, marker, _bound = style(f"exact:{name}")
    return to_hex(color), marker


def test_every_verifier_its_own_colour_and_marker_tree_level_apart(monkeypatch):
    import mdsd_ot.plots as P

    # the registry as other helpers extend it: the two named ones and twelve unnamed newcomers
    extra = tuple(f"tree_v{i}" for i in range(12))
    monkeypatch.setattr(P, "_tree_registry", lambda: (*TREE_VERIFIERS, "gbv", "lookahead", *extra))
    node = sorted(VERIFIERS)
    tree = [*dict.fromkeys([*TREE_VERIFIERS, "gbv", "lookahead", *extra])]
    assert {"block", "traversal", "gbv", "lookahead"} <= set(TREE_VERIFIER_STYLES) <= set(tree)
    looks = {name: _look(name) for name in node + tree}
    assert len(set(looks.values())) == len(looks)  # (colour, marker) never shared
    node_colours = {looks[n][0] for n in node} | {to_hex(c) for c in FAMILY_COLORS.values()}
    node_markers = {looks[n][1] for n in node} | {"o"}  # "o": the bounds
    for name in TREE_VERIFIER_STYLES:  # the named ones: a colour and a marker of their own
        assert looks[name][0] not in node_colours and looks[name][1] not in node_markers, name
        assert [looks[t][0] for t in TREE_VERIFIER_STYLES].count(looks[name][0]) == 1
        assert [looks[t][1] for t in TREE_VERIFIER_STYLES].count(looks[name][1]) == 1
    for name in tree:  # the rule: never a node-wise look, never a named tree-level look
        assert is_tree_level(name) and P.family(f"exact:{name}") == "tree-level"
        assert looks[name][0] not in node_colours and looks[name][1] not in node_markers, name
    assert len({looks[n] for n in node}) == len(node)  # node-wise verifiers told apart too
    # stable: the same look whatever else is registered (fixed names), and from every method kind
    monkeypatch.setattr(P, "_tree_registry", lambda: tuple(TREE_VERIFIERS))
    assert all(_look(n) == looks[n] for n in [*node, *TREE_VERIFIERS])
    assert style("verifier:rrs") == style("gap:rrs") == style("exact:rrs")
    assert not is_tree_level("rrs") and not is_tree_level("my_sampler")


def _decode_rows(temps=(0.5, 1.0), shapes=(("1x3", 3, 3), ("2x2", 4, 2))):
    rows = []
    for T in temps:
        for tree, size, depth in shapes:
            methods = ["exact:naive", "exact:rrs", "exact:traversal", "heuristic", "sampled:rrs"]
            if tree.startswith("1x"):
                methods.append("exact:block")
            for i, m in enumerate(methods):
                rows.append(
                    {"T": T, "tree": tree, "tree_size": size, "scheme": "with_replacement", "method": m,
                     "mean": min(1.5 + 0.2 * i + T / 10, depth + 1.0), "ci95": 0.4}
                )  # fmt: skip
    return rows


def _series(fig):
    """(label, colour, marker, line style, xs, ys) of every errorbar series of the figure."""
    out = []
    for ax in fig.axes:
        for c in ax.containers:
            if hasattr(c, "lines") and c.lines[0] is not None:
                line = c.lines[0]
                out.append(
                    (c.get_label(), to_hex(line.get_color()), line.get_marker(), line.get_linestyle(),
                     list(line.get_xdata()), list(line.get_ydata()), c)
                )  # fmt: skip
    return out


def test_decode_figures_styles_points_per_shape_and_labels():
    import matplotlib.pyplot as plt

    from mdsd_ot.plots import figure_decode

    title = run_title("tree decoding", target="m/target-1b", draft="m/draft-0.1b", prompts="humaneval",
                      counts="4 prompts, 30 target calls", value="mean tokens per target call")  # fmt: skip
    for which in (0, 1):
        fig = figure_decode(_decode_rows(), which, title=title)
        series = _series(fig)
        for label, colour, marker, _ls, *_ in series:  # drawn in its fixed style
            if label.startswith("exact:"):
                assert (colour, marker) == _look(label.split(":", 1)[1])
        legend = [t.get_text() for t in fig.legends[0].get_texts()]
        assert {
            "block (tree-level)",
            "traversal (tree-level)",
            "naive (node-wise)",
            "rrs (node-wise)",
        } <= set(legend)
        assert "node-alpha* heuristic (with_replacement)" in legend and len(legend) == 5
        suptitle = " ".join(fig._suptitle.get_text().split())  # wrapped to the figure's width
        for word in ("target-1b", "draft-0.1b", "humaneval", "30 target calls", "95% intervals"):
            assert word in suptitle
        assert all(ax.get_title() for ax in fig.axes if ax.axison)
    # the tree-size figure: no line joins shapes, one labelled tick per shape, points off-centre
    for _label, _c, _m, ls, xs, _ys, _cont in series:
        assert ls == "None"
    ax = fig.axes[0]
    ticks = [t.get_text() for t in ax.get_xticklabels()]
    assert ticks == ["1x3\n(3)", "2x2\n(4)"]
    first = sorted(s[4][0] for s in series if s[6] in ax.containers)
    assert len(set(first)) == len(first) and all(abs(x) < 0.5 for x in first)  # offset, same category
    plt.close("all")


def test_one_temperature_gives_bar_charts():
    import matplotlib.pyplot as plt
    from matplotlib.container import BarContainer

    from mdsd_ot.plots import figure_decode, figure_families

    rows = _decode_rows(temps=(0.7,))
    fig = figure_decode(rows, 0)
    (ax,) = [a for a in fig.axes if a.axison]
    bars = [c for c in ax.containers if isinstance(c, BarContainer)]
    exact = [t for t in rows if t["method"] not in ("sampled:rrs",)]
    assert len(bars) == len(exact)  # one bar per (shape, method)
    for c in bars:
        (rect,) = c.patches
        assert rect.get_y() == 1.0  # tokens per call: bars from 1
        match = [t for t in exact if abs(t["mean"] - 1.0 - rect.get_height()) < 1e-12]
        assert match
    assert "T = 0.7" in ax.get_title() and [t.get_text() for t in ax.get_xticklabels()] == [
        "1x3\n(3)",
        "2x2\n(4)",
    ]
    assert not [s for s in _series(fig) if len(s[4]) > 1]  # no line series
    table = [
        {"method": m, "T": 1.0, "n": n, "mean": v, "ci95": 0.3, "count": 10}
        for n in (2, 3)
        for m, v in (("bound:with_replacement", 0.9), ("verifier:rrs", 0.8), ("verifier:naive", 0.7))
    ]
    fig = figure_families(table, "acceptance", title="t")
    for ax in fig.axes:
        bars = [c for c in ax.containers if isinstance(c, BarContainer)]
        assert [c.get_label() for c in bars] == ["bound:with_replacement", "verifier:naive", "verifier:rrs"]
        assert [t.get_text() for t in ax.get_xticklabels()] == [c.get_label() for c in bars]
        assert sorted(round(c.patches[0].get_height(), 12) for c in bars) == [0.7, 0.8, 0.9]
        # the bound's interval 0.9 +- 0.3 is cut at 1
        tops = [
            seg[:, 1].max()
            for c in ax.containers
            if not isinstance(c, BarContainer)
            for seg in c.lines[2][0].get_segments()
        ]
        assert max(tops) == pytest.approx(1.0)
    assert [t.get_text() for t in fig.legends[0].get_texts()] == [
        "bound:with_replacement",
        "verifier:naive",
        "verifier:rrs",
    ]
    plt.close("all")


def test_intervals_cut_to_range_and_series_offset():
    import matplotlib.pyplot as plt

    from mdsd_ot.plots import figure_families

    table = [
        {"method": m, "T": T, "n": 2, "mean": v, "ci95": 0.3, "count": 10}
        for T in (0.3, 1.0)
        for m, v in (("bound:with_replacement", 0.95), ("verifier:rrs", 0.9), ("verifier:naive", 0.1))
    ]
    fig = figure_families(table, "acceptance")
    series = _series(fig)
    xs = [s[4][0] for s in series]
    assert len(set(xs)) == 3 and all(abs(x - 0.3) < 0.05 for x in xs)  # apart, near T = 0.3
    for *_rest, c in series:
        segs = c.lines[2][0].get_segments()
        assert all(0.0 <= seg[:, 1].min() and seg[:, 1].max() <= 1.0 for seg in segs)
    naive = next(s for s in series if s[0] == "verifier:naive")
    assert naive[6].lines[2][0].get_segments()[0][:, 1].min() == pytest.approx(0.0)  # 0.1 - 0.3 cut at 0
    plt.close("all")


def test_run_names_from_config(tmp_path):
    config = {
        "identity": {"target": {"path": "a/t", "describe": "a/t (3 files)"}, "prompts": {"count": 4}},
        "config": {"target": "models/target", "draft": "models/draft"},
        "provenance": {"prompts": "humaneval"},
    }
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert run_names(tmp_path) == {"target": "models/target", "draft": "models/draft", "prompts": "humaneval"}
    assert run_names(tmp_path / "missing") == {}
    text = run_title(
        "study", **run_names(tmp_path), counts="12 positions from 4 prompts", value="mean per position"
    )
    assert text.splitlines() == [
        "study: target target, draft draft; prompts humaneval; 12 positions from 4 prompts",
        "mean per position; error bars: 95% intervals clustered by prompt",
    ]

"""scripts/tree_report.py, the second edition's sections (lookahead, gbv, the certified rules): the
sandwich, its per-scheme summary, the paired comparisons and the per-problem weighting against numpy
and mpmath recomputations on small hand-made rows; the checks flag what they should; rows without the
new columns (the first edition) get one line per section."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import mpmath
import numpy as np
import pytest
from conftest import load_script
from oracles import mp_t_quantile

ROOT = Path(__file__).resolve().parents[1]
TEMPS = (0.3, 1.0)
CALLS = (1, 2, 3, 4, 2, 5)  # calls per problem: per call and per problem weightings differ


@pytest.fixture(scope="module")
def tr():
    return load_script("tree_report")


def _rows(seed=7):
    """Rows in the decode format (one per call and cell): a chain ``1x2`` and a tree ``2x2`` drawn with
    replacement, a ``2x2`` top_n tree. On the chain lookahead, gbv and traversal equal block (one
    call off by 3e-13); at T = 1 the chain's subtree rule sits below block, the tree's lookahead below
    node-wise optimal and its one_level rule above the trivial bound 3."""
    rng = np.random.default_rng(seed)
    rows = []
    for T in TEMPS:
        for g, n in enumerate(CALLS):
            rec = f"P/{g}"
            for call in range(n):
                base = dict(record=rec, T=T, call=call, driver="traversal")
                b = 2.0 + rng.uniform(0.0, 0.8)
                chain = {"exact:block": b, "exact:traversal": b, "exact:lookahead": b, "exact:gbv": b,
                         "exact:rrs": b - rng.uniform(0.0, 0.2), "upper:one_level": 2.9,
                         "upper:subtree": b + rng.normal(-0.3 if T == 1.0 else 0.1, 0.05)}  # fmt: skip
                chain["exact:optimal"] = chain["exact:rrs"]
                if (g, call) == (3, 2):
                    chain["exact:lookahead"] = b - 3e-13
                t = 1.8 + rng.uniform(0.0, 1.0)
                opt = t - rng.uniform(0.0, 0.1)
                tree = {"exact:traversal": t, "exact:optimal": opt,
                        "exact:lookahead": opt + (rng.uniform(0.0, 0.3) if T == 0.3 else -0.01),
                        "exact:gbv": t + rng.normal(0.0, 0.1), "upper:one_level": 2.95 if T == 0.3 else 3.2,
                        "emitted": int(rng.integers(1, 4)), "t_draft": rng.uniform(0.5, 1.0),
                        "t_target": rng.uniform(1.0, 2.0), "t_exact": rng.uniform(0.1, 0.5)}  # fmt: skip
                tree["upper:subtree"] = tree["exact:lookahead"] + abs(rng.normal(0.2, 0.1))
                x = 1.5 + rng.uniform(0.0, 1.0)
                top = {"exact:naive": x, "exact:lookahead": x, "exact:traversal": x,
                       "upper:top_n": x + 1e-15, "upper:one_level": x + 0.5}  # fmt: skip
                rows.append(dict(base, tree="1x2", scheme="with_replacement", **chain))
                rows.append(dict(base, tree="2x2", scheme="with_replacement", **tree))
                rows.append(dict(base, tree="2x2", scheme="top_n", **top))
    return rows


def _values(rows, T, tree, scheme, key):
    rs = [r for r in rows if (r["T"], r["tree"], r["scheme"]) == (T, tree, scheme)]
    return np.array([r[key] for r in rs]), np.array([r["record"] for r in rs])


def _oracle_ci(x, groups):
    """Cluster-robust 95% half-width from its formula (numpy; mpmath t quantile)."""
    x, groups = np.asarray(x, dtype=np.float64), np.asarray(groups)
    labels = np.unique(groups)
    s = np.array([(x[groups == c] - x.mean()).sum() for c in labels])
    var = (s**2).sum() / x.size**2 * labels.size / (labels.size - 1)
    return x.mean(), mp_t_quantile(labels.size - 1, 0.975) * math.sqrt(var)


def _oracle_per_problem(x, groups):
    """Each problem weighs 1: the mean of its values, then the t interval over problems."""
    x, groups = np.asarray(x, dtype=np.float64), np.asarray(groups)
    means = np.array([x[groups == c].mean() for c in np.unique(groups)])
    G = means.size
    return means.mean(), mp_t_quantile(G - 1, 0.975) * means.std(ddof=1) / math.sqrt(G), means


def _oracle_p(mean, half, G):
    """Two-sided p of the t test from the interval (mpmath's regularised incomplete beta)."""
    t = abs(mean) / (half / mp_t_quantile(G - 1, 0.975))
    df = mpmath.mpf(G - 1)
    return float(mpmath.betainc(df / 2, mpmath.mpf(1) / 2, 0, df / (df + t * t), regularized=True))


def test_new_comparisons_against_numpy(tr):
    rows = _rows()
    by_call, by_problem = {}, {}
    text = tr.new_comparisons(rows, collect=by_call)
    tr.new_comparisons(rows, per_problem=True, collect=by_problem)
    labels = {k[0] for k in by_call}
    assert labels == {
        "1x2 with_replacement: lookahead - traversal", "1x2 with_replacement: lookahead - optimal (one-step)",
        "1x2 with_replacement: gbv - traversal", "1x2 with_replacement: gbv - block",
        "1x2 with_replacement: gbv - lookahead",
        "2x2 with_replacement: lookahead - traversal", "2x2 with_replacement: lookahead - optimal (one-step)",
        "2x2 with_replacement: gbv - traversal", "2x2 with_replacement: gbv - lookahead",
        "2x2 top_n: lookahead - traversal",
        "1x2 with_replacement: upper:subtree - upper:one_level",
        "2x2 with_replacement: upper:subtree - upper:one_level", "2x2 top_n: upper:top_n - upper:one_level",
    }  # fmt: skip
    # identities on the chain read as rounding (one call is 3e-13 off)
    assert (
        "| 1x2 with_replacement: gbv - block | 0 (equal up to rounding) | 0 (equal up to rounding) |" in text
    )
    assert (
        "| 1x2 with_replacement: gbv - lookahead | 0 (equal up to rounding) | 0 (equal up to rounding) |"
        in text
    )
    for label, tree, scheme, left, right in [
        ("2x2 with_replacement: lookahead - optimal (one-step)", "2x2", "with_replacement", "exact:lookahead",
         "exact:optimal"),
        ("2x2 with_replacement: gbv - traversal", "2x2", "with_replacement", "exact:gbv", "exact:traversal"),
        ("2x2 with_replacement: gbv - lookahead", "2x2", "with_replacement", "exact:gbv", "exact:lookahead"),
        ("1x2 with_replacement: upper:subtree - upper:one_level", "1x2", "with_replacement", "upper:subtree",
         "upper:one_level"),
    ]:  # fmt: skip
        for T in TEMPS:
            a, groups = _values(rows, T, tree, scheme, left)
            b, _ = _values(rows, T, tree, scheme, right)
            mean, half = _oracle_ci(a - b, groups)
            got = by_call[(label, T)]
            assert got[0] == pytest.approx(mean, abs=1e-12) and got[1] == pytest.approx(half, rel=1e-9)
            assert got[2:4] == (len(a), len(CALLS))
            assert got[4] == pytest.approx(_oracle_p(mean, half, len(CALLS)), rel=1e-6)
            pmean, phalf, _ = _oracle_per_problem(a - b, groups)
            got = by_problem[(label, T)]
            assert got[0] == pytest.approx(pmean, abs=1e-12) and got[1] == pytest.approx(phalf, rel=1e-9)
            if np.ptp(a - b) > 0.01:  # the two weightings differ on these rows
                assert abs(pmean - mean) > 1e-4
    assert "2x2 with_replacement: lookahead - optimal (one-step) | +" in text


def test_sandwich_summary_and_per_problem_weighting(tr):
    from mdsd_ot.decode.report import sandwich, summarize

    rows = _rows()
    cells = {(c["T"], c["tree"], c["scheme"]): c for c in sandwich(rows)}
    agg = tr.per_problem_rows(rows)
    agg_table = summarize(agg)
    cells_p = {(c["T"], c["tree"], c["scheme"]): c for c in sandwich(agg, agg_table)}
    rel = {}
    for (T, tree, scheme), c in cells.items():
        keys = sorted({k for r in rows if (r["tree"], r["scheme"]) == (tree, scheme) for k in r if ":" in k})
        vals = {k: _values(rows, T, tree, scheme, k) for k in keys}
        best = max((k for k in keys if k.startswith("exact:")), key=lambda k: vals[k][0].mean())
        rule = min((k for k in keys if k.startswith("upper:")), key=lambda k: sum(_oracle_ci(*vals[k])))
        width, half = _oracle_ci(vals[rule][0] - vals[best][0], vals[best][1])
        assert c["width"] == pytest.approx(width, abs=1e-12) and c["width_ci95"] == pytest.approx(
            half, abs=1e-9
        )
        rel[(T, tree, scheme)] = width / vals[best][0].mean()
        # per problem: every value averaged within its problem first, the choices made on those means
        pp = {k: _oracle_per_problem(*vals[k]) for k in keys}
        best_p = max((k for k in keys if k.startswith("exact:")), key=lambda k: pp[k][0])
        rule_p = min((k for k in keys if k.startswith("upper:")), key=lambda k: pp[k][0] + pp[k][1])
        wp, hp, _ = _oracle_per_problem(pp[rule_p][2] - pp[best_p][2], np.arange(len(CALLS)))
        p = cells_p[(T, tree, scheme)]
        assert (p["width"], p["calls"]) == (pytest.approx(wp, abs=1e-12), len(CALLS))
        assert p["width_ci95"] == pytest.approx(hp, abs=1e-9)
    summary = tr.sandwich_summary(list(cells.values()))
    for T in TEMPS:
        r = [rel[(T, "1x2", "with_replacement")], rel[(T, "2x2", "with_replacement")]]
        top = "2x2" if r[1] > r[0] else "1x2"
        assert f"| with_replacement | {T:g} | 2 | {np.median(r):.1%} | {max(r):.1%} ({top}) |" in summary
        assert f"| top_n | {T:g} | 1 | 0.0% | 0.0% | every cell | none | none |" in summary
    # the chain's subtree rule: 0.1 above block at T = 0.3, 0.3 below at T = 1 (interval wholly below 0)
    assert re.search(r"^\| with_replacement \| 1 \| 2 \| .* \| 1x2 \|$", summary, re.MULTILINE)
    table = tr.sandwich_weighting(list(cells.values()), list(cells_p.values()), agg_table)
    c, p = cells[(0.3, "2x2", "with_replacement")], cells_p[(0.3, "2x2", "with_replacement")]
    assert f"| {p['width'] - c['width']:+.3f} |" in table and "6 cells;" in table


def test_checks_flag_what_the_theory_forbids(tr):
    from mdsd_ot.decode.report import summarize

    rows = _rows()
    text = tr.checks(rows, summarize(rows))
    sub, groups = _values(rows, 1.0, "1x2", "with_replacement", "upper:subtree")
    blk, _ = _values(rows, 1.0, "1x2", "with_replacement", "exact:block")
    mean, half = _oracle_ci(sub - blk, groups)
    assert f"- 1x2 with_replacement T=1: upper:subtree - exact:block {mean:+.3f} ± {half:.3f}" in text
    assert "2 equal up to rounding" in text  # the top_n rule equals naive at both temperatures
    la, groups = _values(rows, 1.0, "2x2", "with_replacement", "exact:lookahead")
    opt, _ = _values(rows, 1.0, "2x2", "with_replacement", "exact:optimal")
    mean, half = _oracle_ci(la - opt, groups)
    assert f"- 2x2 with_replacement T=1: lookahead - optimal {mean:+.3f} ± {half:.3f}" in text
    assert "4 (cell, T), 1 with a negative mean" in text
    assert "largest |difference| 3.0e-13 (1x2 with_replacement: lookahead = block, 34 calls)" in text
    assert "(certified but vacuous): 2x2 with_replacement T=1 upper:one_level 3.200." in text


def test_first_edition_rows_get_one_line_per_section(tr, capsys, tmp_path):
    from mdsd_ot.decode.report import summarize

    rows = [{k: v for k, v in r.items() if k not in tr.NEW_VERIFIERS and not k.startswith("upper:")}
            for r in _rows()]  # fmt: skip
    tr.second_edition(rows, summarize(rows))
    out = capsys.readouterr().out.strip("\n").split("\n\n")
    assert len(out) == 8 and all(h.startswith("## ") for h in out[::2])
    assert all(line.startswith("No ") and "\n" not in line for line in out[1::2])
    # a folder other than the first edition's: the rows do not say which machine ran them
    (tmp_path / "done.txt").write_text(
        "".join(json.dumps({"id": f"P/{g}"}) + "\n" for g in range(len(CALLS)))
    )
    calls = [r for r in rows if "emitted" in r]
    hours = math.fsum(r["t_draft"] + r["t_target"] + r["t_exact"] for r in calls) / 3600
    line = tr.wall_time(tmp_path, rows).splitlines()[2]
    assert line.startswith(f"| {tr.UNRECORDED} | {len(CALLS)} | {len(calls)} | {hours:.2f} |")
    assert len(tr.wall_time(tmp_path, rows).splitlines()) == 3


def test_dtype_effect_on_paired_differences_by_hand():
    """``tree_dtype_effect.paired_summary``: the change of each paired difference between float32 and
    bfloat16, computed by hand on three calls (two verifiers of one cell, two schemes of one shape)."""
    module = load_script("tree_dtype_effect")

    def call(a32, a16, b32, b16, c32, c16):
        return {
            "values": {
                "2x2/with_replacement/traversal": {"float32": a32, "bfloat16": a16},
                "2x2/with_replacement/rrs": {"float32": b32, "bfloat16": b16},
                "2x2/greedy/traversal": {"float32": c32, "bfloat16": c16},
            }
        }

    samples = [
        call(3.0, 2.9, 2.5, 2.5, 3.2, 3.2),
        call(2.0, 2.0, 1.0, 1.2, 2.5, 2.0),
        call(1.0, 1.0, 1.0, 1.0, 1.5, 1.5),
    ]
    out = module.paired_summary(samples)
    per = out["per_comparison"]
    assert set(per) == {
        "2x2/with_replacement: rrs - traversal",
        "2x2: greedy - with_replacement (traversal)",
    }
    # rrs - traversal: (2.5-3.0) - (2.5-2.9) = -0.1; (1.0-2.0) - (1.2-2.0) = -0.2; 0
    v = np.array([-0.1, -0.2, 0.0])
    r = per["2x2/with_replacement: rrs - traversal"]
    assert r["calls"] == 3 and r["mean"] == pytest.approx(v.mean(), abs=1e-12)
    half = mp_t_quantile(2, 0.975) * math.sqrt(((v - v.mean()) ** 2).sum() / 2) / math.sqrt(3)
    assert r["ci95"] == pytest.approx(half, rel=1e-9)
    # greedy - with replacement: (3.2-3.0) - (3.2-2.9) = -0.1; (2.5-2.0) - (2.0-2.0) = 0.5; 0
    w = np.array([-0.1, 0.5, 0.0])
    assert per["2x2: greedy - with_replacement (traversal)"]["mean"] == pytest.approx(w.mean(), abs=1e-12)
    changes = np.abs(np.concatenate([v, w]))
    assert out["change_abs_median"] == pytest.approx(np.median(changes), abs=1e-12)
    assert out["change_abs_max"] == pytest.approx(0.5, abs=1e-12)
    # |differences| under bf16: 0.4, 0.8, 0 and 0.3, 0, 0.5
    assert out["difference_abs_median_bf16"] == pytest.approx(0.35, abs=1e-12)
    assert out["largest_mean_change"]["comparison"] == "2x2: greedy - with_replacement (traversal)"
    assert out["intervals_excluding_zero"] == 0  # three calls: both intervals hold 0
    one = module.paired_summary(samples[:1])["per_comparison"]
    assert all(r["ci95"] is None and r["calls"] == 1 for r in one.values())  # no interval from one call

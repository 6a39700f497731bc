"""docs/results: the analyses against independent recomputation on small synthetic rows; the committed
per-position rows verify, reproduce the committed tables, and the report says what they show."""

from __future__ import annotations

import json
import lzma
import math
import re
from pathlib import Path

import numpy as np
import pytest
from conftest import load_script
from oracles import mp_t_quantile

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results"
REPORT = RESULTS / "qwen_coder_humaneval.md"
DATA = RESULTS / "qwen_coder_humaneval"
EXT = DATA / "extension"
NS = (2, 3, 4)


def _text():
    return " ".join(REPORT.read_text().split())


# ----------------------------------------------------------------------- independent oracles


def _oracle_ci(x, groups):
    """Cluster-robust 95% interval written out from its formula (numpy, not the library's code):
    se² = g/(g−1) · Σ_clusters (Σ (x − mean))² / m², half-width t_{0.975, g−1} · se (mpmath quantile)."""
    x = np.asarray(x, dtype=np.float64)
    groups = np.asarray(groups)
    m, mean = x.size, x.mean()
    labels = np.unique(groups)
    s = np.array([(x[groups == c] - mean).sum() for c in labels])
    var = (s**2).sum() / m**2 * labels.size / (labels.size - 1)
    return mean, mp_t_quantile(labels.size - 1, 0.975) * math.sqrt(var)


def _oracle_quantile(x, q):
    """Linear interpolation between order statistics (numpy's default, written out)."""
    s = sorted(x)
    h = (len(s) - 1) * q
    lo = math.floor(h)
    return s[lo] + (h - lo) * (s[min(lo + 1, len(s) - 1)] - s[lo])


def _synthetic(seed=0, temps=(0.5, 1.0), lengths=(23, 31, 12, 40, 17)):
    """Main-run rows and extension rows of the study's format with known structure: every bound is
    at least its verifiers, RSD at every 5th position (n = 2) and every 10th (n = 3, 4, with a Monte
    Carlo standard error), the extension's n = 3, 4 bounds at every 10th position."""
    rng = np.random.default_rng(seed)
    main, ext = [], []
    for k, length in enumerate(lengths):
        rec = f"P/{k}"
        for pos in range(length):
            token = int(rng.integers(1000))
            for T in temps:
                tv = float(rng.uniform(0.0, 0.3))
                a1 = 1 - tv
                r = {"record": rec, "pos": pos, "token": token, "T": T}
                e = {"record": rec, "pos": pos, "token": token, "T": T}
                wor = {}
                for n in NS:
                    w = a1 + (1 - a1) * float(rng.uniform(0.1, 0.5)) * (n - 1) / 3
                    s = w + (1 - w) * float(rng.uniform(0.0, 0.6))
                    g = s - float(rng.uniform(-0.01, 0.02)) * (1 - s)
                    r[f"bound:with_replacement@{n}"] = w
                    if n == 2:
                        r["bound:without_replacement@2"] = s
                    wor[n] = s
                    r[f"bound:greedy@{n}"] = g
                    r[f"verifier:greedy@{n}"] = g
                    for v, frac in (("naive", 0.5), ("rrs", 0.1), ("spectr", 0.05)):
                        r[f"verifier:{v}@{n}"] = w - frac * float(rng.uniform(0, 1)) * (1 - a1)
                    rsd = s - 0.2 * float(rng.uniform(0, 1)) * (s - a1)
                    if n == 2 and pos % 5 == 0:
                        r["verifier:rrs_without_replacement@2"] = rsd
                    if n > 2 and pos % 10 == 0:
                        r[f"verifier:rrs_without_replacement@{n}"] = rsd
                        r[f"verifier:rrs_without_replacement@{n}:se"] = float(rng.uniform(1e-4, 1e-3))
                r["verifier:spechub@2"] = r["bound:greedy@2"]
                e["bound:with_replacement@1"] = a1
                e["bound:with_replacement@2"] = r["bound:with_replacement@2"]
                e["bound:conditional_poisson@2"] = wor[2] + float(rng.uniform(-1e-3, 1e-3)) * tv
                for n in (3, 4):
                    if pos % 10 == 0:
                        e[f"bound:without_replacement@{n}"] = wor[n]
                        e[f"bound:conditional_poisson@{n}"] = wor[n] + float(rng.uniform(-1e-3, 1e-3)) * tv
                e["tv"] = tv
                main.append(r)
                ext.append(e)
    return main, ext


@pytest.fixture(scope="module")
def an():
    return load_script("qwen_study_analyses")


@pytest.fixture(scope="module")
def synth(an):
    main, ext = _synthetic()
    rows, worst = an.join(main, ext)
    return main, ext, rows


# ------------------------------------------------------------------------- synthetic rows


def test_one_interval_formula(an):
    from mdsd_ot.study import cluster_mean_ci

    assert an.ci is cluster_mean_ci
    rng = np.random.default_rng(1)
    for m, g in ((7, 2), (40, 5), (300, 54)):
        x = rng.normal(size=m)
        groups = rng.integers(g, size=m)
        groups[:g] = np.arange(g)  # every cluster present
        mean, half = an.ci(x, groups)
        om, oh = _oracle_ci(x, groups)
        assert abs(mean - om) < 1e-12 and abs(half - oh) < 1e-12 * max(1.0, oh)


def test_join_checks_tokens_shared_values_and_duplicates(an, synth):
    main, ext, rows = synth
    assert len(rows) == len(main)
    r = rows[7]
    assert r["bound:with_replacement@1"] == ext[7]["bound:with_replacement@1"] and "tv" in r
    bad = [dict(e) for e in ext]
    bad[3]["token"] += 1
    with pytest.raises(ValueError, match="differs between the runs"):
        an.join(main, bad)
    bad = [dict(e) for e in ext]
    bad[5]["bound:with_replacement@2"] += 1e-9
    with pytest.raises(ValueError, match="differs by"):
        an.join(main, bad)
    bad = [dict(e) for e in ext]
    bad[2]["bound:greedy@2"] = 0.5
    with pytest.raises(ValueError, match="in both runs"):
        an.join(main, bad)
    with pytest.raises(ValueError, match="rows"):
        an.join(main, ext[:-1])


def test_paired_differences_against_recomputation(an, synth):
    _, _, rows = synth
    for T in (0.5, 1.0):
        for n, step in ((2, 5), (3, 10), (4, 10)):
            sel = [r for r in rows if r["T"] == T and r["pos"] % step == 0]
            x = [r[f"verifier:greedy@{n}"] - r[f"verifier:rrs_without_replacement@{n}"] for r in sel]
            p = an.paired(rows, an.diff(f"verifier:greedy@{n}", f"verifier:rrs_without_replacement@{n}"), T)
            om, oh = _oracle_ci(x, [r["record"] for r in sel])
            assert p["count"] == len(sel) and abs(p["mean"] - om) < 1e-12 and abs(p["ci95"] - oh) < 1e-12
            assert p["higher"] == sum(v > 1e-9 for v in x) and p["lower"] == sum(v < -1e-9 for v in x)
        # gap against n, paired: the same positions, the bound of each verifier's own scheme
        for v, scheme, step in (
            ("rrs", "with_replacement", 1),
            ("rrs_without_replacement", "without_replacement", 10),
        ):
            sel = [r for r in rows if r["T"] == T and r["pos"] % step == 0]
            x = [
                (r[f"bound:{scheme}@3"] - r[f"verifier:{v}@3"])
                - (r[f"bound:{scheme}@2"] - r[f"verifier:{v}@2"])
                for r in sel
            ]
            p = an.paired(rows, lambda r, v=v: an.gap(r, v, 3) - an.gap(r, v, 2), T)
            om, oh = _oracle_ci(x, [r["record"] for r in sel])
            assert p["count"] == len(sel) and abs(p["mean"] - om) < 1e-12 and abs(p["ci95"] - oh) < 1e-12
        # n = 1 baseline: alpha*_CP - alpha*_1 at every position for n = 2
        sel = [r for r in rows if r["T"] == T]
        x = [r["bound:conditional_poisson@2"] - (1 - r["tv"]) for r in sel]
        p = an.paired(rows, an.diff("bound:conditional_poisson@2", "bound:with_replacement@1"), T)
        om, oh = _oracle_ci(x, [r["record"] for r in sel])
        assert p["count"] == len(sel) and abs(p["mean"] - om) < 1e-12 and abs(p["ci95"] - oh) < 1e-12


def test_verifier_checks_find_planted_violations(an, synth):
    _, _, rows = synth
    clean = an.verifier_checks(rows)
    n_exact = sum(1 for r in rows for k in r if k.startswith("verifier:") and not k.endswith(":se")) - sum(
        1 for r in rows for k in r if k.endswith(":se")
    )
    assert clean["exact"] == n_exact and clean["mc"] == sum(1 for r in rows for k in r if k.endswith(":se"))
    assert clean["exact_above"] == clean["mc_above_3se"] == clean["mc_above_any"] == 0
    assert clean["no_bound"] == 0 and clean["failed"] == 0
    planted = [dict(r) for r in rows]
    mc = [r for r in planted if "verifier:rrs_without_replacement@3:se" in r]
    planted[1]["verifier:rrs@2"] = planted[1]["bound:with_replacement@2"] + 1e-6  # exact, above
    planted[2]["verifier:spectr@4"] = planted[2]["bound:with_replacement@4"] + 1e-10  # within 1e-9
    for r, z in ((mc[0], 5.0), (mc[1], 1.0)):  # Monte Carlo: 5 se above (flagged), 1 se above (not)
        r["verifier:rrs_without_replacement@3"] = (
            r["bound:without_replacement@3"] + z * r["verifier:rrs_without_replacement@3:se"]
        )
    # a Monte Carlo value stored without a standard error (se = 0): above by 1e-12, within 1e-9
    del mc[2]["verifier:rrs_without_replacement@4:se"]
    mc[2]["verifier:rrs_without_replacement@4"] = mc[2]["bound:without_replacement@4"] + 1e-12
    planted[4]["verifier:naive@2"] = None
    del planted[6]["bound:greedy@3"]
    got = an.verifier_checks(planted)
    assert (got["exact_above"], got["mc_above_3se"], got["mc_above_tol"], got["mc_above_any"]) == (1, 1, 2, 3)
    assert (got["mc"], got["mc_zero_se"], got["exact"]) == (clean["mc"], 1, clean["exact"] - 2)
    se = mc[0]["verifier:rrs_without_replacement@3:se"]
    assert abs(got["mc_worst"] - 5.0 * se) < 1e-12 and got["mc_worst_se"] == se
    assert abs(got["exact_worst"] - 1e-6) < 1e-15
    assert got["failed"] == 1 and got["no_bound"] == 1  # verifier:greedy@3 lost its bound


def test_ties_and_ordering_counts(an, synth):
    _, _, rows = synth
    planted = [dict(r) for r in rows if r["T"] == 1.0]
    for r in planted[:5]:  # both bounds at 1: ties at one
        r["bound:with_replacement@2"] = r["bound:without_replacement@2"] = 1.0
    for r in planted[5:8]:  # a tie below one
        r["bound:without_replacement@2"] = r["bound:with_replacement@2"] + 5e-10
    planted[8]["bound:without_replacement@2"] = planted[8]["bound:with_replacement@2"] - 1e-6
    t = an.ties(planted, 2)[1.0]
    assert t == {"higher": len(planted) - 9, "lower": 1, "ties": 8, "ties_at_one": 5}
    o = an.ordering(rows, 2)[0.5]
    x = [r["verifier:spectr@2"] - r["verifier:rrs@2"] for r in rows if r["T"] == 0.5]
    assert o["lower"] == sum(v < -1e-9 for v in x) and abs(o["mean"] - np.mean(x)) < 1e-12


def test_hard_positions_shares_and_quantiles(an, synth):
    _, _, rows = synth
    for T in (0.5, 1.0):
        sel = [r for r in rows if r["T"] == T]
        x = [r["bound:without_replacement@2"] - r["bound:with_replacement@2"] for r in sel]
        tv = [r["tv"] for r in sel]
        s = an.shares(rows, an.diff("bound:without_replacement@2", "bound:with_replacement@2"), T)
        hard = sum(a for a, b in zip(x, tv) if b > 0.1)
        k = round(0.1 * len(x))
        top = sum(sorted(x, reverse=True)[:k])
        assert s["count"] == len(x) and s["hard_count"] == sum(b > 0.1 for b in tv)
        assert abs(s["hard"] - hard / sum(x)) < 1e-12 and abs(s["top"] - top / sum(x)) < 1e-12
        for q in (0.0, 0.5, 0.9, 0.99, 1.0):
            assert abs(an.quantile(tv, q) - _oracle_quantile(tv, q)) < 1e-15
    # shares of a subsampled quantity use only its positions (RSD at every 5th)
    s = an.shares(rows, lambda r: an.gap(r, "rrs_without_replacement", 2), 1.0)
    assert s["count"] == sum(1 for r in rows if r["T"] == 1.0 and r["pos"] % 5 == 0)


def test_report_on_synthetic_rows_prints_the_recomputed_numbers(an, synth):
    _, _, rows = synth
    text = an.report(rows, 0.0)
    sel = [r for r in rows if r["T"] == 1.0 and r["pos"] % 5 == 0]
    om, oh = _oracle_ci(
        [r["verifier:greedy@2"] - r["verifier:rrs_without_replacement@2"] for r in sel],
        [r["record"] for r in sel],
    )
    line = next(ln for ln in text.splitlines() if ln.startswith("| greedy − RSD | 2 |"))
    assert f"{om:+.4f} ± {oh:.4f}" in line and f"| {len(sel):,} |" in line
    m = re.search(r"(\d[\d,]*) exact verifier values, 0 of them above", text)
    assert m and int(m.group(1).replace(",", "")) == an.verifier_checks(rows)["exact"]
    assert "Values stored as failed (the method raised, or its certificate re-check failed): none." in text


def test_rows_export_load_and_tamper(tmp_path):
    rows_mod = load_script("study_rows")
    main, _ = _synthetic(lengths=(5, 3))
    src = tmp_path / "run"
    src.mkdir()
    lines = {}
    for r in main:
        lines.setdefault(r["record"], []).append(json.dumps(r) + "\n")
    import hashlib

    with open(src / "positions.jsonl", "w") as fh, open(src / "done.txt", "w") as done:
        for rec, ls in lines.items():
            fh.writelines(ls)
            data = "".join(ls).encode()
            done.write(
                json.dumps({"id": rec, "rows": len(ls), "sha256": hashlib.sha256(data).hexdigest()}) + "\n"
            )
    (src / "config.json").write_text(
        json.dumps(
            {
                "format": 2,
                "kind": "study",
                "shard": "merged",
                "identity": {"target": {"path": str(tmp_path / "models" / "t")}},
                "argv": [str(src / "x")],
            }
        )
    )
    dest = tmp_path / "committed"
    info = rows_mod.export(src, dest, models=str(tmp_path / "models"))
    assert info["rows"] == len(main) and rows_mod.load_rows(dest) == main
    cfg = (dest / "config.json").read_text()
    assert str(tmp_path) not in cfg and "$MODELS/t" in cfg
    sums = dict(line.split()[::-1] for line in (dest / "SHA256SUMS").read_text().splitlines())
    raw = lzma.decompress((dest / "positions.jsonl.xz").read_bytes())
    assert sums["positions.jsonl"] == hashlib.sha256(raw).hexdigest()
    from mdsd_ot.study import read_rows

    back = rows_mod.unpack(dest, tmp_path / "plain")  # a study folder again, read by the library
    assert sorted(map(json.dumps, read_rows(back))) == sorted(map(json.dumps, main))
    # a changed row: the whole-file checksum and, without it, the problem's done.txt entry catch it
    changed = raw.replace(b'"pos": 1,', b'"pos": 9,', 1)
    (dest / "positions.jsonl.xz").write_bytes(lzma.compress(changed))
    with pytest.raises(ValueError, match="SHA256SUMS"):
        rows_mod.load_rows(dest)
    (dest / "SHA256SUMS").unlink()
    with pytest.raises(ValueError, match="checksum"):
        rows_mod.load_rows(dest)


# ------------------------------------------------------------------------- committed rows


@pytest.fixture(scope="module")
def main_rows():
    return load_script("study_rows").load_rows(DATA)


@pytest.fixture(scope="module")
def joined(an):
    return an.load(DATA, EXT)


def test_committed_rows_verify_and_reproduce_the_summaries(main_rows):
    from mdsd_ot.study import summarize

    assert len(main_rows) == 10_350
    assert len({(r["record"], r["pos"]) for r in main_rows}) == 2_070
    assert len({r["record"] for r in main_rows}) == 54
    assert summarize(main_rows) == json.loads((DATA / "summary.json").read_text())
    ext = load_script("study_rows").load_rows(EXT)
    assert summarize(ext) == json.loads((EXT / "summary.json").read_text())
    for path in [*DATA.rglob("*.json"), *DATA.rglob("*.log"), *DATA.rglob("*.md")]:
        text = path.read_text()
        assert '"/' not in text and "/work/" not in text, path  # no path of the machine that ran it


def test_report_claims_match_the_rows(an, joined):
    rows, _ = joined
    text = _text()
    t2 = an.ties(rows, 2)
    higher = sum(v["higher"] for v in t2.values())
    ties = sum(v["ties"] for v in t2.values())
    assert sum(v["lower"] for v in t2.values()) == 0
    assert f"{higher:,} of the 10,350" in text and f"other {ties:,} pairs are ties" in text
    at_one = sum(v["ties_at_one"] for v in t2.values())
    assert f"Of the ties, {at_one:,} have both bounds within 1e-9 of 1" in text
    assert f"the other {ties - at_one} are ties below 1" in text
    # SpecTr is never below RRS (beyond 1e-9) at any (position, temperature, n)
    cells = [p for n in NS for p in an.ordering(rows, n).values()]
    assert sum(p["count"] for p in cells) == 31_050 and sum(p["lower"] for p in cells) == 0
    assert "never below RRS's by more than 1e-9 at any of the 31,050" in text
    chk = an.verifier_checks(rows)
    assert chk["exact_above"] == 0 and chk["mc_above_3se"] == 0 and chk["failed"] == 0
    assert chk["mc"] == 2_340 and chk["no_bound"] == 0  # RSD n = 3, 4: 234 positions x 5 T x 2
    assert f"{chk['exact']:,} exact verifier values" in text
    assert f"{chk['mc']:,} Monte Carlo values" in text
    assert f"{chk['mc_above_any']} of them above it at all" in text


@pytest.mark.slow  # scripts/qwen_study_analyses.py re-derives analyses.md: 450 paired intervals, ~2 s
def test_analyses_reproduce(an, joined):
    rows, worst = joined
    assert an.report(rows, worst) == (DATA / "analyses.md").read_text()
    assert an.bounds_summary(rows) == json.loads((EXT / "bounds_summary.json").read_text())


def test_gap_vs_n_reproduces_the_summary(capsys):
    load_script("gap_vs_n").main([str(DATA / "summary.json")])
    out = capsys.readouterr().out
    assert out == (DATA / "gap_vs_n.md").read_text()
    summary = {(t["method"], t["n"], t["T"]): t for t in json.loads((DATA / "summary.json").read_text())}
    rrs = next(ln for ln in out.splitlines() if ln.startswith("| rrs | 1 |"))
    for n in (2, 3, 4):
        t = summary[("gap:rrs", n, 1.0)]
        assert f"{t['mean']:.4f} ± {t['ci95']:.4f}" in rrs


@pytest.mark.slow  # scripts/study_extras.py re-derives paired_differences.md from the 10,350 rows
def test_paired_differences_reproduce(capsys):
    assert load_script("study_extras").main([str(DATA)]) == 0
    assert capsys.readouterr().out == (DATA / "paired_differences.md").read_text()


def test_full_coverage_counts_in_the_report():
    text = _text()
    full = (DATA / "wor34_full" / "paired_differences.md").read_text()
    for n, claimed in ((3, "9,397"), (4, "9,347")):
        line = next(ln for ln in full.splitlines() if ln.startswith(f"| positions higher / lower | {n} |"))
        counts = re.findall(r"([\d,]+) / 0", line)
        assert len(counts) == 5 and f"{sum(int(c.replace(',', '')) for c in counts):,}" == claimed
        assert claimed in text


def test_the_subsampled_curves_are_found():
    from mdsd_ot.plots import _subsampled

    summary = json.loads((DATA / "summary.json").read_text())
    sub = _subsampled([t for t in summary if not t["method"].startswith("gap:")])
    assert set(sub) == {("verifier:rrs_without_replacement", n) for n in (2, 3, 4)}
    assert sub[("verifier:rrs_without_replacement", 2)] == (437, 2070)
    assert sub[("verifier:rrs_without_replacement", 3)] == (234, 2070)
    bounds = json.loads((EXT / "bounds_summary.json").read_text())
    sub = _subsampled(bounds)
    assert set(sub) == {
        (f"bound:{s}", n) for s in ("without_replacement", "conditional_poisson") for n in (3, 4)
    }


@pytest.mark.slow  # scripts/replot_summary.py draws the committed summary's figures (about 1.2 s)
def test_replot_marks_the_subsampled_curves(tmp_path):
    pytest.importorskip("matplotlib")
    assert load_script("replot_summary").main([str(DATA / "summary.json"), str(tmp_path)]) == 0
    assert (tmp_path / "acceptance_vs_temperature.png").stat().st_size > 10_000

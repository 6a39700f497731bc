"""docs/results: the report's counts agree with the committed tables, and its helper scripts run."""
from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results"
REPORT = RESULTS / "qwen_coder_humaneval.md"
DATA = RESULTS / "qwen_coder_humaneval"


def _script(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _paired_rows(path):
    rows = []
    for line in path.read_text().splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) == 8 and cells[1].isdigit():
            rows.append(cells)
    return rows


def test_strict_improvement_counts_match_the_committed_tables():
    text = " ".join(REPORT.read_text().split())
    rows = [r for r in _paired_rows(DATA / "paired_differences.md")
            if r[0] == "without_replacement - with_replacement" and r[1] == "2"]
    higher = sum(int(r[6]) for r in rows)
    total = sum(int(r[5]) for r in rows)
    assert all(int(r[7]) == 0 for r in rows)  # never lower
    assert (higher, total) == (8735, 10350)
    assert "8,735 of the 10,350" in text and f"other {total - higher:,} pairs are ties" in text
    full = (DATA / "wor34_full" / "paired_differences.md").read_text()
    for n, claimed in ((3, "9,397"), (4, "9,347")):
        line = next(ln for ln in full.splitlines() if ln.startswith(f"| positions higher / lower | {n} |"))
        counts = re.findall(r"([\d,]+) / 0", line)
        assert len(counts) == 5 and f"{sum(int(c.replace(',', '')) for c in counts):,}" == claimed
        assert claimed in text


def test_checked_verifier_count_and_what_was_left_out():
    config = json.loads((DATA / "config.json").read_text())["study"]
    assert config["every"]["bound:without_replacement@3"] == 0  # no bound for RSD n = 3, 4 here
    summary = json.loads((DATA / "summary.json").read_text())
    counts = {(t["method"], t["n"], t["T"]): t["count"] for t in summary}
    verifier_values = sum(c for (m, n, T), c in counts.items() if m.startswith("verifier:"))
    rsd34 = sum(c for (m, n, T), c in counts.items()
                if m == "verifier:rrs_without_replacement" and n in (3, 4))
    assert verifier_values - rsd34 == 136_735 and rsd34 == 2_340
    assert "own scheme: 136735;" in (DATA / "paired_differences.md").read_text()  # what was checked
    assert "2,340 Monte Carlo values of RSD" in " ".join(REPORT.read_text().split())


def test_gap_vs_n_reproduces_the_summary(capsys):
    _script("gap_vs_n").main([str(DATA / "summary.json")])
    out = capsys.readouterr().out
    assert out == (DATA / "gap_vs_n.md").read_text()
    summary = {(t["method"], t["n"], t["T"]): t for t in json.loads((DATA / "summary.json").read_text())}
    rrs = next(ln for ln in out.splitlines() if ln.startswith("| rrs | 1 |"))
    for n in (2, 3, 4):
        t = summary[("gap:rrs", n, 1.0)]
        assert f"{t['mean']:.4f} ± {t['ci95']:.4f}" in rrs


def test_replot_marks_the_subsampled_rsd(tmp_path):
    pytest.importorskip("matplotlib")
    from mdsd_ot.plots import _subsampled

    summary = json.loads((DATA / "summary.json").read_text())
    sub = _subsampled([t for t in summary if not t["method"].startswith("gap:")])
    assert set(sub) == {("verifier:rrs_without_replacement", n) for n in (2, 3, 4)}
    assert sub[("verifier:rrs_without_replacement", 2)] == (437, 2070)
    assert sub[("verifier:rrs_without_replacement", 3)] == (234, 2070)
    assert _script("replot_summary").main([str(DATA / "summary.json"), str(tmp_path)]) == 0
    assert (tmp_path / "acceptance_vs_temperature.png").stat().st_size > 10_000

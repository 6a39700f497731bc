"""``mdsd-ot demo`` runs offline on the bundled sample, with and without matplotlib."""

from __future__ import annotations

import json
import sys

import pytest

from mdsd_ot import sample
from mdsd_ot.cli import main

pytestmark = pytest.mark.skipif(not sample.sample_path().exists(), reason="bundled sample not captured yet")


def test_demo_prints_table_and_writes_plot(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    rc = main(
        ["demo", "--out", str(tmp_path), "--positions", "12", "--temperatures", "0.3,1.0", "--n", "2,3"]
    )
    assert rc == 0
    text = capsys.readouterr().out
    assert "| bound:without_replacement | 2 |" in text
    assert "| verifier:spectr | 3 |" in text
    assert (tmp_path / "acceptance_vs_temperature.png").stat().st_size > 1000
    assert (tmp_path / "gap_to_bound.png").exists()
    table = json.loads((tmp_path / "demo_summary.json").read_text())
    means = {(t["method"], t["n"], t["T"]): t["mean"] for t in table}
    for (method, n, T), m in means.items():
        assert 0.0 <= m <= 1.0 + 1e-12 or method.startswith("gap:")
        if method.startswith("gap:"):
            assert m >= -1e-9  # no verifier beats the bound of its own scheme
    for T in (0.3, 1.0):  # docs/math.md#test-facts: alpha* non-decreasing in n
        assert means[("bound:with_replacement", 3, T)] >= means[("bound:with_replacement", 2, T)] - 1e-12


def test_demo_without_matplotlib(tmp_path, capsys, monkeypatch):
    for mod in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, mod)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    rc = main(
        [
            "demo",
            "--out",
            str(tmp_path),
            "--positions",
            "4",
            "--temperatures",
            "0.7",
            "--n",
            "2",
            "--verifiers",
            "rrs",
        ]
    )
    assert rc == 0
    out = capsys.readouterr().out
    assert "plot skipped" in out
    assert (tmp_path / "demo_summary.md").exists()
    assert not (tmp_path / "acceptance_vs_temperature.png").exists()


def test_demo_bad_input_is_a_clean_error(tmp_path, capsys):
    assert main(["demo", "--out", str(tmp_path), "--temperatures", "0.42"]) == 2
    assert "available" in capsys.readouterr().err


def test_demo_unknown_verifier_is_rejected(tmp_path, capsys):
    assert main(["demo", "--out", str(tmp_path), "--verifiers", "bad", "--positions", "1"]) == 2
    assert "unknown verifier 'bad'" in capsys.readouterr().err

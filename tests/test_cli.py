"""The ``mdsd-ot bound`` and ``mdsd-ot compare`` commands, run in-process."""

from __future__ import annotations

import json

import numpy as np
import pytest

from mdsd_ot.cli import main

P = np.array([0.5, 0.3, 0.2, 0.0])
Q = np.array([0.1, 0.2, 0.3, 0.4])


@pytest.fixture
def files(tmp_path):
    out = {}
    out["npz"] = tmp_path / "pq.npz"
    np.savez(out["npz"], p=P, q=Q)
    out["npy"] = tmp_path / "pq.npy"
    np.save(out["npy"], np.vstack([P, Q]))
    out["json"] = tmp_path / "pq.json"
    out["json"].write_text(json.dumps({"p": P.tolist(), "q": Q.tolist()}))
    out["txt"] = tmp_path / "pq.txt"
    out["txt"].write_text("0.5 0.3 0.2 0\n0.1,0.2,0.3,0.4\n")
    out["p.npy"] = tmp_path / "p.npy"
    np.save(out["p.npy"], P)
    out["q.json"] = tmp_path / "q.json"
    out["q.json"].write_text(json.dumps(Q.tolist()))
    return out


@pytest.mark.parametrize("fmt", ["npz", "npy", "json", "txt"])
def test_bound_each_format(files, fmt, capsys):
    assert main(["bound", str(files[fmt]), "--n", "2", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["n"] == 2 and data["V"] == 4
    (res,) = data["results"]
    assert res["sampling"] == "with_replacement" and res["value"] == pytest.approx(0.69, abs=1e-9)
    assert res["success"] is True


def test_bound_two_files_text_and_all_schemes(files, capsys):
    assert main(["bound", str(files["p.npy"]), str(files["q.json"]), "--sampling", "all"]) == 0
    out = capsys.readouterr().out
    assert "alpha* = 0.690000000" in out and "alpha* = 0.734523810" in out
    argv = ["bound", str(files["npz"]), "--n", "3", "--sampling", "without_replacement,greedy", "--json"]
    assert main(argv) == 0
    values = {r["sampling"]: r["value"] for r in json.loads(capsys.readouterr().out)["results"]}
    assert values["without_replacement"] == pytest.approx(0.948810, abs=1e-6)
    assert values["greedy"] == pytest.approx(0.833333, abs=1e-6)


@pytest.mark.parametrize("fmt", ["npz", "npy", "json", "txt"])
def test_compare_each_format(files, fmt, capsys):
    assert main(["compare", str(files[fmt]), "--n", "2", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    rec = {r["verifier"]: r for r in data["records"]}
    assert rec["rrs"]["acceptance"] == pytest.approx(0.65, abs=1e-9)
    assert rec["spectr"]["acceptance"] == pytest.approx(0.658443, abs=1e-6)


def test_compare_table_and_options(files, capsys):
    assert main(["compare", str(files["txt"]), "--n", "3", "--verifiers", "rrs,greedy"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[1].split()[0] == "verifier"
    assert "rrs" in out and "0.685000" in out and "0.833333" in out
    assert main(["compare", str(files["npz"]), "--n", "3"]) == 0
    assert "skipped spechub" in capsys.readouterr().out
    unnormalised = files["txt"].parent / "counts.txt"
    unnormalised.write_text("5 3 2 0\n1 2 3 4\n")
    assert main(["compare", str(unnormalised), "--verifiers", "rrs", "--normalize", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["records"][0]["acceptance"] == pytest.approx(0.65)
    assert main(["compare", str(files["npz"]), "--sampling", "without_replacement", "--json"]) == 0
    names = {r["verifier"] for r in json.loads(capsys.readouterr().out)["records"]}
    assert names == {"naive", "rrs_without_replacement", "optimal"}


def _one_line_error(capsys, argv, match):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "error" in err and match in err, err


def test_bad_input_exits_2_with_one_line(files, tmp_path, capsys):
    bad = tmp_path / "bad.txt"
    bad.write_text("0.5 0.6 0.2\n0.1 0.2 0.7\n")
    _one_line_error(capsys, ["bound", str(bad)], "sums to")
    _one_line_error(capsys, ["compare", str(bad)], "sums to")
    _one_line_error(capsys, ["bound", str(tmp_path / "missing.npz")], "no such file")
    _one_line_error(capsys, ["compare", str(files["npz"]), "--verifiers", "bogus"], "unknown verifier")
    _one_line_error(capsys, ["compare", str(files["npz"]), "--n", "3", "--verifiers", "spechub"], "n = 2")
    _one_line_error(capsys, ["bound", str(files["npz"]), "--sampling", "sideways"], "unknown sampling")
    _one_line_error(capsys, ["bound", str(files["npz"]), "--n", "0"], "n (the number of drafts)")
    _one_line_error(capsys, ["bound", str(files["p.npy"])], "second file")
    three = [str(files["p.npy"])] * 3
    _one_line_error(capsys, ["bound", *three], "two files")
    mismatch = tmp_path / "mismatch.json"
    mismatch.write_text(json.dumps({"p": [0.5, 0.5], "q": [0.2, 0.3, 0.5]}))
    _one_line_error(capsys, ["compare", str(mismatch)], "same shape")
    neg = tmp_path / "neg.json"
    neg.write_text(json.dumps([[1.5, -0.5], [0.5, 0.5]]))
    _one_line_error(capsys, ["bound", str(neg)], "negative")


def test_help(capsys):
    for cmd in ("bound", "compare"):
        with pytest.raises(SystemExit) as exc:
            main([cmd, "--help"])
        assert exc.value.code == 0
        out = capsys.readouterr().out
        assert "--n" in out and "--json" in out and "--normalize" in out and "--sampling" in out
    assert main(["compare"]) == 2  # neither FILE nor --p/--q: one line
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_unknown_sampling_and_bad_json_values(files, tmp_path, capsys):
    # compare --sampling bad used to print an empty table with exit status 0
    _one_line_error(capsys, ["compare", str(files["npz"]), "--sampling", "bad"], "unknown sampling 'bad'")
    bools = tmp_path / "bools.json"
    bools.write_text('{"p": [true, false], "q": [0.5, 0.5]}')
    _one_line_error(capsys, ["bound", str(bools)], "bools.json: 'p' must contain only numbers")
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    _one_line_error(capsys, ["compare", str(deep)], "nested too deeply")


def test_huge_n_is_fast_or_rejected(files, capsys):
    n = str(10**9)
    assert main(["compare", str(files["npz"]), "--n", n, "--json"]) == 0
    table = json.loads(capsys.readouterr().out)
    # the full-vocabulary optimal verifier (i.i.d. drafts) has no enumeration limit
    assert {r["verifier"] for r in table["records"]} == {"naive", "rrs", "spectr", "optimal"}
    assert {s["verifier"] for s in table["skipped"]} >= {"greedy", "spechub"}
    _one_line_error(capsys, ["bound", str(files["npz"]), "--n", n, "--method", "lp"], "exact enumeration")

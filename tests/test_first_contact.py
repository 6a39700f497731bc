"""A newcomer's first hour: what the README and the CLI promise, run as written."""

from __future__ import annotations

import argparse
import itertools
import json
import subprocess
import sys

import numpy as np
import pytest

from mdsd_ot import sample
from mdsd_ot.cli import build_parser, main

P = np.array([0.5, 0.3, 0.2, 0.0])
Q = np.array([0.1, 0.2, 0.3, 0.4])


def _alpha_with_replacement(p, q, n):
    """alpha* with i.i.d. drafts by brute force over all subsets H: min p(H) + 1 - q(H)^n."""
    V = len(p)
    return min(
        sum(p[i] for i in H) + 1 - sum(q[i] for i in H) ** n
        for k in range(V + 1)
        for H in itertools.combinations(range(V), k)
    )


@pytest.fixture
def pq_files(tmp_path):
    np.save(tmp_path / "p.npy", P)
    np.save(tmp_path / "q.npy", Q)
    return str(tmp_path / "p.npy"), str(tmp_path / "q.npy")


def _one_line_error(capsys, argv, match):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "error" in err and match in err, err


def test_bound_all_skips_hub_for_n3_with_a_note(pq_files, capsys):
    # the README example `mdsd-ot bound p.npy q.npy --n 3 --sampling all` used to exit 2
    assert main(["bound", *pq_files, "--n", "3", "--sampling", "all"]) == 0
    out = capsys.readouterr().out
    assert "skipped hub: the 'hub' scheme is defined for n = 2 only" in out
    assert f"alpha* = {_alpha_with_replacement(P, Q, 3):.9f}" in out  # 0.771
    assert main(["bound", *pq_files, "--n", "3", "--sampling", "all", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [r["sampling"] for r in data["results"]] == [
        "with_replacement",
        "without_replacement",
        "greedy",
        "conditional_poisson",
        "top_n",
    ]
    assert data["skipped"][0]["sampling"] == "hub" and "n = 2" in data["skipped"][0]["reason"]
    # a scheme named explicitly must run: still one line and exit 2
    _one_line_error(capsys, ["bound", *pq_files, "--n", "3", "--sampling", "hub"], "n = 2 only")
    _one_line_error(capsys, ["bound", *pq_files, "--n", "0", "--sampling", "all"], "must be >= 1")


def test_bound_words_do_not_claim_the_recheck_proves_optimality(pq_files, capsys):
    assert main(["bound", *pq_files, "--n", "2"]) == 0
    out = capsys.readouterr().out
    assert "value attained by H, re-checked" in out and "optimal;" not in out


@pytest.mark.slow
def test_version_and_python_dash_m(capsys):
    import mdsd_ot

    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0 and capsys.readouterr().out.strip() == f"mdsd-ot {mdsd_ot.__version__}"
    done = subprocess.run(
        [sys.executable, "-m", "mdsd_ot", "--version"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0 and done.stdout.strip() == f"mdsd-ot {mdsd_ot.__version__}"
    done = subprocess.run([sys.executable, "-m", "mdsd_ot"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "audit" in done.stdout and "demo" in done.stdout


def test_every_option_with_a_default_shows_it_in_help():
    parser = build_parser()
    subparsers = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    checked = 0
    for name, cmd in subparsers.choices.items():
        text = "".join(cmd.format_help().split())  # argparse may wrap inside a long default
        for action in cmd._actions:
            d = action.default
            no_default = d in (None, False, "", argparse.SUPPRESS)
            if not action.option_strings or no_default or action.dest == "help":
                continue
            shown = "".join(str(d).split())
            assert "default" in (action.help or "") or f"(default:{shown})" in text, (name, action.dest)
            assert shown in text, (name, action.dest, d)
            checked += 1
    assert checked >= 20  # the options with a default across all sub-commands
    study = "".join(subparsers.choices["study"].format_help().split())
    for default in (
        "(default:2,3,4)",
        "(default:0.3,0.5,0.7,1.0)",
        "(default:0)",
        "(default:float32)",
        "(default:auto)",
        "(default:with_replacement,without_replacement,greedy)",
    ):
        assert default in study, default


def test_specinfer_and_rsd_are_aliases(tmp_path, capsys):
    from mdsd_ot.verifiers import VERIFIERS, get_verifier, verifier_acceptance

    assert get_verifier("specinfer") is VERIFIERS["rrs"]
    r = verifier_acceptance("specinfer", P, Q, 2)
    assert r.verifier == "rrs" and r.value == pytest.approx(0.65, abs=1e-12)
    a = verifier_acceptance("rsd", P, Q, 2)
    b = verifier_acceptance("rrs_without_replacement", P, Q, 2)
    assert a.verifier == "rrs_without_replacement" and a.value == b.value
    f = tmp_path / "pq.json"
    f.write_text(json.dumps({"p": P.tolist(), "q": Q.tolist()}))
    assert main(["compare", str(f), "--verifiers", "specinfer,rrs", "--json"]) == 0
    records = json.loads(capsys.readouterr().out)["records"]
    assert [r["verifier"] for r in records] == ["rrs"]  # one record: the same verifier


def test_compare_large_v_skip_message_matches_what_asking_does(tmp_path, capsys):
    rng = np.random.default_rng(3)
    mid, big = tmp_path / "mid.npz", tmp_path / "big.npz"
    np.savez(mid, p=rng.dirichlet(np.ones(150)), q=rng.dirichlet(np.ones(150)))  # 22,500 tuples
    np.savez(big, p=rng.dirichlet(np.ones(3000)), q=rng.dirichlet(np.ones(3000)))  # 9,000,000
    # i.i.d. drafts (the default): the full-vocabulary optimal verifier runs at any size
    assert main(["compare", str(big), "--verifiers", "rrs,optimal", "--json"]) == 0
    rec = json.loads(capsys.readouterr().out)["records"][1]
    assert rec["verifier"] == "optimal" and rec["method"] == "exact" and abs(rec["gap"]) < 1e-9
    # a scheme only the LP covers: skipped by default with a message that matches what asking does
    wo = ["--sampling", "without_replacement", "--json"]
    assert main(["compare", str(mid), "--verifiers", "rrs_without_replacement", *wo]) == 0
    capsys.readouterr()
    assert main(["compare", str(mid), *wo]) == 0
    why = {s["verifier"]: s["reason"] for s in json.loads(capsys.readouterr().out)["skipped"]}
    assert "request it explicitly" in why["optimal"]
    assert main(["compare", str(big), "--verifiers", "optimal", *wo]) == 2  # cannot build it
    assert "exact enumeration" in capsys.readouterr().err
    assert main(["compare", str(big), *wo]) == 0
    why = {s["verifier"]: s["reason"] for s in json.loads(capsys.readouterr().out)["skipped"]}
    assert "beyond the enumeration limit" in why["optimal"] and "request" not in why["optimal"]


needs_sample = pytest.mark.skipif(not sample.sample_path().exists(), reason="bundled sample missing")


@needs_sample
@pytest.mark.parametrize(
    "flags, match",
    [
        (["--n", "0"], "must be >= 1, got 0"),
        (["--n", "-1"], "must be >= 1, got -1"),
        (["--n", ","], "give at least one n"),
        (["--n", "two"], "comma-separated integers"),
        (["--temperatures", "-0.5"], "finite floats > 0"),
        (["--temperatures", "nan"], "finite floats > 0"),
        (["--temperatures", ","], "give at least one temperature"),
        (["--temperatures", "0.42"], "available"),
        (["--positions", "0"], "--positions must be >= 1"),
    ],
)
def test_demo_bad_flags_exit_2_with_one_line(tmp_path, capsys, flags, match):
    _one_line_error(capsys, ["demo", "--out", str(tmp_path), "--positions", "2", *flags], match)
    assert not (tmp_path / "demo_summary.md").exists()


@needs_sample
def test_demo_names_the_methods_that_cannot_run(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    argv = [
        "demo",
        "--out",
        str(tmp_path),
        "--positions",
        "2",
        "--temperatures",
        "0.7",
        "--n",
        "2,99",
        "--verifiers",
        "specinfer,greedy",
    ]
    assert main(argv) == 0
    captured = capsys.readouterr()
    err_lines = [line for line in captured.err.splitlines() if "@99" in line]
    keys = {line.split()[0] for line in err_lines}
    # only the schemes that need 99 distinct tokens of positive q fail; rrs (i.i.d.) runs at any n
    assert keys == {"bound:without_replacement@99", "bound:greedy@99", "verifier:greedy@99"}
    assert all("needs at least 99 tokens with q > 0" in line for line in err_lines)
    assert "matplotlib is not installed" not in captured.out
    assert "| verifier:rrs | 99 |" in captured.out and "| bound:with_replacement | 99 |" in captured.out


@needs_sample
def test_demo_progress_on_stderr(tmp_path, capsys):
    argv = [
        "demo",
        "--out",
        str(tmp_path),
        "--positions",
        "3",
        "--temperatures",
        "0.3,1.0",
        "--n",
        "2",
        "--verifiers",
        "rrs",
        "--no-plot",
    ]
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert "mdsd-ot demo: 6/6 (position, temperature) pairs" in err
    assert main(argv + ["--no-progress"]) == 0
    assert "pairs" not in capsys.readouterr().err


def test_plot_families_share_colour_and_mark_subsamples(tmp_path):
    from mdsd_ot.plots import _styles, _subsampled, family, plot_families

    methods = {
        "bound:greedy",
        "verifier:greedy",
        "verifier:spechub",
        "bound:with_replacement",
        "verifier:rrs",
        "verifier:spectr",
        "bound:without_replacement",
        "verifier:rrs_without_replacement",
    }
    pytest.importorskip("matplotlib")
    from matplotlib.colors import rgb_to_hsv, to_rgb

    def hue(c):
        return rgb_to_hsv(to_rgb(c))[0]

    st = _styles(methods)
    for m in methods:  # one hue per family: each verifier a shade of its bound's colour
        d = abs(hue(st[m][0]) - hue(st[f"bound:{family(m)}"][0]))
        assert min(d, 1 - d) < 0.1, m
    colours = {st[f"bound:{s}"][0] for s in ("greedy", "with_replacement", "without_replacement")}
    assert len(colours) == 3
    assert st["verifier:greedy"][1:3] != st["verifier:spechub"][1:3]  # told apart by style/marker
    assert st["bound:greedy"][1] == "-" and st["verifier:greedy"][1] != "-"
    table = [
        {
            "method": m,
            "T": T,
            "n": 2,
            "mean": 0.9,
            "ci95": 0.01,
            "count": 437 if m == "verifier:rrs_without_replacement" else 2070,
        }
        for m in sorted(methods)
        for T in (0.3, 1.0)
    ]
    assert _subsampled(table) == {("verifier:rrs_without_replacement", 2): (437, 2070)}
    pytest.importorskip("matplotlib")
    files = plot_families(table, tmp_path)
    assert files["acceptance_plot"].stat().st_size > 1000 and "gap_plot" not in files
    assert plot_families([], tmp_path) == {}

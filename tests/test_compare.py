"""compare(): records against independent values, skipping rules, table and JSON output."""

from __future__ import annotations

import json

import numpy as np
import pytest

from mdsd_ot import optimal_acceptance
from mdsd_ot._config import VALUE_TOL
from mdsd_ot.compare import Comparison, compare
from mdsd_ot.verifiers import VERIFIERS

P = [0.5, 0.3, 0.2, 0.0]
Q = [0.1, 0.2, 0.3, 0.4]


def test_records_match_math_vectors():
    table = compare(P, Q, 2)
    assert isinstance(table, Comparison) and table.n == 2 and table.V == 4
    assert [r.verifier for r in table] == list(VERIFIERS)  # all can run at n = 2, V = 4
    expected = {  # docs/math.md#test-vectors, row 2
        "naive": (0.305, 0.69),
        "rrs": (0.65, 0.69),
        "rrs_without_replacement": (0.680952, 0.734524),
        "spectr": (0.658443, 0.69),
        "greedy": (0.666667, 0.666667),
        "spechub": (0.666667, 0.666667),
        "optimal": (0.69, 0.69),
    }
    for r in table:
        acc, bound = expected[r.verifier]
        assert r.acceptance == pytest.approx(acc, abs=1e-6)
        assert r.bound == pytest.approx(bound, abs=1e-6)
        assert r.gap == pytest.approx(r.bound - r.acceptance, abs=1e-15)
        assert r.ratio == pytest.approx(r.acceptance / r.bound, rel=1e-12)
        assert r.gap >= -VALUE_TOL and r.stderr == 0.0 and r.method == "exact"
    assert table["rrs_without_replacement"].sampling == "without_replacement"
    assert table["spechub"].sampling == "hub"
    with pytest.raises(KeyError, match="no record"):
        table["nope"]


def test_skips_with_note_unless_requested():
    table = compare(P, Q, 3)
    assert "spechub" not in [r.verifier for r in table]
    assert any(name == "spechub" and "n = 2" in why for name, why in table.skipped)
    assert "skipped spechub" in str(table)
    with pytest.raises(ValueError, match="n = 2"):
        compare(P, Q, 3, verifiers=["spechub"])
    with pytest.raises(ValueError, match="unknown verifier"):
        compare(P, Q, 2, verifiers="rrs,bogus")


def test_optimal_full_v_included_lp_skipped_for_large_inputs_and_monte_carlo_rows():
    rng = np.random.default_rng(0)
    p, q = rng.dirichlet(np.ones(200)), rng.dirichlet(np.ones(200))
    table = compare(p, q, 4, samples=300, rng=1)
    # i.i.d. drafts: the full-vocabulary construction runs and attains the bound
    assert table["optimal"].method == "exact" and abs(table["optimal"].gap) <= 1e-9
    lp_only = compare(p, q, 4, samples=300, rng=1, sampling="without_replacement")
    assert "optimal" not in [r.verifier for r in lp_only]
    assert any(n == "optimal" for n, _ in lp_only.skipped)
    rsd = table["rrs_without_replacement"]
    assert rsd.method == "monte_carlo" and rsd.stderr > 0
    bound = optimal_acceptance(p, q, 4, sampling="without_replacement").value
    assert rsd.bound == pytest.approx(bound, abs=1e-12)


def test_sampling_filter():
    table = compare(P, Q, 2, sampling="without_replacement")
    assert {r.verifier for r in table} == {"naive", "rrs_without_replacement", "optimal"}
    assert all(r.sampling == "without_replacement" for r in table)
    with pytest.raises(ValueError, match="assumes draft sampling"):
        compare(P, Q, 2, verifiers=["rrs"], sampling="without_replacement")


def test_text_and_json_output():
    table = compare(P, Q, 2, verifiers="rrs, greedy")
    text = str(table)
    lines = text.splitlines()
    assert lines[0].startswith("n = 2")
    head = ["verifier", "sampling", "acceptance", "stderr", "bound", "gap", "ratio", "method"]
    assert lines[1].split() == head
    # aligned columns: every numeric cell ends where its (right-justified) header ends
    for header in ("acceptance", "bound", "ratio"):
        end = lines[1].index(header) + len(header)
        for line in lines[3:5]:
            assert line[end - 1] != " " and line[end] == " ", (header, line)
    assert "0.650000" in text and "0.690000" in text
    data = json.loads(table.to_json())
    assert data["n"] == 2 and data["V"] == 4 and data["skipped"] == []
    assert [r["verifier"] for r in data["records"]] == ["rrs", "greedy"]
    assert table.to_dicts() == data["records"]


def test_normalize_and_validation():
    a = compare([5, 3, 2, 0.0], [1, 2, 3, 4.0], 2, verifiers=["rrs"], normalize=True)
    assert a["rrs"].acceptance == pytest.approx(0.65, abs=1e-12)
    with pytest.raises(ValueError, match="normalize=True"):
        compare([5, 3, 2, 0.0], Q, 2)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"sampling": "bad"}, "unknown sampling 'bad'; choose one of"),
        ({"sampling": "greedy_drafts"}, "unknown sampling 'greedy_drafts'"),  # "Greedy" is accepted
        ({"method": "mc"}, "unknown method 'mc'; choose one of \\['auto', 'exact', 'monte_carlo'\\]"),
    ],
)
def test_unknown_option_names_are_rejected_up_front(kwargs, match):
    # used to be one more "cannot run" reason per verifier: an empty table, no error
    with pytest.raises(ValueError, match=match):
        compare(P, Q, 2, **kwargs)
    with pytest.raises(ValueError, match=match):
        compare(P, Q, 2, verifiers=["naive"], **kwargs)
    with pytest.raises(TypeError, match="must be a string"):
        compare(P, Q, 2, **{k: 3 for k in kwargs})


def test_a_verifier_above_its_bound_is_an_internal_error(monkeypatch):
    """compare never prints a ratio above one: an exact acceptance above the bound raises with a
    fingerprint of the input (simulated by a verifier whose closed form is off)."""
    from mdsd_ot.verifiers.specinfer import _PreparedRRS

    monkeypatch.setattr(_PreparedRRS, "acceptance", lambda self: 0.999)
    with pytest.raises(RuntimeError, match="internal error.*'rrs'.*fingerprint [0-9a-f]{16}"):
        compare([0.5, 0.3, 0.2, 0.0], [0.1, 0.2, 0.3, 0.4], 2, verifiers=["rrs"])


def test_ratio_is_never_above_one_nor_inf(capsys):
    """A bound of 0 (``1 - (1 - 5e-324)^2`` rounds to 0) with acceptances of 1e-323 above it by
    rounding: ratio 1.0 (the verifier attains the bound), not ``inf``, in the API and the CLI."""
    import json as _json

    from mdsd_ot import compare as _compare
    from mdsd_ot.cli import main

    c = _compare([1.0, 0.0], [5e-324, 1.0], 2)
    tiny = [r for r in c.records if r.bound == 0.0 and r.acceptance > 0.0]
    assert tiny, "the input no longer has an acceptance above a zero bound"
    assert all(0.0 <= r.ratio <= 1.0 for r in c.records)
    assert all(r.ratio == 1.0 for r in tiny)
    import tempfile
    from pathlib import Path

    f = Path(tempfile.mkdtemp()) / "pq.json"
    f.write_text(_json.dumps({"p": [1.0, 0.0], "q": [5e-324, 1.0]}))
    assert main(["compare", str(f), "--json"]) == 0
    out = capsys.readouterr().out
    assert "Infinity" not in out and "inf" not in out.lower().replace("info", "")
    assert main(["compare", str(f)]) == 0
    assert " inf " not in capsys.readouterr().out

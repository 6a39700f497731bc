"""``scripts/tree_driven.py``: the second edition's driven runs against the traversal driver's positions,
on hand-made rows, every figure recomputed here by hand (numpy, a 50-digit t quantile)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from conftest import load_script
from oracles import mp_t_quantile

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def td():
    return load_script("tree_driven")


def _call(record, T, call, values, emitted=None, secs=(0.0, 0.0), tree="4,2,2,1", driver="rrs"):
    row = {
        "record": record,
        "T": T,
        "call": call,
        "tree": tree,
        "scheme": "with_replacement",
        "driver": driver,
    }
    row.update({f"exact:{k}": v for k, v in values.items()})
    if emitted is not None:
        row.update(emitted=emitted, tokens=[7] * emitted, t_draft=secs[0], t_target=secs[1])
    return row


def _t_p(mean, half, G):
    """Two-sided p of a t statistic on G - 1 degrees of freedom, by 50-digit integration."""
    import mpmath

    se = half / mp_t_quantile(G - 1, 0.975)
    t, df = abs(mean) / se, G - 1
    with mpmath.workdps(30):
        return float(mpmath.betainc(df / 2, mpmath.mpf(1) / 2, 0, df / (df + t * t), regularized=True))


def test_driven_minus_main_per_problem_and_sampled_minus_exact(td):
    driven = [
        _call("a", 1.0, 0, {"rrs": 3.0, "traversal": 3.2}, emitted=3),
        _call("a", 1.0, 1, {"rrs": 4.0, "traversal": 4.1}, emitted=5),
        _call("b", 1.0, 0, {"rrs": 2.0, "traversal": 2.5}, emitted=1),
        _call("c", 1.0, 0, {"rrs": 3.5, "traversal": 3.0}, emitted=4),
        _call("c", 1.0, 1, {"rrs": 4.5, "traversal": 4.0}, emitted=4),
        _call("c", 1.0, 2, {"rrs": 2.5, "traversal": 2.0}, emitted=2),
    ]
    main = [  # the same cell at the traversal driver's positions; problem d is not in the driven run
        _call("a", 1.0, 0, {"rrs": 3.1, "traversal": 3.0}, driver="traversal"),
        _call("b", 1.0, 0, {"rrs": 2.6, "traversal": 2.4}, driver="traversal"),
        _call("b", 1.0, 1, {"rrs": 3.0, "traversal": 3.2}, driver="traversal"),
        _call("c", 1.0, 0, {"rrs": 3.0, "traversal": 3.3}, driver="traversal"),
        _call("d", 1.0, 0, {"rrs": 9.0, "traversal": 9.0}, driver="traversal"),
    ]
    lines = td.compare(driven, main)
    assert lines[0] == "### 4,2,2,1 with_replacement, decoded by rrs"
    row = {
        line.split("|")[1].strip(): line.split("|")[2].strip() for line in lines if line.startswith("| rrs")
    }
    # per-problem means of rrs: driven a 3.5, b 2.0, c 3.5; main a 3.1, b 2.8, c 3.0
    d = np.array([3.5 - 3.1, 2.0 - 2.8, 3.5 - 3.0])
    half = mp_t_quantile(2, 0.975) * d.std(ddof=1) / math.sqrt(3)
    assert row["rrs"].startswith(
        f"{d.mean():+.3f} ± {half:.3f} (p = {_t_p(d.mean(), half, 3):.2f}), 3 problems"
    )
    # sampled - exact (rrs), clustered by problem: per call 0, 1, -1, 0.5, -0.5, -0.5
    x = np.array([0.0, 1.0, -1.0, 0.5, -0.5, -0.5])
    groups = np.array(["a", "a", "b", "c", "c", "c"])
    mean = x.mean()
    totals = np.array([((x - mean)[groups == g]).sum() for g in "abc"])
    se = math.sqrt(3 / 2 * (totals**2).sum()) / x.size  # G/(G-1) sum of cluster totals^2, over m
    half = mp_t_quantile(2, 0.975) * se
    (sampled,) = [line for line in lines if line.startswith("- T = 1: sampled - exact")]
    assert f"{mean:+.3f} ± {half:.3f}" in sampled


def test_wall_time_per_token_and_speedup_by_hand(td):
    driven = [
        _call("a", 0.7, 0, {"rrs": 3.0}, emitted=3, secs=(0.5, 0.7), tree="1x4"),
        _call("a", 0.7, 1, {"rrs": 4.0}, emitted=5, secs=(0.4, 0.6), tree="1x4"),
    ]
    medians = [  # linear costs: target 0.2 s + 0.01 s per position, draft 0.05 s + 0.005 s per position
        {"model": m, "positions": n, "median_s": a + b * n}
        for m, a, b in (("target", 0.2, 0.01), ("draft", 0.05, 0.005))
        for n in (1, 2, 4, 8, 16)
    ]
    cost = {"basis": "wall", "threads": 2, "medians": medians}
    (line,) = td.wall_per_token(driven, cost)
    per = (0.5 + 0.7 + 0.4 + 0.6) / 8
    plain = 0.21
    tau = 4.0  # tokens per call; a 1x4 chain: draft forwards over tau, 1, 1, 1 positions, target over tau + 4
    draft = (0.05 + 0.005 * tau) + 3 * (0.05 + 0.005)
    target = 0.2 + 0.01 * (tau + 4)
    median = (1.2 + 1.0) / 2 / 4  # the median call's seconds over the mean tokens per call
    model = tau * plain / (draft + target)
    assert line == (
        f"- T = 0.7: {1000 * per:.1f} ms per generated token over 8 tokens (2 calls), {1000 * median:.1f} ms "
        f"at the median call; speedup over plain decoding {plain / per:.2f}, {plain / median:.2f} at the "
        f"median call (t_T(1) = 210.0 ms; the model at 4.000 tokens per call: {model:.2f})"
    )
    (line,) = td.wall_per_token(driven, cost, {"rrs": 50.0, "block": 9.0})  # the driver's verification
    per = (0.5 + 0.7 + 0.4 + 0.6 + 2 * 0.05) / 8
    assert line.startswith(f"- T = 0.7: {1000 * per:.1f} ms per generated token over 8 tokens (2 calls; ")
    assert f"verification 50 ms per call included), {1000 * (1.1 + 0.05) / 4:.1f} ms at the median" in line
    assert f"speedup over plain decoding {plain / per:.2f}, " in line
    for r, n in zip(driven, (3, 5)):  # recorded positions (distinct nodes + 1): priced like the model
        r["positions"] = n
    (line,) = td.wall_per_token(driven, cost)
    priced = 2 * draft + (0.2 + 0.01 * (3 - 1 + tau)) + (0.2 + 0.01 * (5 - 1 + tau))
    assert line.endswith(f"; forwards priced at the recorded positions: {1000 * priced / 8:.1f} ms per token")
    one_thread = dict(cost, threads=1, basis="cpu")  # not like for like with the runs' wall time
    assert "no speedup" in td.wall_per_token(driven, one_thread)[0]


def test_head_to_head_own_decodings_against_the_same_positions(td):
    """Two drivers of one cell: A's exact value at A's positions minus B's at B's, per problem, beside
    the same difference at the traversal driver's positions, over the problems all four hold."""
    run_a = [  # decoded by lookahead
        _call("a", 1.0, 0, {"lookahead": 4.0, "rrs": 3.0}, emitted=4, driver="lookahead"),
        _call("a", 1.0, 1, {"lookahead": 3.0, "rrs": 3.0}, emitted=3, driver="lookahead"),
        _call("b", 1.0, 0, {"lookahead": 2.5, "rrs": 2.0}, emitted=2, driver="lookahead"),
        _call("c", 1.0, 0, {"lookahead": 4.5, "rrs": 4.0}, emitted=5, driver="lookahead"),
    ]
    run_b = [  # decoded by rrs
        _call("a", 1.0, 0, {"lookahead": 9.0, "rrs": 3.2}, emitted=3),
        _call("b", 1.0, 0, {"lookahead": 9.0, "rrs": 2.4}, emitted=2),
        _call("b", 1.0, 1, {"lookahead": 9.0, "rrs": 1.6}, emitted=1),
        _call("c", 1.0, 0, {"lookahead": 9.0, "rrs": 3.0}, emitted=3),
    ]
    main = [
        _call(g, 1.0, 0, {"lookahead": la, "rrs": r}, driver="traversal")
        for g, la, r in (("a", 3.3, 3.0), ("b", 2.2, 2.0), ("c", 4.0, 3.9), ("d", 5.0, 1.0))
    ]
    lines = td.head_to_head([run_a, run_b], main)
    (row,) = [line for line in lines if line.startswith("| lookahead - rrs |")]
    own, same, change = (row.split("|")[k].strip() for k in (2, 3, 4))
    q = mp_t_quantile(2, 0.975)
    d_own = np.array([3.5 - 3.2, 2.5 - 2.0, 4.5 - 3.0])  # per-problem means of each own decoding
    d_same = np.array([0.3, 0.2, 0.1])  # problem d is in main only
    for text, d in ((own, d_own), (same, d_same), (change, d_own - d_same)):
        half = q * d.std(ddof=1) / math.sqrt(3)
        assert text.startswith(f"{d.mean():+.3f} ± {half:.3f} (p ")
    assert td.head_to_head([run_a], main) == []  # one driver: nothing to compare

"""``optimal_acceptance_top_k`` against brute force over completions, and ``mdsd-ot bound --top-k-logprobs``.

The oracles: the exact dual ``optimal_acceptance`` of every completion on a grid of the missing masses
(plus the vertices), the primal LP (HiGHS, ``method="lp"``) at the extremal completions the function
claims attain its ends, and a sum over draw sequences for the continuum mass (not the quadrature).
"""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest

from mdsd_ot import optimal_acceptance, optimal_acceptance_top_k
from mdsd_ot.cli import main
from mdsd_ot.top_k import continuum_sequential_mass, read_top_logprobs

TOL = 1e-9


def _grid(total: float, k: int, m: int):
    """Points of ``{x >= 0 : sum x = total}`` in ``k`` dimensions, step ``total / m`` (vertices included)."""
    if k == 0:
        if total == 0:
            yield ()
        return
    for cut in itertools.combinations(range(m + k - 1), k - 1):
        parts, prev = [], -1
        for x in (*cut, m + k - 1):
            parts.append(x - prev - 1)
            prev = x
        yield tuple(total * a / m for a in parts)


def _instance(rng, named: int, kp: int, kq: int):
    """Lists over tokens 0..named-1 that together name every one of them (``kp + kq >= named``)."""
    assert kp + kq >= named
    while True:
        pid = sorted(rng.choice(named, kp, replace=False).tolist())
        qid = sorted(rng.choice(named, kq, replace=False).tolist())
        if set(pid) | set(qid) == set(range(named)):
            break
    pp = rng.dirichlet(np.full(kp + 1, 0.8))[:kp]
    qq = rng.dirichlet(np.full(kq + 1, 0.8))[:kq]
    return pid, pp, qid, qq


def _completions(pid, pp, qid, qq, V, m):
    rp, rq = 1 - math.fsum(pp), 1 - math.fsum(qq)
    out_p = [t for t in range(V) if t not in pid]
    out_q = [t for t in range(V) if t not in qid]
    for a in _grid(rp, len(out_p), m):
        for b in _grid(rq, len(out_q), m):
            p, q = np.zeros(V), np.zeros(V)
            p[pid], q[qid] = pp, qq
            p[out_p] += a
            q[out_q] += b
            yield p, q


def _realise(pid, pp, qid, qq, V, completion):
    """The full pair of a completion the function returned (unlisted tokens numbered from ``named``)."""
    p, q = np.zeros(V), np.zeros(V)
    p[pid], q[qid] = pp, qq
    fresh = iter(t for t in range(V) if t not in pid and t not in qid)
    names = {}
    for side, vec, allowed in (
        ("target", p, set(range(V)) - set(pid)),
        ("draft", q, set(range(V)) - set(qid)),
    ):
        total = 0.0
        for token, mass in completion[side].items():
            if isinstance(token, str):
                if token not in names:
                    names[token] = next(fresh)
                token = names[token]
            assert token in allowed, (side, token)  # a missing mass only goes where the list is silent
            assert mass >= 0
            vec[token] += mass
            total += mass
        missing = 1 - math.fsum(pp if side == "target" else qq)
        assert abs(total - missing) < 1e-12
    return p, q


CASES = [(seed, named, extra) for seed in range(4) for named, extra in ((3, 0), (3, 1), (4, 2), (4, 1))]


@pytest.mark.parametrize("seed, named, extra", CASES)
def test_with_replacement_ends_exact_and_attained(seed, named, extra):
    rng = np.random.default_rng(100 + seed)
    for n in (1, 2, 3):
        kp = int(rng.integers(1, named + 1))
        kq = int(rng.integers(max(1, named - kp), named + 1))  # the two lists name every token
        pid, pp, qid, qq = _instance(rng, named, kp, kq)
        V = named + extra
        try:
            b = optimal_acceptance_top_k(pid, pp, qid, qq, n, vocab_size=V)
        except ValueError as exc:  # a missing mass with nowhere to go (no unlisted token)
            assert extra == 0 and "no token to go to" in str(exc)
            continue
        values = [optimal_acceptance(p, q, n).value for p, q in _completions(pid, pp, qid, qq, V, 4)]
        assert b.lower - TOL <= min(values) and max(values) <= b.upper + TOL
        assert b.lower_attained and b.upper_attained
        for end, completion in ((b.lower, b.lower_completion), (b.upper, b.upper_completion)):
            p, q = _realise(pid, pp, qid, qq, V, completion)
            assert abs(optimal_acceptance(p, q, n, method="lp").value - end) < TOL
        # any vocabulary size: the bounds hold for the finite one too (its completions are among them)
        wide = optimal_acceptance_top_k(pid, pp, qid, qq, n)
        assert wide.lower - TOL <= b.lower and b.upper <= wide.upper + TOL


def test_with_replacement_upper_chord_and_tent_both_reached():
    """The two cases of the upper end (docs/math.md#top-k-with-replacement): the target's rest and the
    draft's rest small against E and D (the tent, no unlisted mass) and large (the chord)."""
    seen = set()
    for pp, qq in (
        ([0.5, 0.1], [0.5, 0.4]),
        ([0.4, 0.1], [0.3, 0.1]),
    ):  # token 0 in both, 1 target-only, 2 draft-only
        b = optimal_acceptance_top_k([0, 1], pp, [0, 2], qq, 2, vocab_size=5)
        seen.add("<unlisted 1>" in b.upper_completion["target"])
        p, q = _realise([0, 1], pp, [0, 2], qq, 5, b.upper_completion)
        assert abs(optimal_acceptance(p, q, 2, method="lp").value - b.upper) < TOL
        values = [optimal_acceptance(p, q, 2).value for p, q in _completions([0, 1], pp, [0, 2], qq, 5, 5)]
        assert max(values) <= b.upper + TOL and min(values) >= b.lower - TOL
    assert seen == {True, False}


@pytest.mark.parametrize("seed", range(3))
def test_without_replacement_valid_and_lower_approached(seed):
    rng = np.random.default_rng(200 + seed)
    named, V, n = 4, 6, int(rng.integers(2, 4))
    pid, pp, qid, qq = _instance(rng, named, 3, 3)
    b = optimal_acceptance_top_k(pid, pp, qid, qq, n, sampling="without_replacement", vocab_size=V)
    wide = optimal_acceptance_top_k(pid, pp, qid, qq, n, sampling="without_replacement")
    values = [
        optimal_acceptance(p, q, n, sampling="without_replacement").value
        for p, q in _completions(pid, pp, qid, qq, V, 4)
        if np.count_nonzero(q) >= n
    ]
    assert b.lower - TOL <= min(values) and max(values) <= b.upper + TOL
    assert wide.lower - TOL <= min(values) and max(values) <= wide.upper + TOL
    assert not b.lower_attained and not b.upper_attained
    # the infimum: the target's rest on an undrafted token, the draft's rest split ever finer
    rp, rq = b.target_missing, b.draft_missing
    gaps = []
    for k in (1, 4, 16, 64):
        p, q = np.zeros(named + 1 + k), np.zeros(named + 1 + k)
        p[pid], q[qid] = pp, qq
        p[named] = rp
        q[named + 1 :] = rq / k
        gaps.append(
            optimal_acceptance(p, q, n, sampling="without_replacement", method="lp").value - wide.lower
        )
    assert all(g > -TOL for g in gaps) and all(a >= b - TOL for a, b in zip(gaps, gaps[1:]))
    assert gaps[-1] < 0.1 * gaps[0] + 1e-6


def test_without_replacement_lower_attained_when_the_draft_list_is_complete():
    pid, pp, qid, qq = [0, 1, 2], [0.5, 0.2, 0.1], [0, 1, 3], [0.3, 0.3, 0.4]
    b = optimal_acceptance_top_k(pid, pp, qid, qq, 2, sampling="without_replacement")
    assert b.lower_attained and b.draft_missing == 0
    p, q = _realise(pid, pp, qid, qq, 5, b.lower_completion)
    assert abs(optimal_acceptance(p, q, 2, sampling="without_replacement", method="lp").value - b.lower) < TOL


def _sequences(q_in, c, R, n):
    """W_n with a continuum by summing over draw sequences: the listed tokens in order (each at most
    once) and the continuum between them, whose draws at level j (after j tokens) sum to
    h_{n-m}(x_0..x_m), x_j = c / mass left; every mass left a direct sum."""
    q_in = [x for x in q_in if x > 0]
    total = 0.0
    for m in range(n + 1):
        for seq in itertools.permutations(range(len(q_in)), m):
            prob, xs = 1.0, []
            for j in range(m + 1):
                left = R + c + math.fsum(q_in[i] for i in range(len(q_in)) if i not in seq[:j])
                xs.append(c / left)
                if j < m:
                    prob *= q_in[seq[j]] / left
            h = [1.0] + [0.0] * (n - m)
            for x in xs:
                for i in range(1, n - m + 1):
                    h[i] += x * h[i - 1]
            total += prob * h[n - m]
    return total


def test_continuum_mass_against_draw_sequences():
    from mdsd_ot.drafts.without_replacement import sequential_mass_inside

    rng = np.random.default_rng(7)
    for _ in range(40):
        k, n = int(rng.integers(0, 4)), int(rng.integers(1, 6))
        v = rng.dirichlet(np.full(k + 2, rng.uniform(0.3, 2.0)))
        v[k + 1] *= 10.0 ** -int(rng.integers(0, 8))  # outside masses down to 1e-8
        v[k] *= 10.0 ** -int(rng.integers(0, 5))
        v /= v.sum()
        q_in, c, R = v[:k], float(v[k]), float(v[k + 1])
        assert abs(continuum_sequential_mass(q_in, c, R, n) - _sequences(q_in, c, R, n)) < 1e-12
    q_in = np.array([0.3, 0.2, 0.1, 0.15])
    assert abs(continuum_sequential_mass(q_in, 0.0, 0.25, 3) - sequential_mass_inside(q_in, 0.25, 3)) < 1e-15


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"sampling": "greedy"}, "greedy drafts take the draft's n-1 most likely"),
        ({"sampling": "top_n"}, "top_n drafts are the draft's n most likely"),
        ({"sampling": "conditional_poisson"}, "no proof"),
        ({"vocab_size": 2}, "smaller than the 3 distinct tokens"),
        ({"n": 0}, "must be >= 1, got 0"),
    ],
)
def test_refusals(kwargs, match):
    args = dict(n=2)
    args.update(kwargs)
    n = args.pop("n")
    with pytest.raises(ValueError, match=match):
        optimal_acceptance_top_k([0, 1], [0.5, 0.3], [0, 2], [0.6, 0.2], n, **args)


def test_bad_lists():
    with pytest.raises(ValueError, match="the target's missing mass 0.2 has no token to go to"):
        optimal_acceptance_top_k([0, 1], [0.5, 0.3], [0, 1], [0.6, 0.4], 2, vocab_size=2)
    with pytest.raises(ValueError, match="lists token 1 twice"):
        optimal_acceptance_top_k([1, 1], [0.2, 0.2], [0], [0.5], 2)
    with pytest.raises(ValueError, match="not log-probabilities"):
        optimal_acceptance_top_k([0], [-0.1], [0], [0.5], 2)
    with pytest.raises(ValueError, match="sums to 1.2"):
        optimal_acceptance_top_k([0, 1], [0.6, 0.6], [0], [0.5], 2)
    with pytest.raises(ValueError, match="one probability per id"):
        optimal_acceptance_top_k([0, 1], [0.6], [0], [0.5], 2)
    with pytest.raises(TypeError, match="token ids must be ints or strings"):
        optimal_acceptance_top_k([0.5], [0.6], [0], [0.5], 2)
    with pytest.raises(ValueError, match="need 3 tokens with q > 0"):
        optimal_acceptance_top_k([0], [0.5], [0, 1], [0.5, 0.5], 3, sampling="without_replacement")
    b = optimal_acceptance_top_k(["a", "b"], [0.7, 0.3 + 5e-6], ["a"], [0.9], 2)  # rounding above 1
    assert b.rescaled == ("target",) and b.target_missing == 0.0


# ---------------------------------------------------------------------------- the command line


def _chat(rows):
    return {
        "choices": [
            {
                "logprobs": {
                    "content": [
                        {
                            "token": tok,
                            "logprob": -0.1,
                            "top_logprobs": [{"token": t, "logprob": math.log(v)} for t, v in top],
                        }
                        for tok, top in rows
                    ]
                }
            }
        ]
    }


def test_read_top_logprobs_formats(tmp_path):
    rows = [("x", [("x", 0.6), ("y", 0.3)]), ("y", [("y", 0.5)])]
    chat = read_top_logprobs(_chat(rows))
    legacy = read_top_logprobs(
        {
            "choices": [
                {
                    "logprobs": {
                        "tokens": ["x", "y"],
                        "top_logprobs": [{"x": math.log(0.6), "y": math.log(0.3)}, {"y": math.log(0.5)}],
                    }
                }
            ]
        }
    )
    content = read_top_logprobs(_chat(rows)["choices"][0]["logprobs"]["content"])
    for got in (chat, legacy, content):
        assert [t for t, _ in got] == ["x", "y"]
        assert got[0][1] == pytest.approx({"x": 0.6, "y": 0.3}, abs=1e-15)
    path = tmp_path / "bad.json"
    path.write_text(
        '{"choices": [{"logprobs": {"content": [{"token": "x", "top_logprobs": [{"token": "x"}]}]}}]}'
    )
    with pytest.raises(
        ValueError, match="position 0: top_logprobs entry 0 is not an object with 'token' and 'logprob'"
    ):
        read_top_logprobs(path)
    with pytest.raises(ValueError, match="listed twice"):
        read_top_logprobs(_chat([("x", [("x", 0.5), ("x", 0.2)])]))
    with pytest.raises(ValueError, match="has no 'logprobs'"):
        read_top_logprobs({"choices": [{"message": {}}]})


def test_cli_top_k_logprobs(tmp_path, capsys):
    target = [("a", [("a", 0.7), ("b", 0.2)]), ("b", [("b", 0.6), ("c", 0.3)])]
    draft = [("a", [("a", 0.5), ("c", 0.3)]), ("b", [("b", 0.8)])]
    (tmp_path / "t.json").write_text(json.dumps(_chat(target)))
    (tmp_path / "d.json").write_text(json.dumps(_chat(draft)))
    argv = ["bound", "--top-k-logprobs", str(tmp_path / "t.json"), str(tmp_path / "d.json"), "--n", "2"]
    assert main([*argv, "--sampling", "all", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [r["token"] for r in out["positions"]] == ["a", "b"]
    for row, (_, top_p), (_, top_q) in zip(out["positions"], target, draft):
        for s in ("with_replacement", "without_replacement"):
            b = optimal_acceptance_top_k(*zip(*top_p), *zip(*top_q), 2, sampling=s)
            assert row[s]["lower"] == pytest.approx(b.lower, abs=1e-12)
            assert row[s]["upper"] == pytest.approx(b.upper, abs=1e-12)
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "with_replacement: mean lower" in text and "'a'" in text
    (tmp_path / "other.json").write_text(json.dumps(_chat([("a", [("a", 0.5)]), ("z", [("z", 0.5)])])))
    bad = [
        ([*argv[:2], str(tmp_path / "t.json"), str(tmp_path / "other.json")], "position 1"),
        ([*argv, "--sampling", "greedy"], "--sampling with_replacement, without_replacement or all"),
        ([*argv, "--temperature", "0.5"], "drop --temperature"),
        (["bound", "--p", "0.5,0.5", "--q", "0.5,0.5", "--vocab-size", "3"], "--vocab-size goes with"),
    ]
    for args, match in bad:
        assert main(args) == 2
        err = capsys.readouterr().err
        assert match in err and len(err.strip().splitlines()) == 1

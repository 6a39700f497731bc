"""The bundled real sample: checksum, compact form, and the coarsening claim of its docstring."""

from __future__ import annotations

import hashlib
import itertools
import shutil

import numpy as np
import pytest

from mdsd_ot import sample

pytestmark = pytest.mark.skipif(not sample.sample_path().exists(), reason="bundled sample not captured yet")


def test_checksum_matches_and_file_is_small():
    path = sample.sample_path()
    expected = path.with_suffix(".sha256").read_text().split()[0]
    assert hashlib.sha256(path.read_bytes()).hexdigest() == expected
    assert sample.verify_sample() == expected
    assert path.stat().st_size < 8_500_000


def test_corrupted_file_is_rejected(tmp_path):
    src = sample.sample_path()
    dst = tmp_path / src.name
    shutil.copy(src, dst)
    shutil.copy(src.with_suffix(".sha256"), dst.with_suffix(".sha256"))
    data = bytearray(dst.read_bytes())
    data[len(data) // 2] ^= 0xFF
    dst.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="sha256"):
        sample.load_sample(dst)
    dst.with_suffix(".sha256").unlink()
    with pytest.raises(FileNotFoundError, match="checksum"):
        sample.load_sample(dst)


def test_records_follow_the_documented_compact_form():
    meta = sample.sample_metadata()
    recs = sample.load_sample()
    assert len(recs) == meta["positions"] * len(meta["temperatures"])
    assert {r.temperature for r in recs} == set(meta["temperatures"])
    K = meta["top_k"]
    for r in recs[::7]:
        assert r.p.dtype == np.float64 and r.q.dtype == np.float64
        assert r.token_ids[-1] == -1
        ids = r.token_ids[:-1]
        assert np.all(np.diff(ids) > 0) and ids[0] >= 0 and ids[-1] < meta["vocab_size"]
        assert K <= ids.size <= 2 * K
        assert np.all(r.p >= 0) and np.all(r.q >= 0)
        assert abs(r.p.sum() - 1) < 1e-12 and abs(r.q.sum() - 1) < 1e-12
        # the tail holds less than any kept top-K token of each distribution
        assert r.tail[0] <= 1 and r.tail[1] <= 1
        assert r.token in range(meta["vocab_size"])


def test_temperature_was_applied_to_the_logits():
    # p_T(x) / p_T(y) = (p_1(x) / p_1(y)) ** (1 / T) for tokens kept at both temperatures
    recs = sample.load_sample(temperatures=[0.5, 1.0])
    by = {(r.problem, r.position, r.temperature): r for r in recs}
    checked = 0
    for (prob, pos, T), r in list(by.items())[:400]:
        if T != 0.5:
            continue
        one = by[(prob, pos, 1.0)]
        common, ia, ib = np.intersect1d(r.token_ids[:-1], one.token_ids[:-1], return_indices=True)
        a, b = r.p[ia], one.p[ib]
        ok = (a > 1e-200) & (b > 1e-100)
        if ok.sum() < 2:
            continue
        i, j = np.flatnonzero(ok)[:2]
        lhs = np.log(a[i]) - np.log(a[j])
        rhs = 2.0 * (np.log(b[i]) - np.log(b[j]))
        assert abs(lhs - rhs) < 1e-9 * max(1.0, abs(rhs))
        checked += 1
    assert checked > 10


def test_unknown_temperature_is_an_actionable_error():
    with pytest.raises(ValueError, match="available"):
        sample.load_sample(temperatures=[0.42])


def _bruteforce_with_replacement(p, q, n):
    V = len(p)
    best = 0.0
    for r in range(V + 1):
        for H in itertools.combinations(range(V), r):
            best = max(best, sum(q[i] for i in H) ** n - sum(p[i] for i in H))
    return 1.0 - best


def test_merging_tail_tokens_can_only_raise_alpha_with_replacement():
    # the claim of the mdsd_ot.sample docstring, checked on random pairs by exhaustive search
    rng = np.random.default_rng(4)
    for _ in range(25):
        V = int(rng.integers(3, 9))
        p, q = rng.dirichlet(np.ones(V) * 0.5), rng.dirichlet(np.ones(V) * 0.5)
        keep = int(rng.integers(1, V))
        pc = np.append(p[:keep], p[keep:].sum())
        qc = np.append(q[:keep], q[keep:].sum())
        for n in (1, 2, 3):
            assert _bruteforce_with_replacement(pc, qc, n) >= _bruteforce_with_replacement(p, q, n) - 1e-12

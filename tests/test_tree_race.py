"""scripts/tree_race.py: plain and speculative decoding timed side by side, on tiny random models."""

import json

import numpy as np
import pytest
from conftest import load_script

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from tiny_models import tiny_lm  # noqa: E402

from mdsd_ot.backends.torch import to_distribution  # noqa: E402
from mdsd_ot.decode.models import TreeLM  # noqa: E402
from mdsd_ot.verifiers.base import sample_index  # noqa: E402

race = load_script("tree_race")
V = 16
torch.set_num_threads(1)


def tiny(seed=0):
    return tiny_lm(V, seed=seed, hidden=32, intermediate=64, layers=2, heads=4, kv_heads=2, max_positions=256)


def test_plain_decoding_draws_each_token_from_an_uncached_forward_of_everything_before_it():
    """The cached loop against forwards of the whole prefix (no cache), the same uniforms drawn."""
    model = tiny()
    prompt, T = [1, 5, 7, 2], 0.8
    got = race.decode_plain(TreeLM(model), prompt, 7, T, np.random.default_rng(3))
    rng, ids = np.random.default_rng(3), list(prompt)
    for _ in range(7):
        with torch.inference_mode():
            logits = model(input_ids=torch.tensor([ids])).logits[0, -1]
        law = to_distribution(logits[None], temperature=T).double().numpy()[0]
        ids.append(sample_index(law, rng.random()))
    assert got["token_ids"] == ids[len(prompt) :]
    assert got["tokens"] == got["calls"] == 7 and len(got["call_seconds"]) == 7


@pytest.mark.parametrize(
    ("method", "per_call"), [("block@1x4", 5), ("traversal@2x2", 3), ("lookahead@2,1", 3)]
)
def test_a_draft_equal_to_the_target_has_every_path_accepted(method, per_call):
    """With the target as its own draft every verifier accepts a whole root-to-leaf path: each call
    emits depth + 1 tokens, the last one cut to the budget (the laws reach the right nodes)."""
    model = tiny()
    driver, shape = race.parse_method(method)
    got = race.decode_speculative(
        TreeLM(model),
        TreeLM(model),
        [3, 1, 4],
        2 * per_call + 1,
        1.0,
        driver,
        shape,
        np.random.default_rng(0),
    )
    assert got["tokens"] == 2 * per_call + 1 and got["calls"] == 3
    assert got["seconds"] == pytest.approx(sum(got[f"{k}_seconds"] for k in ("draft", "target", "verify")))


def test_run_appends_one_row_per_prompt_and_method_and_resumes(tmp_path, capsys):
    from mdsd_ot.tiny import write_tiny_models

    paths = write_tiny_models(tmp_path / "models")
    out = tmp_path / "race.jsonl"
    argv = ["run", str(out), "--target", str(paths["target"]), "--draft", str(paths["draft"])]
    argv += [
        "--prompts",
        str(paths["prompts"]),
        "--subset",
        "2",
        "--tokens",
        "6",
        "--threads",
        "1",
        "--dtype",
        "float32",
    ]
    argv += ["--methods", "plain", "block@1x4", "traversal@2x2"]
    assert race.main(argv) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted((r["id"], r["method"]) for r in rows) == sorted(
        (p, m) for p in ("tiny/0", "tiny/1") for m in ("plain", "block@1x4", "traversal@2x2")
    )
    assert all(r["tokens"] == 6 for r in rows)
    assert all(r["calls"] == 6 for r in rows if r["method"] == "plain")
    assert all(2 <= r["calls"] <= 6 for r in rows if r["method"] != "plain")
    # the first prompt is led by plain, the second by the next method (rotation)
    assert [r["method"] for r in rows[:3]] == ["plain", "block@1x4", "traversal@2x2"]
    assert [r["method"] for r in rows[3:]] == ["block@1x4", "traversal@2x2", "plain"]
    assert race.main(argv) == 0  # resumed: nothing left
    assert len(out.read_text().splitlines()) == 6
    assert "2 of 2 prompts done" in capsys.readouterr().out
    assert race.main(["show", str(out)]) == 0
    table = capsys.readouterr().out
    assert "| plain | 2 | 1.00 |" in table and "| traversal@2x2 | 2 |" in table


def test_run_refuses_a_method_list_without_plain_or_with_an_invalid_driver(capsys):
    with pytest.raises(SystemExit):
        race.main(["run", "x.jsonl", "--subset", "0"])
    assert "--subset must be >= 1" in capsys.readouterr().err
    assert [race.parse_method(m) is None for m in race.METHODS] == [True] + [False] * (len(race.METHODS) - 1)
    assert race.main(["run", "x.jsonl", "--methods", "block@1x4"]) == 2
    assert "must include 'plain'" in capsys.readouterr().err
    assert race.main(["run", "x.jsonl", "--methods", "plain", "block@4,2,2,1"]) == 2
    assert "not a valid verifier" in capsys.readouterr().err


def test_summary_pairs_the_speedup_by_prompt():
    """Hand-made rows: the method takes half of plain's time per token on both prompts (2.00, an
    interval of zero width), pooled and median milliseconds per token, tokens per call."""

    def row(i, method, secs, calls, **extra):
        return dict(id=i, method=method, T=0.7, tokens=8, calls=calls, seconds=secs, threads=2, dtype="bf16",
                    loadavg1=1.0, **extra)  # fmt: skip

    split = dict(draft_seconds=0.2, target_seconds=0.6, verify_seconds=0.2)
    rows = [
        row("a", "plain", 2.0, 8, call_seconds=[0.6] + [0.2] * 7, call_tokens=[1] * 8),
        row("b", "plain", 4.0, 8, call_seconds=[1.2] + [0.4] * 7, call_tokens=[1] * 8),
        row("a", "x@1x4", 1.0, 2, call_seconds=[0.3, 0.7], call_tokens=[1, 7], **split),
        row("b", "x@1x4", 2.0, 2, call_seconds=[0.6, 1.4], call_tokens=[1, 7], **split),
    ]
    lines = race.summary(rows)
    fast = next(line for line in lines if line.startswith("| x@1x4"))
    # after the first call: plain 0.2 (0.4) s per token, x 0.1 (0.2): 2.00 again
    assert (
        fast == "| x@1x4 | 2 | 4.00 | 187.5 | 187.5 | 2.00 (2.00-2.00) | 2.00 (2.00-2.00) | 100 / 300 / 100 |"
    )
    rows[2]["call_seconds"] = [0.44, 0.56]  # prompt a's later calls faster: 0.08 s per token, 2.5x
    steady = next(line for line in race.summary(rows) if line.startswith("| x@1x4")).split(" | ")[6]
    assert steady.startswith(f"{(2.5 * 2.0) ** 0.5:.2f} (")
    assert next(line for line in lines if line.startswith("| plain")).startswith(
        "| plain | 2 | 1.00 | 375.0 |"
    )
    with pytest.raises(ValueError, match="no 'plain' rows"):
        race.summary(rows[2:])

"""Inputs of the study and the decoder, checked up front by one validator (mdsd_ot.runs.inputs):
prompt records with token ids that are not integers, out of the models' vocabulary, or missing."""

from __future__ import annotations

import json
import re

import pytest

from mdsd_ot.cli import main
from mdsd_ot.runs.inputs import check_token_ids, load_prompts, model_vocab, models_vocab, vocab_size

BAD_RECORDS = [
    ({"prompt_ids": [1.5, 2]}, r"prompt_ids\[0\] = 1.5 is not an integer token id"),
    ({"prompt_ids": [2.0, 2]}, r"prompt_ids\[0\] = 2.0 is not an integer"),  # never converted
    ({"prompt_ids": [True, 2]}, r"prompt_ids\[0\] = true is not an integer"),
    ({"prompt_ids": [1, "2"]}, r'prompt_ids\[1\] = "2" is not an integer'),
    ({"prompt_ids": "12"}, r'prompt_ids must be a list of token ids, got "12"'),
    ({"prompt_ids": None}, r"prompt_ids must be a list of token ids, got null"),
    ({"prompt_ids": []}, r"prompt_ids is empty"),
    ({"prompt_ids": [-1, 2]}, r"prompt_ids\[0\] = -1 is negative"),
    ({"prompt_ids": [1], "completion_ids": [3, 0.5]}, r"completion_ids\[1\] = 0.5 is not an integer"),
    ({"prompt": ["a"]}, r"'prompt' must be text"),
    ({"prompt": "a", "completion": 5}, r"'completion' must be text"),
]


@pytest.mark.parametrize("record, match", BAD_RECORDS)
def test_token_fields_are_refused_not_converted(tmp_path, record, match):
    f = tmp_path / "p.jsonl"
    f.write_text(json.dumps({"id": "r7", **record}) + "\n")
    with pytest.raises(ValueError, match=r"prompt record 'r7': " + match):
        load_prompts(f)
    with pytest.raises(ValueError, match=match):
        load_prompts([{"id": "r7", **record}])


def test_ranges_and_good_records():
    good = [{"id": "a", "prompt_ids": [0, 14], "completion_ids": [15]}, {"id": "b", "prompt": "x"}]
    check_token_ids(good, 16)
    assert load_prompts(good)[0]["prompt_ids"] == [0, 14]
    with pytest.raises(
        ValueError, match=r"'a': completion_ids\[0\] = 15 is outside the models' vocabulary \(ids 0 to 14\)"
    ):
        check_token_ids(good, 15)
    import numpy as np

    check_token_ids([{"id": "n", "prompt_ids": np.arange(3, dtype=np.int32).tolist()}], 3)
    check_token_ids([{"id": "n", "prompt_ids": list(np.arange(3, dtype=np.int64))}], 3)  # numpy ints


def test_the_vocabulary_of_models_and_of_wrapped_models():
    """Rows of the output embedding; a wrapper (a counting or logging proxy) without it: its config's
    vocab_size; neither: unknown (None), and then only types and signs are checked."""
    from types import SimpleNamespace as NS

    head = NS(weight=NS(shape=(7, 3)))
    full = NS(get_output_embeddings=lambda: head, config=NS(vocab_size=5))
    assert vocab_size(full) == 7  # the logits the model really has, not the config's claim
    assert vocab_size(NS(config=NS(vocab_size=5))) == 5
    assert vocab_size(NS(config=NS(vocab_size=True))) is None
    assert vocab_size(NS()) is None
    assert models_vocab(full, NS(config=NS(vocab_size=5))) == 5
    assert models_vocab(NS(), full) == 7
    assert models_vocab(NS(), NS()) is None
    check_token_ids([{"prompt_ids": [10**6]}], models_vocab(NS(), NS()))
    with pytest.raises(ValueError, match="outside"):
        check_token_ids([{"prompt_ids": [5]}], models_vocab(full, NS(config=NS(vocab_size=5))))


def test_empty_prompt_files_say_so(tmp_path):
    for name, text in (("e.jsonl", ""), ("b.jsonl", "\n  \n"), ("e.txt", "")):
        f = tmp_path / name
        f.write_text(text)
        with pytest.raises(ValueError, match=rf"prompt file .*{name} holds no prompt records"):
            load_prompts(f)
    with pytest.raises(ValueError, match="no prompt records given"):
        load_prompts([])


def _model_folder(path, vocab):
    path.mkdir()
    (path / "config.json").write_text(json.dumps({"model_type": "qwen2", "vocab_size": vocab}))
    return path


@pytest.mark.parametrize(
    "records, match",
    [
        (
            [{"id": "a", "prompt_ids": [1, 99]}],
            r"prompt_ids\[1\] = 99 is outside the models' vocabulary \(ids 0 to 15\)",
        ),
        ([{"id": "a", "prompt_ids": [1.5, 2]}], r"1.5 is not an integer token id"),
        ([{"id": "a", "prompt_ids": [True, 2]}], r"true is not an integer token id"),
        ([], r"holds no prompt records"),
    ],
)
def test_cli_decode_refuses_bad_prompts_in_one_line_before_loading(tmp_path, capsys, records, match):
    """Model folders with only a config.json: the refusal comes before any model is loaded, and no
    results folder is made. The smaller vocabulary of the two models bounds the ids."""
    target, draft = _model_folder(tmp_path / "t", 16), _model_folder(tmp_path / "d", 20)
    assert model_vocab(target) == 16 and model_vocab(tmp_path / "nowhere") is None
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(json.dumps(r) + "\n" for r in records))
    out = tmp_path / "out"
    argv = ["decode", "--target", str(target), "--draft", str(draft), "--prompts", str(prompts)]
    assert main(argv + ["--no-progress", "--out", str(out)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("mdsd-ot decode: error: ") and re.search(match, line), line
    assert not out.exists()

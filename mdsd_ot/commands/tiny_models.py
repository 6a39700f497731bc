"""``mdsd-ot tiny-models DIR``: two tiny random causal LMs and a prompts file, to try ``study``,
``decode`` and ``merge`` offline in a minute (see :mod:`mdsd_ot.tiny`)."""

from __future__ import annotations

HELP = (
    "write two tiny random causal LMs (target, draft) and a prompts file, to try study/decode/merge offline"
)


def add_arguments(parser):
    parser.add_argument(
        "folder", metavar="DIR", help="folder to write target/, draft/ and prompts.jsonl into"
    )
    parser.add_argument("--vocab", type=int, default=64, help="vocabulary size shared by both models")
    parser.add_argument("--prompts", type=int, default=4, help="number of prompts")
    parser.add_argument("--prompt-length", type=int, default=8, help="token ids per prompt")
    parser.add_argument("--completion-length", type=int, default=12, help="token ids per continuation")
    parser.add_argument("--seed", type=int, default=0, help="seed of the weights, prompts and continuations")


def commands(paths: dict, folder) -> list[str]:
    """The study, decode and merge commands that run on the written files (printed by the command)."""
    import shlex

    t, d, p = (shlex.quote(str(paths[k])) for k in ("target", "draft", "prompts"))
    out = shlex.quote(str(folder))
    models = f"--target {t} --draft {d} --prompts {p} --device cpu"
    study = f"mdsd-ot study {models} --temperatures 0.5,1 --n 2"
    return [  # the study in two shards, merged into one folder; then tree decoding
        f"{study} --shard 0/2 --out {out}/shard0",
        f"{study} --shard 1/2 --out {out}/shard1",
        f"mdsd-ot merge {out}/shard0 {out}/shard1 --out {out}/study",
        f"mdsd-ot decode {models} --out {out}/decode --trees '2x3 4,2' --temperatures 1 --max-new-tokens 16",
    ]


def run(args) -> int:
    from ..runs.inputs import check_model_dependencies
    from ..tiny import write_tiny_models

    check_model_dependencies("mdsd-ot tiny-models")
    paths = write_tiny_models(
        args.folder,
        vocab=args.vocab,
        prompts=args.prompts,
        prompt_length=args.prompt_length,
        completion_length=args.completion_length,
        seed=args.seed,
    )
    print(
        f"wrote {paths['target']}, {paths['draft']} (tiny random causal LMs, vocabulary of {args.vocab} "
        f"token ids, no tokenizer) and {paths['prompts']} ({args.prompts} prompts of token ids; "
        f"continuations sampled from the target). Their numbers say nothing about real models. Try:"
    )
    for line in commands(paths, args.folder):
        print(f"  {line}")
    return 0

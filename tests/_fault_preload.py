"""Imported once by the fork server of the fault-injection tests: everything a study run needs,
loaded before any child is forked (one torch thread, so that forking is safe)."""

import threading

import torch

torch.set_num_threads(1)

import tqdm  # noqa: E402
import transformers  # noqa: E402
from transformers.models.qwen2 import modeling_qwen2  # noqa: E402,F401

# no helper threads in the server: a thread holding a lock when a child is forked would leave that
# lock held forever in the child (tqdm's monitor thread wakes up every 10 s and takes tqdm's lock)
tqdm.tqdm.monitor_interval = 0
transformers.utils.logging.disable_progress_bar()

import _fault_child  # noqa: E402,F401

import mdsd_ot  # noqa: E402
import mdsd_ot.backends.torch  # noqa: E402,F401
import mdsd_ot.cli  # noqa: E402
import mdsd_ot.commands.merge  # noqa: E402,F401
import mdsd_ot.commands.study  # noqa: E402,F401
import mdsd_ot.study  # noqa: E402,F401
import mdsd_ot.verifiers  # noqa: E402,F401


def _warm_up():
    """One complete tiny study in a throw-away folder (without plots: the children skip them), so
    that lazily loaded code (numba's cached kernels, transformers' loading path) is loaded here,
    once, not in every child."""
    import contextlib
    import io
    import json
    import tempfile
    from pathlib import Path

    from tiny_models import tiny_lm

    from mdsd_ot import study
    from mdsd_ot.cli import main

    plots, study.report.plot_summary = study.report.plot_summary, lambda table, out, **kw: {}
    with (
        tempfile.TemporaryDirectory() as tmp,
        contextlib.redirect_stdout(io.StringIO()),
        contextlib.redirect_stderr(io.StringIO()),
    ):
        tmp = Path(tmp)
        for name, seed in (("t", 0), ("d", None)):  # one seed: the draft continues the target's draws
            tiny_lm(12, seed=seed).save_pretrained(tmp / name)
        (tmp / "p.jsonl").write_text(json.dumps({"prompt_ids": [1, 2], "completion_ids": [3, 4]}))
        main(
            [
                "study",
                "--target",
                str(tmp / "t"),
                "--draft",
                str(tmp / "d"),
                "--prompts",
                str(tmp / "p.jsonl"),
                "--out",
                str(tmp / "o"),
                "--temperatures",
                "1",
                "--n",
                "2",
                "--sampling",
                "with_replacement,greedy",
                "--verifiers",
                "naive",
                "--device",
                "cpu",
                "--no-progress",
                "--threads",
                "1",
            ]
        )
    study.report.plot_summary = plots


_warm_up()
assert threading.active_count() == 1, [t.name for t in threading.enumerate()]

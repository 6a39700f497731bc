"""A real tree decoder over Hugging Face causal LMs (docs/math.md#draft-trees).

Multi-step speculative decoding with draft trees: the draft model drafts a tree level by level
(KV cache, one batched forward per depth), the target verifies the whole tree in one forward with a
tree attention mask (:mod:`.models`), every verifier's exact expected tokens per call are recorded on
the same tree, and decoding continues along one verifier's actual sample (:mod:`.runner`). Rows are
streamed per prompt to a results folder with resume and shards (:mod:`mdsd_ot._store`); the summary
gives block efficiency per temperature, tree, scheme and verifier with 95% intervals clustered by
prompt, the SpecTr speedup model and two plots (:mod:`.report`).

* :func:`run_decode` -- models in memory (library use, tests);
* :func:`run_shard` -- ``(config, shard, out_dir) -> None``: loads the models itself and resumes from
  its own rows, for schedulers; :func:`merge` combines shard folders.

torch and transformers are imported inside the functions.
"""

from .config import DEFAULT_DRIVER, DecodeConfig, driver_for
from .report import measured_cost_ratio, summarize, write_report
from .runner import decode_identity, decode_prompt, merge, open_decode, run_decode, run_shard, runs_at

__all__ = [
    "DecodeConfig",
    "DEFAULT_DRIVER",
    "driver_for",
    "decode_prompt",
    "run_decode",
    "run_shard",
    "decode_identity",
    "open_decode",
    "merge",
    "runs_at",
    "summarize",
    "write_report",
    "measured_cost_ratio",
]

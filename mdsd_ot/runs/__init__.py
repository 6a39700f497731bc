"""The runs wing: what the two applications on top of the library share (:mod:`mdsd_ot.study`, per-
position bounds on real model distributions, and :mod:`mdsd_ot.decode`, tree decoding runs).

* :mod:`.inputs` -- prompt records, the target/draft pair and its per-process cache;
* :mod:`.identity` -- what determines a run's rows (models, tokenizer, prompts), as stored in
  ``config.json``;
* :mod:`.shards` -- shards ``i/N``, the progress bar, a scheduler task's set-up;
* :mod:`.runner` -- the folder a run writes and the loop that appends each finished record;
* :mod:`.statistics` -- means with the 95% interval clustered by prompt, per table cell.

The storage layer is :mod:`mdsd_ot._store` (results folders, identity checks, merge) and the
scheduler :mod:`mdsd_ot.scale` (Ray, Slurm); both are below the wing. Imports go one way only:
``study`` and ``decode`` import the wing; the wing imports the library (``_store``, ``intervals``,
``backends``) and never ``study`` or ``decode``; the library never imports the wing or the
applications (``tests/test_layers.py``). torch and transformers are imported inside the functions.
"""

from __future__ import annotations

from .identity import identify, model_identity, prompts_identity, tokenizer_identity
from .inputs import cached_models, check_model_dependencies, check_record_ids, load_models, load_prompts
from .runner import folder_for, open_folder, remaining, run_records
from .shards import parse_shard, progress, shard_records, worker_setup, worker_threads
from .statistics import clustered_mean, values_of

__all__ = [
    "load_prompts",
    "check_record_ids",
    "load_models",
    "check_model_dependencies",
    "cached_models",
    "identify",
    "model_identity",
    "tokenizer_identity",
    "prompts_identity",
    "parse_shard",
    "shard_records",
    "progress",
    "worker_setup",
    "worker_threads",
    "open_folder",
    "folder_for",
    "remaining",
    "run_records",
    "clustered_mean",
    "values_of",
]

r"""Real-model study: per-position optimal acceptance and verifier acceptance on (p, q) from LMs.

Pipeline (one forward pass per prompt and model, by teacher forcing)::

    prompts -> token ids (prompt + continuation) -> target / draft logits -> per temperature:
    float64 p, q (mdsd_ot.backends.torch.to_distribution) -> bounds per scheme and n,
    verifier acceptance per name and n -> one JSONL row per (prompt, position, temperature)

Outputs in the study folder ``out`` (the storage layer is :mod:`mdsd_ot._store`: one writer per
folder, identity checks, checksummed rows, atomic replacement):

* ``config.json``: the identity of the study (model files, dtype, prompts, parameters: see
  :func:`study_identity`) and provenance; a resumed or merged run must have the same identity;
* ``positions.jsonl``: one row per (record, position, temperature) with flat keys
  ``"bound:<scheme>@<n>"`` and ``"verifier:<name>@<n>"`` (plus ``"...:se"`` for Monte Carlo
  standard errors), written as soon as a prompt is done (full-vocabulary distributions are never
  kept beyond one prompt);
* ``done.txt``: one line per finished record (id, number of rows, sha256 of the rows), appended
  after its rows are fsync'd. A run restarted on the same folder verifies every finished record,
  recomputes the damaged or incomplete ones and the unfinished ones, and skips the rest;
* ``summary.md`` / ``summary.csv`` / ``summary.json`` and ``acceptance_vs_temperature.png`` /
  ``gap_to_bound.png`` (see :func:`summarize`, :func:`write_report`); they do not depend on the
  order of the rows, so a resumed run gives the same bytes as an uninterrupted one.

Sharding: ``shard=(i, N)`` keeps the records whose index is ``i`` modulo ``N``; :func:`merge`
combines shard folders into one.

Confidence intervals: positions of one prompt are correlated, so the 95% interval of a mean is
``mean +- t * se`` with the cluster-robust standard error over prompts,
``se^2 = G/(G-1) * sum_g (sum_{i in g} (x_i - mean))^2 / m^2`` (``m`` positions in ``G``
prompts) and ``t`` the 0.975 quantile of Student's t on ``G - 1`` degrees of freedom
(:func:`cluster_mean_ci`, i.e. :func:`mdsd_ot.intervals.cluster_mean_ci`, the one interval formula
of the summaries, of the demo, of decode and of ``scripts/``).

Modules: :mod:`.config` (what a study computes), :mod:`.collection` (prompts, models, distributions),
:mod:`.evaluation` (bounds and verifiers per position), :mod:`.statistics` (cluster-robust
intervals), :mod:`.report` (tables and plots), :mod:`.runner` (identity, resume, shards, merge).
Heavy dependencies (torch, transformers, tqdm, matplotlib) are imported inside the functions: the
torch-free parts import and run without torch.
"""

from __future__ import annotations

# every name of the submodules stays reachable as mdsd_ot.study.<name> (the tests, scripts and the
# CLI use some private ones); __all__ lists the public API
# ruff: noqa: F401
from . import collection, config, evaluation, report, runner, statistics
from .collection import (
    _check_record_ids,
    _device,
    _record_ids,
    _torch,
    _vocab,
    load_models,
    load_prompts,
    sample_continuation,
    teacher_forcing_logits,
)
from .config import (
    DEFAULT_VERIFIERS,
    SCHEMES,
    StudyConfig,
    StudyWarning,
    _skip,
    _step,
    _verifier_applies,
    check_verifier_names,
    parse_every,
    verifier_scheme,
)
from .evaluation import (
    _call_verifier,
    _core,
    evaluate_rows,
)
from .report import (
    format_table,
    plot_summary,
    read_rows,
    write_report,
)
from .runner import (
    _compute,
    _identify,
    _parse_shard,
    _progress,
    _shard_records,
    merge,
    model_identity,
    open_study,
    remaining_records,
    run_study,
    study_identity,
    tokenizer_identity,
)
from .statistics import (
    _cluster_mean_ci,
    _method_keys,
    summarize,
)

cluster_mean_ci = _cluster_mean_ci

__all__ = [
    "StudyConfig",
    "StudyWarning",
    "SCHEMES",
    "DEFAULT_VERIFIERS",
    "load_prompts",
    "load_models",
    "teacher_forcing_logits",
    "evaluate_rows",
    "parse_every",
    "study_identity",
    "open_study",
    "run_study",
    "read_rows",
    "summarize",
    "write_report",
    "merge",
    "cluster_mean_ci",
]

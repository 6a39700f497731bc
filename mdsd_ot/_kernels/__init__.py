"""Numba kernels, by algorithm family (the only place numba is imported):

* :mod:`.common` -- compensated running sums (Neumaier) and ``logaddexp``;
* :mod:`.scans` -- sorted-prefix scans of the dual: with replacement, sequential n = 2, conditional
  Poisson, the token order, and the binned scan that needs no full sort;
* :mod:`.sequential` -- sequential sampling with any n: the exponential-clock quadrature, its fast
  path, the pruned scan over prefixes, and the independent evaluation used for re-checks;
* :mod:`.verifiers` -- the verifiers' kernels (RSD, naive inclusion probabilities);
* :mod:`.plan` -- the per-position evaluation plan: the token order by a bucket sort, greedy/hub and
  naive sums for every n in one pass, ratio tables of the verifiers, certificate sums;
* :mod:`.small` -- one call of the dual at small V (validation, scan, re-check) in one kernel;
* :mod:`.dispatch` -- which kernel runs (by scheme code, in Python), row-parallel batches, and the
  Python bodies used for small inputs.

Kernels take contiguous float64 arrays and use int64 indices; each has a slow reference in the
tests (``tests/oracles.py``, or the plain DP :func:`sequential_masses`). Thresholds live in
:mod:`mdsd_ot._config`.
"""

from .common import logaddexp, neumaier_add, prefix_sums, suffix_sums, top_k_tokens
from .dispatch import (
    compile_notice,
    compiled_ready,
    masked_row_sums,
    normalized_rows,
    small_or_jit,
    solve_batch,
    solve_sorted,
)
from .scans import (
    break_ties_by_index,
    bucketed_scan,
    complement_masses_kernel,
    complement_parts_kernel,
    esp_prefix_scaled,
    esp_split_ratio,
    esp_tree_coefficients,
    esp_tree_scaled,
    log_esp_suffix_table,
    order_keys,
    power_of_mass,
    scan_conditional_poisson,
    scan_conditional_poisson_sums,
    scan_with_replacement,
    scan_with_replacement_sums,
    scan_without_replacement_2,
    scan_without_replacement_2_sums,
)
from .sequential import (
    candidate_prefixes,
    pair_mass_check,
    quad_grid,
    scan_without_replacement,
    sequential_mass_check,
    sequential_masses,
    sequential_masses_fast,
    series_coefficients,
    series_length,
    without_replacement_bounds,
)
from .small import numpy_sum, small_dual

__all__ = [
    "break_ties_by_index",
    "bucketed_scan",
    "candidate_prefixes",
    "compile_notice",
    "compiled_ready",
    "complement_masses_kernel",
    "complement_parts_kernel",
    "esp_prefix_scaled",
    "esp_split_ratio",
    "esp_tree_coefficients",
    "esp_tree_scaled",
    "log_esp_suffix_table",
    "logaddexp",
    "masked_row_sums",
    "numpy_sum",
    "small_dual",
    "normalized_rows",
    "neumaier_add",
    "order_keys",
    "power_of_mass",
    "prefix_sums",
    "quad_grid",
    "scan_conditional_poisson",
    "scan_conditional_poisson_sums",
    "scan_with_replacement",
    "scan_with_replacement_sums",
    "scan_without_replacement",
    "scan_without_replacement_2",
    "scan_without_replacement_2_sums",
    "pair_mass_check",
    "sequential_mass_check",
    "sequential_masses",
    "sequential_masses_fast",
    "series_coefficients",
    "series_length",
    "small_or_jit",
    "solve_batch",
    "solve_sorted",
    "suffix_sums",
    "top_k_tokens",
    "without_replacement_bounds",
]

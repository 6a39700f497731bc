"""With replacement: n i.i.d. drafts from q, ``Q(H) = q(H)^n`` (docs/math.md#with-replacement).

The formula in every engine, side by side: numpy (one subset, many rows, from sums), the torch twins
of the sorted-prefix bound (along an order and at a certificate), and the numba scan
(:func:`mdsd_ot._kernels.scans.power_of_mass`, kernel code 0: numba kernels stay in ``_kernels``).
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from .._config import PARALLEL_MIN_ENTRIES, POWER_FROM_REST_N
from ..backends._tensor import require_torch
from ._common import _check_enumerable_log, _inverse_cdf, complement_masses
from .scheme import KERNEL_WITH, DraftScheme, TorchPrefix


def _with_sample(q, n, rng):
    return _inverse_cdf(q, rng.random(n))


def _with_sample_rows(q, n, samples, rng):
    return _inverse_cdf(q, rng.random((samples, n)))


def _with_inclusion(q, n):
    """``1 - (1 - q(y))^n``, with ``log(1 - q)`` from whichever of q, 1 - q is accurate (any n)."""
    miss = complement_masses(q)  # 1 - q(y), no cancellation
    with np.errstate(divide="ignore"):
        log_miss = np.where(q < 0.5, np.log1p(-np.minimum(q, 0.5)), np.log(miss))
    return -np.expm1(n * log_miss)


def _with_log_count(k, n):
    return n * math.log(k) if k > 1 else 0.0


def _with_tuples(q, n):
    support = np.flatnonzero(q > 0)
    k = support.size
    _check_enumerable_log(_with_log_count(k, n), lambda: k**n, n)
    tuples = np.array(list(itertools.product(support, repeat=n)), dtype=np.int64).reshape(-1, n)
    return tuples, np.prod(q[tuples], axis=1)


def _with_mass_rows(Q, n, masks):
    from .. import _kernels

    if Q.size < PARALLEL_MIN_ENTRIES:  # no parallel kernel to compile for a small batch
        inside, outside = (Q * masks).sum(axis=1), (Q * ~masks).sum(axis=1)
    else:
        inside, outside = _kernels.masked_row_sums(Q, masks)  # row-parallel plain masked sums
    with np.errstate(divide="ignore"):  # outside = 1 is not read below (the power is used there)
        via_rest = np.minimum(np.exp(n * np.log1p(-np.minimum(outside, 0.5))), inside)
    return np.where((n > 1) & (outside < 0.5), via_rest, inside**n)


def _with_mass(q, n, mask):
    return with_mass_from_sums((q * mask).sum(), (q * ~mask).sum(), n)


def with_mass_from_sums(inside, outside, n):
    """``q(H)^n`` from ``inside = q(H)`` and ``outside``, the mass outside H summed directly."""
    if n > 1 and outside < 0.5:  # x^n multiplies x's relative error by n: use log1p of the outside
        return min(math.exp(n * math.log1p(-outside)), inside)
    return inside**n


# -- torch twins of the sorted-prefix bound (mdsd_ot.backends.torch; tested against the numpy mass)
def _torch_prefix_mass(rows, n: int):
    """``Q(H_k) = q(H_k)^n`` along the order of ``rows`` (:class:`mdsd_ot.backends.torch._SortedRows`)."""
    torch = require_torch()
    Q = rows.Q
    # Q_k <= 1 in exact arithmetic; a rounded prefix sum of 1 + 2e-16 must not make
    # Q_k**n exceed Q_k (p == q would then give 1 - 2e-16 instead of exactly 1)
    QH = torch.minimum(Q**n, Q)
    if n > POWER_FROM_REST_N:  # x^n multiplies x's rounding by n: use the outside mass
        R = rows.R
        QH = torch.minimum(torch.where(R < 0.5, torch.exp(n * torch.log1p(-R)), QH), Q)
    return QH


def _torch_check_mass(ps, qs, inside, q_h, out_h, n):
    """``q(H)^n`` from the masked sums ``q_h = q(H)`` and ``out_h`` (the mass outside H)."""
    torch = require_torch()
    mass = torch.minimum(q_h**n, q_h)
    if n > POWER_FROM_REST_N:
        mass = torch.where(out_h < 0.5, torch.minimum(torch.exp(n * torch.log1p(-out_h)), q_h), mass)
    return mass


SCHEME = DraftScheme(
    "with_replacement",
    "n i.i.d. drafts from q",
    True,
    _with_sample,
    _with_tuples,
    _with_mass,
    lambda n: 1,
    _mass_rows=_with_mass_rows,
    _log_count=_with_log_count,
    kernel_code=KERNEL_WITH,
    sums_up_to=2**63 - 1,  # any n
    _sample_rows=_with_sample_rows,
    _inclusion=_with_inclusion,
    reference_verifier="rrs",
    optimal_at_full_v="chain",
    nested_draws=True,
    torch_prefix=TorchPrefix(None, _torch_prefix_mass, _torch_check_mass),
)

"""Without replacement: sequential draws (draw, remove, renormalise; the law of Gumbel-top-n in draw
order), ``Q(H) = W_n(H)`` (docs/math.md#without-replacement).

The formula in every engine, side by side: numpy (``W_2`` in closed form, ``W_n`` by enumeration or
the independent exponential-clock check), the torch twins of ``W_2`` along an order and at a
certificate, and the numba scans (kernel code 1 in :mod:`mdsd_ot._kernels.scans` and
:mod:`mdsd_ot._kernels.sequential`: numba kernels stay in ``_kernels``).
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from ..backends._tensor import prefix_sums, require_torch
from ._common import (
    _check_enumerable_log,
    _distinct_structure,
    _sequential_tuple_probs,
    _support_size,
    complement_masses,
    complement_parts,
    top_tokens,
    torch_complement_masses,
)
from .scheme import KERNEL_WITHOUT, DraftScheme, TorchPrefix


def _without_sample(q, n, rng):
    with np.errstate(divide="ignore"):
        keys = np.log(q) + rng.gumbel(size=q.size)
    keys[q == 0] = -np.inf
    return top_tokens(keys, n)  # the n largest keys in decreasing order: the draw order


def _without_set_mass_rows(p, q, n, samples, rng):
    from .._kernels import verifiers as kernels  # a numba sampler: no (samples, V) Gumbel keys

    return kernels.sequential_draft_mass(p, q, n, samples, int(rng.integers(0, 2**32 - 1)))


def _without_inclusion(q, n):
    """``P(y drafted)``: q for n = 1; ``q(y) (1 + sum_{x != y} q(x) / (1 - q(x)))`` for n = 2 (no
    ratio can overflow); None beyond (no closed form: enumerate or sample)."""
    if n == 1:
        return q.copy()
    if n != 2:
        return None
    rest = complement_masses(q)
    big = int(np.argmax(q))
    others = np.arange(q.size) != big
    odds = np.zeros_like(q)
    odds[others] = q[others] / rest[others]  # each at most 1 (q(x) <= 1/2 of the mass)
    small = odds.sum()  # every term but the largest token's, which may overflow
    # sum over x != y; its rounding error times q(y) is at most eps * q(y) * small <= eps
    pi = q * (1.0 + np.maximum(small - odds, 0.0))
    # the largest token's term, q(y) q(big) / (1 - q(big)), cannot overflow: q(y) <= 1 - q(big)
    pi[others] += q[big] * (q[others] / rest[big])
    return pi


def _without_log_count(k, n):
    return math.lgamma(k + 1) - math.lgamma(k - n + 1)


def _without_tuples(q, n):
    support = np.flatnonzero(q > 0)
    k = support.size  # >= n (checked by the scheme); k! / (k - n)! ordered tuples
    _check_enumerable_log(_without_log_count(k, n), lambda: math.perm(k, n), n)
    tuples = np.array(list(itertools.permutations(support, n)), dtype=np.int64).reshape(-1, n)
    return tuples, _sequential_tuple_probs(q, tuples)


#: Largest number of ordered draws inside H that :func:`_without_mass` enumerates exactly.
_ENUMERATE_DRAWS = 200_000


def _without_mass(q, n, mask, refine=0):
    """``W_n(H)``: n = 1, 2 in closed form; n >= 3 by enumerating the ordered draws inside H when
    there are at most ``_ENUMERATE_DRAWS`` of them, else by the independent exponential-clock
    evaluation :func:`mdsd_ot._kernels.sequential_mass_check` (not the solver's fast path) on a grid
    whose nodes lie half-way between those of the solver's grid at the same ``refine``
    (docs/math.md#independent-check)."""
    if n == 1:
        return q[mask].sum()
    if n == 2:
        return _without_pair_mass(q, mask)
    return sequential_mass_inside(q[mask], float(q[~mask].sum()), n, refine)


def _without_pair_mass(q, mask):
    """``W_2(H) = q(H) - R sum_{i in H} q_i / (1 - q_i)`` with ``R = q(not H)`` and each ``1 - q_i``
    as :func:`complement_masses` has it, in one compiled pass over the mask
    (:func:`mdsd_ot._kernels.pair_mass_check`: no gather, no temporaries: H may hold most of V)."""
    from .. import _kernels

    total, big, big_rest = complement_parts(q)
    q = np.ascontiguousarray(q, dtype=np.float64)
    mask = np.ascontiguousarray(mask, dtype=np.bool_)
    kernel = _kernels.small_or_jit(_kernels.pair_mass_check, q.size)  # small V: no compile on a first call
    return float(kernel(q, mask, total, big, big_rest))


def pair_mass_of_prefix(qo, k: int, inside: float, outside: float, total: float, big: int, big_rest: float):
    """``W_2(H)`` for ``H`` the first ``k`` tokens of the order ``qo`` (the evaluation plan's re-check), from
    ``inside = q(H)``, ``outside = q(not H)`` (a direct sum) and ``total = sum(qo)``: each ``1 - q_i``
    as ``total - q_i`` except for ``big``, the rank of the token above half the mass (-1: none),
    whose term ``q_b (R / (1 - q_b))`` uses ``big_rest``, its ``1 - q_b`` summed directly (``total - q_b``
    may round to 0)."""
    head = qo[:k]
    rest = total - head
    has_big = 0 <= big < k
    if has_big:
        rest[big] = 1.0  # its term is the big term below
    odds = head / rest
    if has_big:
        odds[big] = 0.0
    big_term = float(qo[big]) * (outside / big_rest) if has_big else 0.0
    return inside - outside * float(odds.sum()) - big_term


def sequential_mass_inside(q_in, outside: float, n: int, refine: int = 0) -> float:
    """``W_n(H)`` for n >= 3 from the masses ``q_in`` of H's tokens and ``outside`` = q(not H), by
    enumeration or the independent evaluation (see :func:`_without_mass`, which calls it)."""
    if outside == 0.0:
        return 1.0 if _support_size(q_in) >= n else 0.0
    k = _support_size(q_in)
    if k < n:
        return 0.0
    if math.lgamma(k + 1) - math.lgamma(k - n + 1) <= math.log(_ENUMERATE_DRAWS):
        return _merged_sequential_mass(q_in, outside, n)
    from .. import _kernels

    return float(_kernels.sequential_mass_check(np.ascontiguousarray(q_in), outside, n, refine))


def _merged_sequential_mass(q_in: np.ndarray, outside: float, n: int) -> float:
    """``W_n(H)`` by enumerating ordered draws inside ``H``, the complement merged into one token.

    Only the first draw outside ``H`` matters, so the complement can be merged into a single token
    of mass ``outside`` without changing the event "the first n draws all lie in H".
    """
    q_pos = q_in[q_in > 0]  # zero masses are never drawn
    if q_pos.size < n:
        return 0.0
    q_ext = np.append(q_pos, outside)
    tuples = np.array(list(itertools.permutations(range(q_pos.size), n)), dtype=np.int64)
    return float(_sequential_tuple_probs(q_ext, tuples).sum())


# -- torch twins of the sorted-prefix bound, n <= 2 (mdsd_ot.backends.torch; tested against W_2 above)
def _torch_prefix_mass(rows, n: int):
    """Sequential ``W_2(H_k) = q(H_k) - R_k sum_{i in H_k} q_i / (1 - q_i)`` along the order of ``rows``
    (:class:`mdsd_ot.backends.torch._SortedRows`); ``W_1(H_k) = q(H_k)``."""
    if n == 1:
        return rows.Q
    torch = require_torch()
    qs, Q, R = rows.qs, rows.Q, rows.R
    zero = torch.zeros_like(qs[:, :1])
    others = Q[:, :-1] + R[:, 1:]  # 1 - q_i as (mass before i) + (mass after i)
    # q_i / (1 - q_i) overflows when 1 - q_i is denormal. Only a token with q_i > 3/4
    # ("big"; at most one per row) can have 1 - q_i < 1/4: its term R_k q_b / (1 - q_b)
    # is evaluated as q_b * (R_k / (1 - q_b)), a ratio <= 1 while b is in H_k.
    big = others < 0.25
    small = ~big & (qs > 0)
    term = torch.where(small, qs / torch.where(small, others, torch.ones_like(others)), torch.zeros_like(qs))
    S = prefix_sums(term)
    has_big = big.any(-1, keepdim=True)
    rank_b = torch.argmax(big.to(torch.int8), -1, keepdim=True)
    q_b = torch.where(has_big, torch.gather(qs, -1, rank_b), torch.zeros_like(zero))
    o_b = torch.where(has_big, torch.gather(others, -1, rank_b), torch.ones_like(zero))
    ks = torch.arange(Q.shape[-1], device=Q.device).unsqueeze(0)
    in_h = has_big & (ks > rank_b)
    BIG = torch.where(in_h, q_b * (R / o_b), torch.zeros_like(R))
    return Q - R * S - BIG


def _torch_check_mass(ps, qs, inside, q_h, out_h, n):
    """``W_2(H) = q(H) - R sum_{i in H} q_i / (1 - q_i)`` by masked sums, each ``1 - q_i`` from the row
    total, the largest token's by a direct sum of the others; ``W_1(H) = q(H)``."""
    if n == 1:
        return q_h
    torch = require_torch()
    zero = torch.zeros_like(ps)
    rest = torch_complement_masses(qs)
    safe = inside & (qs > 0)
    # R / (1 - q_i) <= 1 inside H, so q_i (R / (1 - q_i)) cannot overflow
    ratio = torch.where(safe, out_h.unsqueeze(-1) / torch.where(safe, rest, torch.ones_like(rest)), zero)
    return q_h - (qs * ratio).sum(-1)


def _without_mass_rows(Q, n, masks):
    """``W_n(H_b)`` per row (the batch re-check): n = 2 in one compiled loop over the rows
    (:func:`mdsd_ot._kernels.small.pair_mass_rows`, the same bits as :func:`_without_mass` row by
    row), other n row by row."""
    if n == 2:
        from .. import _kernels

        Q = np.ascontiguousarray(Q, dtype=np.float64)
        masks = np.ascontiguousarray(masks, dtype=np.bool_)
        return _kernels.small_or_jit(_kernels.small.pair_mass_rows, Q.shape[1])(Q, masks)
    return np.array([SCHEME.mass(q, n, h) for q, h in zip(Q, masks)])


SCHEME = DraftScheme(
    "without_replacement",
    "sequential draws without replacement (Gumbel-top-n order)",
    True,
    _without_sample,
    _without_tuples,
    _without_mass,
    lambda n: n,
    quadrature_from=3,
    _log_count=_without_log_count,
    kernel_code=KERNEL_WITHOUT,
    sums_up_to=2,
    _structure=_distinct_structure,
    _inclusion=_without_inclusion,
    _set_mass_rows=_without_set_mass_rows,
    _mass_rows=_without_mass_rows,
    reference_verifier="rrs_without_replacement",
    nested_draws=True,
    torch_prefix=TorchPrefix(2, _torch_prefix_mass, _torch_check_mass),
)

"""Hostile inputs: only ValueError / TypeError, in bounded time, never a NaN (issue #5, item 2)."""
from __future__ import annotations

import numpy as np
import pytest

from mdsd_ot import optimal_acceptance, optimal_acceptance_batch

P2, Q2 = [0.5, 0.5], [0.25, 0.75]


@pytest.mark.parametrize("n", [2**63, 2**64, 10**30, 10**5000], ids=["2^63", "2^64", "1e30", "1e5000"])
def test_n_beyond_int64_is_a_value_error(n):
    # used to escape as OverflowError from the int64 numba kernels (fixed in _validate.check_n)
    with pytest.raises(ValueError, match="at most 2\\*\\*63 - 1"):
        optimal_acceptance(P2, Q2, n)
    with pytest.raises(ValueError, match="at most 2\\*\\*63 - 1"):
        optimal_acceptance_batch([P2], [Q2], n)
    with pytest.raises(ValueError, match=">= 1"):
        optimal_acceptance(P2, Q2, -n)


def test_largest_int64_n_is_accepted():
    # with replacement, Q(H) = q(H)^n -> 0 for every H != Sigma: alpha* = 1 when p has full support
    assert optimal_acceptance(P2, Q2, 2**63 - 1).value == 1.0

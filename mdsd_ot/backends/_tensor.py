"""torch on demand, and the compensated prefix sums every torch twin of a formula builds on.

A leaf: the draft schemes' torch twins (:mod:`mdsd_ot.drafts`) and :mod:`mdsd_ot.backends.torch`
import it; importing it does not import torch.
"""

from __future__ import annotations

from . import TORCH_HINT

__all__ = ["require_torch", "prefix_sums"]


def require_torch():
    """Return the ``torch`` module, or raise ``ImportError`` naming the extra to install."""
    try:
        import torch
    except ImportError as exc:  # pragma: no cover - exercised by monkeypatching in the tests
        raise ImportError(TORCH_HINT) from exc
    return torch


def prefix_sums(x):
    """``S[..., k] = sum(x[..., :k])`` for k = 0..V, compensated: exact to about one ulp of the sum.

    ``torch.cumsum`` rounds at every step (a million tiny terms after one large one drift by 1e-11)
    and may associate in any order on a GPU. With ``s`` its result, the local residual
    ``r_k = (s_{k-1} + x_k) - s_k`` is computed exactly (TwoSum, and ``t - s_k`` is exact by
    Sterbenz since both approximate the same sum), and ``r`` telescopes: ``s_k + sum_{j<=k} r_j`` is
    the exact prefix sum up to the (second-order) rounding of the small residuals' own sum.
    """
    torch = require_torch()
    s = torch.cumsum(x, -1)
    out = torch.empty(x.shape[:-1] + (x.shape[-1] + 1,), dtype=x.dtype, device=x.device)
    out[..., 0] = 0.0
    out[..., 1:2] = s[..., :1]  # the first sum is exact
    if x.shape[-1] > 1:
        prev, x1, s1 = s[..., :-1], x[..., 1:], s[..., 1:]
        t = prev + x1  # in-place below: one full-size temporary at a time (they dominate on CPU)
        bp = t - prev
        a = torch.sub(t, bp)
        torch.sub(prev, a, out=a)
        torch.sub(x1, bp, out=bp)
        a.add_(bp)  # t + a == prev + x1 exactly (TwoSum)
        del bp
        t.sub_(s1).add_(a)  # the local residual r_k
        del a
        torch.cumsum(t, -1, out=t)
        torch.add(s1, t, out=out[..., 2:])
    return out

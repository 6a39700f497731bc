r"""Logits in: next-token distributions from model outputs, in numpy (no torch needed).

:func:`to_distribution` turns logits (or probabilities) into validated float64 probability vectors,
applying temperature, top-k and top-p in the order and with the tie conventions of
:func:`mdsd_ot.backends.torch.to_distribution` (the two agree to 1e-12; the tests check it):

1. temperature ``T > 0``: the logits divided by ``T``, after subtracting the row maximum (no
   overflow); for probabilities ``p**(1/T)`` renormalised, zeros stay zero;
2. top-k: exactly ``min(k, V)`` tokens kept, those with the largest logits, ties by lower index;
3. top-p on the top-k renormalised distribution: **keep the smallest prefix of the tokens, sorted by
   probability (ties by lower index), whose mass reaches** ``top_p - TOP_P_TIE`` (``TOP_P_TIE`` =
   1e-12): the token at rank ``r`` is kept iff ``r = 0`` or the mass strictly before it is
   ``< top_p - 1e-12``. The tokens are ranked by the input itself (logits, or probabilities for
   ``kind="probs"``), never by rounded softmax outputs; the masses are the softmax of the top-k
   logits at the temperature (the input probabilities themselves when ``kind="probs"``, ``T = 1``
   and no top-k, so exact binary fractions are decided exactly). The band makes the boundary a
   property of the inputs rather than of an engine's last bits: a ``top_p`` equal to a cumulative
   mass keeps that prefix in numpy and torch alike;
4. one softmax over the surviving logits, in float64.

Truncated tokens are exactly 0. Temperature does not commute with truncation: convert each
temperature from the logits, not from an already truncated distribution.
"""

from __future__ import annotations

import math

import numpy as np

from ._config import TOP_P_TIE
from ._validate import _as_float_array, check_bool, check_probabilities

__all__ = ["to_distribution"]


def _check_options(temperature, top_k, top_p):
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float, np.integer, np.floating)):
        raise TypeError(f"temperature must be a positive float, got {type(temperature).__name__}")
    temperature = float(temperature)
    if not math.isfinite(temperature) or temperature <= 0:
        raise ValueError(
            f"temperature must be a finite float > 0, got {temperature!r} (for greedy use top_k=1)"
        )
    if top_k is not None:
        if isinstance(top_k, bool) or not isinstance(top_k, (int, np.integer)):
            raise TypeError(f"top_k must be a positive int or None, got {type(top_k).__name__}")
        top_k = int(top_k)
        if top_k < 1:
            raise ValueError(f"top_k must be >= 1, got {top_k}")
    if top_p is not None:
        if isinstance(top_p, bool) or not isinstance(top_p, (int, float, np.integer, np.floating)):
            raise TypeError(f"top_p must be a float in (0, 1] or None, got {type(top_p).__name__}")
        top_p = float(top_p)
        if not (0.0 < top_p <= 1.0):
            raise ValueError(f"top_p must lie in (0, 1], got {top_p!r}")
    return temperature, top_k, top_p


def _softmax(z: np.ndarray) -> np.ndarray:
    m = z.max(axis=-1, keepdims=True)  # finite: every row keeps at least its top token
    e = np.exp(z - m)
    return e / e.sum(axis=-1, keepdims=True)


def to_distribution(
    logits,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    *,
    kind: str = "logits",
    normalize: bool = False,
) -> np.ndarray:
    r"""Logits (or probabilities) -> float64 probabilities, with temperature, top-k and top-p.

    .. math:: \pi_T(y) \propto \exp(z_y / T)\,[y \in \text{top-}k]\,[y \in \text{top-}p]

    Parameters
    ----------
    logits : array_like, shape (V,) or (B, V)
        Logits (``kind="logits"``; ``-inf`` marks a masked token) or probabilities
        (``kind="probs"``); float16/32/64, a list, or a CPU torch tensor.
    temperature : float
        ``T > 0``, applied first.
    top_k : int or None
        Keep the ``top_k`` most likely tokens (ties: lower index first). ``None``: all.
    top_p : float or None
        Nucleus mass in ``(0, 1]``: the smallest prefix of the sorted tokens whose mass reaches
        ``top_p`` (within ``TOP_P_TIE`` = 1e-12 below it: the rule of the module docstring, shared
        with the torch engine). ``None``: all.
    kind : {"logits", "probs"}
        How to read the input.
    normalize : bool
        ``kind="probs"`` only: rescale rows that do not sum to one (else ``ValueError``).

    Returns
    -------
    ndarray, float64, same shape as the input
        Each row sums to one (up to rounding); truncated tokens are exactly 0. Ready for
        :func:`mdsd_ot.optimal_acceptance` and :func:`mdsd_ot.compare`.

    Notes
    -----
    Cost: one softmax, plus one stable sort per row when ``top_k`` or ``top_p`` is set.

    Examples
    --------
    >>> from mdsd_ot import to_distribution
    >>> to_distribution([2.0, 1.0, 0.0, -1.0]).round(4).tolist()
    [0.6439, 0.2369, 0.0871, 0.0321]
    >>> to_distribution([2.0, 1.0, 0.0, -1.0], temperature=0.5, top_k=2).round(4).tolist()
    [0.8808, 0.1192, 0.0, 0.0]
    >>> to_distribution([2.0, 1.0, 0.0, -1.0], top_p=0.8).round(4).tolist()
    [0.7311, 0.2689, 0.0, 0.0]
    """
    if kind not in ("logits", "probs"):
        raise ValueError(f"unknown kind {kind!r}; choose 'logits' or 'probs'")
    normalize = check_bool(normalize, "normalize")
    temperature, top_k, top_p = _check_options(temperature, top_k, top_p)
    x = _as_float_array(logits, "logits" if kind == "logits" else "probabilities")
    if x.ndim not in (1, 2):
        raise ValueError(f"logits must have shape (V,) or (B, V); got an array of shape {x.shape}")
    if x.shape[-1] == 0 or x.size == 0:
        raise ValueError("logits are empty; a distribution needs at least one token")
    if kind == "probs":
        # from the input itself: its dtype sets the sum tolerance (float32 softmax: sum_tolerance)
        x = check_probabilities(logits, "probabilities", ndim=x.ndim, normalize=normalize)
        if temperature == 1.0 and top_k is None and (top_p is None or top_p == 1.0):
            return x
        with np.errstate(divide="ignore"):
            base = np.log(x)  # log 0 = -inf: a zero stays zero under any temperature
    else:
        bad = np.isnan(x) | (x == np.inf)
        if bad.any():
            raise ValueError(
                f"logits contain NaN or +inf (first at index {tuple(int(i) for i in np.argwhere(bad)[0])})"
            )
        if (x == -np.inf).all(axis=-1).any():
            raise ValueError("a row of logits is entirely -inf; no token is left to sample")
        base = x
    with np.errstate(over="ignore", invalid="ignore"):
        # (z - max) / T <= 0 cannot overflow to +inf; a difference that overflows to -inf is a
        # token of probability 0 at any positive T
        z = (base - base.max(axis=-1, keepdims=True)) / temperature
    V = z.shape[-1]
    # rank by the input itself (logits, or the probabilities: log may round two apart to one value),
    # the order of z without ties created by rounding; stable: equal inputs keep the lower index first
    key = base if kind == "logits" else x
    if top_k is not None and top_k < V:
        order = np.argsort(-key, axis=-1, kind="stable")
        np.put_along_axis(z, order[..., top_k:], -np.inf, axis=-1)
    if top_p is not None and top_p < 1.0:
        exact = kind == "probs" and temperature == 1.0 and (top_k is None or top_k >= V)
        prob = x if exact else _softmax(z)
        order = np.argsort(-np.where(z == -np.inf, -np.inf, key), axis=-1, kind="stable")
        sorted_p = np.take_along_axis(prob, order, axis=-1)
        before = np.concatenate(
            [np.zeros_like(sorted_p[..., :1]), np.cumsum(sorted_p, axis=-1)[..., :-1]], axis=-1
        )
        cut = before >= top_p - TOP_P_TIE
        cut[..., 0] = False  # the most likely token is always kept
        drop = np.zeros(z.shape, dtype=bool)
        np.put_along_axis(drop, order, cut, axis=-1)
        z[drop] = -np.inf
    return _softmax(z)

"""Input validation with actionable messages (``ValueError`` / ``TypeError``, never ``assert``)."""

from __future__ import annotations

import math
import numbers
import operator
from typing import NamedTuple

import numpy as np

from ._config import SUM_TOL

_FLOAT_KINDS = "f"

#: Largest accepted number of drafts: the numba kernels take ``n`` as an int64.
N_MAX = 2**63 - 1


#: Unit roundoff (half the machine epsilon) and smallest positive (subnormal) number of each float dtype
#: a distribution may arrive in; the dtype names are numpy's and torch's.
ROUNDING = {
    "float64": (2.0**-53, 2.0**-1074),
    "float32": (2.0**-24, 2.0**-149),
    "bfloat16": (2.0**-8, 2.0**-133),
    "float16": (2.0**-11, 2.0**-24),
}


def sum_tolerance(dtype, size: int) -> float:
    r"""Largest ``|sum(x) - 1|`` accepted (without ``normalize=True``) for ``size`` probabilities that
    arrived as ``dtype``: ``SUM_TOL`` for float64 input, and for float32, bfloat16 and float16 input
    the rounding bound of a softmax stored in that dtype (docs/math.md#sums-of-low-precision-input).

    A softmax ``x_i = e_i / S`` (or ``e_i * (1 / S)``) computed with a float32 accumulator (as torch
    does for half-precision dtypes too) and stored in ``dtype`` sums, in exact arithmetic, to within

    .. math:: \frac{(1 + u_a)^2 (1 + u_d)}{1 - \gamma_{V-1}} - 1 + V \frac{t_a + t_d}{2},
              \qquad \gamma_k = \frac{k u_a}{1 - k u_a}

    of one, whatever the values ``e_i >= 0`` and the summation order of ``S``: ``u_a``, ``t_a`` are
    the unit roundoff and the smallest subnormal of float32, ``u_d``, ``t_d`` those of ``dtype``
    (none for float32 itself). The float64 sum taken here adds at most ``2 V 2^-53``. The tolerance
    is the larger of that bound and ``SUM_TOL``; past V = 2^23 the bound says nothing and the
    tolerance is ``SUM_TOL``.

    Parameters
    ----------
    dtype : str or numpy dtype or torch dtype
        The input's dtype (``"float32"``, ``torch.bfloat16``, ...); anything else counts as float64.
    size : int
        The number of probabilities ``V`` of one distribution.

    Returns
    -------
    float

    >>> f"{sum_tolerance('float32', 152_064):.3e}", sum_tolerance("float64", 152_064)
    ('9.231e-03', 1e-06)
    """
    name = str(dtype).rsplit(".", 1)[-1]
    if name not in ROUNDING or name == "float64":
        return SUM_TOL
    u_d, t_d = ROUNDING[name]
    u_a, t_a = ROUNDING["float32"]
    if name == "float32":
        u_d, t_d = 0.0, 0.0
    V = int(size)
    k = (V - 1) * u_a
    if k >= 0.5:  # V > 2^23: the bound says nothing
        return SUM_TOL
    gamma = k / (1.0 - k)
    # (1 + u_a)^2 (1 + u_d) / (1 - gamma) - 1, without the cancellation of subtracting 1
    excess = 2.0 * u_a + u_a * u_a + u_d * (1.0 + u_a) ** 2 + gamma
    bound = excess / (1.0 - gamma) + V * (t_a + t_d) / 2.0 + 2.0 * V * 2.0**-53
    return max(SUM_TOL, bound)


def source_dtype(x) -> str:
    """The float dtype ``x`` arrives in, as :data:`ROUNDING` names it (``"float64"`` for lists,
    Python floats and any dtype it does not list)."""
    name = str(getattr(x, "dtype", "float64")).rsplit(".", 1)[-1]
    return name if name in ROUNDING else "float64"


def _as_float_array(x, name: str) -> np.ndarray:
    """Convert an array-like (numpy, list, torch tensor) to a float64 ndarray, rejecting non-floats."""
    if isinstance(x, (str, bytes, dict, set)) or x is None:
        raise TypeError(f"{name} must be an array of probabilities, got {type(x).__name__}")
    if isinstance(x, np.ma.MaskedArray):
        masked = int(np.ma.count_masked(x))
        if masked:
            raise ValueError(
                f"{name} is a masked array with {masked} masked entries; their meaning is ambiguous: "
                f"pass {name}.filled(0.0) to treat them as zero mass, or drop those tokens"
            )
        x = x.data
    if hasattr(x, "detach") and hasattr(x, "cpu"):  # a torch tensor: convert without importing torch
        x = x.detach().cpu()
        if str(getattr(x, "dtype", "")).endswith("bfloat16"):
            x = x.float()
        x = x.numpy()
    try:
        arr = np.asarray(x)
    except (ValueError, TypeError) as exc:  # ragged nested lists and the like
        raise TypeError(f"{name} could not be read as a numeric array: {exc}") from None
    if arr.dtype == object:
        raise TypeError(f"{name} must be a numeric array, got elements of mixed or non-numeric type")
    if arr.dtype.kind == "b":
        raise TypeError(f"{name} has dtype bool; pass probabilities as floats")
    if arr.dtype.kind in "iu":
        raise TypeError(
            f"{name} has integer dtype {arr.dtype}; probabilities must be floats "
            f"(e.g. {name}.astype(float) / {name}.sum() for counts)"
        )
    if arr.dtype.kind == "c":
        raise TypeError(f"{name} is complex; probabilities must be real floats")
    if arr.dtype.kind not in _FLOAT_KINDS:
        raise TypeError(f"{name} must be a float array, got dtype {arr.dtype}")
    return np.array(arr, dtype=np.float64, order="C")  # always a fresh C-contiguous float64 copy


def _shaped(x, name: str, ndim: int) -> np.ndarray:
    """``x`` as a fresh float64 array with the required number of dimensions and no empty axis."""
    return _shaped_from(x, name, ndim)[0]


def _shaped_from(x, name: str, ndim: int):
    """``(array, dtype)``: :func:`_shaped` and the dtype ``x`` came in (:func:`source_dtype`)."""
    dtype = source_dtype(x if not isinstance(x, np.ma.MaskedArray) else x.data)
    arr = _as_float_array(x, name)
    if arr.ndim != ndim:
        shape = "(V,)" if ndim == 1 else "(B, V)"
        raise ValueError(f"{name} must have shape {shape}; got an array of shape {arr.shape}")
    if arr.shape[-1] == 0:
        raise ValueError(f"{name} is empty; a distribution needs at least one token")
    if ndim == 2 and arr.shape[0] == 0:
        raise ValueError(f"{name} has no rows; pass at least one distribution")
    return arr, dtype


def _totals_checked(
    arr: np.ndarray, name: str, normalize: bool, dtype: str = "float64", report=None
) -> np.ndarray:
    sums = arr.sum(axis=-1)
    check_totals(arr, name, sums, arr.min(), normalize, dtype=dtype)
    if report is not None and dtype != "float64":
        off = np.atleast_1d(sums - 1.0)
        report.append(Renormalized(name, dtype, arr.shape[-1], float(off[np.argmax(np.abs(off))])))
    if normalize:
        arr /= sums[..., None]
    return arr


class Renormalized(NamedTuple):
    """One input that came in a lower precision than float64 and was renormalised in float64."""

    name: str
    dtype: str
    size: int
    off: float  # sum - 1 of its row farthest from one, before the float64 renormalisation


def renormalized_note(report) -> str:
    """The sentence a result carries when inputs came in float32, bfloat16 or float16: which, how far
    off one their sums were, the tolerance of :func:`sum_tolerance`, and what was computed exactly."""
    if not report:
        return ""
    parts = ", ".join(
        f"{r.name} ({r.dtype}) summed to 1 {'-' if r.off < 0 else '+'} {abs(r.off):.2g}" for r in report
    )
    tol = max(sum_tolerance(r.dtype, r.size) for r in report)
    return (
        f"input renormalised in float64: {parts} (accepted within {tol:.2g}, the rounding bound of a "
        f"{'/'.join(dict.fromkeys(r.dtype for r in report))} softmax at V = {report[0].size:,}); "
        f"the value is exact for the renormalised float64 distributions"
    )


def check_probabilities(x, name: str = "p", *, ndim: int = 1, normalize: bool = False) -> np.ndarray:
    """Return ``x`` as a validated float64 array of probability vectors along the last axis.

    Parameters
    ----------
    x : array_like, shape (V,) or (B, V)
        Probabilities (float16/32/64 or a torch tensor).
    name : str
        Name used in error messages.
    ndim : {1, 2}
        Required number of dimensions.
    normalize : bool
        Rescale each row to sum to one instead of rejecting sums off one by more than
        :func:`sum_tolerance` (``SUM_TOL`` for float64 input).
    """
    normalize = check_bool(normalize, "normalize")
    arr, dtype = _shaped_from(x, name, ndim)
    return _totals_checked(arr, name, normalize, dtype)


#: Appended to the messages of inputs that look like logits (negative entries, entries above 1, sums off
#: one); the command line says --logits instead (:data:`mdsd_ot.cli.CLI_SPELLING`).
LOGITS_HINT = "if these are logits, convert them first: mdsd_ot.to_distribution(logits, temperature=1.0)"

#: How the messages name the option that rescales positive weights (the command line: --normalize).
NORMALIZE_HINT = "pass normalize=True"


def check_totals(
    arr: np.ndarray, name: str, sums, minimum: float, normalize: bool, *, dtype: str = "float64"
) -> None:
    """The checks of :func:`check_probabilities` given the row sums and the smallest entry of ``arr``
    (however they were computed): every entry finite and non-negative, every row of positive mass,
    and, unless ``normalize``, summing to one within :func:`sum_tolerance` of ``dtype`` (the dtype the
    input came in: ``SUM_TOL`` for float64); ``ValueError`` naming the first bad entry or row
    otherwise."""
    tol = SUM_TOL if dtype == "float64" else sum_tolerance(dtype, arr.shape[-1])
    # one distribution: the passing case in scalar arithmetic (at small V numpy's calls dominate)
    if np.ndim(sums) == 0:
        total = float(sums)
        if math.isfinite(total) and minimum >= 0 and total > 0 and (normalize or abs(total - 1.0) <= tol):
            return
    if not (np.isfinite(sums).all() and minimum >= 0):  # the slow checks only to say what is wrong
        if not np.all(np.isfinite(arr)):
            bad = np.argwhere(~np.isfinite(arr))[0]
            raise ValueError(f"{name} contains NaN or inf (first at index {tuple(int(i) for i in bad)})")
        if np.any(arr < 0):
            bad = np.argwhere(arr < 0)[0]
            raise ValueError(
                f"{name} has negative entries (first at index {tuple(int(i) for i in bad)}: "
                f"{arr[tuple(bad)]:.3g}); probabilities must be >= 0; {LOGITS_HINT}"
            )
        raise ValueError(f"{name} has entries too large to sum in float64; rescale it")
    if np.any(sums <= 0):
        raise ValueError(f"{name} has total mass 0; a distribution needs positive mass")
    off = np.abs(sums - 1.0)
    if not normalize and np.any(off > tol):
        worst = float(np.atleast_1d(sums)[np.argmax(np.atleast_1d(off))])
        if tol == SUM_TOL:
            allowed = f"more than {SUM_TOL:g} away from 1"
        else:
            allowed = (
                f"more than {tol:.2g} away from 1, the rounding bound of a {dtype} softmax of "
                f"{arr.shape[-1]:,} tokens"
            )
        top = float(np.max(arr))
        above = f" (it has entries above 1, up to {top:.4g})" if top > 1.0 else ""
        raise ValueError(
            f"{name} sums to {worst:.9g}, {allowed}: not a probability distribution{above}; {LOGITS_HINT}; "
            f"to rescale positive weights, {NORMALIZE_HINT}"
        )


def check_bool(value, name: str) -> bool:
    """Validate a flag: ``True``/``False`` (or numpy bools) only, never a truthy string or number."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise TypeError(f"{name} must be True or False, got {type(value).__name__} {value!r}")


def check_pair(p, q, *, ndim: int = 1, normalize: bool = False, report=None) -> tuple[np.ndarray, np.ndarray]:
    """Validate a target/draft pair of the same shape (sums within :func:`sum_tolerance` of the dtype
    each came in). ``report``: a list to which each input that came in float32, bfloat16 or float16
    is appended as a :class:`Renormalized` (for :func:`renormalized_note`)."""
    normalize = check_bool(normalize, "normalize")
    (p, dp), (q, dq) = _shaped_from(p, "p", ndim), _shaped_from(q, "q", ndim)
    if p.shape != q.shape:  # first: a truncated q would otherwise get the message about its sum
        raise ValueError(
            f"p and q must have the same shape (one probability per vocabulary token); "
            f"got p {p.shape} and q {q.shape}"
        )
    return _totals_checked(p, "p", normalize, dp, report), _totals_checked(q, "q", normalize, dq, report)


def normalized_pair(p, q, *, normalize: bool = False, report=None) -> tuple[np.ndarray, np.ndarray]:
    """The validation of one (p, q) problem at the library's boundary: :func:`check_pair`, then each
    rescaled to sum to one exactly (by at most ``SUM_TOL`` relative for float64 input, at most
    :func:`sum_tolerance` for float32, bfloat16 and float16 input; with ``normalize=True``, the
    user's positive weights normalised). Fresh float64 copies."""
    p, q = check_pair(p, q, normalize=normalize, report=report)
    p /= p.sum()  # check_pair returned fresh copies
    q /= q.sum()
    return p, q


def distinct_ns(ns) -> np.ndarray:
    """The distinct draft counts of ``ns``, ascending, as the int64 array the plan's kernels take.

    Parameters
    ----------
    ns : iterable of int
        Validated draft counts (repeats allowed).

    Returns
    -------
    numpy.ndarray
        int64, sorted, without repeats.
    """
    return np.array(sorted(set(ns)), dtype=np.int64)


def check_n(n) -> int:
    """Validate the number of drafts: a positive integer (bools rejected)."""
    if isinstance(n, bool) or not isinstance(n, numbers.Integral):
        if isinstance(n, float) and n.is_integer():
            raise TypeError(f"n must be an int, got float {n!r}; pass n={int(n)}")
        raise TypeError(f"n (the number of drafts) must be a positive int, got {type(n).__name__} {n!r}")
    n = operator.index(n)
    if n < 1:
        shown = n if n > -N_MAX else f"a {n.bit_length()}-bit negative integer"
        raise ValueError(f"n (the number of drafts) must be >= 1, got {shown}")
    if n > N_MAX:  # the kernels index drafts with int64; print the size, not 10**9 digits
        raise ValueError(
            f"n (the number of drafts) must be at most 2**63 - 1, got a {n.bit_length()}-bit integer"
        )
    return n


def _fold(text: str) -> str:
    """A name as it is matched: case, surrounding spaces and ``-`` vs ``_`` do not matter."""
    return text.strip().lower().replace("-", "_").replace(" ", "_")


def choices_text(choices, aliases=None) -> str:
    """``['a', 'b'] (aliases: x -> a; case does not matter)``: the choices as messages list them."""
    text = str(sorted(choices))
    if aliases:
        text += " (aliases: " + ", ".join(f"{a} -> {t}" for a, t in sorted(aliases.items()))
        text += "; case does not matter)"
    return text


def check_choice(value, name: str, choices, aliases=None, *, fold: bool = False) -> str:
    """Validate a string option against its allowed values; return the canonical choice.

    Parameters
    ----------
    value : str
    name : str
        The option's name, for the message.
    choices : iterable of str
        Canonical values.
    aliases : dict or None
        Other accepted names -> canonical value (listed in the message of an unknown value).
    fold : bool
        Match case-insensitively, ``-`` and ``_`` alike (implied by ``aliases``); the caller must use
        the returned canonical value.

    >>> check_choice("HiGHS", "method", ["dual", "lp"], {"highs": "lp"})
    'lp'
    """
    if not isinstance(value, str):
        raise TypeError(
            f"{name} must be a string, one of {choices_text(choices, aliases)}; got {type(value).__name__}"
        )
    if value in choices:
        return value
    if aliases is not None or fold:
        table = {_fold(c): c for c in choices}
        for a, target in (aliases or {}).items():
            table.setdefault(_fold(a), target)
        hit = table.get(_fold(value))
        if hit is not None:
            return hit
    raise ValueError(f"unknown {name} {value!r}; choose one of {choices_text(choices, aliases)}")


def fingerprint(*arrays, **params) -> str:
    """A short, stable identifier of an input (sha256 of the arrays' float64 bytes and the params),
    printed in internal-error messages so that a report can be matched to its input."""
    import hashlib

    h = hashlib.sha256()
    for a in arrays:
        a = np.ascontiguousarray(a, dtype=np.float64)
        h.update(str(a.shape).encode())
        h.update(a.tobytes())
    h.update(repr(sorted(params.items())).encode())
    return h.hexdigest()[:16]

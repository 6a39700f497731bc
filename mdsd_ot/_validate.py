"""Input validation with actionable messages (``ValueError`` / ``TypeError``, never ``assert``)."""

from __future__ import annotations

import math
import numbers
import operator

import numpy as np

from ._config import SUM_TOL

_FLOAT_KINDS = "f"

#: Largest accepted number of drafts: the numba kernels take ``n`` as an int64.
N_MAX = 2**63 - 1


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
    arr = _as_float_array(x, name)
    if arr.ndim != ndim:
        shape = "(V,)" if ndim == 1 else "(B, V)"
        raise ValueError(f"{name} must have shape {shape}; got an array of shape {arr.shape}")
    if arr.shape[-1] == 0:
        raise ValueError(f"{name} is empty; a distribution needs at least one token")
    if ndim == 2 and arr.shape[0] == 0:
        raise ValueError(f"{name} has no rows; pass at least one distribution")
    return arr


def _totals_checked(arr: np.ndarray, name: str, normalize: bool) -> np.ndarray:
    sums = arr.sum(axis=-1)
    check_totals(arr, name, sums, arr.min(), normalize)
    if normalize:
        arr /= sums[..., None]
    return arr


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
        Rescale each row to sum to one instead of rejecting sums off one by more than ``SUM_TOL``.
    """
    normalize = check_bool(normalize, "normalize")
    return _totals_checked(_shaped(x, name, ndim), name, normalize)


#: Appended to the messages of inputs that look like logits (negative entries, entries above 1).
LOGITS_HINT = (
    "if these are logits, convert them first: mdsd_ot.to_distribution(logits, temperature=1.0) "
    "(on the command line: --logits)"
)


def check_totals(arr: np.ndarray, name: str, sums, minimum: float, normalize: bool) -> None:
    """The checks of :func:`check_probabilities` given the row sums and the smallest entry of ``arr``
    (however they were computed): every entry finite and non-negative, every row of positive mass,
    and, unless ``normalize``, summing to one within ``SUM_TOL``; ``ValueError`` naming the first bad
    entry or row otherwise."""
    # one distribution: the passing case in scalar arithmetic (at small V numpy's calls dominate)
    if np.ndim(sums) == 0:
        total = float(sums)
        if math.isfinite(total) and minimum >= 0 and total > 0 and (normalize or abs(total - 1.0) <= SUM_TOL):
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
    if not normalize and np.any(off > SUM_TOL):
        worst = float(np.atleast_1d(sums)[np.argmax(np.atleast_1d(off))])
        top = float(np.max(arr))
        hint = f" ({name} has entries above 1, up to {top:.4g}: {LOGITS_HINT})" if top > 1.0 else ""
        raise ValueError(
            f"{name} sums to {worst:.9g}, more than {SUM_TOL:g} away from 1; "
            f"pass normalize=True to rescale it{hint}"
        )


def check_bool(value, name: str) -> bool:
    """Validate a flag: ``True``/``False`` (or numpy bools) only, never a truthy string or number."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise TypeError(f"{name} must be True or False, got {type(value).__name__} {value!r}")


def check_pair(p, q, *, ndim: int = 1, normalize: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Validate a target/draft pair of the same shape."""
    normalize = check_bool(normalize, "normalize")
    p, q = _shaped(p, "p", ndim), _shaped(q, "q", ndim)
    if p.shape != q.shape:  # first: a truncated q would otherwise get the message about its sum
        raise ValueError(
            f"p and q must have the same shape (one probability per vocabulary token); "
            f"got p {p.shape} and q {q.shape}"
        )
    return _totals_checked(p, "p", normalize), _totals_checked(q, "q", normalize)


def normalized_pair(p, q, *, normalize: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """The validation of one (p, q) problem at the library's boundary: :func:`check_pair`, then each
    rescaled to sum to one exactly (by at most ``SUM_TOL`` relative; with ``normalize=True``, the
    user's positive weights normalised). Fresh float64 copies."""
    p, q = check_pair(p, q, normalize=normalize)
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

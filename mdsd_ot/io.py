"""Reading target/draft distributions from files (used by the ``mdsd-ot`` CLI).

Formats, chosen by the file extension:

``.npy``   one array: shape ``(V,)`` is one distribution, shape ``(2, V)`` is ``p`` then ``q``.
``.npz``   an archive with arrays ``p`` and ``q``.
``.json``  a list of numbers (one distribution), a list of two lists (``p`` then ``q``), or an object
           with keys ``"p"`` and ``"q"``.
other      text: numbers separated by whitespace and/or commas; ``#`` starts a comment. One number
           per line, or all on one line, is one distribution; two lines of several numbers each are
           ``p`` then ``q``.

:func:`load_pair` accepts either one file holding both distributions or two files holding one each.
Values are returned as float64 (``.npy``/``.npz`` keep their dtype so that validation can report an
integer or boolean array); checking that they are probabilities is left to
:func:`mdsd_ot._validate.check_pair`.
"""

from __future__ import annotations

import json
import os
import re
import zipfile
from pathlib import Path

import numpy as np

__all__ = ["load_arrays", "load_distribution", "load_pair"]

_SEP = re.compile(r"[\s,;]+")
_NONE = object()  # "no offending element found" (None itself is JSON null)


def _path(path) -> Path:
    p = Path(os.fspath(path))
    if not p.exists():
        raise FileNotFoundError(f"no such file: {p}")
    if p.is_dir():
        raise IsADirectoryError(f"{p} is a directory; pass a .npy, .npz, .json or text file")
    return p


def _numbers(values, where: str) -> np.ndarray:
    if isinstance(values, list):
        # JSON true/false would become 1.0/0.0 and strings/null would be parsed or become NaN: reject
        # every element that is not a number (nested lists are reported by depth below)
        bad = next((v for v in values if isinstance(v, (bool, str, dict)) or v is None), _NONE)
        if bad is not _NONE:
            raise ValueError(
                f"{where} must contain only numbers; found the JSON value {json.dumps(bad)[:40]} "
                f"(write each probability as a number, e.g. 0.5)"
            )
    try:
        arr = np.asarray(values, dtype=np.float64)
    except OverflowError:  # a JSON integer beyond float64 (310 digits and more)
        big = next((v for v in _flat(values) if isinstance(v, int) and abs(v).bit_length() > 1024), None)
        digits = f" (an integer of {len(str(abs(big)))} digits)" if big is not None else ""
        raise ValueError(
            f"{where} holds a number too large for float64{digits}; write each probability as a number "
            f"like 0.5"
        ) from None
    except (TypeError, ValueError, RecursionError):
        raise ValueError(f"{where} must contain only numbers") from None
    if arr.ndim != 1:
        raise ValueError(f"{where} must be a flat list of numbers, got nesting of depth {arr.ndim}")
    return arr


def _flat(values):
    """The scalars of nested lists (for messages; iterative, so deep nesting cannot recurse)."""
    stack = [values]
    while stack:
        v = stack.pop()
        if isinstance(v, list):
            stack.extend(v)
        else:
            yield v


def _from_json(path: Path) -> list[np.ndarray]:
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path} is not valid JSON: {exc.msg} (line {exc.lineno})") from None
    except RecursionError:  # the decoder recurses once per nesting level
        raise ValueError(
            f"{path}: JSON nested too deeply to read; expected a list of numbers, [p, q] or "
            '{"p": ..., "q": ...}'
        ) from None
    except UnicodeDecodeError:
        raise ValueError(f"{path} is not a UTF-8 text file") from None
    except ValueError as exc:  # Python refuses integers of more than 4300 digits
        reason = " ".join(str(exc).split())
        if "digits" in reason:
            reason = (
                "it holds an integer with thousands of digits; write each probability as a number like 0.5"
            )
        raise ValueError(f"{path} cannot be read: {reason}") from None
    if isinstance(data, dict):
        missing = [k for k in ("p", "q") if k not in data]
        if missing:
            raise ValueError(
                f"{path}: a JSON object needs keys 'p' and 'q'; missing {missing}, found {sorted(data)}"
            )
        return [_numbers(data["p"], f"{path}: 'p'"), _numbers(data["q"], f"{path}: 'q'")]
    if isinstance(data, list):
        if data and all(isinstance(x, list) for x in data):
            if len(data) != 2:
                raise ValueError(
                    f"{path}: a JSON list of lists must hold exactly two (p and q), got {len(data)}"
                )
            return [_numbers(data[0], f"{path}: p"), _numbers(data[1], f"{path}: q")]
        return [_numbers(data, str(path))]
    raise ValueError(f"{path}: expected a JSON list of numbers or an object with 'p' and 'q'")


def _from_text(path: Path) -> list[np.ndarray]:
    try:
        text = path.read_text()
    except UnicodeDecodeError:
        raise ValueError(
            f"{path} is not a text file (use .npy, .npz or .json for binary/structured data)"
        ) from None
    rows = []
    for lineno, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        fields = [f for f in _SEP.split(line) if f]
        try:
            rows.append([float(f) for f in fields])
        except ValueError:
            bad = next(f for f in fields if not _is_float(f))
            raise ValueError(f"{path}, line {lineno}: {bad!r} is not a number") from None
    if not rows:
        raise ValueError(f"{path} contains no numbers")
    if all(len(r) == 1 for r in rows):
        return [np.array([r[0] for r in rows])]
    if len(rows) == 1:
        return [np.array(rows[0])]
    if len(rows) == 2:
        return [np.array(rows[0]), np.array(rows[1])]
    raise ValueError(
        f"{path}: expected one distribution (one line, or one number per line) or two lines (p and q); "
        f"got {len(rows)} lines of several numbers"
    )


def _is_float(s: str) -> bool:
    try:
        float(s)
    except ValueError:
        return False
    return True


def _check_npy_header(path: Path) -> None:
    """Refuse a ``.npy`` whose header claims more data than the file holds, before numpy allocates
    the claimed shape (a header saying (2, 2**40) made ``np.load`` fail with a MemoryError)."""
    from numpy.lib import format as npy_format

    try:
        with open(path, "rb") as f:
            version = npy_format.read_magic(f)
            if version == (1, 0):
                shape, _, dtype = npy_format.read_array_header_1_0(f)
            elif version in ((2, 0), (3, 0)):
                shape, _, dtype = npy_format.read_array_header_2_0(f)
            else:
                return  # np.load reports an unknown version itself
            offset = f.tell()
    except (ValueError, OSError, EOFError) as exc:
        raise ValueError(f"{path} could not be read as a .npy array: {exc}") from None
    if dtype.hasobject:
        return  # refused by np.load(allow_pickle=False) with its own message
    need = int(np.prod(shape, dtype=object)) * dtype.itemsize
    have = path.stat().st_size - offset
    if need > have:
        raise ValueError(
            f"{path}: its header declares an array of shape {tuple(shape)} ({need:,} bytes of {dtype}) "
            f"but the file holds {max(have, 0):,} bytes after the header; the file is truncated or not a "
            f".npy array"
        )


def _from_npy(path: Path) -> list[np.ndarray]:
    _check_npy_header(path)
    try:
        arr = np.load(path, allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise ValueError(f"{path} could not be read as a .npy array: {exc}") from None
    if arr.ndim == 1:
        return [arr]
    if arr.ndim == 2 and arr.shape[0] == 2:
        return [arr[0], arr[1]]
    raise ValueError(f"{path}: expected shape (V,) or (2, V), got {arr.shape}")


def _from_npz(path: Path) -> list[np.ndarray]:
    try:
        with np.load(path, allow_pickle=False) as data:
            keys = sorted(data.files)
            if "p" not in keys or "q" not in keys:
                raise ValueError(f"{path}: a .npz archive needs arrays 'p' and 'q'; found {keys}")
            out = []
            for key in ("p", "q"):
                arr = np.squeeze(np.asarray(data[key]))
                if arr.ndim != 1:
                    raise ValueError(f"{path}: array {key!r} has shape {data[key].shape}; expected (V,)")
                out.append(arr)
            return out
    except (OSError, EOFError, zipfile.BadZipFile) as exc:
        raise ValueError(f"{path} could not be read as a .npz archive: {exc}") from None


_READERS = {".npy": _from_npy, ".npz": _from_npz, ".json": _from_json}


def load_arrays(path) -> list[np.ndarray]:
    """The one or two distributions stored in ``path`` (see the module docstring for formats).

    Parameters
    ----------
    path : str or os.PathLike
        An existing file (``FileNotFoundError`` if missing, ``IsADirectoryError`` for a folder); its
        extension chooses the format. ``ValueError`` for content that is not one or two distributions.

    Returns
    -------
    list of numpy.ndarray
        One or two 1-D arrays (``p``, then ``q``).
    """
    path = _path(path)
    return _READERS.get(path.suffix.lower(), _from_text)(path)


def load_distribution(path) -> np.ndarray:
    """Exactly one distribution from ``path`` (``ValueError`` if the file holds two).

    Parameters
    ----------
    path : str or os.PathLike
        As for :func:`load_arrays`.

    Returns
    -------
    numpy.ndarray
        Shape ``(V,)``.
    """
    arrays = load_arrays(path)
    if len(arrays) != 1:
        raise ValueError(f"{path} holds both p and q; pass it alone, not together with another file")
    return arrays[0]


def load_pair(path, path_q=None) -> tuple[np.ndarray, np.ndarray]:
    """``(p, q)`` from one file holding both, or from two files holding one each.

    Parameters
    ----------
    path : path-like
        A file with both distributions, or with ``p`` alone when ``path_q`` is given.
    path_q : path-like, optional
        A file with ``q``.

    Examples
    --------
    >>> import json, tempfile, os
    >>> f = os.path.join(tempfile.mkdtemp(), "pq.json")
    >>> _ = open(f, "w").write(json.dumps({"p": [0.5, 0.5], "q": [0.25, 0.75]}))
    >>> [a.tolist() for a in load_pair(f)]
    [[0.5, 0.5], [0.25, 0.75]]
    """
    if path_q is None:
        arrays = load_arrays(path)
        if len(arrays) != 2:
            raise ValueError(
                f"{path} holds one distribution; pass a second file for q, or store both "
                f"(.npz with p and q, JSON object with p and q, .npy of shape (2, V), two text lines)"
            )
        return arrays[0], arrays[1]
    return load_distribution(path), load_distribution(path_q)

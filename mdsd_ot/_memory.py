"""Giving freed heap memory back to the operating system between the steps of long runs.

glibc's allocator serves arrays below its mmap threshold (128 KiB at start, raised up to 32 MiB as
large blocks are freed) from one heap that grows at its top; memory freed in its middle stays
resident. A run that allocates and frees vocabulary-sized arrays call after call (``mdsd-ot decode``:
the laws of every node and cell, the verifiers' tables) ends up with a resident set far above what it
holds: 18.5 GB for the tree report's decode, of which ``malloc_trim(0)`` returned 7 GB at once. The
runs call :func:`release_freed_memory` after each target call and each finished record.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

_TRIM = None  # malloc_trim of the C library (False: none here)


def release_freed_memory() -> bool:
    """Return the heap's free pages to the operating system (glibc's ``malloc_trim(0)``).

    Returns
    -------
    bool
        True when the C library has ``malloc_trim`` and it released memory; False elsewhere (macOS,
        Windows, musl) or when nothing was released. Never raises.

    Examples
    --------
    >>> from mdsd_ot._memory import release_freed_memory
    >>> isinstance(release_freed_memory(), bool)
    True
    """
    global _TRIM
    if _TRIM is None:
        _TRIM = False
        if sys.platform.startswith("linux"):
            try:
                trim = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
                trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
                _TRIM = trim
            except (OSError, AttributeError):
                pass
    return bool(_TRIM(0)) if _TRIM else False

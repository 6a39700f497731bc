"""Running records into a results folder: open or take an open folder, compute what is left, append.

What the study's and the decoder's runners share on top of the storage layer
(:mod:`mdsd_ot._store`: one writer, identity, checksummed rows, atomic replacement, merge): the
folder they write (their own, closed at the end, or one the caller opened), the records of the
folder's shard not finished yet, and the loop that computes each record's rows and appends them as
soon as the record is done.
"""

from __future__ import annotations

import contextlib
import sys
import time

from .. import _store
from .._memory import release_freed_memory
from .shards import parse_shard, shard_records

__all__ = ["open_folder", "folder_for", "remaining", "run_records", "cost_note"]

#: A run whose first prompt takes this many seconds or more says what the rest will cost.
SLOW_FIRST_RECORD_S = 20.0


def cost_note(first_s: float, left: int) -> str:
    """The line a slow first prompt gets: its time, the projection for the ``left`` prompts at its
    rate, and how to cut it ("" below ``SLOW_FIRST_RECORD_S`` or with nothing left).

    Parameters
    ----------
    first_s : float
        Seconds the first prompt took.
    left : int
        Prompts still to do.

    Returns
    -------
    str

    >>> print(cost_note(75.0, 163))  # doctest: +ELLIPSIS
    mdsd_ot: the first prompt took 75 s; at this rate the 163 left take about 3.4 h (cut it ...)
    """
    if first_s < SLOW_FIRST_RECORD_S or left < 1:
        return ""
    rest = first_s * left
    when = (
        f"{rest / 3600:.1f} h" if rest >= 5400 else f"{rest / 60:.0f} min" if rest >= 90 else f"{rest:.0f} s"
    )
    return (
        f"mdsd_ot: the first prompt took {first_s:.0f} s; at this rate the {left:,} left take about {when} "
        f"(cut it with fewer --temperatures or --verifiers, a smaller --n or --trees, --every, or "
        f"--max-records to try a few)"
    )


def open_folder(out, *, kind: str, identity: dict, shard, expected: int, info: dict) -> _store.ResultsFolder:
    """Open (create or resume) the results folder ``out`` of a run for writing (lock, identity check,
    verified rows); ``shard`` is ``(i, N)``.

    Parameters
    ----------
    out : str or os.PathLike
    kind : str
        Run kind recorded in the folder (study or decode).
    identity : dict
        What determines the rows (refused if it differs from the folder's).
    shard : tuple of (int, int)
    expected : int
        Number of records the shard holds.
    info : dict
        Extra entries recorded in ``config.json``.

    Returns
    -------
    mdsd_ot._store.ResultsFolder
        Open for writing.
    """
    i, n = shard
    folder = _store.ResultsFolder(
        out, kind=kind, identity=identity, shard=f"{i}/{n}", expected=expected, info=info
    )
    return folder.open()


@contextlib.contextmanager
def folder_for(out, open_new):
    """The folder to write: ``out`` itself when it is an open :class:`mdsd_ot._store.ResultsFolder`
    (left open), else ``open_new()``, closed when the block ends.

    Parameters
    ----------
    out : str, os.PathLike or ResultsFolder
    open_new : callable
        ``open_new() -> ResultsFolder``, called when ``out`` is not an open folder.

    Returns
    -------
    contextlib.AbstractContextManager
        Yields the folder.
    """
    own = not isinstance(out, _store.ResultsFolder)
    folder = open_new() if own else out
    try:
        yield folder
    finally:
        if own:
            folder.close()


def remaining(folder: _store.ResultsFolder, records, max_records) -> tuple[list, list]:
    """``(mine, todo)``: ``[(index, record)]`` of the folder's shard, and those not finished yet.

    Parameters
    ----------
    folder : ResultsFolder
    records : iterable of dict
        All prompt records.
    max_records : int or None
        Keep only the first ``max_records`` (None or 0: all).

    Returns
    -------
    tuple of (list, list)
    """
    i, n = parse_shard(folder.shard)
    mine = shard_records(list(records), max_records, i, n)
    return mine, [(k, r) for k, r in mine if r["id"] not in folder.done]


def run_records(folder: _store.ResultsFolder, todo, compute, *, bar=None, postfix=None) -> None:
    """For each item of ``todo``, ``compute(item) -> (record id, lines)`` and append the lines to
    ``folder`` as one finished record; ``bar`` (a progress bar, closed at the end) advances by one
    record each time, with ``postfix()`` (a dict) as its postfix.

    Parameters
    ----------
    folder : ResultsFolder
        Open for writing.
    todo : iterable
        Items to compute.
    compute : callable
        ``compute(item) -> (record id, lines)``.
    bar : progress bar or None
    postfix : callable or None
        ``postfix() -> dict``.

    A first record that takes ``SLOW_FIRST_RECORD_S`` or more, with records left, gets one line on
    stderr projecting the rest at its rate (:func:`cost_note`), progress bar or not.
    """
    todo = list(todo)
    try:
        for k, item in enumerate(todo):
            t0 = time.monotonic()
            record, lines = compute(item)
            folder.append(record, lines)
            release_freed_memory()  # what the record freed goes back to the system (mdsd_ot._memory)
            if k == 0:
                note = cost_note(time.monotonic() - t0, len(todo) - 1)
                if note:
                    print(note, file=sys.stderr, flush=True)
            if bar is not None:
                bar.update(1)
                if postfix is not None:
                    bar.set_postfix(**postfix())
    finally:
        if bar is not None:
            bar.close()

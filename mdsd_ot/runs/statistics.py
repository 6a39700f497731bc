"""Clustered statistics of stored rows: a mean with its 95% interval over prompts, per table cell.

The loop every summary shares (the study's per method, temperature and n; the decoder's per cell and
method): the values of one key over a group of rows, each clustered by its ``record``, and
:func:`mdsd_ot.intervals.cluster_mean_ci` (cluster-robust standard error, t on G - 1 degrees of
freedom). A row where the key is present but None is a failure, counted, never averaged.
"""

from __future__ import annotations

from ..intervals import cluster_mean_ci

__all__ = ["values_of", "clustered_mean"]


def values_of(rows, key) -> tuple[list, int]:
    """``([(value, record)], failed)``: the rows' values of ``key`` (None left out) with their prompt,
    in row order, and the number of rows where the method ran and failed (``key`` present, None).

    Parameters
    ----------
    rows : iterable of dict
        Rows with a ``record`` field.
    key : str
        The value key.

    Returns
    -------
    tuple of (list of tuple, int)
    """
    vals = [(r[key], r["record"]) for r in rows if r.get(key) is not None]
    failed = sum(1 for r in rows if key in r and r[key] is None)
    return vals, failed


def clustered_mean(pairs) -> tuple[float, float, int, int]:
    """``(mean, ci95, count, records)`` of ``[(value, record)]``: the mean, the half-width of its 95%
    interval clustered by record, the number of values and of distinct records.

    Parameters
    ----------
    pairs : list of tuple
        ``(value, record)`` pairs, as from :func:`values_of`.

    Returns
    -------
    tuple of (float, float, int, int)
    """
    mean, ci = cluster_mean_ci([v for v, _ in pairs], [g for _, g in pairs])
    return mean, ci, len(pairs), len({g for _, g in pairs})

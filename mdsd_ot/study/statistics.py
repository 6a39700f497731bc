"""Statistics: means with the cluster-robust 95% interval over prompts (one formula,
:func:`mdsd_ot.intervals.cluster_mean_ci`, also used by ``scripts/``, the demo and decode)."""

from __future__ import annotations

from ..intervals import cluster_mean_ci
from ..keys import (
    GAP,
    bound_key_of_verifier,
    is_bound,
    is_value_key,
    is_verifier,
    method_key,
    split_key,
    split_method,
)
from ..runs.statistics import clustered_mean, values_of


def _method_keys(rows):
    """Method keys of the rows in a canonical order (bounds first, then by name and n), so that the
    summary does not depend on the order of the rows or of the parameters."""
    keys = set()
    for r in rows:
        for k in r:
            if is_value_key(k):
                keys.add(k)

    def order(k):
        method, n = split_key(k)
        return (not is_bound(method), method, int(n) if n.isdigit() else 0, k)

    return sorted(keys, key=order)


#: The clustered interval (public as ``mdsd_ot.study.cluster_mean_ci``): one function for every
#: summary, :func:`mdsd_ot.intervals.cluster_mean_ci` (t quantile on G - 1 degrees of freedom).
_cluster_mean_ci = cluster_mean_ci


def summarize(rows) -> list[dict]:
    """Mean acceptance per method x temperature x n with 95% intervals, and gaps to the bound.

    Returns
    -------
    list of dict
        Keys ``method`` (``"bound:<scheme>"`` / ``"verifier:<name>"`` / ``"gap:<name>"``, the
        latter = bound of the verifier's scheme minus its acceptance), ``T``, ``n``, ``mean``,
        ``ci95`` (half-width), ``count`` (positions), ``records``, ``failed`` (positions where
        the method raised).
    """
    keys = _method_keys(rows)
    groups = {}
    for r in rows:
        groups.setdefault(r["T"], []).append(r)
    table = []
    for T in sorted(groups):
        rs = groups[T]
        for key in keys:
            method, n = split_key(key)
            vals, failed = values_of(rs, key)
            if not vals:
                continue
            mean, ci, count, records = clustered_mean(vals)
            table.append(
                {
                    "method": method,
                    "T": T,
                    "n": int(n),
                    "mean": mean,
                    "ci95": ci,
                    "count": count,
                    "records": records,
                    "failed": failed,
                }
            )
            if is_verifier(method):
                name = split_method(method)[1]
                bkey = bound_key_of_verifier(name, n)
                pairs = [
                    (r[bkey] - r[key], r["record"])
                    for r in rs
                    if r.get(key) is not None and r.get(bkey) is not None
                ]
                if pairs:
                    gm, gci, count, records = clustered_mean(pairs)
                    table.append(
                        {
                            "method": method_key(GAP, name),
                            "T": T,
                            "n": int(n),
                            "mean": gm,
                            "ci95": gci,
                            "count": count,
                            "records": records,
                            "failed": 0,
                        }
                    )
    return table

"""Statistics: means with the cluster-robust 95% interval over prompts (one formula,
:func:`mdsd_ot.intervals.cluster_mean_ci`, also used by ``scripts/``, the demo and decode)."""

from __future__ import annotations

from ..intervals import cluster_mean_ci
from .config import verifier_scheme


def _method_keys(rows):
    """Method keys of the rows in a canonical order (bounds first, then by name and n), so that the
    summary does not depend on the order of the rows or of the parameters."""
    keys = set()
    for r in rows:
        for k in r:
            if (k.startswith("bound:") or k.startswith("verifier:")) and not k.endswith(":se"):
                keys.add(k)

    def order(k):
        method, _, n = k.rpartition("@")
        return (not method.startswith("bound:"), method, int(n) if n.isdigit() else 0, k)

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
            method, n = key.rsplit("@", 1)
            vals = [(r[key], r["record"]) for r in rs if r.get(key) is not None]
            failed = sum(1 for r in rs if key in r and r[key] is None)
            if not vals:
                continue
            mean, ci = _cluster_mean_ci([v for v, _ in vals], [g for _, g in vals])
            table.append(
                {
                    "method": method,
                    "T": T,
                    "n": int(n),
                    "mean": mean,
                    "ci95": ci,
                    "count": len(vals),
                    "records": len({g for _, g in vals}),
                    "failed": failed,
                }
            )
            if method.startswith("verifier:"):
                name = method.split(":", 1)[1]
                bkey = f"bound:{verifier_scheme(name)}@{n}"
                pairs = [
                    (r[bkey] - r[key], r["record"])
                    for r in rs
                    if r.get(key) is not None and r.get(bkey) is not None
                ]
                if pairs:
                    gm, gci = _cluster_mean_ci([v for v, _ in pairs], [g for _, g in pairs])
                    table.append(
                        {
                            "method": f"gap:{name}",
                            "T": T,
                            "n": int(n),
                            "mean": gm,
                            "ci95": gci,
                            "count": len(pairs),
                            "records": len({g for _, g in pairs}),
                            "failed": 0,
                        }
                    )
    return table

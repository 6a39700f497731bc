#!/usr/bin/env python
"""Per-position analyses of the real study (docs/results/qwen_coder_humaneval.md), from committed rows.

    python scripts/qwen_study_analyses.py --plot docs/results/qwen_coder_humaneval/extension \
        > docs/results/qwen_coder_humaneval/analyses.md

Reads two sets of committed per-position rows (``scripts/study_rows.py`` checks them against
``SHA256SUMS`` and every problem's rows against the sha256 recorded in ``done.txt``):

* ``docs/results/qwen_coder_humaneval/``: the main run (``scripts/run_qwen_study.sh``): bounds with
  replacement, sequential without replacement (n = 2) and greedy; the verifiers (RSD at every 5th
  position for n = 2, by Monte Carlo at every 10th for n = 3, 4);
* ``docs/results/qwen_coder_humaneval/extension/``: the extension run
  (``scripts/run_qwen_extension.sh``) on the same positions: the n = 1 optimum and TV(p, q) at every
  position, the conditional-Poisson bound (n = 2 at every position, n = 3, 4 at every 10th) and the
  sequential bound for n = 3, 4 at every 10th position (where RSD n = 3, 4 was evaluated);

joins them on (problem, position, temperature) (the token and the with-replacement n = 2 bound, which
both runs compute, must agree) and prints, as Markdown: the checks behind the report's claims, the
verifiers against their bounds (RSD n = 3, 4 paired with its bound), the n = 1 baseline, paired
greedy − RSD, the gap against n paired across n, the conditional-Poisson bound beside the
sequential one, and hard positions (TV(p, q) > 0.1) with quantiles.

Every interval is the 95% interval of the study summaries, clustered by problem:
:func:`mdsd_ot.study.cluster_mean_ci` (``mean ± t se``, t the 0.975 quantile of Student's t on g − 1
degrees of freedom,
``se² = g/(g−1) · Σ_problems (Σ_positions (x − mean))² / m²`` for m values in g problems).
The functions below take rows (dicts as in ``positions.jsonl``) and return numbers; ``main`` prints.
"""

from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from study_rows import load_rows  # noqa: E402

from mdsd_ot.study import cluster_mean_ci  # noqa: E402
from mdsd_ot.study import verifier_scheme as _verifier_scheme  # noqa: E402

DATA = ROOT / "docs" / "results" / "qwen_coder_humaneval"
EXT = DATA / "extension"
NS = (2, 3, 4)
HARD_TV = 0.1  # "hard" positions: TV(p, q) above this
QUANTILES = (0.5, 0.75, 0.9, 0.95, 0.99)
TOP_SHARE = 0.1  # share of a total carried by this fraction of positions with the largest values
EXACT_TOL = 1e-9  # an exact verifier value above its bound by more than this is flagged
MC_SE = 3.0  # a Monte Carlo value above its bound by more than this many standard errors is flagged
TIE = 1e-9  # "strictly higher / lower": differences beyond this (as in the report)
JOIN_TOL = 1e-12  # the two runs' with-replacement n = 2 bounds must agree to this
SHARED = ("bound:with_replacement@2",)  # computed by both runs: a check of the join

ci = cluster_mean_ci  # the one interval formula of the report
verifier_scheme = functools.lru_cache(maxsize=None)(_verifier_scheme)


# ------------------------------------------------------------------------------------------ data


def join(main_rows, ext_rows):
    """Main rows joined with the extension rows on (problem, position, T).

    Raises ``ValueError`` when a row is missing in either run, the tokens differ, a key other than
    :data:`SHARED` is in both, or a shared value differs by more than :data:`JOIN_TOL`. Returns the
    joined rows and the largest difference of a shared value.
    """
    ext = {(r["record"], r["pos"], r["T"]): r for r in ext_rows}
    if len(ext) != len(ext_rows) or len(ext) != len(main_rows):
        raise ValueError(f"the runs have {len(main_rows)} and {len(ext_rows)} rows (or duplicates)")
    rows, worst = [], 0.0
    for r in main_rows:
        e = ext.get((r["record"], r["pos"], r["T"]))
        if e is None or e["token"] != r["token"]:
            raise ValueError(f"row {r['record']} pos {r['pos']} T {r['T']} differs between the runs")
        merged = dict(r)
        for k, v in e.items():
            if k in ("record", "pos", "T", "token"):
                continue
            if k == "errors":
                merged["errors"] = {**merged.get("errors", {}), **v}
            elif k in SHARED:
                if (v is None) != (r.get(k) is None):
                    raise ValueError(f"{k} failed in one run only at {r['record']} pos {r['pos']}")
                if v is not None:
                    d = abs(v - r[k])
                    if d > JOIN_TOL:
                        raise ValueError(f"{k} differs by {d:.2e} at {r['record']} pos {r['pos']}")
                    worst = max(worst, d)
            elif k in merged:
                raise ValueError(f"{k} is in both runs")
            else:
                merged[k] = v
        rows.append(merged)
    return rows, worst


def load(main_dir=DATA, ext_dir=EXT):
    """The committed rows of both runs, verified and joined: ``(rows, largest shared difference)``."""
    return join(load_rows(main_dir), load_rows(ext_dir))


def get(r, key):
    """``r[key]``; ``KeyError`` when absent or ``None`` (not evaluated at this position, or failed)."""
    v = r.get(key)
    if v is None:
        raise KeyError(key)
    return v


def values(rows, f, T=None):
    """``[(f(row), problem)]`` over the rows (at temperature T) where f is defined.

    ``f`` returns a number, or ``None`` / raises ``KeyError`` to leave the row out.
    """
    out = []
    for r in _at(rows, T):
        try:
            v = f(r)
        except KeyError:
            continue
        if v is not None:
            out.append((float(v), r["record"]))
    return out


_SPLIT: dict = {}  # id(rows) -> (rows, {T: rows at T}) while report() runs (it holds the list)


def _at(rows, T):
    """The rows at temperature T (all rows for None); grouped once per list during report()."""
    if T is None:
        return rows
    hit = _SPLIT.get(id(rows))
    if hit is not None and hit[0] is rows:
        return hit[1].get(T, [])
    return [r for r in rows if r["T"] == T]


def paired(rows, f, T=None) -> dict | None:
    """Mean of f over the rows with its interval, and counts of values above / below ±:data:`TIE`."""
    d = values(rows, f, T)
    if not d:
        return None
    x = [v for v, _ in d]
    mean, half = ci(x, [g for _, g in d])
    return {
        "mean": mean,
        "ci95": half,
        "count": len(x),
        "higher": sum(v > TIE for v in x),
        "lower": sum(v < -TIE for v in x),
    }


def temperatures(rows):
    return sorted({r["T"] for r in rows})


def gap(r, verifier, n):
    """Bound of the verifier's own scheme minus its acceptance, at one row."""
    return get(r, f"bound:{verifier_scheme(verifier)}@{n}") - get(r, f"verifier:{verifier}@{n}")


def diff(a, b):
    """f(row) = row[a] − row[b]."""
    return lambda r: get(r, a) - get(r, b)


# ---------------------------------------------------------------------------------------- checks


def verifier_checks(rows) -> dict:
    """Every verifier value against the bound of its own scheme in the same (joined) row.

    A Monte Carlo value is one whose key has a standard error (``<key>:se``) in some row; the study
    stores the standard error only when it is positive, so a Monte Carlo value without one has
    se = 0. Exact values are flagged above the bound by more than :data:`EXACT_TOL`, Monte Carlo
    values by more than :data:`MC_SE` standard errors plus :data:`EXACT_TOL`; ``mc_above_tol`` counts
    those above by more than :data:`EXACT_TOL`, ``mc_above_any`` those above by any amount, and
    ``mc_worst`` / ``mc_worst_se`` are the largest excess and the standard error of that value.
    """
    mc_keys = {k[: -len(":se")] for r in rows for k in r if k.endswith(":se")}
    out = {
        "exact": 0,
        "exact_above": 0,
        "exact_worst": -np.inf,
        "mc": 0,
        "mc_zero_se": 0,
        "mc_above_any": 0,
        "mc_above_tol": 0,
        "mc_above_3se": 0,
        "mc_worst": -np.inf,
        "mc_worst_se": float("nan"),
        "no_bound": 0,
        "failed": 0,
    }
    for r in rows:
        for k, v in r.items():
            if not k.startswith("verifier:") or k.endswith(":se"):
                continue
            if v is None:
                out["failed"] += 1
                continue
            name, n = k[len("verifier:") :].rsplit("@", 1)
            b = r.get(f"bound:{verifier_scheme(name)}@{n}")
            if b is None:
                out["no_bound"] += 1
                continue
            if k not in mc_keys:
                out["exact"] += 1
                out["exact_worst"] = max(out["exact_worst"], v - b)
                out["exact_above"] += v - b > EXACT_TOL
                continue
            se = r.get(k + ":se", 0.0)
            out["mc"] += 1
            out["mc_zero_se"] += se == 0.0
            out["mc_above_any"] += v > b
            out["mc_above_tol"] += v - b > EXACT_TOL
            out["mc_above_3se"] += v - b > MC_SE * se + EXACT_TOL
            if v - b > out["mc_worst"]:
                out["mc_worst"], out["mc_worst_se"] = v - b, se
    return out


def failures(rows) -> dict:
    """``{key: rows where the value is None}`` (the method raised, or its re-check failed)."""
    out = {}
    for r in rows:
        for k, v in r.items():
            if v is None:
                out[k] = out.get(k, 0) + 1
    return out


def ties(rows, n=2) -> dict:
    """Without − with replacement at n: per T, strictly higher / lower (beyond :data:`TIE`) / ties,
    and how many ties have both bounds within :data:`TIE` of 1."""
    out = {}
    for T in temperatures(rows):
        h = lo = t = at_one = 0
        for r in _at(rows, T):
            try:
                a = get(r, f"bound:without_replacement@{n}")
                b = get(r, f"bound:with_replacement@{n}")
            except KeyError:
                continue
            if a - b > TIE:
                h += 1
            elif a - b < -TIE:
                lo += 1
            else:
                t += 1
                at_one += a > 1 - TIE and b > 1 - TIE
        out[T] = {"higher": h, "lower": lo, "ties": t, "ties_at_one": at_one}
    return out


def ordering(rows, n, first="spectr", second="rrs") -> dict:
    """Per T: is the mean of ``first`` above ``second``, and at how many positions is it below."""
    out = {}
    for T in temperatures(rows):
        p = paired(rows, diff(f"verifier:{first}@{n}", f"verifier:{second}@{n}"), T)
        out[T] = p
    return out


# -------------------------------------------------------------------------------- hard positions


def quantile(x, q):
    """Linear-interpolation quantile (numpy's default), the one used in the tables."""
    return float(np.quantile(np.asarray(x, dtype=np.float64), q))


def shares(rows, f, T, hard=HARD_TV) -> dict | None:
    """Part of the total of f (over the rows at T where it is defined) carried by the positions with
    TV(p, q) > hard, and by the :data:`TOP_SHARE` fraction of positions with the largest f."""
    sel = []
    for r in _at(rows, T):
        try:
            v = f(r)
        except KeyError:
            continue
        if v is not None:
            sel.append((float(v), r["tv"]))
    if not sel:
        return None
    x = np.array([a for a, _ in sel])
    tv = np.array([b for _, b in sel])
    total = float(x.sum())
    k = max(1, int(round(TOP_SHARE * x.size)))
    top = float(np.sort(x)[::-1][:k].sum())
    return {
        "total": total,
        "count": int(x.size),
        "hard_count": int((tv > hard).sum()),
        "hard": float(x[tv > hard].sum()) / total if total > 0 else float("nan"),
        "top": top / total if total > 0 else float("nan"),
    }


# ---------------------------------------------------------------------------------------- report


def _cell(p, signed=False, digits=4):
    if p is None:
        return ""
    sign = "+" if signed else ""
    return f"{p['mean']:{sign}.{digits}f} ± {p['ci95']:.{digits}f}"


def _table(rows, lines, *, signed=False, digits=4, counts=True):
    """lines: [(label, n, f)] -> Markdown, one column per temperature, the number of positions (one
    number, or one per temperature when they differ) and, with ``counts``, higher / lower per T."""
    temps = temperatures(rows)
    head = "| quantity | n | " + " | ".join(f"T={t:g}" for t in temps) + " | positions |"
    if counts:
        head += " higher / lower (per T) |"
    out = [head, "|---|---|" + "---|" * (len(temps) + 1) + ("---|" if counts else "")]
    for label, n, f in lines:
        ps = [paired(rows, f, t) for t in temps]
        cells = [_cell(p, signed, digits) for p in ps]
        npos = [p["count"] if p is not None else 0 for p in ps]  # per T when they differ
        npos = npos[:1] if len(set(npos)) == 1 else npos
        line = f"| {label} | {n} | " + " | ".join(cells) + " | " + " / ".join(f"{c:,}" for c in npos)
        if counts:
            line += " | " + ", ".join(f"{p['higher']:,}/{p['lower']:,}" if p else "" for p in ps)
        out.append(line + " |")
    return "\n".join(out)


def report(rows, shared_worst: float = 0.0) -> str:
    """The analyses as Markdown (the committed ``analyses.md``)."""
    split = {}
    for r in rows:
        split.setdefault(r["T"], []).append(r)
    _SPLIT[id(rows)] = (rows, split)
    try:
        return _report(rows, shared_worst)
    finally:
        _SPLIT.pop(id(rows), None)


def _report(rows, shared_worst: float) -> str:
    temps = temperatures(rows)
    positions = len({(r["record"], r["pos"]) for r in rows})
    problems = len({r["record"] for r in rows})
    out = []

    def P(text=""):
        out.append(text)

    P("# Per-position analyses of the Qwen2.5-Coder study\n")
    P(
        "Generated by `python scripts/qwen_study_analyses.py` from the committed rows of the main run "
        "(`positions.jsonl.xz`) and of the extension run (`extension/positions.jsonl.xz`), joined on "
        f"(problem, position, temperature): {positions:,} positions of {problems} problems × "
        f"{len(temps)} temperatures = {len(rows):,} rows. Both files match their `SHA256SUMS`, every "
        "problem's rows match the sha256 in its `done.txt`, the two runs have the same token at every "
        "position, and the with-replacement n = 2 bound, computed by both, agrees within "
        f"{shared_worst:.1e}. Intervals: 95%, clustered by problem (`mdsd_ot.study.cluster_mean_ci`, "
        f'the formula of every interval in the report). "Higher / lower" counts values above '
        f"{TIE:g} / below −{TIE:g}.\n"
    )

    # ---------------------------------------------------------------------------------- checks
    P("## Checks\n")
    tv_err = max(abs(1 - r["bound:with_replacement@1"] - r["tv"]) for r in rows)
    P(
        f"* n = 1: the optimum `bound:with_replacement@1` equals 1 − TV(p, q) (TV computed directly) "
        f"within {tv_err:.1e} at every row."
    )
    fail = failures(rows)
    P(
        "* Values stored as failed (the method raised, or its certificate re-check failed): "
        + (", ".join(f"`{k}` {v}" for k, v in sorted(fail.items())) if fail else "none")
        + "."
    )
    chk = verifier_checks(rows)
    P(
        f"* Every verifier value against the bound of its own draft scheme in the same row: "
        f"{chk['exact']:,} exact verifier values, {chk['exact_above']} of them above the bound by more "
        f"than {EXACT_TOL:g} (largest verifier − bound: {chk['exact_worst']:.1e}); {chk['mc']:,} Monte "
        f"Carlo values (RSD, n = 3, 4, 2,000 draft tuples each, {chk['mc_zero_se']} of them with a zero "
        f"standard error; against the extension's sequential bound): {chk['mc_above_3se']} above it by "
        f"more than {MC_SE:g} standard errors, {chk['mc_above_tol']} above it by more than "
        f"{EXACT_TOL:g} (largest verifier − bound: {chk['mc_worst']:.1e}, with a standard error of "
        f"{chk['mc_worst_se']:.1e}), and {chk['mc_above_any']} of them above it at all; "
        f"{chk['no_bound']} values without their bound in the row, {chk['failed']} failed."
    )
    t2 = ties(rows, 2)
    h = sum(v["higher"] for v in t2.values())
    lo = sum(v["lower"] for v in t2.values())
    nt = sum(v["ties"] for v in t2.values())
    one = sum(v["ties_at_one"] for v in t2.values())
    P(
        f"* Without − with replacement, n = 2: strictly higher at {h:,} of the {h + lo + nt:,} "
        f"(position, temperature) pairs, lower at {lo}, ties at {nt:,} ("
        + ", ".join(f"T = {T:g}: {v['ties']:,}" for T, v in t2.items())
        + f"); {one:,} of the ties have both bounds within {TIE:g} of 1."
    )
    for n in (3, 4):
        tn = ties(rows, n)
        h = sum(v["higher"] for v in tn.values())
        lo = sum(v["lower"] for v in tn.values())
        nt = sum(v["ties"] for v in tn.values())
        P(
            f"* Without − with replacement, n = {n} (every 10th position): strictly higher at {h:,} of "
            f"{h + lo + nt:,} pairs, lower at {lo}, ties at {nt:,}."
        )
    P(
        "* SpecTr − RRS (same i.i.d. drafts), paired: "
        + "; ".join(
            f"n = {n}: "
            + ", ".join(
                f"T = {T:g} {p['mean']:+.4f} ± {p['ci95']:.4f} (lower at {p['lower']:,} of {p['count']:,})"
                for T, p in ordering(rows, n).items()
            )
            for n in NS
        )
        + "."
    )

    P(
        "\nRSD for n = 3, 4 (Monte Carlo) paired with the sequential bound at the same positions "
        "(bound − RSD):\n"
    )
    lines = [("bound − RSD", n, lambda r, n=n: gap(r, "rrs_without_replacement", n)) for n in (3, 4)]
    P(_table(rows, lines, signed=True, digits=5))
    se = [
        r[f"verifier:rrs_without_replacement@{n}:se"]
        for r in rows
        for n in (3, 4)
        if f"verifier:rrs_without_replacement@{n}:se" in r
    ]
    P(f"\nMean Monte Carlo standard error of these RSD values: {np.mean(se):.1e} (largest {np.max(se):.1e}).")

    # ------------------------------------------------------------------------------------ n = 1
    P("\n## The n = 1 baseline\n")
    P(
        "With one draft every scheme coincides: alpha\\*_1 = Σ_y min(p(y), q(y)) = 1 − TV(p, q), "
        "attained by standard speculative sampling. Below: alpha\\*_1, and what n drafts add to it, "
        "paired per position. Sequential and conditional Poisson for n = 3, 4 are at every 10th "
        "position only (see the positions column).\n"
    )
    one = "bound:with_replacement@1"
    lines = [("alpha*_1", 1, lambda r: get(r, one))]
    for s, label in (
        ("with_replacement", "with"),
        ("without_replacement", "sequential"),
        ("conditional_poisson", "cond. Poisson"),
        ("greedy", "greedy"),
    ):
        for n in NS:
            lines.append((f"alpha*_{label} − alpha*_1", n, diff(f"bound:{s}@{n}", one)))
    for v in ("naive", "rrs", "spectr"):
        for n in NS:
            lines.append((f"{v} − alpha*_1", n, diff(f"verifier:{v}@{n}", one)))
    P(_table(rows, lines, signed=True))

    # ---------------------------------------------------------------------------- greedy − RSD
    P("\n## Paired greedy − RSD\n")
    P(
        "Greedy drafts with Hu et al.'s greedy verifier against RSD on sequential drafts, at the "
        "positions where RSD was evaluated (every 5th for n = 2, exact; every 10th for n = 3, 4, Monte "
        "Carlo), paired per position; the difference of the two bounds on the same positions beside "
        "it.\n"
    )
    lines = []
    for n in NS:
        rsd = f"verifier:rrs_without_replacement@{n}"
        lines.append(("greedy − RSD", n, diff(f"verifier:greedy@{n}", rsd)))
        lines.append(
            (
                "alpha*_greedy − alpha*_sequential",
                n,
                lambda r, n=n, rsd=rsd: (
                    get(r, f"bound:greedy@{n}") - get(r, f"bound:without_replacement@{n}")
                    if rsd in r
                    else None
                ),
            )
        )
    P(_table(rows, lines, signed=True))

    # ------------------------------------------------------------------------------- gap vs n
    P("\n## Gap against n, paired across n\n")
    P(
        "Gap = bound of the verifier's own scheme − its acceptance, per position. The rows "
        '"n=k − n=k−1" pair the two gaps at the same position. RSD is at every 5th position for '
        "n = 2 and every 10th for n = 3, 4 (the n = 3, 4 gaps use the extension's sequential bound); "
        "its differences are on the every-10th positions.\n"
    )
    lines = []
    for v in ("naive", "rrs", "spectr", "rrs_without_replacement"):
        for n in NS:
            lines.append((f"gap {v}", n, lambda r, n=n, v=v: gap(r, v, n)))
        for n in (3, 4):
            lines.append(
                (f"gap {v}: n={n} − n={n - 1}", n, lambda r, n=n, v=v: gap(r, v, n) - gap(r, v, n - 1))
            )
    P(_table(rows, lines, signed=True))

    # ------------------------------------------------------------------- conditional Poisson
    P("\n## Conditional Poisson beside sequential sampling\n")
    P(
        "alpha\\*_CP: the optimum for a conditional-Poisson draft set (an n-subset drawn with "
        "probability proportional to Π q, the quantity Hu et al.'s dynamic program computes); "
        "alpha\\*_sequential: sequential sampling without replacement. n = 2 at every position; "
        "n = 3, 4 at every 10th.\n"
    )
    lines = [("alpha*_CP", n, lambda r, n=n: get(r, f"bound:conditional_poisson@{n}")) for n in NS]
    lines += [("alpha*_sequential", n, lambda r, n=n: get(r, f"bound:without_replacement@{n}")) for n in NS]
    P(_table(rows, lines, counts=False))
    P()
    cp = "bound:conditional_poisson@{}"
    lines = [("CP − sequential", n, diff(cp.format(n), f"bound:without_replacement@{n}")) for n in NS]
    lines += [("CP − with", n, diff(cp.format(n), f"bound:with_replacement@{n}")) for n in NS]
    lines += [("CP − greedy", n, diff(cp.format(n), f"bound:greedy@{n}")) for n in NS]
    P(_table(rows, lines, signed=True, digits=5))
    d = [v for v, _ in values(rows, diff(cp.format(2), "bound:without_replacement@2"))]
    P(f"\nLargest |CP − sequential| at n = 2 over all rows: {max(abs(x) for x in d):.2e}.")

    # ------------------------------------------------------------------------ hard positions
    P(f"\n## Hard positions (TV(p, q) > {HARD_TV:g}) and quantiles\n")
    P("TV(p, q) = 1 − alpha\\*_1 per position and temperature.\n")
    P(
        "| T | positions | TV quantiles "
        + " / ".join(f"{round(100 * x)}%" for x in QUANTILES)
        + f" | TV > {HARD_TV:g} |"
    )
    P("|---|---|---|---|")
    for t in temps:
        tv = [r["tv"] for r in _at(rows, t)]
        hard = sum(x > HARD_TV for x in tv)
        P(
            f"| {t:g} | {len(tv):,} | "
            + " / ".join(f"{quantile(tv, q):.3f}" for q in QUANTILES)
            + f" | {hard:,} ({hard / len(tv):.1%}) |"
        )
    effects = [
        ("1 − alpha*_1", lambda r: 1 - get(r, one)),
        ("1 − alpha*_with (n = 2)", lambda r: 1 - get(r, "bound:with_replacement@2")),
        ("sequential − with (n = 2)", diff("bound:without_replacement@2", "bound:with_replacement@2")),
        ("greedy − with (n = 4)", diff("bound:greedy@4", "bound:with_replacement@4")),
        ("RRS gap (n = 2)", lambda r: gap(r, "rrs", 2)),
        ("SpecTr gap (n = 2)", lambda r: gap(r, "spectr", 2)),
        ("naive gap (n = 2)", lambda r: gap(r, "naive", 2)),
        ("RSD gap (n = 2, every 5th)", lambda r: gap(r, "rrs_without_replacement", 2)),
        ("RRS gap (n = 4)", lambda r: gap(r, "rrs", 4)),
    ]
    P(
        f"\nShare of each total (over the positions at that temperature) carried by the hard positions "
        f"/ by the {TOP_SHARE:.0%} of positions with the largest values of that quantity (above 100% "
        f"when the quantity is negative somewhere):\n"
    )
    P("| quantity | " + " | ".join(f"T={t:g}" for t in temps) + " |")
    P("|---|" + "---|" * len(temps))
    for label, f in effects:
        cells = []
        for t in temps:
            s = shares(rows, f, t)
            cells.append("-" if s is None or not s["total"] > 0 else f"{s['hard']:.0%} / {s['top']:.0%}")
        P(f"| {label} | " + " | ".join(cells) + " |")
    P("\nQuantiles of the per-position values (50% / 90% / 99% / max):\n")
    P("| quantity | " + " | ".join(f"T={t:g}" for t in temps) + " |")
    P("|---|" + "---|" * len(temps))
    for label, f in effects[2:8]:
        cells = []
        for t in temps:
            x = [v for v, _ in values(rows, f, t)]
            cells.append(" / ".join(f"{quantile(x, q):.4f}" for q in (0.5, 0.9, 0.99)) + f" / {max(x):.3f}")
        P(f"| {label} | " + " | ".join(cells) + " |")
    P(f"\nMeans on the hard positions (TV > {HARD_TV:g}) and on the others:\n")

    def only(f, hard):
        return lambda r: f(r) if (r["tv"] > HARD_TV) == hard else None

    lines = []
    for label, key, n in (
        ("alpha*_1", one, 1),
        ("alpha*_with", "bound:with_replacement@2", 2),
        ("alpha*_sequential", "bound:without_replacement@2", 2),
        ("alpha*_CP", "bound:conditional_poisson@2", 2),
        ("alpha*_greedy", "bound:greedy@2", 2),
        ("rrs", "verifier:rrs@2", 2),
        ("spectr", "verifier:spectr@2", 2),
        ("RSD (every 5th)", "verifier:rrs_without_replacement@2", 2),
    ):
        for hard in (True, False):
            lines.append(
                (f"{label}, {'hard' if hard else 'other'}", n, only(lambda r, k=key: get(r, k), hard))
            )
    P(_table(rows, lines, counts=False))
    P()
    lines = []
    for label, f in (
        ("sequential − with", effects[2][1]),
        ("RRS gap", effects[4][1]),
        ("greedy − RSD", diff("verifier:greedy@2", "verifier:rrs_without_replacement@2")),
    ):
        for hard in (True, False):
            lines.append((f"{label}, {'hard' if hard else 'other'}", 2, only(f, hard)))
    P(_table(rows, lines, signed=True))
    return "\n".join(out) + "\n"


def bounds_summary(rows) -> list[dict]:
    """:func:`mdsd_ot.study.summarize` of the bounds of the joined rows (every scheme, n = 1..4)."""
    from mdsd_ot.study import summarize

    return summarize([{k: v for k, v in r.items() if not k.startswith("verifier:")} for r in rows])


def plot_bounds(rows, out, title=None) -> Path:
    """``bounds_summary.json`` and ``bounds_vs_temperature.png`` (one family colour per scheme;
    bounds evaluated at a subsample of the positions drawn hollow, with their counts) into ``out``."""
    import json

    from mdsd_ot.plots import plot_families

    out = Path(out)
    table = bounds_summary(rows)
    (out / "bounds_summary.json").write_text(json.dumps(table, indent=1))
    tmp = out / "_plot"
    tmp.mkdir(exist_ok=True)
    png = plot_families(table, tmp, title=title)["acceptance_plot"]
    dest = out / "bounds_vs_temperature.png"
    Path(png).replace(dest)
    tmp.rmdir()
    return dest


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--main", default=str(DATA), help="folder of the main run's rows")
    parser.add_argument("--ext", default=str(EXT), help="folder of the extension run's rows")
    parser.add_argument(
        "--plot",
        default=None,
        metavar="DIR",
        help="also write bounds_summary.json and bounds_vs_temperature.png into DIR",
    )
    args = parser.parse_args(argv)
    rows, worst = load(args.main, args.ext)
    sys.stdout.write(report(rows, worst))
    if args.plot:
        plot_bounds(
            rows,
            args.plot,
            title="Qwen2.5-Coder 1.5B / 0.5B on HumanEval: optimal acceptance per draft scheme",
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""``mdsd-ot demo``: bounds and verifiers on the bundled real Qwen2.5-Coder sample, offline, < 1 min.

Reads :func:`mdsd_ot.sample.load_sample` (checksum verified), evaluates for a few temperatures and n
the optimal acceptance with replacement, without replacement and for greedy drafts, and the exact
acceptance of each published verifier, then prints the mean per method with 95% intervals and
writes a plot (matplotlib, Agg backend) and the tables to ``--out``. Needs neither torch nor a model.
Progress goes to stderr (a tqdm bar on a terminal, else a line per tenth); methods that cannot run
for a chosen n (e.g. ``--n 99``: fewer than 99 tokens of positive q) are named on stderr with the
reason, and left out of the tables.
"""

from __future__ import annotations

import sys
import time

HELP = "offline demo on bundled real Qwen2.5-Coder distributions: bounds vs verifiers (< 1 min)"


def add_arguments(parser):
    from ..plots import in_family_order
    from ..verifiers import DEFAULT_VERIFIERS, VERIFIERS

    parser.add_argument(
        "--out",
        default="mdsd_ot_demo",
        help="folder for the plots and tables, relative to the current folder (default: ./mdsd_ot_demo)",
    )
    parser.add_argument(
        "--temperatures",
        default="0.3,0.7,1.0",
        help="comma-separated, among the captured ones: 0.3, 0.5, 0.7, 1.0",
    )
    parser.add_argument("--n", default="2,3,4", help="numbers of drafts (>= 1), comma-separated")
    parser.add_argument(
        "--positions",
        type=int,
        default=150,
        help="number of positions, spread evenly over the sample (default 150)",
    )
    parser.add_argument(
        "--verifiers",
        # the default verifiers, then every other registered one (optimal: the compact sample is small)
        default=",".join(
            in_family_order(DEFAULT_VERIFIERS) + tuple(v for v in VERIFIERS if v not in DEFAULT_VERIFIERS)
        ),
        help="comma-separated verifier names ('' for none)",
    )
    parser.add_argument("--no-plot", action="store_true", help="print the tables only")
    parser.add_argument("--no-progress", action="store_true", help="no progress display on stderr")


class _Progress:
    """Progress on stderr: a tqdm bar on a terminal when tqdm is installed, else a line per tenth."""

    def __init__(self, total: int, enabled: bool):
        self.total, self.done, self.bar, self.t0 = total, 0, None, time.time()
        self.enabled = enabled and total > 0
        self.next_line = 0.1
        if self.enabled and sys.stderr.isatty():
            try:
                from tqdm.auto import tqdm

                self.bar = tqdm(total=total, desc="mdsd-ot demo", unit="pair", file=sys.stderr)
            except ImportError:
                pass

    def update(self) -> None:
        self.done += 1
        if not self.enabled:
            return
        if self.bar is not None:
            self.bar.update(1)
        elif self.done >= self.next_line * self.total or self.done == self.total:
            self.next_line = (int(10 * self.done / self.total) + 1) / 10
            print(
                f"mdsd-ot demo: {self.done}/{self.total} (position, temperature) pairs, "
                f"{time.time() - self.t0:.1f} s",
                file=sys.stderr,
                flush=True,
            )

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _failures(rows) -> list:
    """One line per method that raised somewhere: where and the (first) reason."""
    seen = {}
    for r in rows:
        for key, why in (r.get("errors") or {}).items():
            count, first = seen.get(key, (0, why))
            seen[key] = (count + 1, first)
    return [
        f"{key} at {count} of {len(rows)} (position, temperature) pairs; first reason: "
        f"{' '.join(str(why).split())}"
        for key, (count, why) in seen.items()
    ]


def run(args) -> int:
    import json
    from pathlib import Path

    from ..intervals import interval_note
    from ..sample import load_sample, sample_metadata
    from ..study import SCHEMES, StudyConfig, evaluate_rows, format_table, summarize
    from ..verifiers import get_verifier
    from .study import _floats, _ints, _names

    t0 = time.time()
    # the study's own checks (n >= 1, finite temperatures > 0, verifier names); aliases first
    config = StudyConfig(
        temperatures=_floats(args.temperatures),
        ns=_ints(args.n),
        verifiers=list(dict.fromkeys(get_verifier(v).name for v in _names(args.verifiers))),
    ).validate()
    temps, ns, verifiers = config.temperatures, config.ns, config.verifiers
    if args.positions < 1:
        raise ValueError(f"--positions must be >= 1, got {args.positions}")
    out = Path(args.out)
    if out.exists() and not out.is_dir():  # before the run, not after it
        raise ValueError(f"--out {out} is a file; give a folder (created if missing)")
    out.mkdir(parents=True, exist_ok=True)
    records = load_sample(temperatures=temps)
    meta = sample_metadata()
    keys = sorted({(r.problem, r.position) for r in records})
    if args.positions > len(keys):
        print(
            f"mdsd-ot demo: --positions {args.positions} is more than the sample's {len(keys)} "
            f"positions; using all {len(keys)}",
            file=sys.stderr,
        )
    step = max(1, len(keys) // args.positions)
    chosen = set(keys[::step][: args.positions])
    rows = []
    todo = [r for r in records if (r.problem, r.position) in chosen]
    progress = _Progress(len(todo), enabled=not args.no_progress)
    try:
        for r in todo:
            vals = evaluate_rows(
                r.p[None, :],
                r.q[None, :],
                ns=ns,
                schemes=list(SCHEMES),
                verifiers=verifiers,
                backend="numpy",
                seed=r.position,
                positions=[0],
            )[0]
            rows.append({"record": r.problem, "pos": r.position, "T": r.temperature, **vals})
            progress.update()
    finally:
        progress.close()
    failures = _failures(rows)
    table = summarize(rows)
    if not table:
        raise ValueError("no method could run for these options: " + "; ".join(failures))
    elapsed = time.time() - t0
    problems = len({r["record"] for r in rows})
    head = (
        f"mdsd-ot demo: {len(chosen)} positions x {len(temps)} "
        f"temperature{'' if len(temps) == 1 else 's'} of real "
        f"{meta['target']} (target) / {meta['draft']} (draft) distributions on HumanEval\n"
        f"(compact form: top-{meta['top_k']} union + tail token; see mdsd_ot.sample). "
        f"Mean acceptance; {interval_note(problems, 'problem')}"
    )
    text = "\n".join(
        [
            head,
            "",
            format_table(table, order="family"),
            "",
            "Gap = bound of the verifier's own draft scheme - its acceptance:",
            "",
            format_table(table, kind="gap", order="family"),
        ]
    )
    print(text)
    (out / "demo_summary.md").write_text(text + "\n", encoding="utf-8")
    (out / "demo_summary.json").write_text(json.dumps(table, indent=1))
    if args.no_plot:
        print(f"\nplot skipped (--no-plot); tables in {out}")
    else:
        from ..plots import plot_families, run_title

        title = run_title(
            "mdsd-ot demo",
            target=meta["target"],
            draft=meta["draft"],
            prompts="HumanEval (bundled sample)",
            counts=f"{len(chosen)} positions of {problems} problems",
            value="mean per position",
            unit="problem",
        )
        try:
            files = plot_families(table, out, title=title)
        except ImportError:
            print(
                f"\nmatplotlib is not installed: plot skipped (pip install matplotlib, or the "
                f"'plot' extra); tables in {out}"
            )
        else:
            print("\nplots: " + ", ".join(str(f) for f in files.values()))
    if failures:
        print("note: these methods could not run and are missing from the tables:", file=sys.stderr)
        for line in failures:
            print(f"  {line}", file=sys.stderr)
    print(f"done in {time.time() - t0:.1f} s (evaluation {elapsed:.1f} s); results in {out.resolve()}")
    return 0

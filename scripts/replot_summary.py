#!/usr/bin/env python
"""Redraw a study's plots from its ``summary.json`` with :func:`mdsd_ot.plots.plot_families`.

    python scripts/replot_summary.py docs/results/qwen_coder_humaneval/summary.json \
        docs/results/qwen_coder_humaneval --title "Qwen2.5-Coder 1.5B / 0.5B on HumanEval"

One hue per bound and the verifiers built for its draft scheme (a shade each); methods evaluated on a
subsample of the positions (``mdsd-ot study --every``) are drawn hollow and labelled with their
position counts. Writes ``acceptance_vs_temperature.png`` and ``gap_to_bound.png`` into the output folder.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mdsd_ot.plots import plot_families  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("summary", help="summary.json written by mdsd-ot study / merge")
    parser.add_argument("out", help="folder for the two PNG files")
    parser.add_argument("--title", default=None, help="figure title")
    args = parser.parse_args(argv)
    table = json.loads(Path(args.summary).read_text())
    files = plot_families(table, args.out, title=args.title)
    for f in files.values():
        print(f)
    return 0


if __name__ == "__main__":
    sys.exit(main())

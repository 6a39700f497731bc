"""scripts/tree_rows.py on the committed tree-report rows: check passes, cells counts, tampering fails."""

import importlib.util
import json
import lzma
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ROWS = ROOT / "docs" / "results" / "trees"
SCRIPT = ROOT / "scripts" / "tree_rows.py"

pytestmark = pytest.mark.skipif(not (ROWS / "positions.jsonl.xz").exists(), reason="no committed rows")


def _run(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True)


def _main(argv, capsys):
    """The script's ``main`` in this process (one interpreter start fewer than :func:`_run`)."""
    spec = importlib.util.spec_from_file_location("tree_rows", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    code = module.main([str(a) for a in argv])
    return code, capsys.readouterr().out


@pytest.mark.slow  # 14 MB of committed rows decompressed, hashed and parsed three times: about 2.5 s
def test_check_and_cells_on_the_committed_rows(tmp_path, capsys):
    res = _run("check", ROWS)  # the script as a program
    assert res.returncode == 0, res.stderr
    code, out = _main(["cells", ROWS], capsys)
    assert code == 0
    cells = json.loads(out)
    assert cells and set(cells[0]) == {"temperature", "shape", "scheme", "calls"}
    # an independent count: one row per (call, cell), read straight from the compressed file
    rows = [
        json.loads(line) for line in lzma.decompress((ROWS / "positions.jsonl.xz").read_bytes()).splitlines()
    ]
    want = Counter((r["T"], r["tree"], r["scheme"]) for r in rows)
    for c in cells:
        assert c["calls"] == want[(c["temperature"], c["shape"], c["scheme"])]
    assert sum(c["calls"] for c in cells) == len(rows)  # every row in one cell
    assert {c["shape"] for c in cells} <= {"1x4", "2x4", "4x4", "4x3", "4,2,2,1"}


def test_check_fails_on_a_changed_byte(tmp_path):
    copy = tmp_path / "trees"
    shutil.copytree(ROWS, copy)
    raw = bytearray(lzma.decompress((copy / "positions.jsonl.xz").read_bytes()))
    i = raw.index(b'"call": ') + len(b'"call": ')
    raw[i] = ord("7") if raw[i] != ord("7") else ord("8")
    # preset 0: a fast xz stream (the default preset takes seconds on these 14 MB); any xz reads back
    (copy / "positions.jsonl.xz").write_bytes(lzma.compress(bytes(raw), preset=0))
    res = _run("check", copy)
    assert res.returncode == 1 and "sha256" in res.stderr
    (copy / "positions.jsonl.xz").unlink()
    assert _run("check", copy).returncode == 1


def test_compare_reports_what_differs():
    """``compare``: nothing for identical rows; a changed value and changed driver tokens are named,
    with the difference and both means computed here by hand."""
    spec = importlib.util.spec_from_file_location("tree_rows", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    rows = [
        {
            "record": "P/0",
            "T": 0.7,
            "tree": "1x4",
            "scheme": "greedy",
            "call": c,
            "exact:optimal": v,
            "exact:rrs": 2.0,
            "tokens": [c],
            "t_draft": 0.1 * c,
        }
        for c, v in enumerate([3.0, 4.0, 5.0])
    ]
    same = module.compare(rows, [dict(r, t_draft=9.0) for r in rows])  # timings are not compared
    assert "the same in every matched call" in same[1] and "every field equal" in same[-1]
    changed = [dict(r) for r in rows]
    changed[1]["exact:optimal"] = 4.25
    changed[2]["tokens"] = [7]
    out = module.compare(rows, changed + [dict(rows[0], call=9)])  # one row without a twin
    assert out[0].startswith("4 rows of B, 3 matched")
    assert "DIFFERENT" in out[1]
    line = next(x for x in out if x.startswith("| exact:optimal |"))
    assert line == "| exact:optimal | 1 of 3 | 2.5e-01 | 0.2500 | 4.00000 | 4.08333 |"
    assert not any(x.startswith("| exact:rrs |") for x in out)
    assert any(x.startswith("| tokens | 1 | (not numbers)") for x in out)

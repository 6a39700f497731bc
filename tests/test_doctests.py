"""Every example in the README and in the package's docstrings runs, and prints what it says.

* Docstrings: every module of ``mdsd_ot`` goes through :mod:`doctest` (one test per module; modules
  that need torch are skipped when torch is missing).
* README: every ```python block must be written as a doctest (``>>>`` lines with their output) and is
  run as one; a block that imports torch is skipped without torch. Every ``mdsd-ot`` line of a bash
  block runs through the CLI in a folder holding the files it names; lines that need the real models
  (``--target``, and ``merge`` of their output) are left out, and demo lines run on 4 positions
  without plots (flags checked, time bounded).
"""

from __future__ import annotations

import doctest
import importlib
import importlib.util
import pkgutil
import re
import shlex
from pathlib import Path

import numpy as np
import pytest

import mdsd_ot

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
HAS_TORCH = importlib.util.find_spec("torch") is not None

MODULES = sorted(m.name for m in pkgutil.walk_packages(mdsd_ot.__path__, "mdsd_ot."))
NEEDS_TORCH = {"mdsd_ot.backends.torch"}


def _run(test: doctest.DocTest) -> doctest.TestResults:
    runner = doctest.DocTestRunner(optionflags=FLAGS)
    out = []
    runner.run(test, out=out.append)
    assert runner.failures == 0, "".join(out)
    return doctest.TestResults(runner.failures, runner.tries)


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    if name in NEEDS_TORCH and not HAS_TORCH:
        pytest.skip("needs torch")
    module = importlib.import_module(name)
    for test in doctest.DocTestFinder().find(module, name):
        if test.examples:
            _run(test)


def test_docstring_examples_exist():
    """The doctest run is not vacuous: the public modules carry examples."""
    count = 0
    for name in MODULES:
        if name in NEEDS_TORCH and not HAS_TORCH:
            continue
        module = importlib.import_module(name)
        count += sum(len(t.examples) for t in doctest.DocTestFinder().find(module, name))
    assert count >= 35  # 39 without torch (the torch backend module has 7 more)


def _blocks(lang: str) -> list[tuple[int, str]]:
    """``(line number, body)`` of each fenced block of ``lang`` in the README."""
    text = README.read_text(encoding="utf-8")
    out = []
    for m in re.finditer(rf"^```{lang}\n(.*?)^```", text, flags=re.S | re.M):
        out.append((text.count("\n", 0, m.start()) + 1, m.group(1)))
    return out


PY_BLOCKS = _blocks("python")


def test_readme_python_blocks_are_doctests():
    assert len(PY_BLOCKS) >= 4
    for line, body in PY_BLOCKS:
        first = next(ln for ln in body.splitlines() if ln.strip())
        assert first.startswith(">>> "), f"README.md:{line}: write the example as a doctest (>>>)"


@pytest.mark.parametrize("line, body", PY_BLOCKS, ids=[f"README.md:{ln}" for ln, _ in PY_BLOCKS])
def test_readme_python_block(line, body):
    if "import torch" in body and not HAS_TORCH:
        pytest.skip("needs torch")
    test = doctest.DocTestParser().get_doctest(body, {}, f"README.md:{line}", str(README), line)
    assert test.examples
    _run(test)


def _cli_lines() -> list[tuple[int, str]]:
    lines = []
    for start, body in _blocks("bash"):
        for k, raw in enumerate(body.splitlines()):
            cmd = raw.split("#", 1)[0].strip()
            if cmd.startswith("mdsd-ot ") and "--target" not in cmd and not cmd.endswith("\\"):
                lines.append((start + 1 + k, cmd))
    return lines


CLI_LINES = _cli_lines()


@pytest.fixture
def example_files(tmp_path, monkeypatch):
    p, q = np.array([0.5, 0.3, 0.2, 0.0]), np.array([0.1, 0.2, 0.3, 0.4])
    np.save(tmp_path / "p.npy", p)
    np.save(tmp_path / "q.npy", q)
    np.savez(tmp_path / "pair.npz", p=p, q=q)
    (tmp_path / "pair.json").write_text('{"p": [0.5, 0.3, 0.2, 0.0], "q": [0.1, 0.2, 0.3, 0.4]}')
    (tmp_path / "my_sampler.py").write_text(
        "from mdsd_ot.audit import registry_verify\nverify = registry_verify('rrs')\n"
    )
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_readme_cli_lines_found():
    commands = {shlex.split(c)[1] for _, c in CLI_LINES}
    assert {"bound", "compare", "audit", "demo"} <= commands


@pytest.mark.slow
@pytest.mark.parametrize("line, cmd", CLI_LINES, ids=[f"README.md:{ln}" for ln, _ in CLI_LINES])
def test_readme_cli_line(example_files, line, cmd, capsys):
    from mdsd_ot.cli import main

    argv = shlex.split(cmd)[1:]
    if argv[0] == "demo":
        argv += ["--positions", "4", "--no-plot", "--no-progress"]
    if argv[0] in ("study", "merge") and "--help" not in argv:
        pytest.skip("needs the real models (merge: the study folders they produce)")
    try:
        rc = main(argv)
    except SystemExit as exc:  # --help, --version
        rc = exc.code
    captured = capsys.readouterr()
    assert rc == 0, f"README.md:{line}: `{cmd}` exited {rc}: {captured.err}"

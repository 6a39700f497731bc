"""Every example in the README, in the ``docs/`` pages and in the package's docstrings runs, and prints
what it says.

* Docstrings: every module of ``mdsd_ot`` goes through :mod:`doctest` (one test per module; modules
  that need torch are skipped when torch is missing).
* README.md and docs/*.md (the pages next to docs/math.md; docs/results/ holds write-ups, not
  examples): every ```python block is a doctest (``>>>`` lines with their output), run as one, or a
  script to paste into ``python3`` whose ``print`` lines end in ``# -> <what it prints>``, run as
  pasted (through ``python3 -i`` on stdin) with each printed line compared; a block that imports
  torch is skipped without torch. Every ``mdsd-ot`` line of a bash block runs through the CLI in a
  copy of ``examples/cli/`` (the files the README's lines name, as pasted after ``cd examples/cli``);
  lines that need real models (``--target``, and ``merge`` of their output) are left out, demo lines
  run on 4 positions without plots (flags checked, time bounded) and warmup lines with ``--list``
  (nothing compiled). The README's tiny-models block (``mdsd-ot tiny-models`` then study, merge and
  decode on those models) runs as one sequence, as pasted, in an empty folder.
* The README gives an example of every sub-command of ``mdsd-ot --help``.
"""

from __future__ import annotations

import doctest
import importlib
import importlib.util
import pkgutil
import re
import shlex
import shutil
from pathlib import Path

import pytest

import mdsd_ot

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
EXAMPLES_CLI = ROOT / "examples" / "cli"
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


def _name(page: Path) -> str:
    return page.relative_to(ROOT).as_posix()


def _blocks(lang: str, pages=PAGES) -> list[tuple[str, int, str]]:
    """``(page, line number, body)`` of each fenced block of ``lang`` in the pages."""
    out = []
    for page in pages:
        text = page.read_text(encoding="utf-8")
        for m in re.finditer(rf"^```{lang}\n(.*?)^```", text, flags=re.S | re.M):
            out.append((_name(page), text.count("\n", 0, m.start()) + 1, m.group(1)))
    return out


PY_BLOCKS = _blocks("python")


def _is_script(body: str) -> bool:
    return not next(ln for ln in body.splitlines() if ln.strip()).startswith(">>> ")


def test_readme_python_blocks_are_doctests():
    assert sum(name == "README.md" for name, _, _ in PY_BLOCKS) >= 1
    assert len(PY_BLOCKS) >= 9  # the README's API example and the docs pages' examples
    for name, line, body in PY_BLOCKS:
        if _is_script(body):  # a script says what it prints
            assert "# -> " in body, (
                f"{name}:{line}: write the example as a doctest (>>>) or mark outputs # ->"
            )
            assert ">>>" not in body, f"{name}:{line}: a script block has no >>> lines"


@pytest.mark.parametrize("name, line, body", PY_BLOCKS, ids=[f"{name}:{ln}" for name, ln, _ in PY_BLOCKS])
def test_readme_python_block(name, line, body):
    if "import torch" in body and not HAS_TORCH:
        pytest.skip("needs torch")
    if _is_script(body):
        import os
        import subprocess
        import sys

        expected = [ln.split("# -> ", 1)[1].rstrip() for ln in body.splitlines() if "# -> " in ln]
        env = dict(os.environ, PYTHONPATH=str(ROOT), MDSD_OT_QUIET="1")
        got = subprocess.run(
            [sys.executable, "-i", "-q"],
            input=body + "\n",
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert "Traceback" not in got.stderr and got.returncode == 0, got.stderr
        assert [ln.rstrip() for ln in got.stdout.splitlines()] == expected, (name, line, got.stdout)
        return
    test = doctest.DocTestParser().get_doctest(body, {}, f"{name}:{line}", str(ROOT / name), line)
    assert test.examples
    _run(test)


def _commands(body: str) -> list[tuple[int, str]]:
    """``(offset, command)`` of every ``mdsd-ot`` line of a bash block (comments stripped)."""
    out = []
    for k, raw in enumerate(body.splitlines()):
        cmd = raw.split("#", 1)[0].strip()
        if cmd.startswith("mdsd-ot ") and not cmd.endswith("\\"):
            out.append((k, cmd))
    return out


def _is_tiny_block(body: str) -> bool:
    return any(shlex.split(cmd)[1] == "tiny-models" for _, cmd in _commands(body))


TINY_BLOCKS = [(line, body) for name, line, body in _blocks("bash", [README]) if _is_tiny_block(body)]


def _cli_lines() -> list[tuple[str, int, str]]:
    lines = []
    for name, start, body in _blocks("bash"):
        if _is_tiny_block(body):
            continue  # run as one sequence below
        for k, cmd in _commands(body):
            if "--target" not in cmd:
                lines.append((name, start + 1 + k, cmd))
    return lines


CLI_LINES = _cli_lines()


@pytest.fixture
def example_files(tmp_path, monkeypatch):
    """A copy of examples/cli/ as the current folder (importable, for ``my_sampler:verify``)."""
    folder = tmp_path / "cli"
    shutil.copytree(EXAMPLES_CLI, folder, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.chdir(folder)
    monkeypatch.syspath_prepend(str(folder))
    return folder


def _subcommands() -> set[str]:
    import argparse

    from mdsd_ot.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return set(sub.choices)


def test_readme_cli_lines_found():
    """Every sub-command has an example in the README; the README's lines name the shipped files."""
    readme = [cmd for name, _, cmd in CLI_LINES if name == "README.md"]
    readme += [cmd for _, body in TINY_BLOCKS for _, cmd in _commands(body)]
    commands = {shlex.split(c)[1] for c in readme}
    assert _subcommands() <= commands, _subcommands() - commands
    assert len(TINY_BLOCKS) == 1
    text = README.read_text(encoding="utf-8")
    assert "```bash\ncd examples/cli\n```" in text
    for cmd in readme:
        for word in shlex.split(cmd):
            if re.fullmatch(r"[\w.]+\.(npy|npz|json)", word):
                assert (EXAMPLES_CLI / word).is_file(), (cmd, word)


@pytest.mark.slow
@pytest.mark.parametrize("name, line, cmd", CLI_LINES, ids=[f"{name}:{ln}" for name, ln, _ in CLI_LINES])
def test_readme_cli_line(example_files, name, line, cmd, capsys):
    from mdsd_ot.cli import main

    argv = shlex.split(cmd)[1:]
    if argv[0] == "demo":
        argv += ["--positions", "4", "--no-plot", "--no-progress"]
    if argv[0] == "warmup":  # compiling every family takes minutes: its listing (flags checked)
        argv += ["--list"]
    if argv[0] in ("study", "merge") and "--help" not in argv:
        pytest.skip("needs the real models (merge: the study folders they produce)")
    try:
        rc = main(argv)
    except SystemExit as exc:  # --help, --version
        rc = exc.code
    captured = capsys.readouterr()
    assert rc == 0, f"{name}:{line}: `{cmd}` exited {rc}: {captured.err}"


@pytest.mark.slow
@pytest.mark.parametrize("line, body", TINY_BLOCKS, ids=[f"README.md:{ln}" for ln, _ in TINY_BLOCKS])
def test_readme_tiny_model_block(tmp_path, monkeypatch, capsys, line, body):
    """tiny-models, then study (two shards), merge and decode on them, as pasted, in an empty folder."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from mdsd_ot.cli import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for k, cmd in _commands(body):
        argv = shlex.split(cmd)[1:]
        if argv[0] in ("study", "decode"):
            argv.append("--no-progress")
        rc = main(argv)
        captured = capsys.readouterr()
        assert rc == 0, f"README.md:{line + 1 + k}: `{cmd}` exited {rc}: {captured.err}"
    assert (tmp_path / "tiny" / "study" / "summary.md").is_file()
    assert (tmp_path / "tiny" / "decode" / "summary.md").is_file()


def test_pages_name_no_absolute_path_of_a_machine():
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        assert not re.search(r"(?<![\w$.])/(work|home|root|Users)/", text), _name(page)

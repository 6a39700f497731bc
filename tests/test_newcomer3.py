"""A newcomer's first hour, round 3 (issue 38): first calls, inputs as they come, --device, and the
minor items. Every CLI case checks the exit status and that the message is one line."""

from __future__ import annotations

import importlib.util
import io
import os
from pathlib import Path

import pytest

from mdsd_ot.cli import main

ROOT = Path(__file__).resolve().parents[1]
HAS_TORCH = importlib.util.find_spec("torch") is not None


def _cli(capsys, argv):
    code = main([str(a) for a in argv])
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def _one_line_error(capsys, argv, *fragments, code=2):
    got, out, err = _cli(capsys, argv)
    assert got == code, (got, out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err and "error" in lines[0], err
    for f in fragments:
        assert f in lines[0], (f, lines[0])
    return lines[0]


# ------------------------------------------------------------------------------- 1. first calls


def test_a_notice_is_said_once_then_never_after_the_kernel_is_compiled(tmp_path, capsys, monkeypatch):
    """The notice goes by numba's cache for the present source: said before a first compile, not
    after it (in this process, nor by a new dispatcher that loads the kernel from the disk cache)."""
    from mdsd_ot._kernels import dispatch

    (tmp_path / "tiny_kernel.py").write_text(
        "import numba\n\n@numba.njit(cache=True)\ndef plus_one(x):\n    return x + 1\n"
    )

    def load(name):
        spec = importlib.util.spec_from_file_location(name, tmp_path / "tiny_kernel.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module.plus_one

    monkeypatch.delenv("MDSD_OT_QUIET", raising=False)
    monkeypatch.setattr(dispatch, "_NOTICED", set())
    kernel = load("tiny_kernel_a")
    if not dispatch.jit_enabled():
        pytest.skip("NUMBA_DISABLE_JIT=1: nothing compiles, no notice")
    dispatch.compile_notice(kernel, "the tiny kernels", 3)
    dispatch.compile_notice(kernel, "the tiny kernels", 3)  # once per process
    assert capsys.readouterr().err.count("compiling the tiny kernels (not in the kernel cache yet") == 1
    assert kernel(1) == 2  # compiled, and written to the cache
    dispatch._NOTICED.clear()
    dispatch.compile_notice(kernel, "the tiny kernels", 3)  # compiled in this process
    dispatch.compile_notice(load("tiny_kernel_b"), "the tiny kernels", 3)  # a new dispatcher: cached
    assert capsys.readouterr().err == ""


def test_a_small_input_loop_compiles_once_the_python_body_has_run_as_long_as_a_compile(tmp_path, monkeypatch):
    """Small inputs run the kernel's Python body until it has run, in this process, as long as its
    compile would take (its family's estimate, else PYTHON_TWIN_BUDGET_S); then the kernel is compiled
    (the demo's 52,000 exact-RSD calls at V = 33 ran the body for most of its minute)."""
    from mdsd_ot import _compile
    from mdsd_ot._config import PYTHON_TWIN_BUDGET_S
    from mdsd_ot._kernels import dispatch
    from mdsd_ot._kernels.verifiers import rsd2_rejection

    if not dispatch.jit_enabled():
        pytest.skip("NUMBA_DISABLE_JIT=1: nothing compiles")
    (tmp_path / "twin_kernel.py").write_text(
        "import numba\n\n@numba.njit(cache=True)\ndef double(x):\n    return 2 * x\n"
    )
    spec = importlib.util.spec_from_file_location("twin_kernel", tmp_path / "twin_kernel.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    kernel = module.double
    monkeypatch.setattr(dispatch, "_TWIN_SECONDS", {})
    body = dispatch.small_or_jit(kernel, 10)
    assert body is not kernel and body(3) == 6 and not kernel.signatures  # the Python body
    assert 0.0 <= dispatch._TWIN_SECONDS[kernel] < PYTHON_TWIN_BUDGET_S
    dispatch._TWIN_SECONDS[kernel] = PYTHON_TWIN_BUDGET_S  # as if it had run that long
    assert dispatch.small_or_jit(kernel, 10) is kernel and kernel(3) == 6 and kernel.signatures
    assert dispatch._budget(kernel) == PYTHON_TWIN_BUDGET_S  # outside the families
    assert dispatch._budget(rsd2_rejection) == _compile.FAMILIES["rsd"].seconds


def test_the_batch_passes_the_scans_argument_types():
    """The row-parallel sequential kernel hands ``refine`` and ``have_sums`` to the scan as arguments
    (int and bool from Python, as solve_sorted does): constants were typed Literal[int](0) inside
    numba, a second signature of the whole scan, compiled again on a first batch."""
    import inspect

    from mdsd_ot._kernels import dispatch

    kernel, extra = dispatch._batch_kernel(32_000, 3, 1)
    assert kernel is dispatch._batch_without
    assert [type(x) for x in extra] == [int, int, bool] and extra[1:] == (0, False)
    source = inspect.getsource(dispatch._batch_without.py_func if dispatch.jit_enabled() else kernel)
    assert "scan_without_replacement_into(" in source and ", 0)" not in source


def test_warmup_lists_every_family_with_its_estimate_and_the_cache(capsys):
    from mdsd_ot import warmup
    from mdsd_ot._compile import FAMILIES, cache_location

    out = io.StringIO()
    results = warmup(dry_run=True, file=out)
    text = out.getvalue()
    assert [r.family for r in results] == list(FAMILIES)
    assert all(r.estimate == FAMILIES[r.family].in_warmup for r in results)
    where = cache_location()
    assert (where or "NUMBA_DISABLE_JIT") in text
    for r in results:
        assert f"{r.family}: {r.what}" in text
    code, stdout, err = _cli(capsys, ["warmup", "--list"])
    assert code == 0 and stdout.splitlines()[0].split() == ["family", "cached", "estimate", "(s)"]
    assert len(stdout.splitlines()) == 1 + len(FAMILIES)
    with pytest.raises(ValueError, match="unknown kernel family 'sequentail'; choose from binned_scan"):
        warmup(["sequentail"], file=None)
    _one_line_error(capsys, ["warmup", "--families", "nope"], "unknown kernel family 'nope'")


def test_warmup_runs_each_familys_calls_and_reports_them(monkeypatch):
    module = importlib.import_module("mdsd_ot.warmup")  # (mdsd_ot.warmup is the function)

    ran = []
    monkeypatch.setattr(module, "_calls", lambda name: [lambda: ran.append(name)] * 2)
    out = io.StringIO()
    results = module.warmup("sequential,plan", file=out)
    assert ran == ["sequential"] * 2 + ["plan"] * 2
    assert [r.family for r in results] == ["sequential", "plan"]
    assert all(r.seconds >= 0 and r.cpu_seconds >= 0 for r in results)
    lines = out.getvalue().splitlines()
    assert lines[1].startswith("[1/2] sequential: the sequential-sampling kernels")
    assert lines[-1].startswith("mdsd_ot warmup: done in")
    assert "MDSD_OT_QUIET" not in os.environ or os.environ["MDSD_OT_QUIET"]  # restored

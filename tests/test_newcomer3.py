"""A newcomer's first hour, round 3 (issue 38): first calls, inputs as they come, --device, and the
minor items. Every CLI case checks the exit status and that the message is one line."""

from __future__ import annotations

import importlib.util
import io
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from mdsd_ot import optimal_acceptance
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


# ----------------------------------------------------------------- 2. inputs as they come


def test_sum_tolerance_is_the_rounding_bound_of_a_low_precision_softmax():
    """The bound of docs/math.md#sums-of-low-precision-input, recomputed in exact rational arithmetic."""
    from fractions import Fraction as F

    from mdsd_ot._config import SUM_TOL
    from mdsd_ot._validate import sum_tolerance

    u32 = F(1, 2**24)
    for dtype, u_d, t_d in (("float32", F(0), F(0)), ("bfloat16", F(1, 2**8), F(1, 2**133))):
        for V in (1_000, 152_064, 262_144):
            gamma = (V - 1) * u32 / (1 - (V - 1) * u32)
            exact = (1 + u32) ** 2 * (1 + u_d) / (1 - gamma) - 1 + V * (F(1, 2**149) + t_d) / 2
            exact += 2 * V * F(1, 2**53)
            assert math.isclose(sum_tolerance(dtype, V), float(exact), rel_tol=1e-12)
    assert sum_tolerance("float64", 152_064) == sum_tolerance(np.float64, 10) == SUM_TOL
    assert sum_tolerance("float32", 4) == SUM_TOL  # never below the float64 tolerance


def test_a_float32_softmax_with_the_worst_summation_is_accepted_and_renormalised():
    """A peaked float32 softmax (one e_i = 1, the others 1.5 * 2^-24: every addition rounds the
    running sum up by half an ulp) with its sum accumulated left to right in float32 at V = 262,144
    is off one by 7.6e-3, about half the bound: accepted, renormalised in float64, said so; alpha* for
    n = 1 is sum(min(p, q)) of the renormalised float64 arrays (closed form, numpy). Twice as far off:
    refused."""
    from mdsd_ot._validate import sum_tolerance

    V = 262_144
    e = np.full(V, 1.5 * 2.0**-24, dtype=np.float32)
    e[0] = 1.0
    p = (e / np.add.accumulate(e, dtype=np.float32)[-1]).astype(np.float32)
    q = np.random.default_rng(5).dirichlet(np.ones(V)).astype(np.float32)
    off = float(p.astype(np.float64).sum()) - 1.0
    assert 0.4 * sum_tolerance("float32", V) < -off < sum_tolerance("float32", V)
    r = optimal_acceptance(p, q, 1)
    p64, q64 = p.astype(np.float64), q.astype(np.float64)
    p64, q64 = p64 / p64.sum(), q64 / q64.sum()
    assert abs(r.value - float(np.minimum(p64, q64).sum())) <= 1e-12
    assert "input renormalised in float64: p (float32) summed to 1 - 0.0076" in r.message
    assert "exact for the renormalised float64 distributions" in r.message
    assert "renormalised" not in optimal_acceptance(p64, q64, 1).message
    far = p.copy()
    far[0] -= np.float32(2.5 * sum_tolerance("float32", V))
    with pytest.raises(ValueError, match="rounding bound of a float32 softmax of 262,144 tokens"):
        optimal_acceptance(far, q, 1)


@pytest.mark.skipif(not HAS_TORCH, reason="needs torch")
def test_torch_float32_and_bfloat16_softmax_are_accepted():
    import torch

    from mdsd_ot.backends import torch as tb

    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 152_064, generator=gen) * 3
    for dtype in (torch.float32, torch.bfloat16):
        p, q = torch.softmax(logits.to(dtype), -1)
        p64, q64 = p.double().numpy(), q.double().numpy()
        expected = float(np.minimum(p64 / p64.sum(), q64 / q64.sum()).sum())  # n = 1: sum min(p, q)
        r = optimal_acceptance(p, q, 1)
        assert abs(r.value - expected) <= 1e-12 and f"p ({str(dtype)[6:]}) summed to 1" in r.message
        assert abs(float(tb.sorted_prefix_bound(p, q, 1).value) - expected) <= 1e-12
    wrong = torch.softmax(logits[0], -1)
    wrong[0] += 0.05  # 5% extra mass: not a softmax
    with pytest.raises(
        ValueError, match=r"rounding bound of a float32 softmax of 152,064 tokens.*to_distribution"
    ):
        optimal_acceptance(wrong, q, 1)


def test_refusals_name_to_distribution_and_the_cli_flags(capsys):
    p, q = np.array([0.5, 0.3, 0.1]), np.array([0.5, 0.3, 0.2])
    with pytest.raises(ValueError) as exc:
        optimal_acceptance(p, q, 2)
    assert "mdsd_ot.to_distribution(logits" in str(exc.value) and "pass normalize=True" in str(exc.value)
    line = _one_line_error(
        capsys, ["bound", "--p", "0.5,0.3,0.1", "--q", "0.5,0.3,0.2"], "--logits", "--normalize"
    )
    assert "normalize=True" not in line and "to_distribution" not in line
    line = _one_line_error(capsys, ["compare", "--p", "5,3,1", "--q", "0.5,0.3,0.2"], "--normalize")
    assert "normalize=True" not in line


# ---------------------------------------------------------------------------------- 3. --device


@pytest.mark.skipif(not HAS_TORCH, reason="needs torch")
@pytest.mark.parametrize("command", ["study", "decode"])
def test_an_unusable_device_is_refused_before_anything_is_loaded_or_written(tmp_path, capsys, command):
    import torch

    from mdsd_ot.runs.inputs import check_device

    out = tmp_path / "out"
    argv = [command, "--target", tmp_path / "t", "--draft", tmp_path / "d", "--prompts", tmp_path / "p.jsonl"]
    _one_line_error(capsys, argv + ["--device", "cdua", "--out", out], "--device 'cdua' is not a device")
    assert not out.exists()
    if not torch.cuda.is_available():
        _one_line_error(capsys, argv + ["--device", "cuda", "--out", out], "--device cuda:", "--device cpu")
        assert not out.exists()
        with pytest.raises(ValueError, match="--device cuda"):
            check_device("cuda")
        assert str(check_device("cuda:1", available=False)) == "cuda:1"  # the name alone (Ray workers)
    assert check_device("auto") is None and str(check_device("cpu")) == "cpu"


# ------------------------------------------------------------------------------- 6. minor items


def test_no_progress_silences_the_model_loading_bars(monkeypatch):
    """--no-progress: the hub's variable for transformers imported later, and the switches of
    transformers and huggingface_hub when imported already (stand-ins here: no global state changes)."""
    from types import SimpleNamespace

    from mdsd_ot.commands.study import check_device_option

    said = []
    fake_tf = SimpleNamespace(
        utils=SimpleNamespace(logging=SimpleNamespace(disable_progress_bar=lambda: said.append("tf")))
    )
    fake_hub = SimpleNamespace(utils=SimpleNamespace(disable_progress_bars=lambda: said.append("hub")))
    monkeypatch.setitem(sys.modules, "transformers", fake_tf)
    monkeypatch.setitem(sys.modules, "huggingface_hub", fake_hub)
    monkeypatch.delenv("HF_HUB_DISABLE_PROGRESS_BARS", raising=False)

    class Args:
        no_progress, ray, device = True, "", "auto"

    check_device_option(Args(), "mdsd-ot study")
    assert os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] == "1" and said == ["tf", "hub"]


def test_results_files_follow_the_umask(tmp_path):
    from mdsd_ot import _store

    old = os.umask(0o022)
    try:
        _store.atomic_write(tmp_path / "summary.csv", "a,b\n")
        os.umask(0o077)
        _store.atomic_write(tmp_path / "private.csv", "a,b\n")
    finally:
        os.umask(old)
    if os.name == "posix":
        assert (tmp_path / "summary.csv").stat().st_mode & 0o777 == 0o644
        assert (tmp_path / "private.csv").stat().st_mode & 0o777 == 0o600
    assert not [p for p in tmp_path.iterdir() if ".tmp-" in p.name]


def test_trees_names_the_shape_and_the_one_step_optimal(capsys):
    code, out, err = _cli(capsys, ["trees", "--vocab", "2", "--shape", "2,1"])
    assert code == 0, err
    assert "tree 2x2 (branching 2,1: 2 chains of 2 draft tokens), with_replacement drafts" in out
    assert "optimal (one-step)  node-wise" in out
    assert "not the tree optimum (the lp row)" in out
    _one_line_error(
        capsys, ["trees", "--shape", "2,1", "--sampling", "hub"], "has 1 per node at depth 2; use 2,2"
    )
    _one_line_error(capsys, ["trees", "--laws", "nosuch.json"], "error: no such file: nosuch.json")


def test_decode_tables_label_the_one_step_optimal_and_trees_need_spaces(capsys, tmp_path):
    from mdsd_ot.decode.report import format_table

    row = dict(T=1.0, tree="2x3", scheme="with_replacement", mean=2.0, ci95=0.1, calls=3, prompts=2)
    text = format_table([dict(row, method="exact:optimal"), dict(row, method="exact:rrs")])
    assert "| exact:optimal (one-step) |" in text and "| exact:rrs |" in text
    argv = ["decode", "--target", "a", "--draft", "b", "--device", "cpu", "--out", tmp_path / "d"]
    _one_line_error(capsys, argv + ["--trees", "2x3,4,2"], "several trees are separated by spaces")


def test_a_slow_first_prompt_says_what_the_rest_costs(monkeypatch, capsys):
    from mdsd_ot.runs import runner

    assert runner.cost_note(19.0, 100) == "" and runner.cost_note(75.0, 0) == ""
    assert "the 3 left take about 4 min" in runner.cost_note(75.0, 3)

    class Folder:
        def append(self, record, lines):
            pass

    monkeypatch.setattr(runner, "SLOW_FIRST_RECORD_S", 0.0)
    runner.run_records(Folder(), ["a", "b", "c"], lambda item: (item, []))
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "the first prompt took 0 s; at this rate the 2 left" in err[0]


def test_audit_says_what_bias_it_can_detect():
    """detectable_tv against an independent check: Pearson's test simulated on N multinomial draws
    from the hardest bias of that TV (mass moved between two halves of p) flags it in ~80% of runs."""
    from scipy.stats import chi2

    from mdsd_ot.audit import POWER, _detectable_tv, audit, registry_verify

    N, level = 50_000.0, 0.01
    p = np.array([0.5, 0.3, 0.2])
    delta = _detectable_tv(N, len(p) - 1, level)
    law = p + delta * np.array([1.0, -0.6, -0.4])  # TV delta, chi^2(law, p) = 4 delta^2
    counts = np.random.default_rng(0).multinomial(int(N), law, size=4000)
    stat = ((counts - N * p) ** 2 / (N * p)).sum(axis=1)
    power = float(np.mean(stat > chi2.isf(level, len(p) - 1)))
    assert abs(power - POWER) < 0.03, power
    r = audit(registry_verify("rrs"), [0.5, 0.3, 0.2, 0.0], [0.1, 0.2, 0.3, 0.4], 2, trials=2_000, seed=1)
    assert r.lossless and r.detectable_tv > 0.03  # 2,000 trials: only large biases are seen
    assert f"a bias of TV >= {r.detectable_tv:.2g} is flagged" in str(r)
    assert r.to_dict()["detectable_tv"] == r.detectable_tv


def test_schemes_print_readably():
    from mdsd_ot import SCHEMES

    text = repr(SCHEMES)
    assert "<draft scheme 'greedy': the n-1 most likely tokens" in text
    assert "function" not in text and len(text) < 1000


def test_demo_results_inside_the_clone_stay_out_of_git():
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    got = subprocess.run(
        ["git", "check-ignore", "-q", "examples/cli/demo_out/demo_summary.md"], cwd=ROOT, capture_output=True
    )
    assert got.returncode == 0  # ignored: examples/cli/.gitignore
    tracked = subprocess.run(["git", "check-ignore", "-q", "examples/cli/pair.json"], cwd=ROOT)
    assert tracked.returncode == 1

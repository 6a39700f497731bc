import gc
import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

# The cyclic garbage collector and collection: importing the test modules (torch, transformers,
# hypothesis, ...) makes some 600,000 long-lived objects per process, and every full collection
# walks them all again (about 3 s of each lane process's collection phase, 3 s of its tests and
# 2 s of its exit). Collect rarely while importing, then freeze what the imports made (gc.freeze:
# those objects are kept and not walked again; objects the tests make are collected as usual).
gc.set_threshold(100_000, 50, 100)


def pytest_collection_finish(session):
    gc.freeze()
    gc.set_threshold(700, 10, 10)  # CPython's defaults for the tests themselves


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    gc.freeze()  # the interpreter's exit then skips a last walk over everything still alive


#: Test files whose fast-lane tests build tiny Hugging Face models (through tests/tiny_models.py or
#: tests/labs.py, or in a README/docs block): the first such model in a process imports transformers'
#: model code (about 2.5 s), so the lane runs these files in one process (pytest_xdist_make_scheduler).
_MODEL_FILES = {
    "test_decode.py", "test_doctests.py", "test_newcomer.py", "test_scale_decode.py", "test_study.py",
    "test_tree_optimum.py", "test_tree_race.py",
}  # fmt: skip
#: Files that build models only in full-lane tests (the Ray scenarios, the storage faults: 3 of the
#: full lane's 11 minutes of test time): kept apart, each its own unit, so the two processes stay even.
_SLOW_MODEL_FILES = {"test_scale.py", "test_study_store.py"}
#: The units handed out first, after the model unit: the files with the most full-lane test time
#: (about 110, 75 and 70 s warm). xdist hands out units by their number of tests, which sent
#: test_scale.py's few long Ray scenarios last and left one process idle for 45 s at the end.
_LONG_FIRST = ("test_scale.py", "test_domain.py", "test_study_store.py")


@pytest.hookimpl(optionalhook=True)  # a pytest-xdist hook: unknown (and unused) without it
def pytest_xdist_make_scheduler(config, log):
    """``--dist loadfile`` with the files of :data:`_MODEL_FILES` as one unit: each test file runs in
    one process (its module fixtures, a Ray cluster or a reference run, are set up once), and so do
    the model files together. (xdist's own ``loadgroup`` cannot do it under pytest 9, whose node ids
    ignore the group suffix xdist adds.)"""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class FilesAndModels(LoadScopeScheduling):
        def _split_scope(self, nodeid):
            file = nodeid.split("::", 1)[0]
            return "tiny models" if file.rpartition("/")[2] in _MODEL_FILES else file

        def _assign_work_unit(self, node):
            if not getattr(self, "_ordered", False):  # once, on the queue the first assignment sees
                self._ordered = True
                first = ["tiny models"] + [s for s in self.workqueue if s.rpartition("/")[2] in _LONG_FIRST]
                for scope in reversed([s for s in first if s in self.workqueue]):
                    self.workqueue.move_to_end(scope, last=False)
            super()._assign_work_unit(node)

    return FilesAndModels(config, log)


SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


def load_script(name):
    """The module ``scripts/<name>.py``, loaded from its file (the scripts folder is not a package;
    it goes on ``sys.path`` first, for the scripts' imports of each other)."""
    if str(SCRIPTS) not in sys.path:
        sys.path.insert(0, str(SCRIPTS))
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def random_pair(rng, V, *, zeros=True):
    """A random (p, q) pair on V tokens with the awkward cases the solvers must handle."""
    kind = rng.integers(8)
    conc = 10 ** rng.uniform(-1, 1)
    p = rng.dirichlet(np.full(V, conc))
    q = rng.dirichlet(np.full(V, conc))
    if kind == 0:
        q = p.copy()  # p == q
    elif kind == 1 and V >= 2:  # disjoint supports
        cut = int(rng.integers(1, V))
        p[cut:] = 0.0
        q[:cut] = 0.0
    elif kind == 2:  # one-hot target
        p = np.zeros(V)
        p[rng.integers(V)] = 1.0
    elif kind == 3:  # ties
        p = np.round(p * 4) + 1.0
        q = np.round(q * 4) + 1.0
    elif kind == 4:  # near one-hot draft
        q = np.full(V, 1e-13)
        q[rng.integers(V)] = 1.0
    if zeros and kind >= 5:
        p[rng.random(V) < 0.25] = 0.0
        q[rng.random(V) < 0.25] = 0.0
    if p.sum() == 0:
        p[0] = 1.0
    if q.sum() == 0:
        q[-1] = 1.0
    return p / p.sum(), q / q.sum()


def _back_to_one_torch_thread():
    torch = sys.modules.get("torch")
    if torch is None or torch.get_num_threads() == 1:
        return
    torch.set_num_threads(1)
    inputs = sys.modules.get("mdsd_ot.runs.inputs")
    if inputs is not None:
        # the models a study or decode command loaded (and set the threads for) are loaded again by
        # the next such command, which then sets its threads again: every in-process run computes
        # with the threads its own load sets, as in a fresh process (rows depend on the thread count)
        inputs._MODELS.clear()


@pytest.fixture(autouse=True)
def _one_torch_thread():
    """torch on one thread in every test (as tests/test_decode.py sets it at import): the lane runs one
    process per core, and a torch op on two threads waits for a core the other process holds (5-15 ms
    an op instead of microseconds). Set again after each test, since the study and decode commands
    (``load_models``) set torch's threads to ``min(2, cpus)`` for the rest of the process."""
    _back_to_one_torch_thread()
    yield
    _back_to_one_torch_thread()


@pytest.fixture
def rng():
    return np.random.default_rng(20261129)


@pytest.fixture
def no_plots(monkeypatch):
    """Study and decode reports without their PNGs (0.3-0.6 s a report, matplotlib's layout and
    rendering): for the tests about rows, merges, resumes and values. The plots themselves are
    checked in tests/test_decode.py::test_rows_exact_values_and_summary,
    tests/test_study.py::test_run_study_values_match_independent_oracle, tests/test_demo.py and
    tests/test_report.py, and drawn in the command-line runs."""
    from mdsd_ot.decode import report as decode_report
    from mdsd_ot.study import report as study_report

    monkeypatch.setattr(decode_report, "plot_summary", lambda table, out, **kw: {})
    monkeypatch.setattr(study_report, "plot_summary", lambda table, out, title=None: {})


@pytest.fixture(scope="module")
def cluster():
    """One local Ray cluster (2 CPUs) per test module that asks for it (tests/test_scale*.py):
    starting one takes seconds. Skips the test when ray is not installed."""
    ray = pytest.importorskip("ray")
    if ray.is_initialized():
        ray.shutdown()
    ray.init(num_cpus=2, include_dashboard=False, object_store_memory=100 * 1024**2, log_to_driver=False)
    yield ray
    ray.shutdown()


@pytest.fixture(scope="session")
def warm_jit():
    """Load (or compile) the numba kernels a big-vocabulary sweep uses, once per session, so that
    their first-call cost is this fixture's setup in ``--durations`` rather than the time of whichever
    test happens to run first. It makes the calls those sweeps make anyway (p == q and one p != q pair
    at V = 262,144, each registered scheme at the n its sweeps use): no kernel the sweeps would not
    compile, so the lane's total time does not grow."""
    import time

    import mdsd_ot

    t0 = time.perf_counter()
    rng = np.random.default_rng(7)
    V = 262_144
    p = rng.dirichlet(np.full(V, 0.1))
    for name, scheme in mdsd_ot.SCHEMES.items():
        if not scheme.q_dominates:
            continue
        ns = [scheme.fixed_n] if scheme.fixed_n else [1, 2, 3]
        if name == "conditional_poisson":
            ns = [1, 2]
        for n in ns:
            mdsd_ot.optimal_acceptance(p, p.copy(), n, sampling=name)
    return time.perf_counter() - t0

"""How the lane schedules the test files (tests/conftest.py): one process per file, the files whose
fast tests build tiny models together in one; the lists of those files are checked against the files."""

import ast
import re
from pathlib import Path

import conftest
import pytest
from conftest import _MODEL_FILES, _SLOW_MODEL_FILES

TESTS = Path(__file__).resolve().parent

#: what building a tiny model looks like in a test file: the helpers, the labs, the CLI command
_BUILDS_MODELS = re.compile(r"\btiny_models\b|\btiny_lm\b|\bfrom labs import\b|\btiny-models\b")


def test_the_model_files_are_the_files_that_build_models():
    files = [f for f in TESTS.glob("test_*.py") if f.name != Path(__file__).name]  # not this file's pattern
    builds = {f.name for f in files if _BUILDS_MODELS.search(f.read_text("utf-8"))}
    assert builds == _MODEL_FILES | _SLOW_MODEL_FILES and not _MODEL_FILES & _SLOW_MODEL_FILES


#: the names through which a test builds models: the labs' fixtures and helpers, the tiny models
_MODEL_NAMES = {"lab", "shards", "Lab", "save_models", "_save_models", "save_tiny_lm", "tiny_lm", "tiny_pair"}


def _is_slow(node) -> bool:
    return any("slow" in ast.unparse(d) for d in node.decorator_list)


@pytest.mark.parametrize("name", sorted(_SLOW_MODEL_FILES))
def test_the_files_kept_apart_build_models_only_in_the_full_lane(name):
    """Their tests that are not marked slow (the whole file is, or the test is) name no lab, no
    tiny model and no helper that saves one."""
    tree = ast.parse((TESTS / name).read_text("utf-8"))
    module_slow = any(
        isinstance(n, ast.Assign)
        and ast.unparse(n.targets[0]) == "pytestmark"
        and "slow" in ast.unparse(n.value)
        for n in tree.body
    )
    fast = [
        n for n in tree.body
        if isinstance(n, ast.FunctionDef) and n.name.startswith("test_") and not (module_slow or _is_slow(n))
    ]  # fmt: skip
    for test in fast:
        names = {a.arg for a in test.args.args} | {n.id for n in ast.walk(test) if isinstance(n, ast.Name)}
        assert not names & _MODEL_NAMES, (name, test.name, names & _MODEL_NAMES)
    assert module_slow or fast  # the check saw the file's fast tests


class _Config:
    def getvalue(self, name):
        return "loadfile"


def test_the_scheduler_keeps_each_file_and_the_model_files_together():
    xdist = pytest.importorskip("xdist.scheduler")
    sched = conftest.pytest_xdist_make_scheduler(_Config(), log=None)
    assert isinstance(sched, xdist.LoadScopeScheduling)
    scope = sched._split_scope
    assert scope("tests/test_decode.py::test_a[x]") == scope("tests/test_study.py::test_b")
    assert scope("tests/test_api.py::test_a") == scope("tests/test_api.py::test_b[1]")
    assert scope("tests/test_api.py::test_a") != scope("tests/test_cli.py::test_a")
    assert scope("tests/test_api.py::test_a") != scope("tests/test_decode.py::test_a")
    assert scope("tests/test_scale.py::test_a") != scope("tests/test_decode.py::test_a")


def test_the_model_unit_and_the_longest_files_go_out_first(monkeypatch):
    from collections import OrderedDict

    xdist = pytest.importorskip("xdist.scheduler")
    seen = []
    monkeypatch.setattr(
        xdist.LoadScopeScheduling, "_assign_work_unit", lambda self, node: seen.append(list(self.workqueue))
    )
    sched = conftest.pytest_xdist_make_scheduler(_Config(), log=None)
    scopes = [
        "tests/test_api.py",
        "tests/test_domain.py",
        "tiny models",
        "tests/test_scale.py",
        "tests/test_cli.py",
    ]
    sched.workqueue = OrderedDict((scope, {}) for scope in scopes)
    sched._assign_work_unit(None)
    sched._assign_work_unit(None)
    assert seen[0] == [
        "tiny models",
        "tests/test_domain.py",
        "tests/test_scale.py",
        "tests/test_api.py",
        "tests/test_cli.py",
    ]
    assert seen[1] == seen[0]  # reordered once, not at every assignment

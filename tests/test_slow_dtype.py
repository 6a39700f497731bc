"""The CPU half-precision probe: a measured slowdown, and a warning when it is large."""

import warnings

import pytest

torch = pytest.importorskip("torch")

from mdsd_ot.backends import torch as tb  # noqa: E402
from mdsd_ot.runs import inputs  # noqa: E402


def test_float32_against_itself_is_about_one():
    # the same matmul twice: the ratio is 1 up to timing noise (a loose band: shared machines)
    assert 0.1 < tb.cpu_matmul_slowdown("float32", size=256) < 10


@pytest.mark.parametrize("slow, warns", [(36.0, True), (1.2, False), (0.4, False)])
def test_warning_only_when_far_slower(monkeypatch, slow, warns):
    monkeypatch.setattr(tb, "cpu_matmul_slowdown", lambda dtype: slow)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        inputs.warn_if_slow_dtype("bfloat16")
    messages = [str(w.message) for w in seen if issubclass(w.category, RuntimeWarning)]
    assert bool(messages) == warns
    if warns:
        assert "36x slower than float32" in messages[0] and "--dtype float32" in messages[0]

"""The formulas that schemes and verifiers own read only what the engines' interfaces name
(:mod:`mdsd_ot.interfaces`): each is run on a view of the engine's tables that exposes nothing else,
and must give the values it gives on the tables themselves."""

from __future__ import annotations

import numpy as np
import pytest

from mdsd_ot import VERIFIERS
from mdsd_ot.drafts.greedy import plan_bounds
from mdsd_ot.interfaces import BatchView, PlanView, members
from mdsd_ot.plan import _Plan

NS = (1, 2, 3, 4)


class _Only:
    """``obj`` seen through ``names`` alone: any other attribute read raises AttributeError."""

    def __init__(self, obj, names):
        object.__setattr__(self, "_obj", obj)
        object.__setattr__(self, "_names", names)

    def __getattr__(self, name):
        if name not in self._names:
            raise AttributeError(f"{name!r} is read but not named by the interface")
        return getattr(self._obj, name)


def _pair(rng, V=400):
    p = rng.dirichlet(np.full(V, 0.3))
    q = 0.6 * p + 0.4 * rng.dirichlet(np.full(V, 0.3))
    return p / p.sum(), q / q.sum()


def _same(a, b):
    if isinstance(a, Exception) or isinstance(b, Exception):
        return type(a) is type(b) and str(a) == str(b)
    return np.array_equal(np.asarray(a, dtype=float), np.asarray(b, dtype=float))


def test_members_name_the_interfaces():
    assert {"p", "q", "tables", "scans", "top", "greedy", "naive", "held_top"} <= members(PlanView)
    assert {"pt", "qt", "rows", "t", "greedy"} <= members(BatchView)


def test_plan_formulas_read_only_the_plan_view(rng):
    p, q = _pair(rng)
    owners = [v for v in VERIFIERS.values() if v.plan is not None]
    assert owners  # the registry gives plan formulas
    names = members(PlanView)
    for v in owners:
        ns = [n for n in NS if v.plan.covers(n)]
        need = {"greedy": set(), "naive": set()}
        for n in ns:
            for key, value in v.plan.needs(n).items():
                if key in ("greedy", "naive"):  # the n of those passes
                    need[key].add(value)
                else:  # a flag
                    need[key] = value
        real, seen = _Plan(p, q, **need), _Plan(p, q, **need)
        try:
            assert isinstance(real, PlanView)
            want = v.plan.evaluate(real, ns)
            got = v.plan.evaluate(_Only(seen, names), ns)
            assert len(got) == len(ns)
            assert all(_same(a, b) for a, b in zip(want, got)), v.name
        finally:
            real.close()
            seen.close()
    real, seen = _Plan(p, q, greedy=NS), _Plan(p, q, greedy=NS)
    try:
        assert plan_bounds(_Only(seen, names), NS) == plan_bounds(real, NS)
    finally:
        real.close()
        seen.close()


def test_batch_formulas_read_only_the_batch_view(rng):
    torch = pytest.importorskip("torch")
    from mdsd_ot.backends.torch import _Batch

    pairs = [_pair(rng, 300) for _ in range(3)]
    pt = torch.tensor(np.array([a for a, _ in pairs]), dtype=torch.float64)
    qt = torch.tensor(np.array([b for _, b in pairs]), dtype=torch.float64)
    owners = [v for v in VERIFIERS.values() if v.batch is not None]
    assert owners
    names = members(BatchView)
    for v in owners:
        ns = [n for n in NS if v.batch.covers(n)]
        greedy_ns = [g for n in ns for k, g in v.batch.needs(n).items() if k == "greedy"]
        real, seen = _Batch(pt, qt, greedy_ns), _Batch(pt, qt, greedy_ns)
        assert isinstance(real, BatchView)
        want = v.batch.evaluate(real, ns)
        got = v.batch.evaluate(_Only(seen, names), ns)
        assert set(got) == set(ns) == set(want)
        for n in ns:
            assert torch.equal(torch.as_tensor(got[n]), torch.as_tensor(want[n])), (v.name, n)

import numpy as np
import pytest


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


@pytest.fixture
def rng():
    return np.random.default_rng(20261129)


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

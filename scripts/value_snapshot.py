"""Snapshot every engine's values on seeded inputs, and compare two snapshots bit for bit.

For refactors and speed changes that must not move a value ("bit-identical or within 1e-15"):

    python scripts/value_snapshot.py capture before.pkl     # on the old code (e.g. a `git archive` copy
                                                            # first on PYTHONPATH)
    python scripts/value_snapshot.py capture after.pkl      # on the new code
    python scripts/value_snapshot.py compare before.pkl after.pkl

``capture`` records, on 120 seeded pairs (LLM-like at T = 0.05-2, Dirichlet(0.05), top-k targets with
zeros, log-uniform masses down to 1e-130; V = 6 to 40,000): ``optimal_acceptance`` (value, success,
a checksum of the subset) for every scheme and n = 1, 2, 3, 4, 8, ``optimal_acceptance_batch``,
``verifier_acceptance`` (exact) of every verifier, the torch backend's ``sorted_prefix_bounds``,
``greedy_bounds`` and ``evaluate_batch``, ``plan.evaluate_position`` and ``rows.evaluate_rows`` with
both backends. An input a function refuses is recorded with its exception type and message, so
messages are compared too. ``compare`` prints every differing record and the largest difference, and
exits 1 when any record differs. Needs torch.

It also records ``optimal_acceptance`` on the hard input classes of ``tests/hard_inputs.py`` (tiny and
subnormal draft blocks, one-hot and near one-hot targets, tied drafts, ...; V = 500 and 3,000) for
every scheme and n = 2, 3, 4, 8, 16, 64: the inputs the worst-case speed work changed paths for.
"""

from __future__ import annotations

import argparse
import math
import pickle
import sys
import zlib

import numpy as np

HARD_NS = (2, 3, 4, 8, 16, 64)
HARD_SIZES = (500, 3000)


def hard_pairs():
    """``(name, V, n, p, q)`` for every hard input class of ``tests/hard_inputs.py``."""
    from pathlib import Path

    tests = str(Path(__file__).resolve().parent.parent / "tests")
    if tests not in sys.path:
        sys.path.insert(0, tests)
    from hard_inputs import CLASSES, build

    for name in CLASSES:
        for V in HARD_SIZES:
            for n in HARD_NS:
                p, q = build(name, V, n, seed=V + n)
                yield name, V, n, p, q


def pairs():
    """The 120 seeded (seed, p, q) pairs."""
    out = []
    for s in range(120):
        rng = np.random.default_rng(s)
        kind = s % 6
        sizes = (6, 40, 300, 2000, 20000, 40000) if s < 60 else (8, 60, 500, 5000, 17000, 33000)
        V = sizes[s % 6]
        if kind in (0, 1, 2):
            z = rng.standard_normal(V) * rng.uniform(1, 4)
            t1, t2 = rng.choice([0.05, 0.3, 1.0, 2.0]), rng.choice([0.05, 0.3, 1.0, 2.0])
            p = np.exp((z - z.max()) / t1)
            d = z + 0.5 * rng.standard_normal(V)
            q = np.exp((d - d.max()) / t2)
        elif kind == 3:
            p = rng.dirichlet(np.full(V, 0.05))
            q = 0.7 * p + 0.3 * rng.dirichlet(np.full(V, 0.05))
        elif kind == 4:
            p = rng.random(V)
            p[rng.random(V) < 0.3] = 0
            q = rng.random(V)
            q[rng.random(V) < 0.2] = 0
            p[0], q[1], q[2] = 1.0, 1.0, 0.5
        else:
            p = np.exp(rng.uniform(-300, 0, V))
            q = np.exp(rng.uniform(-300, 0, V))
        out.append((s, p / p.sum(), q / q.sum()))
    return out


def plain(x):
    """Tensors, arrays, records and containers as plain Python values (floats kept exactly)."""
    import torch

    if isinstance(x, (torch.Tensor, np.ndarray)):
        return x.tolist()
    if isinstance(x, dict):
        return {k: plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [plain(v) for v in x]
    if hasattr(x, "__dataclass_fields__"):
        return {k: plain(getattr(x, k)) for k in x.__dataclass_fields__}
    if hasattr(x, "_asdict"):
        return plain(x._asdict())
    if isinstance(x, (float, int, str, bool)) or x is None:
        return x
    if hasattr(x, "__dict__"):
        return {k: plain(v) for k, v in vars(x).items()}
    return repr(x)


def record(f):
    try:
        return plain(f())
    except Exception as exc:  # a refusal is a value too: its type and message are compared
        return ("ERR", type(exc).__name__, str(exc))


def capture(path: str) -> None:
    import torch

    from mdsd_ot import SCHEMES, VERIFIERS, optimal_acceptance, optimal_acceptance_batch, plan
    from mdsd_ot import verifier_acceptance as va
    from mdsd_ot.backends import torch as tb
    from mdsd_ot.rows import evaluate_rows

    closed = ("naive", "rrs", "spectr", "greedy", "spechub", "rrs_without_replacement")
    res = {}
    for s, p, q in pairs():
        V = p.size
        for name in SCHEMES:
            for n in (1, 2, 3, 4, 8):

                def one():
                    r = optimal_acceptance(p, q, n, sampling=name)
                    return r.value, r.success, zlib.crc32(np.sort(np.asarray(r.subset)).tobytes())

                res[("oa", s, name, n)] = record(one)
                if V <= 5000 and s % 2 == 0:
                    P, Q = np.stack([p, q, 0.5 * (p + q)]), np.stack([q, p, q])
                    batch = optimal_acceptance_batch
                    res[("batch", s, name, n)] = record(lambda: batch(P, Q, n, sampling=name))
        for vname in VERIFIERS:
            for n in (1, 2, 3):
                if vname != "optimal" or V <= 300:
                    res[("va", s, vname, n)] = record(lambda: va(vname, p, q, n, method="exact").value)
        if V >= 40:
            ns = (1, 2, 3, 4)
            pt, qt = torch.from_numpy(np.stack([p, q])), torch.from_numpy(np.stack([q, p]))
            for samp in tb.SAMPLINGS:
                res[("tsp", s, samp)] = record(lambda: tb.sorted_prefix_bounds(pt, qt, (1, 2), samp))
            res[("tgb", s)] = record(lambda: tb.greedy_bounds(pt, qt, ns))
            res[("teb", s)] = record(lambda: tb.evaluate_batch(pt, qt, ns, schemes=tuple(SCHEMES)))
            verifiers = tuple(VERIFIERS) if V <= 300 else (*closed, "optimal")
            res[("pos", s)] = record(
                lambda: plan.evaluate_position(p, q, ns, schemes=tuple(SCHEMES), verifiers=verifiers)
            )
            for backend in ("numpy", "torch"):
                res[("rows", s, backend)] = record(
                    lambda: evaluate_rows(
                        np.stack([p, q]),
                        np.stack([q, p]),
                        ns=[1, 2, 3],
                        schemes=list(SCHEMES),
                        verifiers=list(closed),
                        backend=backend,
                    )
                )
    for name, V, n, p, q in hard_pairs():
        for scheme in SCHEMES:
            if scheme == "hub" and n != 2:
                continue

            def hard():
                r = optimal_acceptance(p, q, n, sampling=scheme)
                return r.value, r.success, zlib.crc32(np.sort(np.asarray(r.subset)).tobytes())

            res[("hard", name, V, scheme, n)] = record(hard)
    with open(path, "wb") as fh:
        pickle.dump(res, fh)
    refused = sum(1 for v in res.values() if isinstance(v, tuple) and v and v[0] == "ERR")
    print(f"{len(res)} records ({refused} refusals) -> {path}")


def compare(a_path: str, b_path: str) -> int:
    with open(a_path, "rb") as fa, open(b_path, "rb") as fb:
        a, b = pickle.load(fa), pickle.load(fb)
    if a.keys() != b.keys():
        print(f"different records: {sorted(set(a) ^ set(b))[:10]}")
        return 1
    worst, floats = 0.0, 0
    differing = []

    def walk(x, y, where):
        nonlocal worst, floats
        if isinstance(x, float) and isinstance(y, float):
            floats += 1
            if not (x == y or (math.isnan(x) and math.isnan(y))):
                worst = max(worst, abs(x - y))
                differing.append((where, x, y))
        elif type(x) is not type(y) or (isinstance(x, (dict, list)) and len(x) != len(y)):
            differing.append((where, x, y))
        elif isinstance(x, dict):
            if x.keys() != y.keys():
                differing.append((where, sorted(x), sorted(y)))
            else:
                for k in x:
                    walk(x[k], y[k], (*where, k))
        elif isinstance(x, (list, tuple)):
            for i, (u, v) in enumerate(zip(x, y)):
                walk(u, v, (*where, i))
        elif x != y:
            differing.append((where, x, y))

    records = 0
    for key in a:
        before = len(differing)
        walk(a[key], b[key], key)
        records += len(differing) > before
    for where, x, y in differing[:20]:
        print("differs:", where, repr(x)[:120], repr(y)[:120])
    print(f"{len(a)} records, {floats} floats: {len(differing)} differences in {records} records")
    print(f"largest difference {worst:.3g}")
    return 1 if differing else 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="what", required=True)
    sub.add_parser("capture").add_argument("out")
    c = sub.add_parser("compare")
    c.add_argument("before")
    c.add_argument("after")
    args = parser.parse_args(argv)
    if args.what == "capture":
        capture(args.out)
        return 0
    return compare(args.before, args.after)


if __name__ == "__main__":
    sys.exit(main())

"""Freed heap memory goes back to the system between the calls of long runs (mdsd_ot._memory)."""

import subprocess
import sys
import textwrap

import pytest

from mdsd_ot import _store
from mdsd_ot._memory import release_freed_memory

GLIBC = sys.platform.startswith("linux") and "glibc" in " ".join(__import__("platform").libc_ver())


@pytest.mark.skipif(not GLIBC, reason="malloc_trim is glibc's")
def test_release_returns_the_free_middle_of_the_heap():
    """In a fresh process: 200 arrays of 1 MiB from the heap (after a freed 24 MB block has raised
    glibc's mmap threshold) with long-lived 16 KB arrays between them; freeing the big ones leaves the
    resident set where it was (the holes are in the middle of the heap); the release gives them back."""
    code = textwrap.dedent(
        """
        import os, numpy as np
        from mdsd_ot._memory import release_freed_memory
        def rss():
            return int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6
        x = np.ones(3_000_000); del x
        big, small = [], []
        for i in range(200):
            big.append(np.ones(131_072)); small.append(np.ones(2_000))
        held = rss(); del big; freed = rss()
        print(held, freed, release_freed_memory(), rss())
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    held, freed, released, after = out.split()
    held, freed, after = float(held), float(freed), float(after)
    assert freed > held - 50  # free() alone leaves most of the 200 MB resident
    assert released == "True" and after < freed - 150, (held, freed, after)


def test_release_is_a_bool_everywhere():
    assert isinstance(release_freed_memory(), bool)


def test_decode_releases_after_every_call_and_record(tmp_path, monkeypatch):
    """``mdsd-ot decode`` gives memory back after each target call (union and single-cell runs) and
    each finished record (every run of the runs wing)."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from tiny_models import tiny_lm

    from mdsd_ot.decode import DecodeConfig, run_decode
    from mdsd_ot.decode import runner as decode_runner
    from mdsd_ot.runs import runner as runs_runner

    calls = {"call": 0, "record": 0}
    monkeypatch.setattr(
        decode_runner, "release_freed_memory", lambda: calls.__setitem__("call", calls["call"] + 1)
    )
    monkeypatch.setattr(
        runs_runner, "release_freed_memory", lambda: calls.__setitem__("record", calls["record"] + 1)
    )
    target, draft = tiny_lm(16, seed=1), tiny_lm(16, seed=2)
    records = [{"id": "r0", "prompt_ids": [1, 2]}]
    for union in (True, False):
        calls.update(call=0, record=0)
        config = DecodeConfig(
            trees=["1x2", "2x2"],
            schemes=["with_replacement"],
            temperatures=[0.9],
            max_new_tokens=4,
            union=union,
        ).validate()
        rows = _store.read_rows(
            run_decode(target, draft, records, tmp_path / f"u{union}", config, progress=False)
        )
        driving = sum(1 for r in rows if "emitted" in r)
        assert calls["call"] == driving >= 1 and calls["record"] == len(records), (union, calls, driving)

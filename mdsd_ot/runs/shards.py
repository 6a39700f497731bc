"""Shards of a run and its progress bar: which records a shard ``i/N`` holds, and how far it is.

A shard ``i/N`` keeps the records whose index (among the first ``max_records``) is ``i`` modulo
``N``, in the study and the decoder alike; :func:`worker_setup` is what a scheduler task (Ray, Slurm)
does before running one.
"""

from __future__ import annotations

import operator
import os
import sys
import time

__all__ = [
    "parse_shard",
    "shard_records",
    "progress",
    "worker_setup",
    "worker_threads",
    "quiet_model_loading",
]


def progress(total, desc, initial: int = 0):
    """A progress bar over prompts; ``initial`` prompts were finished by earlier runs.

    The bar starts at ``initial`` instead of counting those prompts as work done now, so that its
    rate and ETA measure this run only.

    Parameters
    ----------
    total : int
        Number of prompts of the run.
    desc : str
        The bar's label.
    initial : int
        Prompts already finished.

    Returns
    -------
    tqdm or a plain printer
        With ``update(k)``, ``set_postfix(**kw)`` and ``close()``.
    """
    try:
        from tqdm.auto import tqdm

        return tqdm(total=total, initial=initial, desc=desc, unit="prompt", dynamic_ncols=True)
    except ImportError:

        class _Plain:
            def __init__(self):
                self.i, self.t0 = initial, time.time()

            def update(self, k=1):
                self.i += k
                new, left = self.i - initial, total - self.i
                dt = time.time() - self.t0
                eta = f", ETA {left * dt / new:.0f} s" if new and left else ""
                print(f"{desc}: {self.i}/{total} prompts ({initial} from earlier runs){eta}", flush=True)

            def set_postfix(self, **kw):
                pass

            def close(self):
                pass

        return _Plain()


def parse_shard(shard) -> tuple[int, int]:
    """``(i, N)`` of a shard given as ``"i/N"``, a pair of integers, or None (``(0, 1)``: everything).

    Parameters
    ----------
    shard : str, pair of int or None
        ``ValueError`` unless ``0 <= i < N``.

    Returns
    -------
    tuple of (int, int)
    """
    if shard is None:
        return 0, 1
    if isinstance(shard, str):
        try:
            i, n = (int(x) for x in shard.split("/"))
        except ValueError:
            raise ValueError(f"shard must look like 'i/N' (e.g. 0/2), got {shard!r}") from None
    else:
        try:
            i, n = shard
        except (TypeError, ValueError):
            raise ValueError(f"shard must be 'i/N' or a pair of integers (i, N), got {shard!r}") from None
        # integers only: (0.5, 2) kept no prompt and recorded shard "0.5/2", which the next open
        # refused; True would pass as 1
        try:
            if isinstance(i, bool) or isinstance(n, bool):
                raise TypeError
            i, n = operator.index(i), operator.index(n)
        except TypeError:
            raise ValueError(f"shard i/N needs integers i and N, got {shard!r}") from None
    if not (n >= 1 and 0 <= i < n):
        raise ValueError(f"shard i/N needs 0 <= i < N, got {i}/{n}")
    return i, n


def shard_records(records, max_records, i_shard: int, n_shard: int) -> list:
    """``[(index, record)]`` of one shard: index ``i`` mod ``N`` among the first ``max_records``.

    Parameters
    ----------
    records : list
    max_records : int or None
        Keep only the first ``max_records`` (None or 0: all).
    i_shard, n_shard : int
        ``i`` and ``N``.

    Returns
    -------
    list of tuple
    """
    records = records[:max_records] if max_records else records
    return [(k, r) for k, r in enumerate(records) if k % n_shard == i_shard]


def worker_setup() -> None:
    """A scheduler task's quiet start: no per-worker "Loading weights" bars (the driver shows the
    one bar over all shards)."""
    quiet_model_loading()


def quiet_model_loading() -> None:
    """No progress bars from the hub's downloads and transformers' "Loading weights" in this process
    (``--no-progress``, scheduler tasks): ``HF_HUB_DISABLE_PROGRESS_BARS``, which transformers reads
    when it is imported, and its switch if it was imported already."""
    os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
    if "transformers" in sys.modules:
        sys.modules["transformers"].utils.logging.disable_progress_bar()
    if "huggingface_hub" in sys.modules:
        sys.modules["huggingface_hub"].utils.disable_progress_bars()


def worker_threads(threads):
    """``threads``, or with None the CPUs the scheduler gave the task (``OMP_NUM_THREADS``, which Ray
    sets to the task's ``num_cpus``), so that shards sharing a node do not oversubscribe it.

    Parameters
    ----------
    threads : int or None

    Returns
    -------
    int or None
    """
    if threads is None and os.environ.get("OMP_NUM_THREADS", "").isdigit():
        return max(1, int(os.environ["OMP_NUM_THREADS"]))
    return threads

"""Child side of the fault-injection tests (tests/test_study_store.py).

:func:`run_cli` runs ``mdsd-ot`` in a process forked from a warm fork server (torch, transformers
and mdsd_ot already imported, see ``_fault_preload``) and makes it fail on purpose:

* ``kill_at=k``: at the k-th call of ``mdsd_ot._store.checkpoint`` (a no-op hook called at every
  write step) send ``signal`` (default SIGKILL) to itself; when the step is about to write data
  (``rows``, ``done``) and ``torn`` is given, first write that fraction of the bytes, as a crash in
  the middle of a ``write`` would;
* ``kill_after=s``: SIGKILL after ``s`` seconds wherever the process is;
* ``pause_at=step``: at the first checkpoint named ``step``, set the ``ready`` event and wait for
  ``go`` (two-writer test);
* ``record=path``: write the list of checkpoint names reached to ``path`` (JSON);
* ``plots=False``: skip the two PNG plots (they cost half a second per run).

The exit status of the child is the command's (or -signal when killed).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading


def run_cli(argv, plan, stdout_path, stderr_path, events=None):
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for fd, path in ((1, stdout_path), (2, stderr_path)):
        f = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(f, fd)
        os.close(f)
    import faulthandler

    faulthandler.dump_traceback_later(30, exit=True)  # a hang shows where it is, then ends
    from mdsd_ot import _store, study
    from mdsd_ot.cli import main

    calls = []
    kill_at = plan.get("kill_at")
    sig = plan.get("signal", signal.SIGKILL)

    def hook(step, **context):
        calls.append(step)
        if kill_at == len(calls):
            data, fd = context.get("data"), context.get("fd")
            if plan.get("torn") is not None and data and fd is not None:
                cut = min(len(data) - 1, max(1, int(len(data) * plan["torn"])))
                os.write(fd, data[:cut])
            sys.stdout.flush()
            sys.stderr.flush()
            os.kill(os.getpid(), sig)
        if plan.get("pause_at") == step and events is not None and not events[0].is_set():
            events[0].set()
            events[1].wait(120)

    _store.checkpoint = hook
    if plan.get("plots") is False:
        study.report.plot_summary = lambda table, out, **kw: {}
    if plan.get("kill_after") is not None:
        t = threading.Timer(plan["kill_after"], os.kill, (os.getpid(), signal.SIGKILL))
        t.daemon = True
        t.start()
    code = 1
    try:
        code = main(list(argv))
    finally:
        if plan.get("record"):
            with open(plan["record"], "w") as fh:
                json.dump(calls, fh)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)

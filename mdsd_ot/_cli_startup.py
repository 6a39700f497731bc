"""Ctrl-C while the ``mdsd-ot`` command is starting.

Importing the package takes about a second (numba), and it happens before
:func:`mdsd_ot.cli.main`, which turns Ctrl-C into exit status 130 and one line, is running. When the
process is the ``mdsd-ot`` console script, importing this module (first thing in
``mdsd_ot/__init__.py``) installs a SIGINT handler doing the same; ``main`` puts the default handler
back as soon as it starts. Any other program importing ``mdsd_ot`` is left alone.
"""

from __future__ import annotations

import os
import signal
import sys
import threading


def _interrupted(signum, frame):
    sys.stderr.write("mdsd-ot: interrupted\n")
    raise SystemExit(130)


def _is_console_script() -> bool:
    name = os.path.basename(sys.argv[0]) if getattr(sys, "argv", None) else ""
    return name in ("mdsd-ot", "mdsd-ot.exe", "mdsd-ot-script.py")


def install() -> None:
    if (
        _is_console_script()
        and threading.current_thread() is threading.main_thread()
        and signal.getsignal(signal.SIGINT) is signal.default_int_handler
    ):
        signal.signal(signal.SIGINT, _interrupted)


def restore() -> None:
    """Back to Python's default (KeyboardInterrupt), if :func:`install` changed it."""
    if (
        threading.current_thread() is threading.main_thread()
        and signal.getsignal(signal.SIGINT) is _interrupted
    ):
        signal.signal(signal.SIGINT, signal.default_int_handler)


install()

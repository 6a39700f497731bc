"""The ``mdsd-ot`` command line: one sub-command per module of :mod:`mdsd_ot.commands`.

Each command module defines ``HELP`` (one line), ``add_arguments(parser)`` and ``run(args) -> int``.
Errors from bad input are reported as one line on stderr with exit status 2.
"""

from __future__ import annotations

import argparse
import importlib
import sys

#: sub-command name -> module under mdsd_ot.commands (imported when the parser is built; keep light)
COMMANDS = {
    "bound": "bound",
    "compare": "compare",
    "demo": "demo",
    "study": "study",
    "merge": "merge",
    "audit": "audit",
    "decode": "decode",
    "trees": "trees",
    "tiny-models": "tiny_models",
    "warmup": "warmup",
}


def _has_default(action) -> bool:
    """True for an option whose default is worth printing (not None, False, '' or suppressed)."""
    d = action.default
    return bool(action.option_strings) and not (
        d is None or d is False or d is argparse.SUPPRESS or (isinstance(d, str) and not d)
    )


class _HelpFormatter(argparse.HelpFormatter):
    """Appends ``(default: X)`` to every option whose help does not state its default already."""

    def _get_help_string(self, action):
        text = action.help or ""
        if not _has_default(action) or "default" in text:
            return text
        return f"{text} (default: %(default)s)".lstrip()


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line and exit status 2, as argparse does, without the usage block
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    from . import __version__

    parser = _Parser(
        prog="mdsd-ot",
        description="Optimal acceptance rates of multi-draft speculative decoding.",
        formatter_class=_HelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name, module_name in COMMANDS.items():
        module = importlib.import_module(f"mdsd_ot.commands.{module_name}")
        cmd = sub.add_parser(name, help=module.HELP, description=module.HELP, formatter_class=_HelpFormatter)
        module.add_arguments(cmd)
        for action in cmd._actions:  # options without any help text still show their default
            if action.help is None and _has_default(action):
                action.help = "(default: %(default)s)"
        cmd.set_defaults(_run=module.run)
    return parser


def _error_text(exc: BaseException) -> str:
    """One line for an input error: a missing file as ``no such file: <path>`` and a folder given for
    a file as ``<path> is a directory`` (as the commands' own checks say it), not Python's
    ``[Errno 2] No such file or directory: '<path>'``; anything else its message on one line."""
    filename = getattr(exc, "filename", None)
    if isinstance(exc, FileNotFoundError) and exc.errno is not None and filename is not None:
        return f"no such file: {filename}"
    if isinstance(exc, IsADirectoryError) and exc.errno is not None and filename is not None:
        return f"{filename} is a directory; give a file"
    return " ".join(str(exc).split()) or type(exc).__name__


def _os_error(exc: OSError) -> str:
    """One line naming the path: ``<path>: <reason>`` (disk full, permissions, bad paths)."""
    if exc.errno is not None and exc.strerror and exc.filename is not None:
        extra = f" -> {exc.filename2}" if getattr(exc, "filename2", None) else ""
        return f"{exc.filename}{extra}: {exc.strerror}"
    return " ".join(str(exc).split()) or type(exc).__name__


#: The library's messages name Python options; a command says its own flags instead, or, when it has
#: none for that, what to do: (text, with the flag, without it).
CLI_SPELLING = (
    (
        "convert them first: mdsd_ot.to_distribution(logits, temperature=1.0)",
        "logits",
        "pass --logits (and --temperature T)",
        "convert them with a softmax first",
    ),
    (
        "to rescale positive weights, pass normalize=True",
        "normalize",
        "to rescale positive weights, pass --normalize",
        "rescale them to sum to one",
    ),
)


def cli_spelling(message: str, args) -> str:
    """``message`` with the Python spellings of :data:`CLI_SPELLING` replaced by the flags of the
    command that ``args`` was parsed for (``normalize=True`` -> ``--normalize``)."""
    for text, dest, flag, other in CLI_SPELLING:
        if text in message:
            message = message.replace(text, flag if hasattr(args, dest) else other)
    return message


def _closed_pipe() -> int:
    """The reader of stdout went away (``mdsd-ot ... | head``): stop quietly, status 0.

    stdout is pointed at the null device so that the interpreter's final flush does not print
    "Exception ignored ... BrokenPipeError"."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # no real file descriptor (captured, redirected)
        pass
    return 0


#: Characters of the reports that a strict ASCII terminal cannot show, and what it shows instead.
ASCII_FALLBACK = {
    "\u00b1": "+/-",
    "\u2212": "-",
    "\u00d7": "x",
    "\u2014": "--",
    "\u2013": "-",
    "\u2026": "...",
}


def _ascii_fallback(exc):
    """Codec error handler of :func:`_safe_streams`: the spellings of ``ASCII_FALLBACK``, backslash
    escapes for anything else."""
    if not isinstance(exc, UnicodeEncodeError):
        raise exc
    bad = exc.object[exc.start : exc.end]
    return "".join(
        ASCII_FALLBACK.get(c) or c.encode("ascii", "backslashreplace").decode("ascii") for c in bad
    ), exc.end


def _safe_streams() -> None:
    """Under a locale whose encoding cannot write the reports (``LC_ALL=C`` with ``PYTHONUTF8=0``:
    ASCII), stdout and stderr substitute plain spellings (``+/-`` for the summary's ``±``) instead of
    raising ``UnicodeEncodeError`` after every record and file was written (a scheduler then saw a
    failed job). UTF-8 streams are left alone."""
    import codecs

    try:
        codecs.lookup_error("mdsd_ot_ascii")
    except LookupError:
        codecs.register_error("mdsd_ot_ascii", _ascii_fallback)
    for stream in (sys.stdout, sys.stderr):
        encoding = getattr(stream, "encoding", None)
        try:
            "".join(ASCII_FALLBACK).encode(encoding or "ascii")
        except (UnicodeEncodeError, LookupError):
            reconfigure = getattr(stream, "reconfigure", None)
            if callable(reconfigure):
                try:
                    reconfigure(errors="mdsd_ot_ascii")
                except (ValueError, OSError):  # a replaced or closed stream: leave it
                    pass


def main(argv=None) -> int:
    prog = "mdsd-ot"
    try:  # Ctrl-C at any moment, imports and argument parsing included: one line, status 130
        from . import _cli_startup

        _cli_startup.restore()
        _safe_streams()
        parser = build_parser()
        args, extra = parser.parse_known_args(argv)
        if extra:  # named by the sub-command that was given, with its --help
            subs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
            (subs.choices.get(getattr(args, "command", None)) or parser).error(
                f"unrecognized arguments: {' '.join(extra)}"
            )
        if getattr(args, "_run", None) is None:
            parser.print_help()
            return 2
        prog = f"mdsd-ot {args.command}"
        try:
            code = int(args._run(args) or 0)
            sys.stdout.flush()  # here, not at exit: a closed pipe (| head) is handled below
            return code
        except BrokenPipeError:
            return _closed_pipe()
        except (ValueError, TypeError, FileNotFoundError, IsADirectoryError, ImportError) as exc:
            message = cli_spelling(_error_text(exc), args)
            print(f"{prog}: error: {message}", file=sys.stderr)
            return 2
        except OSError as exc:
            print(f"{prog}: error: {_os_error(exc)}", file=sys.stderr)
            return 2
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

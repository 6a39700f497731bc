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
}


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line and exit status 2, as argparse does, without the usage block
        self.exit(2, f"mdsd-ot: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="mdsd-ot",
        description="Optimal acceptance rates of multi-draft speculative decoding.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name, module_name in COMMANDS.items():
        try:
            module = importlib.import_module(f"mdsd_ot.commands.{module_name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"mdsd_ot.commands.{module_name}":
                continue  # command not built yet
            raise
        cmd = sub.add_parser(name, help=module.HELP, description=module.HELP)
        module.add_arguments(cmd)
        cmd.set_defaults(_run=module.run)
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "_run", None) is None:
        parser.print_help()
        return 2
    try:
        return int(args._run(args) or 0)
    except (ValueError, TypeError, FileNotFoundError, IsADirectoryError, ImportError) as exc:
        message = " ".join(str(exc).split()) or type(exc).__name__
        print(f"mdsd-ot {args.command}: error: {message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"mdsd-ot {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

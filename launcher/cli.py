"""The `gantry` command line: argument parsing, subcommand discovery and error reporting.

Each module in ``launcher/commands`` defines ``register(subparsers)`` that adds one
subcommand whose handler is stored as ``func(args) -> int``. Errors surface as a single
``error: ...`` line: bad input exits 2, other failures exit 1.
"""

from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import sys
from collections.abc import Sequence
from typing import NoReturn

import launcher
import launcher.commands
from launcher.errors import EXIT_BAD_INPUT, GantryError

_LINE_BREAKS = {ord(c): repr(c)[1:-1] for c in "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"}
"""What str.splitlines() breaks on, written as escapes (\\n, \\x85, ...)."""


def one_line(message: str) -> str:
    """``message`` with any line break escaped: an error is always exactly one line, whatever
    value it quotes."""
    return message.translate(_LINE_BREAKS)


class GantryArgumentParser(argparse.ArgumentParser):
    """argparse with the project's one-line error format (exit 2)."""

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"error: {one_line(f'{self.prog}: {message}')} (see --help)\n")
        raise SystemExit(EXIT_BAD_INPUT)


def build_parser() -> argparse.ArgumentParser:
    parser = GantryArgumentParser(
        prog="gantry",
        description="Slurm-integrated launcher for pipeline-parallel GPU training.",
    )
    parser.add_argument("--version", action="version", version=f"gantry {launcher.__version__}")
    subparsers = parser.add_subparsers(
        dest="command", metavar="COMMAND", parser_class=GantryArgumentParser
    )
    for info in sorted(pkgutil.iter_modules(launcher.commands.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"launcher.commands.{info.name}")
        module.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    words = list(sys.argv[1:] if argv is None else argv)
    # Everything after the first "--" is a command for the job (e.g. `gantry submit job.yaml
    # -- python train.py`), kept verbatim; subcommands accept it with set_defaults(passthrough=[]).
    passthrough: list[str] | None = None
    if "--" in words:
        cut = words.index("--")
        words, passthrough = words[:cut], words[cut + 1 :]
    args = parser.parse_args(words)
    if passthrough is not None:
        if not hasattr(args, "passthrough"):
            parser.error("arguments after -- are not accepted by this command")
        args.passthrough = passthrough
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return EXIT_BAD_INPUT
    try:
        return int(func(args))
    except GantryError as err:
        sys.stderr.write(f"error: {one_line(str(err))}\n")
        return err.exit_status
    except KeyboardInterrupt:
        sys.stderr.write("error: interrupted\n")
        return 130
    except BrokenPipeError:
        # The reader went away (`gantry ... | head`): not an error of ours.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0

"""The `gantry` command line: argument parsing, subcommand discovery and error reporting.

Each module in ``launcher/commands`` defines ``register(subparsers)`` that adds one
subcommand whose handler is stored as ``func(args) -> int``. Errors surface as a single
``error: ...`` line: bad input exits 2, other failures exit 1.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

import launcher
import launcher.commands
from launcher.errors import EXIT_BAD_INPUT, GantryError

_LINE_BREAKS = {ord(c): repr(c)[1:-1] for c in "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"}
"""What str.splitlines() breaks on, written as escapes (\\n, \\x85, ...)."""


def one_line(message: str) -> str:
    """``message`` with any line break escaped: an error is always exactly one line, whatever
    value it quotes."""
    return message.translate(_LINE_BREAKS)


def terminal_columns() -> int:
    """The terminal's width as ``shutil.get_terminal_size`` finds it ($COLUMNS, else the
    terminal of stdout, else 80), without importing shutil (and its compression modules)
    into every command that argparse merely validates."""
    try:
        columns = int(os.environ.get("COLUMNS", "0"))
    except ValueError:
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            columns = 0
    return columns or 80


class TerminalHelpFormatter(argparse.HelpFormatter):
    """argparse's help formatter, sized by :func:`terminal_columns`."""

    def __init__(self, prog: str, indent_increment: int = 2, max_help_position: int = 24,
                 width: int | None = None) -> None:
        super().__init__(prog, indent_increment, max_help_position,
                         terminal_columns() - 2 if width is None else width)


class TerminalRawDescriptionFormatter(argparse.RawDescriptionHelpFormatter,
                                      TerminalHelpFormatter):
    """argparse's RawDescriptionHelpFormatter (the description's lines kept as written),
    sized by :func:`terminal_columns`."""


class GantryArgumentParser(argparse.ArgumentParser):
    """argparse with the project's one-line error format (exit 2), and arguments whose
    definition is deferred (:meth:`defer`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", TerminalHelpFormatter)
        super().__init__(*args, **kwargs)
        self._deferred: list[Callable[[argparse.ArgumentParser], None]] = []

    def defer(self, add: Callable[[argparse.ArgumentParser], None]) -> None:
        """Run ``add(self)`` (which adds arguments) when this parser is first used to parse
        or to print help, not now: `gantry --help` builds every subcommand's parser, and
        this keeps what their arguments need (e.g. the overrides table) from loading."""
        self._deferred.append(add)

    def _add_deferred(self) -> None:
        while self._deferred:
            self._deferred.pop(0)(self)

    def parse_known_args(self, *args: Any, **kwargs: Any) -> Any:  # every overload
        self._add_deferred()
        return super().parse_known_args(*args, **kwargs)

    def format_help(self) -> str:
        self._add_deferred()
        return super().format_help()

    def format_usage(self) -> str:
        self._add_deferred()
        return super().format_usage()

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"error: {one_line(f'{self.prog}: {message}')} (see --help)\n")
        raise SystemExit(EXIT_BAD_INPUT)


def command_modules() -> list[str]:
    """The module name of every subcommand (``launcher/commands/<name>.py``), sorted (listed
    from the directory: pkgutil would import inspect, a tenth of the start-up)."""
    directory = os.path.dirname(launcher.commands.__file__ or "")
    return sorted(entry.name.removesuffix(".py") for entry in os.scandir(directory)
                  if entry.name.endswith(".py") and not entry.name.startswith("_"))


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The `gantry` parser with every subcommand, or with only the one of module ``only``
    (what `main` builds when the command is known: the others' modules are not imported)."""
    parser = GantryArgumentParser(
        prog="gantry",
        description="Slurm-integrated launcher for pipeline-parallel GPU training.",
    )
    parser.add_argument("--version", action="version", version=f"gantry {launcher.__version__}")
    subparsers = parser.add_subparsers(
        dest="command", metavar="COMMAND", parser_class=GantryArgumentParser
    )
    for name in command_modules() if only is None else [only]:
        importlib.import_module(f"launcher.commands.{name}").register(subparsers)
    return parser


def parser_for(words: Sequence[str]) -> argparse.ArgumentParser:
    """The parser for the command line ``words``: only its subcommand's when the first word
    names one (``preflight-scripts``: module preflight_scripts), else every subcommand's
    (``--help``, a mistyped command: the listing and the choices need them all)."""
    if words and not words[0].startswith("-"):
        name = words[0].replace("-", "_")
        if name in command_modules():
            parser = build_parser(only=name)
            if words[0] in _subcommands(parser):
                return parser
    return build_parser()


def _subcommands(parser: argparse.ArgumentParser) -> set[str]:
    return {name for action in parser._actions
            if isinstance(action, argparse._SubParsersAction) for name in action.choices}


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line ``argv`` (default: sys.argv[1:]); its exit status."""
    return _run(argv)[0]


def console() -> int:
    """The `gantry` console script and `python -m launcher`: :func:`main`, then the exit. A
    command that holds nothing to clean up at exit (``exit_at_once``: no threads, MPI, temp
    directories or atexit work; `status`, `logs`, `cancel`) leaves with ``os._exit`` once its
    output is flushed, skipping the interpreter's teardown of every module it loaded (about
    5 ms of a 50 ms `gantry status JOB` here)."""
    status, at_once = _run(None)
    if at_once:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except OSError:  # a closed pipe: the normal exit reports it as Python always does
            return status
        os._exit(status)
    return status


def _run(argv: Sequence[str] | None) -> tuple[int, bool]:
    """(exit status, whether the command may leave without the interpreter's teardown)."""
    words = list(sys.argv[1:] if argv is None else argv)
    # Everything after the first "--" is a command for the job (e.g. `gantry submit job.yaml
    # -- python train.py`), kept verbatim; subcommands accept it with set_defaults(passthrough=[]).
    passthrough: list[str] | None = None
    if "--" in words:
        cut = words.index("--")
        words, passthrough = words[:cut], words[cut + 1 :]
    parser = parser_for(words)
    args = parser.parse_args(words)
    if passthrough is not None:
        if not hasattr(args, "passthrough"):
            parser.error("arguments after -- are not accepted by this command")
        args.passthrough = passthrough
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return EXIT_BAD_INPUT, False
    at_once = bool(getattr(args, "exit_at_once", False))
    try:
        return int(func(args)), at_once
    except GantryError as err:
        sys.stderr.write(f"error: {one_line(str(err))}\n")
        return err.exit_status, at_once
    except KeyboardInterrupt:
        sys.stderr.write("error: interrupted\n")
        return 130, False
    except BrokenPipeError:
        # The reader went away (`gantry ... | head`): not an error of ours.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0, False

"""Arguments and helpers shared by the job commands (render, submit, status, logs, cancel).

Cheap to import: every job command's parser is built from it at start-up. What the commands
do to jobs is launcher/job_state.py's, launcher/job_submit.py's and launcher/job_logs.py's.
"""

from __future__ import annotations

import argparse
import sys
import time
import typing
from pathlib import Path
from typing import IO, TYPE_CHECKING

if TYPE_CHECKING:  # the overrides table (dataclasses), the job directory and Slurm's client
    # load when a job command builds its parser or runs
    from launcher.job_dir import JobDir
    from launcher.job_overrides import CliOverrides
    from launcher.slurm import JobInfo, SlurmClient
    from launcher.step_labels import RankFilter


def add_jobs_dir_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--jobs-dir", type=Path, default=None, metavar="DIR",
                        help="root of the job directories (default: $GANTRY_JOBS_DIR, "
                             "else ./gantry-jobs)")


def add_request_args(parser: argparse.ArgumentParser) -> None:
    """The job file, --site and the CLI overrides of common job fields (the overrides are
    added when the parser is first used, where it can defer them: the gantry parser's
    subcommands)."""
    parser.add_argument("job", type=Path, help="job spec YAML")
    parser.add_argument("--site", type=Path, default=None,
                        help="site config YAML (default: the job's `site`, else "
                             "site_configs/local.yaml)")
    add_jobs_dir_arg(parser)
    defer = getattr(parser, "defer", None)
    if defer is not None:
        defer(_add_override_args)
    else:
        _add_override_args(parser)
    parser.set_defaults(passthrough=[])
    parser.epilog = ("Arguments after `--` are a command every rank runs instead of "
                     "`gantry train` (each argument carried literally).")


def _add_override_args(parser: argparse.ArgumentParser) -> None:
    """One option per CliOverrides flag, in its table's order."""
    from launcher.job_overrides import CliOverrides

    group = parser.add_argument_group("overrides (win over the job YAML)")
    types = typing.get_type_hints(CliOverrides)
    for name, flag in CliOverrides.flags():
        names = (flag.flag, flag.short) if flag.short else (flag.flag,)
        if types[name] == tuple[str, ...]:
            group.add_argument(*names, dest=name, action="append", default=[],
                               metavar=flag.metavar, help=flag.help)
        elif types[name] == bool | None:
            group.add_argument(*names, dest=name, action="store_const", const=True,
                               default=None, help=flag.help)
        else:
            group.add_argument(*names, dest=name, help=flag.help,
                               type=int if types[name] == int | None else str,
                               choices=list(flag.choices) or None, metavar=flag.metavar)


def add_job_filters(parser: argparse.ArgumentParser) -> None:
    """--state and --name, which select among the jobs given (or all of them)."""
    parser.add_argument("--state", action="append", default=[], metavar="STATE",
                        help="only jobs in this state, e.g. RUNNING, PENDING, GONE "
                             "(repeatable; comma-separated lists too)")
    parser.add_argument("--name", action="append", default=[], metavar="NAME",
                        help="only jobs of this name (repeatable; shell-style patterns such "
                             "as 'gpt2-*')")


def overrides_from_args(args: argparse.Namespace) -> CliOverrides:
    """The overrides add_request_args parsed, and the command after `--`."""
    from launcher.job_overrides import CliOverrides

    return CliOverrides.from_values(vars(args), args.passthrough)


def resolve_job(args: argparse.Namespace) -> tuple[Path, JobDir]:
    from launcher.job_dir import find_job_dir, jobs_root

    root = jobs_root(args.jobs_dir)
    return root, find_job_dir(root, args.job_ref)


def follow_log(job_dir: JobDir, job_id: str, client: SlurmClient, out: IO[str] = sys.stdout,
               stream: str = "out", poll_s: float = 0.5, state_every_s: float = 2.0,
               from_start: bool = True, keep: RankFilter | None = None) -> JobInfo | None:
    """Copy the job's log to ``out`` as it grows until the job ends; return its last state.
    ``keep``: only one rank's lines (launcher/step_labels.py), the rest at the end."""
    path = job_dir.log_file(job_id, stream)
    offset = 0 if from_start else (path.stat().st_size if path.exists() else 0)
    last_check = 0.0
    info: JobInfo | None = None
    while True:
        offset = copy_new_text(path, offset, out, keep)
        now = time.monotonic()
        if now - last_check >= state_every_s:
            last_check = now
            info = client.job_states([job_id]).get(job_id)
            if info is None or info.terminal:
                time.sleep(poll_s)  # the last lines may land just after the state changes
                copy_new_text(path, offset, out, keep, final=True)
                if keep is not None:
                    out.write(keep.finish())
                    out.flush()
                return info
        time.sleep(poll_s)


def whole_characters(chunk: bytes) -> int:
    """How many bytes of ``chunk`` end on a UTF-8 character boundary: a multi-byte character
    that a writer has only half written yet is held back for the next read, not decoded into
    replacement characters (bytes that can never complete are left to the decoder)."""
    for back in range(1, min(4, len(chunk)) + 1):
        byte = chunk[-back]
        if byte < 0x80:  # ASCII: whatever follows it is no character's start
            return len(chunk)
        if byte >= 0xC0:  # a lead byte: does its sequence fit in what was read?
            need = 2 if byte < 0xE0 else 3 if byte < 0xF0 else 4
            return len(chunk) if back >= need else len(chunk) - back
    return len(chunk)


def copy_new_text(path: Path, offset: int, out: IO[str], keep: RankFilter | None = None,
              final: bool = False) -> int:
    """Copy what ``path`` holds past ``offset`` to ``out``; return the new offset. A character
    cut at the end waits for its last bytes unless ``final``."""
    try:
        with path.open("rb") as handle:
            handle.seek(offset)
            chunk = handle.read()
    except FileNotFoundError:
        return offset
    if not final:
        chunk = chunk[:whole_characters(chunk)]
    if chunk:
        text = chunk.decode("utf-8", errors="replace")
        out.write(text if keep is None else keep.feed(text))
        out.flush()
    return offset + len(chunk)

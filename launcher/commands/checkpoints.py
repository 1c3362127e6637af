"""`gantry checkpoints JOB|DIR [--verify]`: a job's checkpoints (or those under a directory):
step, complete or not, shards, size, and with --verify whether every shard still matches its
manifest; says which one a resume would take. Exit 1 when --verify finds a bad one.
`--export-weights FILE [--step N]` writes one checkpoint's parameters as a single model file
(launcher/train/export_weights.py)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from launcher.errors import EXIT_FAILURE, EXIT_OK, UserInputError
from launcher.job_cli import add_jobs_dir_arg
from topology.user_files import require_short_names, require_writable_file

if TYPE_CHECKING:  # the checkpoint readers (numpy, safetensors) and rich load when used
    from launcher.train.checkpoint_scan import CheckpointEntry


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "checkpoints", help="list a job's checkpoints; --verify checks every shard",
        description="List the step_<N> checkpoint directories of a job (id, directory or "
                    "name) or under a checkpoint directory: complete (manifest written) or "
                    "not, shards, size; --verify recomputes every shard's checksum as resume "
                    "does. Exit status 1 when --verify finds a complete checkpoint that fails.")
    parser.add_argument("ref", metavar="JOB|DIR",
                        help="job id, job directory or name, or a checkpoint directory")
    add_jobs_dir_arg(parser)
    parser.add_argument("--verify", action="store_true",
                        help="recompute every shard's checksum against its manifest")
    parser.add_argument("--export-weights", type=Path, default=None, metavar="FILE",
                        help="write the parameters of one checkpoint (verified first) to a "
                             "single HF-named safetensors file: for inference, or as "
                             "train.init_weights of a job with another layout")
    parser.add_argument("--step", type=int, default=None, metavar="N",
                        help="with --export-weights: the checkpoint of step N (default: the "
                             "newest complete one)")
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.set_defaults(func=run)


def checkpoint_root(ref: str, jobs_dir: Path | None) -> tuple[Path, bool]:
    """(the directory holding the step_<N> directories, whether it is a job's checkpoint.dir):
    ``ref`` itself when it is a directory other than a job directory, else the job's."""
    from launcher.job_dir import META_FILE, find_job_dir, jobs_root
    from launcher.job_state import run_history

    candidate = Path(ref)
    if candidate.is_dir() and not (candidate / META_FILE).is_file():
        return candidate.resolve(), False
    job_dir = find_job_dir(jobs_root(jobs_dir), ref)
    configured = run_history(job_dir)["checkpoint_dir"]
    if not isinstance(configured, str):
        raise UserInputError(f"job {ref}: its request names no checkpoint.dir "
                             f"({job_dir.request})")
    return Path(configured), True


def _export(args: argparse.Namespace, root: Path, entries: list[CheckpointEntry]) -> int:
    from launcher.console import make_console, print_json
    from launcher.train.export_weights import export_weights

    complete = {e.step: e for e in entries if e.complete}
    if not complete:
        raise UserInputError(f"{root}: no complete checkpoint to export")
    if args.step is not None and args.step not in complete:
        steps = ", ".join(str(s) for s in sorted(complete))
        raise UserInputError(f"--step: {args.step} is not allowed (complete checkpoints: "
                             f"{steps})")
    chosen = complete[args.step if args.step is not None else max(complete)]
    result = export_weights(chosen.path, args.export_weights)
    if args.json:
        print_json(result.to_json())
        return EXIT_OK
    tied = "" if result.head_max_diff is None else "; the lm_head copy matched wte (tied)"
    make_console().print(f"exported step {result.step}: {result.tensors} tensors, "
                         f"{result.bytes / 1e9:.2f} GB -> {result.out}{tied}", markup=False)
    return EXIT_OK


def _checks_cell(entry: CheckpointEntry) -> str:
    if not entry.complete:
        return entry.problem or "-"
    if entry.verified is None:
        return "not checked"
    return "ok" if entry.verified else f"FAILED: {entry.problem}"


def run(args: argparse.Namespace) -> int:
    from rich.markup import escape
    from rich.table import Table

    from launcher.console import make_console, print_json
    from launcher.train.checkpoint_scan import resume_choice, scan

    if args.step is not None and args.export_weights is None:
        raise UserInputError("--step: only with --export-weights")
    if args.verify and args.export_weights is not None:
        raise UserInputError("--verify: not with --export-weights (the export verifies the "
                             "checkpoint it writes)")
    require_short_names(Path(args.ref), "JOB|DIR")
    if args.export_weights is not None:
        require_writable_file(args.export_weights, "--export-weights")
    root, of_job = checkpoint_root(args.ref, args.jobs_dir)
    if args.export_weights is not None:
        return _export(args, root, scan(root))
    entries = [] if of_job and not root.exists() else scan(root, verify=args.verify)
    chosen = resume_choice(entries)
    failed = [e for e in entries if e.verified is False]
    if args.json:
        print_json({"dir": str(root), "checkpoints": [e.to_json() for e in entries],
                    "resume_step": None if chosen is None else chosen.step})
        return EXIT_FAILURE if failed else EXIT_OK
    console = make_console()
    table = Table(title=escape(f"checkpoints in {root}"), title_justify="left")
    for column in ("step", "state", "shards", "size", "checksums"):
        table.add_column(column, justify="right" if column in ("step", "shards", "size")
                         else "left")
    for entry in entries:
        state = "complete" if entry.complete else "incomplete"
        table.add_row(str(entry.step), state, str(entry.shards), f"{entry.bytes / 1e9:.2f} GB",
                      escape(_checks_cell(entry)))
    console.print(table)
    if chosen is None:
        console.print("resume: no usable checkpoint (training would start from step 0)",
                      markup=False)
    else:
        how = "verified" if chosen.verified else "not verified here; resume verifies it"
        console.print(f"resume: step {chosen.step} ({chosen.path}; {how})", markup=False)
    return EXIT_FAILURE if failed else EXIT_OK

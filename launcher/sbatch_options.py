"""Per-job sbatch options (``resources.sbatch_options``, ``--sbatch-option``): their checks.

A per-job option is ``--name`` or ``--name=value`` (Slurm's long form; short flags and the
space-separated form are refused so that each option is one #SBATCH word). The value is
carried through the same checked #SBATCH line as every other value
(launcher.sbatch_render.SbatchOption). An option that gantry itself sets (the node count,
tasks, time, job name, log paths, placement...) is refused, naming the job field that sets
it; so is an abbreviation of one (sbatch accepts unique prefixes of long options).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from launcher.errors import brief

_NAME = re.compile(r"--[a-z][a-z0-9-]*", re.ASCII)

SBATCH_VALUE = re.compile(r"^[A-Za-z0-9_./:,=+@%\[\]{}&|*()-]+$")
"""What an #SBATCH value may hold: sbatch reads the line itself (whitespace, quotes, the
backslash and ``#`` are its syntax); ``$``, backticks and ``;`` are refused too, as no
option needs them. ``& | * ( )`` of a --constraint are plain characters to it."""
SBATCH_VALUE_TEXT = ("expected letters, digits and . _ / : , = + @ % [ ] { } & | * ( ) - "
                     "only; no spaces, quotes, $, `, ; or newlines")

OWNED: dict[str, str] = {
    "--job-name": "name",
    "--nodes": "resources.nodes + resources.spares",
    "--ntasks": "resources.gpus_per_node",
    "--ntasks-per-node": "resources.gpus_per_node",
    "--gpus": "resources.gpus_per_node",
    "--gpus-per-node": "resources.gpus_per_node",
    "--gpus-per-task": "resources.gpus_per_node",
    "--cpus-per-task": "resources.cpus_per_task",
    "--time": "resources.time_limit",
    "--partition": "resources.partition",
    "--account": "resources.account",
    "--qos": "resources.qos",
    "--dependency": "resources.dependencies",
    "--signal": "policy.signal_lead_s",
    "--requeue": "policy.requeue",
    "--no-requeue": "policy.requeue",
    "--no-kill": "policy.recover_in_allocation",
    "--open-mode": "the job directory's logs",
    "--chdir": "the submit directory",
    "--output": "the job directory's logs",
    "--error": "the job directory's logs",
    "--nodelist": "gantry's placement",
    "--exclude": "gantry's placement and recovery",
    "--switches": "gantry's placement",
    "--wrap": "the batch script itself",
    "--array": "one job per job directory",
}
"""The options gantry sets itself, and what sets each (what an error names)."""

GPU_GRES = re.compile(r"(^|,)gpu(:|,|$)", re.ASCII)
"""A --gres value that asks for GPUs (gantry asks for them from resources.gpus_per_node)."""


def option_name(option: str) -> str:
    """``--mem`` of ``--mem=64G`` (the text before the first '=')."""
    return option.partition("=")[0]


def check_option(option: str) -> str | None:
    """Why ``option`` cannot be a per-job sbatch option, or None when it can."""
    if "\n" in option or "\r" in option or "\x00" in option:
        return f"{brief(option)} is not allowed (no newline or NUL in an #SBATCH line)"
    name, sep, value = option.partition("=")
    if not _NAME.fullmatch(name):
        return (f"{brief(option)} is not allowed (expected --name or --name=value, Slurm's "
                "long form, e.g. --constraint=a100 or --exclusive)")
    if sep and not value:
        return f"{brief(option)} is not allowed (expected a value after '=', or no '=')"
    if name in OWNED:
        return f"{name} is not allowed (gantry sets it from {OWNED[name]})"
    longer = [owned for owned in OWNED if owned.startswith(name)]
    if longer:
        return (f"{name} is not allowed (it abbreviates {longer[0]}, which gantry sets from "
                f"{OWNED[longer[0]]})")
    if sep and not SBATCH_VALUE.fullmatch(value):
        return (f"{brief(value)} is not allowed in an #SBATCH line ({SBATCH_VALUE_TEXT})")
    if name == "--gres" and GPU_GRES.search(value):
        return (f"{brief(option)} is not allowed (GPUs come from resources.gpus_per_node; "
                "--gres may name other resources)")
    if re.search("hetjob|packjob", option, re.IGNORECASE):
        return (f"{brief(option)} is not allowed (sbatch reads an #SBATCH line holding "
                "'hetjob' as a heterogeneous job separator)")
    return None


def merge_options(base: Iterable[str], later: Iterable[str]) -> list[str]:
    """``base`` then ``later``, an option of ``later`` replacing ``base``'s of the same name
    (so that the CLI's --mem wins over the job file's, and the job's over the site's)."""
    later = list(later)
    names = {option_name(option) for option in later}
    return [*(o for o in base if option_name(o) not in names), *later]

"""The job fields the command line overrides (``gantry submit/render/plan`` flags and the
Python API's keyword overrides): one table, :class:`CliOverrides`.

Cheap to import (the argument parser of every job command reads it at start-up): the job
spec's checks and the sbatch option merging load when overrides are applied.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from launcher.errors import UserInputError, brief


@dataclass(frozen=True)
class Flag:
    """How one CliOverrides field is given on the command line and where it lands."""

    flag: str
    """The option, e.g. "--gpus-per-node"."""
    help: str
    """Its --help text."""
    section: str | None
    """The job mapping's section it sets (None: top level)."""
    key: str
    """The key in that section."""
    choices: tuple[str, ...] = ()
    """The values allowed (argparse checks them)."""
    metavar: str | None = None
    short: str | None = None
    """Slurm's short form of the option, e.g. "-N" (an alias)."""
    sbatch: str | None = None
    """The sbatch option it adds to resources.sbatch_options (a first-class sbatch flag,
    e.g. "--mem": ``--mem 64G`` adds "--mem=64G", replacing the job file's --mem)."""


def _flag(flag: str, help: str, section: str | None, key: str, default: Any = None,
          choices: tuple[str, ...] = (), metavar: str | None = None,
          short: str | None = None) -> Any:
    return field(default=default, metadata={"flag": Flag(flag, help, section, key, choices,
                                                          metavar, short)})


def _sbatch_flag(option: str, help: str, metavar: str | None = None,
                 short: str | None = None) -> Any:
    flag = Flag(option, help, "resources", "sbatch_options", metavar=metavar, short=short,
                sbatch=option)
    return field(default=None, metadata={"flag": flag})


@dataclass(frozen=True)
class CliOverrides:
    """Job fields given on the command line; None means "not given" (the YAML decides).

    The one table of the overrides: each field's :class:`Flag` (in ``metadata["flag"]``)
    gives its option, help, and the job field it sets; the argument parser
    (launcher/job_cli.py), :meth:`from_values`, :meth:`check_text` and :meth:`apply` all
    read it. A tuple field is repeatable and adds to the YAML's list or mapping."""

    name: str | None = _flag("--name", "job name", None, "name", short="-J")
    nodes: int | None = _flag("--nodes", "nodes that run ranks", "resources", "nodes",
                              short="-N")
    spares: int | None = _flag("--spares", "extra nodes for preflight replacements",
                               "resources", "spares")
    gpus_per_node: int | None = _flag("--gpus-per-node", "ranks (GPUs) per node",
                                      "resources", "gpus_per_node")
    cpus_per_task: int | None = _flag("--cpus-per-task", "CPUs per rank", "resources",
                                      "cpus_per_task", short="-c")
    time_limit: str | None = _flag("--time", "time limit (MM, MM:SS, HH:MM:SS, D-HH[:MM[:SS]])",
                                   "resources", "time_limit", short="-t")
    partition: str | None = _flag("--partition", "partition", "resources", "partition",
                                  short="-p")
    account: str | None = _flag("--account", "account", "resources", "account", short="-A")
    qos: str | None = _flag("--qos", "QOS", "resources", "qos", short="-q")
    constraint: str | None = _sbatch_flag("--constraint", "Slurm node features, e.g. a100",
                                          short="-C")
    exclusive: bool | None = _sbatch_flag("--exclusive", "nodes not shared with other jobs")
    mem: str | None = _sbatch_flag("--mem", "memory per node, e.g. 64G")
    hint: str | None = _sbatch_flag("--hint", "Slurm task binding hint, e.g. nomultithread")
    gres: str | None = _sbatch_flag("--gres", "generic resources other than GPUs")
    container_image: str | None = _flag(
        "--container-image", "pyxis container image for the training step", "resources",
        "container_image")
    dependencies: tuple[str, ...] = _flag(
        "--dependency", "Slurm dependency, e.g. afterok:123 (repeatable)", "resources",
        "dependencies", default=(), metavar="DEP", short="-d")
    sbatch_options: tuple[str, ...] = _flag(
        "--sbatch-option", "an sbatch option for this job, e.g. --sbatch-option=--mem=64G "
        "(repeatable; replaces the job file's option of that name)", "resources",
        "sbatch_options", default=(), metavar="--OPT[=VALUE]")
    env: tuple[str, ...] = _flag(
        "--env", "environment for every rank (repeatable; carried literally)", None, "env",
        default=(), metavar="KEY=VALUE")
    preflight_level: str | None = _flag("--preflight", "preflight level", "policy",
                                        "preflight_level",
                                        choices=("off", "quick", "standard", "deep"))
    launch: str | None = _flag("--launch", "how a command job's ranks start: a task per rank "
                               "with PyTorch's environment, or a torchrun agent per node",
                               None, "launch", choices=("per-rank", "torchrun"))
    command: tuple[str, ...] = ()
    """Arguments after `--`: run this argv on every rank instead of `gantry train`."""

    @staticmethod
    def flags() -> list[tuple[str, Flag]]:
        """(field name, its Flag) of every override given by an option, in --help order."""
        return [(f.name, f.metadata["flag"]) for f in fields(CliOverrides)
                if "flag" in f.metadata]

    @classmethod
    def from_values(cls, values: dict[str, Any], command: Sequence[str] = ()) -> CliOverrides:
        """The overrides from parsed options (field name -> value; lists for repeatables)."""
        repeatable = {f.name for f in fields(cls) if f.default == ()}
        given: dict[str, Any] = {
            name: tuple(values[name] or ()) if name in repeatable else values[name]
            for name, _ in cls.flags()}
        return cls(**given, command=tuple(command))

    def _given(self) -> list[tuple[Flag, Any]]:
        """(Flag, value) of each option set: single values first, then repeatable ones (the
        order of the flags-used record)."""
        pairs = [(flag, getattr(self, name)) for name, flag in self.flags()]
        return ([(f, v) for f, v in pairs if not isinstance(v, tuple) and v is not None]
                + [(f, v) for f, v in pairs if isinstance(v, tuple) and v])

    def check_text(self) -> None:
        """Every text flag is UTF-8: argv bytes that are not reach Python as lone surrogates,
        which no batch script can hold; UserInputError naming the flag otherwise."""
        from launcher.job_spec import NOT_UTF8, is_utf8

        values = [(flag.flag, v) for flag, value in self._given()
                  for v in (value if isinstance(value, tuple) else (value,))]
        for flag, value in [*values, *(("-- COMMAND", c) for c in self.command)]:
            if isinstance(value, str) and not is_utf8(value):
                raise UserInputError(f"{flag}: {brief(value)} is not allowed ({NOT_UTF8})")

    def apply(self, raw: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
        """``raw`` (the job YAML mapping) with the overrides set; also the flags used."""
        import copy

        from launcher.sbatch_options import merge_options

        self.check_text()
        data = copy.deepcopy(raw)
        used: list[str] = []
        for flag, value in self._given():
            target = data if flag.section is None else data.setdefault(flag.section, {})
            if not isinstance(target, dict):
                raise UserInputError(f"{flag.flag}: cannot override {flag.section}.{flag.key} "
                                     f"({flag.section} in the job file is not a mapping)")
            if flag.key == "env":
                target[flag.key] = {**dict(target.get(flag.key) or {}), **_env_pairs(value)}
            elif flag.key == "sbatch_options":
                option = flag.sbatch
                options = value if option is None else (
                    (option,) if value is True else (f"{option}={value}",))
                target[flag.key] = merge_options(target.get(flag.key) or [], options)
            elif isinstance(value, tuple):
                target[flag.key] = [*(target.get(flag.key) or []), *value]
            else:
                target[flag.key] = value
            used.append(flag.flag)
        if self.command:
            data["command"] = list(self.command)
            used.append("-- COMMAND")
        return data, used


def _env_pairs(items: Sequence[str]) -> dict[str, str]:
    env: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UserInputError(f"--env: {item!r} is not allowed (expected KEY=VALUE)")
        env[key] = value
    return env

"""Renders the batch script of a job: typed inputs -> text, a pure function (no I/O but templates).

Safety by construction: every ``{{ value }}`` in a template is shell-quoted (shlex.quote) by
the environment's ``finalize`` unless it is a :class:`Shell` value built here from validated
parts; ``#SBATCH`` values are checked against a strict character set (sbatch parses those
lines itself, so quoting cannot help there), and undefined template variables are errors.
"""

from __future__ import annotations

import functools
import re
import shlex
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import jinja2

import launcher.job_dir
from launcher import job_exit_codes
from launcher.errors import UserInputError, brief
from launcher.install_paths import data_dir
from launcher.job_dir import LOGS_DIR, log_file_name
from launcher.sbatch_options import SBATCH_VALUE, SBATCH_VALUE_TEXT

TEMPLATE_DIR = data_dir("sbatch_templates")
DEFAULT_TEMPLATE = "train.sbatch.j2"

_SBATCH_FLAG = re.compile(r"^--[a-z][a-z0-9-]*$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class Shell(str):
    """Text that is already safe shell (quoted or built from validated parts)."""


def quote(value: Any) -> Shell:
    """Shell-quote one value (ints as digits; Shell values unchanged)."""
    if isinstance(value, Shell):
        return value
    if isinstance(value, bool) or not isinstance(value, str | int | Path):
        raise TypeError(f"sbatch template: cannot shell-quote {type(value).__name__} {value!r}")
    return Shell(shlex.quote(str(value)))


def comment_text(value: Any) -> Shell:
    """Text safe inside a ``#`` comment line: control characters (newlines) become '?'."""
    return Shell(re.sub(r"[\x00-\x1f\x7f]", "?", str(value)))


def quote_argv(argv: Iterable[Any]) -> Shell:
    """Shell-quote every argument and join with spaces."""
    return Shell(" ".join(quote(arg) for arg in argv))


@dataclass(frozen=True)
class SbatchOption:
    """One ``#SBATCH --flag[=value]`` line."""

    flag: str
    """The long option, e.g. "--nodes"."""
    value: str | None = None
    """Its value (None for switches like --requeue)."""
    source: str = ""
    """Where the value came from, for error messages (e.g. "resources.partition")."""

    @property
    def text(self) -> Shell:
        if not _SBATCH_FLAG.match(self.flag):
            raise UserInputError(f"{self.source or 'sbatch option'}: {brief(self.flag)} is not "
                                 "allowed (expected a long option like --switches)")
        if self.value is None:
            return Shell(self.flag)
        if not SBATCH_VALUE.match(self.value):
            raise UserInputError(
                f"{self.source or self.flag}: {brief(self.value)} is not allowed in an #SBATCH "
                f"line ({SBATCH_VALUE_TEXT})")
        return Shell(f"{self.flag}={self.value}")


def parse_sbatch_option(option: str, source: str) -> SbatchOption:
    """An SbatchOption from "--flag=value" or "--flag" text (placement, site extras)."""
    flag, sep, value = option.partition("=")
    return SbatchOption(flag, value if sep else None, source)


@dataclass(frozen=True)
class Placement:
    """Where to run, as chosen by topology/ placement (empty: Slurm chooses)."""

    sbatch_options: tuple[str, ...] = ()
    """Extra #SBATCH options, e.g. ("--nodelist=n[1-5]", "--switches=1@05:00")."""
    summary: str = "Slurm chooses the nodes"
    """One line for the script header."""
    nodes: tuple[str, ...] = ()
    """The planned nodes that run ranks, in rank order, spares not included (empty when
    Slurm chooses); without preflight exactly these nodes train."""


@dataclass(frozen=True)
class PreflightStep:
    """The health check run once per node, then the gate that decides which nodes train.

    Contract with the preflight commands: ``check_argv`` prints one JSON line per node on
    stdout; ``gate_argv`` is called with ``--reports FILE --need N --nodes-out FILE
    --record FILE``, writes
    the comma-separated names of the N nodes to train on (healthy; spares replace failures)
    and exits 0, or exits non-zero when fewer than N are healthy (draining as it sees fit).
    """

    level: str
    """Preflight level, passed to the check as --level."""
    check_argv: tuple[str, ...]
    """Per-node check command (before --level)."""
    gate_argv: tuple[str, ...]
    """Gate command (before --reports ...)."""
    fabric_argv: tuple[str, ...] = ()
    """The fabric test's rank program, one task per node that passed (empty: no fabric
    test); the gate is first called with ``--passed-out FILE`` (lists those nodes, changes
    nothing), then with ``--fabric`` the test's output as well."""


@dataclass(frozen=True)
class RecoveryStep:
    """Recovery inside the allocation (sbatch --no-kill): the training step runs under
    ``watch_argv`` (stops waiting once a rank failed), and after a recoverable failure
    ``recover_argv`` names and drains the culprits and writes the next launch's nodes (exit
    0), requeues the job excluding them (exit 75) or gives up (other)."""

    max_recoveries: int
    """Relaunches inside the allocation before the job requeues."""
    watch_argv: tuple[str, ...]
    """`gantry step-watch` (before --attempt-dir ...)."""
    recover_argv: tuple[str, ...]
    """`gantry recover` (before --attempt-dir ...)."""
    grace_s: int = 2
    """Seconds the launcher may take to end by itself after a rank failed."""
    stop_on_eviction: bool = False
    """A command job: its program cannot act on an eviction, so step-watch stops the step
    (TERM, KILL ``stop_grace_s`` later) once a node was asked to leave, and the step counts
    as evicted (gantry's trainer checkpoints and stops by itself: False)."""
    stop_grace_s: int = 30
    """Seconds between the TERM and the KILL of a step stopped on an eviction."""


@dataclass(frozen=True)
class MonitorStep:
    """The run monitor: ``argv`` (`gantry monitor` before --attempt-dir ...) on every node
    that runs ranks, beside each training step (srun --overlap, one task per node), stopped
    when the step ends; its own failure never fails the training."""

    argv: tuple[str, ...]
    interval_s: float
    """Seconds between two samples (> 0)."""

    @property
    def interval(self) -> str:
        """``interval_s`` as the script writes it (``30``, ``0.5``)."""
        return f"{self.interval_s:g}"


@dataclass(frozen=True)
class LaunchStep:
    """How the ranks are started."""

    launcher: Literal["srun", "mpirun"]
    """srun (--mpi=<srun_mpi>) or mpirun inside the allocation."""
    argv: tuple[str, ...]
    """What every rank runs (gantry train ..., or the job's command)."""
    srun_mpi: str = "pmix"
    """srun --mpi plugin."""
    container_image: str | None = None
    """pyxis --container-image for the step (srun only)."""
    tasks_per_node: int | None = None
    """Tasks the step starts per node (None: the job's ranks per node; a torchrun job: 1,
    one agent per node that starts the node's ranks itself)."""
    rendezvous_argv: tuple[str, ...] = ()
    """A command printing a TCP port free on the node it runs on (`gantry torch-env
    --free-port`); given (command jobs), each launch first exports MASTER_ADDR, the first
    launch node's address (Slurm's NodeAddr), and MASTER_PORT, that port found there."""


@dataclass(frozen=True)
class ScriptInputs:
    """Everything a batch script template needs; nothing else reaches the template."""

    job_name: str
    """Slurm job name."""
    job_dir: str
    """Absolute job directory (script, logs, per-attempt directories)."""
    submit_dir: str
    """Working directory of the job (--chdir)."""
    generated_by: str
    """"gantry <version>"."""
    spec_file: str
    """The job YAML (for the header comment)."""
    site_name: str
    """Site name (for the header comment)."""
    layout: str
    """One line describing pp x dp on nodes (for the header comment)."""
    nodes: int
    """Nodes that run ranks."""
    spares: int
    """Extra nodes allocated for preflight replacements."""
    ranks_per_node: int
    """Tasks per node."""
    gpus_per_node: int
    """GPUs per node to request (0: no GPU request)."""
    time_limit: str
    """Slurm time limit."""
    launch: LaunchStep
    """The training step."""
    cpus_per_task: int | None = None
    """CPUs per rank (None: Slurm default)."""
    partition: str | None = None
    """Partition (None: cluster default)."""
    account: str | None = None
    """Account."""
    qos: str | None = None
    """QOS."""
    dependencies: tuple[str, ...] = ()
    """Slurm dependency expressions, joined with ','."""
    signal_lead_s: int = 120
    """Seconds before the time limit that the batch shell gets USR1."""
    requeue: bool = True
    """Requeue after a signal (and let Slurm requeue on node failure)."""
    max_restarts: int = 3
    """Stop requeueing after this many restarts."""
    env: tuple[tuple[str, str], ...] = ()
    """Environment exported for every step, in order (site MPI, NCCL, then the job's)."""
    pythonpath: str | None = None
    """Directory put before the user's PYTHONPATH so that every step imports this gantry
    (None: gantry is installed, the user's PYTHONPATH stays as it is)."""
    placement: Placement = field(default_factory=Placement)
    """Topology options."""
    preflight: PreflightStep | None = None
    """Health check + gate (None: preflight off)."""
    recovery: RecoveryStep | None = None
    """Recovery inside the allocation (None: a failed step requeues the job)."""
    monitor: MonitorStep | None = None
    """The run monitor (None: policy.monitor_interval_s 0, or a command job without
    recovery in the allocation)."""
    evict_argv: tuple[str, ...] = ()
    """Without recovery in the allocation: `gantry recover` (before --attempt-dir ...), run
    with --no-relaunch after the trainer stopped for an eviction (exit TRAINER_EVICTED), so
    that the named node is drained and the job requeued excluding it (empty: not rendered)."""
    job_options: tuple[str, ...] = ()
    """The job's own sbatch options (resources.sbatch_options), last in the header."""

    def sbatch_options(self) -> list[SbatchOption]:
        """The #SBATCH header, in order; values validated when rendered."""
        opts = [
            SbatchOption("--job-name", self.job_name, "name"),
            SbatchOption("--nodes", str(self.nodes + self.spares), "resources.nodes"),
            SbatchOption("--ntasks-per-node", str(self.ranks_per_node),
                         "resources.gpus_per_node"),
        ]
        if self.gpus_per_node:
            opts.append(SbatchOption("--gpus-per-node", str(self.gpus_per_node),
                                     "resources.gpus_per_node"))
        if self.cpus_per_task:
            opts.append(SbatchOption("--cpus-per-task", str(self.cpus_per_task),
                                     "resources.cpus_per_task"))
        opts.append(SbatchOption("--time", self.time_limit, "resources.time_limit"))
        for flag, value, source in (("--partition", self.partition, "resources.partition"),
                                    ("--account", self.account, "resources.account"),
                                    ("--qos", self.qos, "resources.qos")):
            if value:
                opts.append(SbatchOption(flag, value, source))
        if self.dependencies:
            opts.append(SbatchOption("--dependency", ",".join(self.dependencies),
                                     "resources.dependencies"))
        opts += [
            SbatchOption("--signal", f"B:USR1@{self.signal_lead_s}", "policy.signal_lead_s"),
            SbatchOption("--requeue" if self.requeue else "--no-requeue", None,
                         "policy.requeue"),
            *([SbatchOption("--no-kill", None, "policy.recover_in_allocation")]
              if self.recovery is not None else []),
            SbatchOption("--open-mode", "append"),
            SbatchOption("--chdir", self.submit_dir, "working directory"),
            SbatchOption("--output", f"{self.job_dir}/{LOGS_DIR}/{log_file_name('%j', 'out')}",
                         "job directory"),
            SbatchOption("--error", f"{self.job_dir}/{LOGS_DIR}/{log_file_name('%j', 'err')}",
                         "job directory"),
        ]
        opts += [parse_sbatch_option(o, "placement") for o in self.placement.sbatch_options]
        opts += [parse_sbatch_option(o, "resources.sbatch_options") for o in self.job_options]
        return opts

    def check(self) -> None:
        """Raise UserInputError for anything that cannot be carried safely into the script."""
        for opt in self.sbatch_options():
            _ = opt.text
        for key, _value in self.env:
            if not _ENV_NAME.match(key):
                raise UserInputError(f"env.{key}: is not a valid environment variable name")
        if self.signal_lead_s < 1:
            raise UserInputError(f"policy.signal_lead_s: {self.signal_lead_s} is not allowed "
                                 "(expected >= 1)")
        if self.max_restarts < 0:
            raise UserInputError(f"policy.max_restarts: {self.max_restarts} is not allowed "
                                 "(expected >= 0)")
        if self.launch.container_image and self.launch.launcher != "srun":
            raise UserInputError("resources.container_image: needs the srun launcher")
        if not self.launch.argv:
            raise UserInputError("command: the launch step has no command")


_NAME_WORD = re.compile(r"[A-Za-z0-9_.-]+", re.ASCII)


@functools.cache
def job_dir_names() -> dict[str, Shell]:
    """The templates' ``names``: launcher/job_dir.py's names of files, directories and
    environment variables (its ``*_FILE``, ``*_DIR`` and ``*_ENV`` constants) by constant,
    each a plain word that needs no quoting, even inside double quotes."""
    names: dict[str, Shell] = {}
    for key, value in vars(launcher.job_dir).items():
        if key.endswith(("_FILE", "_DIR", "_ENV")) and isinstance(value, str):
            if not _NAME_WORD.fullmatch(value):
                raise ValueError(f"launcher/job_dir.py: {key} = {value!r} is not a plain word")
            names[key] = Shell(value)
    return names


def _finalize(value: Any) -> Shell:
    """Applied to every ``{{ ... }}``: quote unless already Shell; refuse None and bools."""
    if value is None:
        raise TypeError("sbatch template: a value is None (guard it with {% if %})")
    if isinstance(value, jinja2.Undefined):
        value._fail_with_undefined_error()  # raises UndefinedError naming the missing variable
    return quote(value)


@functools.lru_cache(maxsize=8)
def _environment(template_dir: Path) -> jinja2.Environment:
    """One jinja2 environment per template directory (compiled templates are cached)."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(template_dir)),
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        finalize=_finalize,
    )
    env.filters["q"] = quote
    env.filters["argv"] = quote_argv
    env.filters["comment"] = comment_text
    return env


def _one_line(err: BaseException) -> str:
    text = " ".join(str(err).split())
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


def render_script(inputs: ScriptInputs, template: str = DEFAULT_TEMPLATE,
                  template_dir: Path = TEMPLATE_DIR) -> str:
    """The batch script text for ``inputs`` (raises UserInputError for unsafe values, and for
    a site's own template that cannot be read, parsed or rendered)."""
    inputs.check()
    try:
        tmpl = _environment(template_dir).get_template(template)
    except jinja2.TemplateNotFound:
        raise UserInputError(f"slurm.sbatch_template: {template!r} not found in "
                             f"{template_dir}") from None
    except jinja2.TemplateSyntaxError as err:
        raise UserInputError(f"slurm.sbatch_template: {err.filename or template}:{err.lineno}: "
                             f"{' '.join(err.message.split()) if err.message else 'syntax error'}"
                             " (expected a jinja2 template)") from None
    except (OSError, ValueError) as err:  # a directory, not UTF-8, a NUL in the name
        raise UserInputError(f"slurm.sbatch_template: cannot read {template!r} in "
                             f"{template_dir} ({_one_line(err)})") from None
    header = [opt.text for opt in inputs.sbatch_options()]
    try:
        return tmpl.render(
            job=inputs,
            sbatch_lines=header,
            exit_codes=job_exit_codes.DOCUMENTED,
            codes=job_exit_codes,
            raw=Shell,
            names=job_dir_names(),
        )
    except Exception as err:
        if template_dir == TEMPLATE_DIR:
            raise  # gantry's own templates: a bug, keep the traceback
        raise UserInputError(f"slurm.sbatch_template: {template_dir / template} fails to "
                             f"render ({_one_line(err)})") from None


def env_pairs(*sources: Sequence[tuple[str, str]] | dict[str, str]) -> tuple[tuple[str, str], ...]:
    """Merge environments in order; a later source wins and moves the name to its place."""
    merged: dict[str, str] = {}
    for source in sources:
        items = source.items() if isinstance(source, dict) else source
        for key, value in items:
            merged.pop(key, None)
            merged[key] = value
    return tuple(merged.items())

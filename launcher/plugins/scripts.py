"""The Prolog, Epilog and HealthCheckProgram scripts, one generator for both writers
(`gantry site install-plugins` and `gantry preflight-scripts`): each runs
``gantry preflight --site S --level L --drain --quiet`` on its node and applies gantry's
drain policy (owned ``gantry:<check>:<detail>`` reasons; an operator's reason is never
touched; gantry's own drains are resumed after K clean passes).

- prolog (``Prolog=``): the site's level before every job; exits 0 even on FAIL: a non-zero
  prolog makes slurmctld replace gantry's reason with "Prolog error", which gantry would then
  treat as an operator's and never resume. The drained node gets no further jobs (the job's
  own gate, or steps started with --gantry-preflight, refuse it). ``fail_job`` opts into
  Slurm's requeue anyway.
- epilog (``Epilog=``): quick checks after every job; always exits 0.
- healthcheck (``HealthCheckProgram=``): quick checks every HealthCheckInterval, on drained
  nodes too (``HealthCheckNodeState=ANY``).

Pure functions of their inputs; every value shell-quoted.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from launcher.atomic_write import FileSet, made_directories

ScriptKind = Literal["prolog", "epilog", "healthcheck"]
SCRIPT_KINDS: tuple[ScriptKind, ...] = ("prolog", "epilog", "healthcheck")
HEALTH_CHECK_INTERVAL_S = 300
"""HealthCheckInterval= when the site sets none."""


def script_name(kind: ScriptKind) -> str:
    return f"gantry-{kind}.sh"


def slurm_conf_for(kind: ScriptKind, path: Path | str,
                   interval_s: int = HEALTH_CHECK_INTERVAL_S) -> list[str]:
    """The slurm.conf lines that run the ``kind`` script installed at ``path``."""
    if kind == "healthcheck":
        return [f"HealthCheckProgram={path}", f"HealthCheckInterval={interval_s}",
                "HealthCheckNodeState=ANY"]
    return [f"{kind.capitalize()}={path}"]


@dataclass(frozen=True)
class ScriptSpec:
    """Inputs of one script."""

    kind: ScriptKind
    """prolog, epilog or healthcheck."""
    gantry: tuple[str, ...]
    """The command that runs gantry: ``(<prefix>/bin/gantry,)`` or ``(python, -m, launcher)``."""
    site: str
    """Site config path (absolute)."""
    level: str
    """The prolog's preflight level (the epilog and the health check run quick)."""
    writer: str
    """The command that writes it, for the header."""
    env: tuple[tuple[str, str], ...] = ()
    """Environment of the checks (exported before they run)."""
    pythonpath: str | None = None
    """Directory to put on PYTHONPATH when gantry is not installed (a checkout)."""
    fail_job: bool = False
    """prolog only: exit non-zero when the node fails (Slurm requeues the job)."""
    slurm_conf: tuple[str, ...] = ()
    """The slurm.conf lines that install it, shown in the header."""

    @property
    def run_level(self) -> str:
        return self.level if self.kind == "prolog" else "quick"


def render_script(spec: ScriptSpec) -> str:
    """The text of one script."""
    q = shlex.quote
    fails = spec.kind == "prolog" and spec.fail_job
    lines = [
        "#!/bin/sh",
        f"# gantry {spec.kind} script, written by `{spec.writer}`; do not edit.",
        *(["# slurm.conf:"] if spec.slurm_conf else []),
        *[f"#   {line}" for line in spec.slurm_conf],
        "# Runs `gantry preflight` on this node and applies the drain policy: drain with an",
        "# owned gantry:<check>:<detail> reason on FAIL, never touch an operator's reason,",
        "# resume gantry's own drains after K clean passes; "
        + ("exits 1 on FAIL." if fails else "always exits 0."),
        'SLURMD_NODENAME="${SLURMD_NODENAME:-$(hostname -s)}"',
        "export SLURMD_NODENAME",
    ]
    if spec.pythonpath:
        lines += [f'PYTHONPATH={q(spec.pythonpath)}"${{PYTHONPATH:+:$PYTHONPATH}}"',
                  "export PYTHONPATH"]
    lines += [f"{key}={q(value)}; export {key}" for key, value in spec.env]
    command = " ".join([*(q(word) for word in spec.gantry), "preflight", "--site",
                        q(spec.site), "--level", q(spec.run_level), "--drain", "--quiet"])
    lines += [f"exec {command}"] if fails else [f"{command} || true", "exit 0"]
    return "\n".join(lines) + "\n"


def write_scripts(out_dir: Path, specs: list[ScriptSpec]) -> list[Path]:
    """Write one executable script per spec into ``out_dir`` (``gantry-<kind>.sh``); returns
    their paths. All or none: a failure leaves the previous scripts as they were (a
    half-written health check would exit 0 on every node) and removes the directories it
    made."""
    paths = []
    with made_directories(out_dir), FileSet() as files:
        for spec in specs:
            path = out_dir / script_name(spec.kind)
            files.write_text(path, render_script(spec), mode=0o755)
            paths.append(path)
    return paths

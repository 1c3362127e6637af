"""The Prolog, Epilog and HealthCheckProgram scripts of the suite: each runs
``<prefix>/bin/gantry preflight --site S --level L --drain --quiet`` on its node, with the
suite's preflight environment, and applies gantry's drain policy (owned
``gantry:<check>:<detail>`` reasons; an operator's reason is never touched).

- prolog: the site's level before every job; exits 0 even on FAIL: a non-zero prolog makes
  slurmctld replace gantry's reason with "Prolog error" (then neither gantry nor the
  operator can tell what failed). The drained node gets no further jobs; steps started with
  --gantry-preflight refuse it on their own.
- epilog: quick checks after every job; always exits 0.
- healthcheck: quick checks every HealthCheckInterval, on drained nodes too, so gantry's own
  drains are resumed after K clean passes.
Pure functions of their inputs; every value shell-quoted.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import Literal

ScriptKind = Literal["prolog", "epilog", "healthcheck"]
SCRIPT_KINDS: tuple[ScriptKind, ...] = ("prolog", "epilog", "healthcheck")


def render_script(
    kind: ScriptKind,
    gantry: str,
    site_path: str,
    level: str,
    env: Mapping[str, str],
) -> str:
    """The text of one script (``level`` is used by the prolog; the others run quick)."""
    q = shlex.quote
    run_level = level if kind == "prolog" else "quick"
    lines = [
        "#!/bin/sh",
        f"# gantry {kind} script, written by `gantry site install-plugins`; do not edit.",
        "# Runs gantry's node checks and applies the drain policy; always exits 0.",
        'SLURMD_NODENAME="${SLURMD_NODENAME:-$(hostname -s)}"',
        "export SLURMD_NODENAME",
    ]
    lines += [f"{key}={q(value)}; export {key}" for key, value in env.items()]
    lines += [
        f"{q(gantry)} preflight --site {q(site_path)} --level {q(run_level)} --drain --quiet"
        " || true",
        "exit 0",
    ]
    return "\n".join(lines) + "\n"

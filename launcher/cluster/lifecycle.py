"""`gantry cluster up` and `down`: plan (validate, render, check ports: nothing started on
bad input), start munged -> slurmctld -> one slurmd per node with readiness waits, and stop
exactly the recorded processes in the reverse order.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from launcher.atomic_write import write_text
from launcher.cluster import client, munge, processes
from launcher.cluster.layout import RunLayout
from launcher.cluster.ports import busy_ports
from launcher.cluster.render import RenderedConfig, check_supported, node_ports, render_all
from launcher.cluster.versions import SlurmFeatures, detect_version, features_for
from launcher.errors import GantryError, UserInputError
from launcher.plugins import install as plugin_install
from launcher.site_config import RUN_DIR_ENV, LoadedSite
from launcher.slurm.tools import require_tool

_BROKEN_STATES = ("drain", "inval", "fail")
"""Node states that will not turn idle by waiting (a config/host mismatch)."""

RUN_DIR_MARKER_ENV = "GANTRY_CLUSTER_RUN_DIR"
"""Set in every daemon's environment: lets `down` recognise what the daemons spawned."""


@dataclass(frozen=True)
class ClusterPlan:
    """Everything about an embedded cluster that is decided before anything starts."""

    site: LoadedSite
    """The site config and its file."""
    layout: RunLayout
    """Paths under the run dir."""
    features: SlurmFeatures
    """What the installed Slurm supports."""
    rendered: RenderedConfig
    """slurm.conf and topology.conf text."""
    ports: dict[str, int]
    """slurmd port of each node."""

    @property
    def nodes(self) -> list[str]:
        return list(self.ports)

    def daemons(self) -> list[str]:
        """Names of all daemons, in start order."""
        return ["munged", "slurmctld", *(f"slurmd-{n}" for n in self.nodes)]


@dataclass
class UpResult:
    """What `up` did."""

    plan: ClusterPlan
    already_running: bool = False
    """True when the cluster was already up (nothing was started)."""
    restarted_partial: list[str] = field(default_factory=list)
    """Daemons of a half-running earlier cluster that were stopped first."""
    seconds: float = 0.0
    """Wall time of the start-up."""


def daemon_user() -> str:
    """The account slurmctld/slurmd run as (and SlurmUser/SlurmdUser): the caller."""
    return pwd.getpwuid(os.geteuid()).pw_name


def make_plan(site: LoadedSite) -> ClusterPlan:
    """Validate that this host can run the site and render its configs (no side effects)."""
    config = site.config
    if not config.slurm.embedded:
        raise UserInputError(
            f"{site.path}: slurm.embedded: false; `gantry cluster` only runs embedded sites "
            "(set slurm.embedded: true, or use the site's own Slurm)"
        )
    features = features_for(detect_version())
    check_supported(config, features, str(site.path))
    topology_text: str | None = None
    if config.topology.file and config.topology.plugin != "flat":
        topo_path = site.resolve(config.topology.file)
        if topo_path.suffix != ".conf":
            raise UserInputError(
                f"{site.path}: topology.file: {config.topology.file!r} is not allowed for an "
                "embedded cluster (expected a Slurm topology.conf file, *.conf)"
            )
        try:
            topology_text = topo_path.read_text()
        except OSError as err:
            raise UserInputError(
                f"{site.path}: topology.file: cannot read {topo_path} ({err.strerror})"
            ) from None
    layout = RunLayout(site.run_dir())
    blocked = munge.unreachable_ancestor(layout.root, munge.munge_identity())
    if blocked is not None:
        mode = oct(blocked.stat().st_mode & 0o777)[2:]
        source = "slurm.run_dir" if config.slurm.run_dir else f"run dir (${RUN_DIR_ENV})"
        raise UserInputError(
            f"{site.path}: {source}: {layout.root} is not allowed: munged runs as user "
            f"munge and cannot enter {blocked} (mode {mode}); expected a directory every "
            "user can traverse, e.g. under /tmp"
        )
    plugin_lines = plugin_install.embedded_slurm_conf_lines(site)
    rendered = render_all(config, layout, features, daemon_user(), topology_text, plugin_lines)
    return ClusterPlan(site, layout, features, rendered, node_ports(config))


def live_records(layout: RunLayout) -> dict[str, processes.PidRecord]:
    """The recorded daemons that are still running (identity verified)."""
    return {r.daemon: r for r in processes.read_records(layout) if processes.is_ours(r)}


def _check_ports(plan: ClusterPlan) -> None:
    slurm = plan.site.config.slurm
    busy = busy_ports([slurm.controller_port, *plan.ports.values()])
    if not busy:
        return
    port = busy[0]
    if port == slurm.controller_port:
        field_name, what = "slurm.controller_port", "slurmctld"
    else:
        node = next(n for n, p in plan.ports.items() if p == port)
        field_name, what = "slurm.slurmd_port_base", f"slurmd of node {node}"
    raise UserInputError(
        f"{plan.site.path}: {field_name}: port {port} ({what}) is already in use "
        f"(expected free ports: {slurm.controller_port} and "
        f"{slurm.slurmd_port_base}..{max(plan.ports.values())}); pick other ports"
    )


def _write_configs(plan: ClusterPlan) -> None:
    layout = plan.layout
    for directory in layout.directories(plan.nodes):
        directory.mkdir(parents=True, exist_ok=True)
    os.chmod(layout.root, 0o755)
    _write_text(layout.slurm_conf, plan.rendered.slurm_conf)
    _write_text(layout.mpi_conf, plan.rendered.mpi_conf)
    if plan.rendered.gres_conf is not None:
        _link_gpu_devices(layout, plan.nodes, plan.site.config.nodes.gpus_per_node)
        _write_text(layout.gres_conf, plan.rendered.gres_conf)
    else:
        layout.gres_conf.unlink(missing_ok=True)
    if plan.rendered.topology_conf is not None:
        _write_text(layout.topology_conf, plan.rendered.topology_conf)
    else:
        layout.topology_conf.unlink(missing_ok=True)


def _link_gpu_devices(layout: RunLayout, nodes: list[str], gpus: int) -> None:
    """Each emulated node's GPU device files: nvidia0.. as links to /dev/null."""
    for node in nodes:
        directory = layout.gpu_device_dir(node)
        directory.mkdir(parents=True, exist_ok=True)
        for index in range(gpus):
            link = directory / f"nvidia{index}"
            if not link.is_symlink():
                link.unlink(missing_ok=True)
                link.symlink_to("/dev/null")


def _changed_config(plan: ClusterPlan) -> str | None:
    """The name of the first daemon config (slurm.conf, mpi.conf, gres.conf) on disk that
    differs from what the site renders now; None when all match."""
    wanted = {plan.layout.slurm_conf: plan.rendered.slurm_conf,
              plan.layout.mpi_conf: plan.rendered.mpi_conf,
              plan.layout.gres_conf: plan.rendered.gres_conf or ""}
    for path, text in wanted.items():
        on_disk = path.read_text() if path.exists() else ""
        if on_disk != text:
            return path.name
    return None


def _write_text(path: Path, text: str) -> None:
    write_text(path, text, mode=0o644)


def _daemon_env(layout: RunLayout) -> dict[str, str]:
    env = client.slurm_env(layout)
    env[RUN_DIR_MARKER_ENV] = str(layout.root)
    return env


def _last_line(path: Path) -> str:
    with contextlib.suppress(OSError):
        lines = [ln for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
        if lines:
            return lines[-1].strip()
    return ""


def _startup_failure(layout: RunLayout, daemon: str, what: str) -> GantryError:
    log = layout.daemon_log(daemon)
    detail = _last_line(log) or _last_line(layout.output_log(daemon))
    tail = f": {detail}" if detail else ""
    logs = dict.fromkeys([str(log), str(layout.output_log(daemon))])
    return GantryError(f"{daemon} {what}{tail} (see {' and '.join(logs)})")


def _wait(
    ready: Callable[[], bool],
    procs: dict[str, subprocess.Popen[bytes]],
    layout: RunLayout,
    deadline: float,
    waiting_for: str,
    interval: float = 0.2,
) -> None:
    """Poll ``ready`` until true; fail naming the log of any daemon that exited meanwhile."""
    while True:
        for daemon, proc in procs.items():
            code = proc.poll()
            if code is not None:
                raise _startup_failure(layout, daemon, f"exited during start-up (status {code})")
        if ready():
            return
        if time.monotonic() >= deadline:
            raise GantryError(waiting_for)
        time.sleep(interval)


def _start_all(plan: ClusterPlan, timeout: float) -> None:
    layout = plan.layout
    deadline = time.monotonic() + timeout
    env = _daemon_env(layout)

    who = munge.munge_identity()
    munge.prepare(layout, who)
    layout.munge_socket.unlink(missing_ok=True)
    procs = {
        "munged": processes.start_daemon(
            layout,
            "munged",
            munge.munged_argv(layout),
            env,
            user=who.user,
            group=None if who.user is None else who.gid,
        )
    }
    _wait(
        layout.munge_socket.exists,
        procs,
        layout,
        deadline,
        f"munged did not create {layout.munge_socket} within {timeout:.0f} s "
        f"(see {layout.daemon_log('munged')})",
    )

    conf = str(layout.slurm_conf)
    procs["slurmctld"] = processes.start_daemon(
        layout, "slurmctld", [require_tool("slurmctld"), "-D", "-c", "-f", conf], env
    )
    _wait(
        lambda: client.controller_answers(layout),
        procs,
        layout,
        deadline,
        f"slurmctld did not answer `scontrol ping` within {timeout:.0f} s "
        f"(see {layout.slurmctld_log})",
    )

    slurmd = require_tool("slurmd")
    for node in plan.nodes:
        procs[f"slurmd-{node}"] = processes.start_daemon(
            layout, f"slurmd-{node}", [slurmd, "-D", "-c", "-N", node, "-f", conf], env
        )
    pending: dict[str, str] = {}

    def all_idle() -> bool:
        states = client.node_states(layout)
        pending.clear()
        pending.update({n: states.get(n, "missing") for n in plan.nodes})
        for node, state in list(pending.items()):
            if state == "idle":
                del pending[node]
            elif state.rstrip("*~#$@!%").startswith(_BROKEN_STATES):
                reason = client.node_reason(layout, node) or "no reason given"
                raise GantryError(
                    f"node {node} is {state} after start-up ({reason}); see "
                    f"{layout.slurmd_log(node)} and {layout.slurmctld_log}"
                )
        return not pending

    try:
        _wait(all_idle, procs, layout, deadline, "", interval=0.3)
    except GantryError as err:
        if str(err):
            raise
        first = next(iter(pending))
        listing = ", ".join(f"{n}={s}" for n, s in pending.items())
        raise GantryError(
            f"nodes not idle after {timeout:.0f} s ({listing}); see "
            f"{layout.slurmd_log(first)} and {layout.slurmctld_log}"
        ) from None


def up(site: LoadedSite, timeout: float = 60.0) -> UpResult:
    """Bring the embedded cluster up; a no-op when it already runs with the same config."""
    plan = make_plan(site)
    layout = plan.layout
    result = UpResult(plan=plan)
    alive = live_records(layout)
    if alive:
        if set(alive) == set(plan.daemons()):
            changed = _changed_config(plan)
            if changed is not None:
                raise GantryError(
                    f"the cluster in {layout.root} runs with a different {changed} than "
                    f"{site.path} renders now; run `gantry cluster down` first"
                )
            result.already_running = True
            return result
        result.restarted_partial = sorted(alive)
        stop_all(layout)
    _check_ports(plan)
    started = time.monotonic()
    _write_configs(plan)
    if plan.site.config.plugins.enabled:  # build + write the suite slurm.conf points at
        plugin_install.perform_install(plugin_install.plan_install(plan.site))
    try:
        _start_all(plan, timeout)
    except BaseException:
        stop_all(layout)
        raise
    result.seconds = time.monotonic() - started
    return result


def _cancel_jobs(layout: RunLayout, timeout: float = 20.0) -> None:
    jobs = client.active_job_ids(layout)
    if not jobs:
        return
    client.run(layout, "scancel", jobs)
    deadline = time.monotonic() + timeout
    while client.active_job_ids(layout) and time.monotonic() < deadline:
        time.sleep(0.3)


def _spawned_by_cluster(layout: RunLayout) -> list[int]:
    """Processes (slurmstepd, job steps) whose environment carries this run dir's marker."""
    marker = f"{RUN_DIR_MARKER_ENV}={layout.root}".encode()
    found: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if marker in environ.split(b"\0"):
            found.append(int(entry.name))
    return found


def stop_all(layout: RunLayout) -> dict[str, str]:
    """Stop every recorded daemon (slurmd, slurmctld, munged order) and whatever they
    spawned; returns daemon -> outcome. Jobs are cancelled first while slurmctld runs."""
    records = processes.read_records(layout)
    alive = {r.daemon for r in records if processes.is_ours(r)}
    if "slurmctld" in alive and "munged" in alive:
        with contextlib.suppress(GantryError):
            _cancel_jobs(layout)

    def order(record: processes.PidRecord) -> int:
        return {"munged": 2, "slurmctld": 1}.get(record.daemon, 0)

    outcomes: dict[str, str] = {}
    by_tier: dict[int, list[processes.PidRecord]] = {}
    for record in records:
        by_tier.setdefault(order(record), []).append(record)
    for tier in sorted(by_tier):
        tier_records = by_tier[tier]
        for record in tier_records:
            if processes.is_ours(record):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(record.pid, signal.SIGTERM)
        for record in tier_records:
            outcome = processes.stop(record)
            if record.daemon in alive and outcome == "not running":
                outcome = "stopped"
            outcomes[record.daemon] = outcome
            processes.remove_record(layout, record.daemon)
    for pid in _spawned_by_cluster(layout):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return outcomes


def down(site: LoadedSite) -> tuple[RunLayout, dict[str, str]]:
    """Stop the site's embedded cluster; returns its layout and daemon -> outcome."""
    layout = RunLayout(site.run_dir())
    return layout, stop_all(layout)

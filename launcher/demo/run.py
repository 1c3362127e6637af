"""The demo flow, unattended: embedded cluster up -> native trainer built for the site -> token
shards from the repository's docs -> fault drill on one planned node -> `gantry submit` of a
pp 2 x dp 2 GPT-2 job on 4 nodes + 1 spare, followed with the live view (the gate excludes and
drains the broken node, the spare takes over) -> `gantry report` -> the simulated fault's
drain is lifted again (the node was never broken).

Each step prints the gantry command it stands for, so the demo doubles as a walkthrough.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console
from rich.text import Text

import launcher
from launcher.build import build_site
from launcher.cluster import lifecycle
from launcher.cluster.client import slurm_env
from launcher.cluster.layout import RunLayout
from launcher.demo.corpus import corpus_files
from launcher.demo.faults import write_fake_sysfs
from launcher.demo.job import NAME, demo_job
from launcher.demo.plan import demo_placement
from launcher.errors import GantryError, UserInputError
from launcher.job_dir import JobDir
from launcher.live.follow import follow_job
from launcher.live.summary import RunSummary
from launcher.preflight.drain_reason import is_gantry_reason
from launcher.preflight.result import STATUSES, worst
from launcher.report.build import ReportResult, build_report
from launcher.report.checkpoints import describe as describe_checkpoints
from launcher.report.sources import resolve_sources
from launcher.site_check.run import check_site
from launcher.site_config import LoadedSite, load_site
from launcher.slurm import CommandRunner, SlurmClient, make_client

REPO_ROOT = Path(launcher.__file__).resolve().parent.parent
STEPS = 6


@dataclass(frozen=True)
class DemoOptions:
    """What the command line chose."""

    site: Path | None
    """Site config of the embedded cluster (None: site_configs/local.yaml)."""
    work_dir: Path | None
    """Where the demo's files go (None: <cluster run dir>/demo)."""
    steps: int = 60
    """Training steps."""
    faulty: str | None = None
    """Node to break (None: the second planned rank node)."""
    restore: bool = True
    """Lift the simulated fault's drain at the end."""
    timeout_s: float = 600.0
    """Cancel the training job when it runs longer than this."""


@dataclass
class DemoResult:
    """What the demo did (the --json output)."""

    job_id: str = ""
    """Slurm job id."""
    job_dir: str = ""
    """gantry job directory."""
    faulty: str = ""
    """The node the fault drill broke."""
    planned: list[str] = field(default_factory=list)
    """Planned nodes (rank order, then the spare)."""
    summary: RunSummary | None = None
    """The live view's end summary."""
    report: ReportResult | None = None
    """The report."""
    restored: bool = False
    """The faulty node's gantry drain was lifted."""
    seconds: dict[str, float] = field(default_factory=dict)
    """Wall time per demo step."""
    site_check: str = ""
    """`gantry site check`'s verdict on the demo's site: PASS, WARN or FAIL."""

    def to_json(self) -> dict[str, Any]:
        return {"job_id": self.job_id, "job_dir": self.job_dir, "faulty_node": self.faulty,
                "planned": self.planned, "restored": self.restored,
                "summary": None if self.summary is None else self.summary.to_json(),
                "report": None if self.report is None else self.report.to_json(),
                "seconds": {k: round(v, 1) for k, v in self.seconds.items()},
                "site_check": self.site_check}


class _Steps:
    """Numbered step headers, the command each stands for, and their wall times."""

    def __init__(self, console: Console, result: DemoResult) -> None:
        self.console, self.result = console, result
        self.index, self.name, self.started = 0, "", 0.0

    def begin(self, name: str, title: str) -> None:
        self.end()
        self.index += 1
        self.name, self.started = name, time.monotonic()
        self.console.rule(Text(f"{self.index}/{STEPS} {title}", style="bold"), align="left")

    def command(self, argv: list[str]) -> None:
        self.console.print(f"$ {shlex.join(argv)}", style="cyan", markup=False,
                           highlight=False)

    def end(self) -> None:
        if self.name:
            self.result.seconds[self.name] = time.monotonic() - self.started
            self.name = ""


def _gantry(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "launcher", *args], capture_output=True,
                          text=True, env=env, cwd=REPO_ROOT, check=False)


def _checked_site(path: Path | None) -> LoadedSite:
    site = load_site(path)
    if not site.config.slurm.embedded:
        raise UserInputError(f"{site.path}: slurm.embedded: false is not allowed for "
                             "`gantry demo` (it runs on the embedded cluster)")
    if len(site.config.nodes.node_list()) < 5:
        raise UserInputError(f"{site.path}: nodes.names: the demo needs >= 5 nodes "
                             "(4 that train + 1 spare)")
    return site


def run_demo(opts: DemoOptions, console: Console) -> DemoResult:
    """Run the whole demo; GantryError when a step fails (the cluster stays up)."""
    if opts.steps < 2:
        raise UserInputError(f"--steps: {opts.steps} is not allowed (expected >= 2)")
    if opts.timeout_s <= 0:
        raise UserInputError(f"--timeout: {opts.timeout_s} is not allowed (expected seconds > 0)")
    site = _checked_site(opts.site)
    if opts.faulty is not None and opts.faulty not in site.config.nodes.node_list():
        raise UserInputError(f"--faulty: {opts.faulty!r} is not allowed (expected a node of "
                             f"{site.path}: {site.config.nodes.names})")
    result = DemoResult()
    steps = _Steps(console, result)
    steps.begin("cluster", "embedded Slurm cluster")
    steps.command(["gantry", "cluster", "up", "--site", str(site.path)])
    up = lifecycle.up(site)
    layout = RunLayout(site.run_dir())
    state = "already up" if up.already_running else f"up in {up.seconds:.1f} s"
    console.print(f"cluster {site.config.slurm.cluster_name} {state}: "
                  f"{len(site.config.nodes.node_list())} nodes, run dir {layout.root}",
                  markup=False)
    env = {**slurm_env(layout), "PYTHONPATH": os.pathsep.join(
        p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH", "")) if p)}
    client = make_client(site.config.slurm.client, runner=CommandRunner(env=env))
    work = (opts.work_dir or layout.root / "demo").resolve()
    run_dir = work / time.strftime("run-%Y%m%d-%H%M%S")
    run_dir.mkdir(parents=True, exist_ok=True)

    steps.begin("build", "native trainer for the site")
    steps.command(["gantry", "build", "--site", str(site.path)])
    built = build_site(site)
    console.print(f"{'up to date' if built.cached else 'built'}: {built.library}", markup=False)
    steps.command(["gantry", "site", "check", "--site", str(site.path)])
    result.site_check = _site_check(site, console)

    steps.begin("data", "token shards from the repository's docs")
    files = corpus_files(REPO_ROOT)
    data_dir = run_dir / "data"  # per run: gantry data refuses a directory of older shards
    args = ["data", *(str(f.relative_to(REPO_ROOT)) for f in files), "--out", str(data_dir),
            "--val-fraction", "0.05"]
    steps.command(["gantry", *args])
    made = _gantry(args, env)
    if made.returncode != 0:
        raise GantryError(f"gantry data failed: {made.stderr.strip()}")
    console.print(made.stdout.strip(), markup=False)

    steps.begin("fault", "fault drill on a planned node")
    spec = demo_job(str(data_dir / "train_*.bin"), run_dir / "sysfs", run_dir / "state",
                    opts.steps)
    job_path = run_dir / f"{NAME}.yaml"
    job_path.write_text(yaml.safe_dump(spec, sort_keys=False), encoding="utf-8")
    placement = demo_placement(job_path, site.path, client)
    result.planned = [*placement.rank_nodes, *placement.spare_nodes]
    faulty = opts.faulty or placement.rank_nodes[1]
    result.faulty = faulty
    write_fake_sysfs(run_dir / "sysfs", [faulty])
    console.print(f"planned: {', '.join(placement.rank_nodes)} train, "
                  f"{', '.join(placement.spare_nodes)} is the spare", markup=False)
    console.print(f"{faulty}: InfiniBand port mlx5_0/1 set DOWN for preflight (fake sysfs "
                  f"{run_dir / 'sysfs'}, GANTRY_SYSFS_ROOT in the job's env); job spec "
                  f"{job_path}", markup=False)

    steps.begin("train", "submit and follow (pp 2 x dp 2, 4 nodes + 1 spare)")
    jobs_dir = work / "jobs"
    args = ["submit", str(job_path), "--site", str(site.path), "--jobs-dir", str(jobs_dir)]
    steps.command(["gantry", *args, "--follow"])
    submitted = _gantry([*args, "--json"], env)
    if submitted.returncode != 0:
        raise GantryError(f"gantry submit failed: {submitted.stderr.strip()}")
    record = json.loads(submitted.stdout)
    result.job_id, result.job_dir = str(record["job_id"]), str(record["job_dir"])
    console.print(f"submitted job {result.job_id}: {result.job_dir}", markup=False)
    info, result.summary = follow_job(JobDir(Path(result.job_dir)), result.job_id, client,
                                      console, timeout_s=opts.timeout_s)
    if info is not None:
        JobDir(Path(result.job_dir)).update_meta(last_state=info.to_json())

    steps.begin("report", "report: loss curve, pipeline timeline, trace")
    steps.command(["gantry", "report", result.job_id, "--jobs-dir", str(jobs_dir)])
    try:
        result.report = build_report(resolve_sources(result.job_id, jobs_dir))
        for label, path in (("html", result.report.html), ("loss", result.report.loss_png),
                            ("timeline", result.report.timeline_png),
                            ("trace", result.report.trace)):
            if path is not None:
                console.print(f"  {label:<9}{path}", markup=False)
        if result.report.checkpoints:
            console.print("  checkpoints "
                          + describe_checkpoints(list(result.report.checkpoints)), markup=False)
    except GantryError as err:
        console.print(f"no report: {err}", markup=False)
    steps.end()
    result.restored = opts.restore and _lift_drain(client, faulty, console)
    _closing(console, site, result)
    return result


def _site_check(site: LoadedSite, console: Console) -> str:
    """`gantry site check` in one line (and a line per warning or failure); its verdict."""
    checks = check_site(site)
    verdict = worst(c.status for c in checks)
    counts = Counter(c.status for c in checks)
    console.print(f"site check: {verdict} ("
                  + ", ".join(f"{counts[s]} {s}" for s in STATUSES if counts[s]) + ")",
                  markup=False)
    for check in checks:
        if check.status in ("WARN", "FAIL"):
            console.print(f"  {check.status} {check.id}: {check.observed}", markup=False)
    return verdict


def _lift_drain(client: SlurmClient, node: str, console: Console) -> bool:
    """Resume the drill's node if gantry drained it (its fault was simulated)."""
    states = {n.name: n for n in client.node_states([node])}
    info = states.get(node)
    if info is None or not info.drained or not is_gantry_reason(info.reason):
        return False
    client.resume([node])
    console.print(f"{node}: drain '{info.reason}' lifted (the fault was simulated; on a real "
                  "site it stays until preflight passes again)", markup=False)
    return True


def _closing(console: Console, site: LoadedSite, result: DemoResult) -> None:
    total = sum(result.seconds.values())
    console.print(f"demo done in {total:.0f} s (" + ", ".join(
        f"{k} {v:.0f} s" for k, v in result.seconds.items()) + ")", markup=False)
    console.print(f"next: gantry status {result.job_id} --jobs-dir "
                  f"{Path(result.job_dir).parent}; gantry cluster down --site {site.path}",
                  markup=False)

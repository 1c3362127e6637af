"""`gantry site topology`: the topology the site's Slurm runs (`scontrol show topology`) as a
topology.conf or topology.yaml file for the site config's `topology.file`."""

from __future__ import annotations

import os
from pathlib import Path

from launcher.errors import GantryError, UserInputError
from launcher.job_placement import site_client_runner, slurm_conf_problem
from launcher.site_check.live_facts import READ_TIMEOUT_S
from launcher.site_config import LoadedSite
from launcher.slurm.runner import SlurmCommandError, first_line
from topology.build import build_topology
from topology.conf_format import write_topology_conf
from topology.model import Topology
from topology.scontrol_format import parse_scontrol_topology
from topology.yaml_format import write_topology_yaml


def read_slurm_topology(site: LoadedSite) -> Topology:
    """The topology the site's Slurm reports, every node it names included; GantryError when
    Slurm cannot be asked or reports none (a flat cluster)."""
    problem = slurm_conf_problem(site)
    if problem is not None:
        raise GantryError(problem)
    runner = site_client_runner(site, quick=True, timeout_s=READ_TIMEOUT_S)
    try:
        shown = runner.run(["scontrol", "show", "topology"], check=False)
    except SlurmCommandError as err:
        raise GantryError(f"Slurm not reachable ({err})") from None
    if shown.returncode != 0:
        raise GantryError("scontrol show topology: "
                          f"{first_line(shown.stderr) or f'exit status {shown.returncode}'}")
    if not any(line.startswith(("SwitchName=", "BlockName="))
               for line in shown.stdout.splitlines()):
        raise GantryError("Slurm reports no topology (no switches or blocks: a flat cluster, "
                          "or no TopologyPlugin=): nothing to write")
    try:
        return build_topology(parse_scontrol_topology(shown.stdout))
    except UserInputError as err:
        raise GantryError(f"Slurm's topology does not parse: {err}") from None


def topology_format(path: Path | None, chosen: str | None) -> str:
    """"conf" or "yaml": --format, else the output file's extension (.yaml/.yml), else conf."""
    if chosen is not None:
        return chosen
    return "yaml" if path is not None and path.suffix in (".yaml", ".yml") else "conf"


def render_topology(topology: Topology, fmt: str) -> str:
    """The topology as topology.conf or topology.yaml text."""
    return write_topology_yaml(topology) if fmt == "yaml" else write_topology_conf(topology)


def write_new_file(path: Path, text: str, force: bool) -> None:
    """Write ``text`` to ``path`` atomically; an existing file only with ``force``."""
    if path.exists() and not force:
        raise UserInputError(f"--out: {path} exists (expected a new file, or pass --force)")
    if not path.parent.is_dir():
        raise UserInputError(f"--out: {path.parent} is not a directory")
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)

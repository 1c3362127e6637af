"""`gantry site topology`: the topology the site's Slurm runs (`scontrol show topology`) as a
topology.conf or topology.yaml file for the site config's `topology.file`."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from launcher.atomic_write import FileExists, WriteError, write_text
from launcher.errors import GantryError, UserInputError
from launcher.site_check.live_facts import READ_TIMEOUT_S
from launcher.site_config import LoadedSite
from launcher.site_slurm import site_client_runner, slurm_conf_problem
from launcher.slurm.runner import SlurmCommandError, first_line
from topology.build import build_topology
from topology.conf_format import write_topology_conf
from topology.model import Topology
from topology.scontrol_format import parse_scontrol_topology
from topology.yaml_format import write_topology_yaml

TopologyFormat = Literal["conf", "yaml"]


def read_slurm_topology(site: LoadedSite) -> Topology:
    """The topology the site's Slurm reports, every node it names included (its warnings,
    e.g. a node listed under two leaves and kept under the first, in ``warnings``);
    GantryError when Slurm cannot be asked or reports none (a flat cluster)."""
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
    listed = any(line.lstrip().startswith(("SwitchName=", "BlockName="))
                 for line in shown.stdout.splitlines())
    if not listed and shown.stderr.strip():  # 22.05 exits 0 when the controller is away
        raise GantryError(f"scontrol show topology: {first_line(shown.stderr)}")
    if not listed:
        raise GantryError("Slurm reports no topology (no switches or blocks: a flat cluster, "
                          "or no TopologyPlugin=): nothing to write")
    try:
        return build_topology(parse_scontrol_topology(shown.stdout))
    except UserInputError as err:
        raise GantryError(f"Slurm's topology cannot be written as a gantry site topology: "
                          f"{err}") from None


def topology_format(path: Path | None, chosen: TopologyFormat | None) -> TopologyFormat:
    """--format, else the output file's extension (.yaml/.yml: yaml), else conf; a --format
    the extension contradicts is refused (the site loads topology.file by its extension)."""
    by_suffix: TopologyFormat | None = None
    if path is not None:
        by_suffix = "yaml" if path.suffix in (".yaml", ".yml") else "conf"
    if chosen is not None and by_suffix is not None and chosen != by_suffix:
        raise UserInputError(f"--format: {chosen} is not allowed with --out {path} (expected "
                             f"{by_suffix}: a site reads topology.file by its extension, "
                             ".yaml/.yml as topology.yaml, anything else as topology.conf)")
    return chosen or by_suffix or "conf"


def render_topology(topology: Topology, fmt: TopologyFormat) -> str:
    """The topology as topology.conf or topology.yaml text."""
    return write_topology_yaml(topology) if fmt == "yaml" else write_topology_conf(topology)


def check_out_path(path: Path, force: bool) -> Path:
    """Where --out will write (through a link with ``force``); UserInputError when it cannot:
    a directory, an existing name without ``force``, a link loop, a missing parent, a name
    the file system refuses. Checked before Slurm is asked, again when writing."""
    try:
        if path.is_dir():
            raise UserInputError(f"--out: {path} is a directory (expected a file name)")
        if (path.exists() or path.is_symlink()) and not force:
            raise UserInputError(f"--out: {path} exists (expected a new file, or pass --force)")
        target = path.resolve() if force and path.is_symlink() else path
        if not target.parent.is_dir():
            raise UserInputError(f"--out: {target.parent} is not a directory")
    except (OSError, RuntimeError) as err:  # a name too long, a link loop
        raise UserInputError(f"--out: {path} is not allowed ({err})") from None
    return target


def write_new_file(path: Path, text: str, force: bool) -> None:
    """Write ``text`` to ``path``: a new file (an existing one, a link included, is kept
    unless ``force``, which replaces it keeping its mode, or writes through a link), complete
    or not at all (launcher/atomic_write.py: linked into place, or renamed with ``force``)."""
    target = check_out_path(path, force)
    try:
        write_text(target, text, overwrite=force)
    except FileExists:
        raise UserInputError(f"--out: {path} exists (expected a new file, or pass --force)"
                             ) from None
    except WriteError as err:
        raise GantryError(f"--out: cannot write {path}: {err.reason}") from None

"""Which Slurm is installed (from `slurmd -V`) and which features that version supports.

Every version-dependent choice of the embedded cluster is made here, in `SlurmFeatures`,
so that rendering code asks "does this Slurm support X" instead of comparing numbers.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from functools import total_ordering

from launcher.cluster import tools
from launcher.errors import GantryError

_VERSION_RE = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?")


@total_ordering
@dataclass(frozen=True)
class SlurmVersion:
    """A Slurm release number, e.g. 22.05.8."""

    major: int
    """Year of the release series, e.g. 22."""
    minor: int
    """Month of the release series, e.g. 5."""
    micro: int = 0
    """Maintenance release, e.g. 8."""

    @classmethod
    def parse(cls, text: str) -> SlurmVersion:
        """Parse the output of `slurmd -V` ("slurm-wlm 22.05.8", "slurm 24.11.3")."""
        match = _VERSION_RE.search(text)
        if match is None:
            raise ValueError(f"no Slurm version number in {text.strip()!r}")
        major, minor, micro = match.groups()
        return cls(int(major), int(minor), int(micro or 0))

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, SlurmVersion):
            return NotImplemented
        return (self.major, self.minor, self.micro) < (other.major, other.minor, other.micro)

    def __str__(self) -> str:
        return f"{self.major:02d}.{self.minor:02d}.{self.micro}"


BLOCK_TOPOLOGY_SINCE = SlurmVersion(23, 11)
"""topology/block (BlockName=/BlockSizes= in topology.conf) first shipped in Slurm 23.11."""


@dataclass(frozen=True)
class SlurmFeatures:
    """What the installed Slurm supports, as far as the embedded cluster cares."""

    version: SlurmVersion
    """The version these features were derived from."""
    block_topology: bool
    """topology/block is available (Slurm >= 23.11)."""
    topology_plugins: tuple[str, ...]
    """Values of the site's `topology.plugin` this Slurm can run."""


def features_for(version: SlurmVersion) -> SlurmFeatures:
    """The feature set of a given Slurm version (pure; unit-tested for 22.05 and 24.11)."""
    block = version >= BLOCK_TOPOLOGY_SINCE
    plugins = ("flat", "tree", "block") if block else ("flat", "tree")
    return SlurmFeatures(version=version, block_topology=block, topology_plugins=plugins)


def detect_version() -> SlurmVersion:
    """Run `slurmd -V` (path overridable, see `tools`) and parse its version."""
    slurmd = tools.path_of("slurmd")
    try:
        result = subprocess.run(
            [slurmd, "-V"], capture_output=True, text=True, check=False, timeout=30
        )
    except OSError as err:
        raise GantryError(
            f"cannot run {slurmd} -V ({err.strerror}); is slurm-wlm installed?"
        ) from None
    try:
        return SlurmVersion.parse(result.stdout + result.stderr)
    except ValueError as err:
        raise GantryError(f"{slurmd} -V: {err}") from None

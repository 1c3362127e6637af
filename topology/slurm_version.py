"""Slurm's release number and the one reader of it: every version gantry reads (``slurmd -V``,
``sinfo -V``, ``sbatch --version``, a ``--slurm-version`` flag) is parsed here."""

from __future__ import annotations

import re
from typing import NamedTuple

from topology.errors import TopologyInputError

_VERSION = re.compile(r"(?<![0-9.])([0-9]{1,9})\.([0-9]{1,9})(?:\.([0-9]{1,9}))?(?![0-9])")


class SlurmVersion(NamedTuple):
    """A Slurm release, e.g. 22.05.8 (what `slurmd -V` / `sinfo -V` print)."""

    major: int
    """Year part, e.g. 24."""
    minor: int
    """Month part, e.g. 11."""
    micro: int = 0
    """Maintenance release."""

    @staticmethod
    def parse(text: str, where: str = "slurm version", exact: bool = False) -> SlurmVersion:
        """The first X.Y[.Z] in ``text`` (``slurmd -V``, ``sinfo -V``, ``sbatch --version``
        output: "slurm-wlm 22.05.8", "slurm 23.11.0-0rc1"), each part 1-9 ASCII digits not
        run into other digits or dots; ``where`` names its origin. ``exact``: ``text`` must be
        the version alone (a flag's value: "-1.2" is no version). The one reader of Slurm's
        version: every caller parses with it."""
        match = (_VERSION.fullmatch(text.strip()) if exact else _VERSION.search(text))
        if match is None:
            raise TopologyInputError(
                f"{where}: {text!r} is not allowed (expected e.g. 22.05.8 or 24.11)"
            )
        return SlurmVersion(int(match[1]), int(match[2]), int(match[3] or 0))

    def __str__(self) -> str:
        return f"{self.major}.{self.minor:02d}.{self.micro}"

"""The one reader of Slurm's version: tool output and a --slurm-version flag, each part a
bounded run of ASCII digits (a 5000-digit part is bad input, not a crash in int())."""

from __future__ import annotations

import pytest

from launcher.slurm.records import SlurmParseError, parse_version
from topology.errors import TopologyInputError
from topology.slurm_version import SlurmVersion


@pytest.mark.parametrize(("text", "expected"), [
    ("slurm-wlm 22.05.8\n", (22, 5, 8)), ("slurm 24.11.1", (24, 11, 1)),
    ("slurm 23.11.0-0rc1", (23, 11, 0)), ("slurm 25.05", (25, 5, 0)),
])
def test_one_version_reader(text: str, expected: tuple[int, int, int]) -> None:
    assert parse_version(text, "sbatch --version") == expected
    version = SlurmVersion.parse(text)
    assert (version.major, version.minor, version.micro) == expected


@pytest.mark.parametrize("text", ["9" * 5000 + ".05", "22..05", "1" * 10 + ".05", "²².05"])
def test_a_version_flag_that_is_no_version_is_bad_input(text: str) -> None:
    with pytest.raises(TopologyInputError, match=r"--slurm-version: .* is not allowed"):
        SlurmVersion.parse(text, "--slurm-version", exact=True)
    with pytest.raises(SlurmParseError, match="sbatch --version: cannot read a Slurm version"):
        parse_version("slurm " + text, "sbatch --version")

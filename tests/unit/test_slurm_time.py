"""Slurm's time-limit formats as gantry reads them (launcher/slurm_time.py); the embedded
cluster test (tests/integration/test_slurm_conventions_cluster.py) checks them against sbatch."""

from __future__ import annotations

import pytest

from launcher.errors import UserInputError
from launcher.job_spec import JobSpec
from launcher.slurm_time import MAX_SECONDS, time_limit_minutes, time_limit_seconds
from launcher.typed_config import from_mapping


@pytest.mark.parametrize(("text", "seconds"), [
    ("30", 1800),                # MM
    ("00:30", 30),               # MM:SS: 30 seconds, not 30 minutes
    ("0:90", 90),                # fields are not bounded
    ("01:00:00", 3600),          # HH:MM:SS
    ("1-12", 129600),            # D-HH
    ("1-12:30", 131400),         # D-HH:MM
    ("2-00:00:05", 172805),      # D-HH:MM:SS
])
def test_formats(text: str, seconds: int) -> None:
    assert time_limit_seconds(text) == seconds


def test_seconds_round_up_to_minutes() -> None:
    assert time_limit_minutes("00:30") == 1 and time_limit_minutes("1:01") == 2
    assert time_limit_minutes("1-12") == 2160


@pytest.mark.parametrize("text", ["", "0", "00:00", "1:2:3:4", "1-2-3", "1-", "-5", "1.5",
                                  "UNLIMITED", "1h", " 30", "30 ", "\u0663\u0660",
                                  str(MAX_SECONDS // 60 + 1)])
def test_refused(text: str) -> None:
    assert time_limit_seconds(text) is None
    with pytest.raises(UserInputError, match=r"resources\.time_limit: .* is not allowed "
                       r"\(expected Slurm's MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS"):
        from_mapping(JobSpec, {"name": "j", "resources": {"time_limit": text}}, "job.yaml")

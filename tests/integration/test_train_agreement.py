"""The trainer's error agreement (launcher/train/agreement.py) under mpirun with 3 ranks: a
GantryError raised in an ``agreed`` block on one rank makes every rank raise when the block
ends, rank 0 with the first failed rank's message and exit status, the others QuietFailure
with that status; a block that fails nowhere raises nowhere; any other exception is not
agreed on."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.pipeline_helpers import MPI_ENV, REPO

pytestmark = pytest.mark.slow

PROGRAM = """
import json, sys
from pathlib import Path
from mpi4py import MPI
from launcher.errors import GantryError, UserInputError
from launcher.train.agreement import agreed

world = MPI.COMM_WORLD
rank = world.Get_rank()
failing = {int(r): kind for r, kind in json.loads(sys.argv[1]).items()}
outcome = "none"
try:
    with agreed(world):
        kind = failing.get(rank)
        if kind == "input":
            raise UserInputError(f"rank {rank}: bad input")
        if kind == "failure":
            raise GantryError(f"rank {rank}: failed")
        if kind == "other":
            raise KeyError(rank)
except GantryError as err:
    outcome = [type(err).__name__, str(err), err.exit_status]
except KeyError as err:
    outcome = ["KeyError", str(err), None]
Path(sys.argv[2], f"{rank}.json").write_text(json.dumps(outcome))
"""


def _outcomes(tmp_path: Path, failing: dict[int, str]) -> dict[int, object]:
    """Each rank's outcome (in a file of its own: output lines of ranks interleave)."""
    cmd = ["mpirun", "--oversubscribe", "-np", "3", sys.executable, "-c", PROGRAM,
           json.dumps(failing), str(tmp_path)]
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH", "")]))
    env = {**os.environ, **MPI_ENV, "PYTHONPATH": path}
    result = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env,
                            cwd=REPO, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    return {rank: json.loads((tmp_path / f"{rank}.json").read_text()) for rank in range(3)}


def test_a_block_that_fails_nowhere_raises_nowhere(tmp_path: Path) -> None:
    assert _outcomes(tmp_path, {}) == {0: "none", 1: "none", 2: "none"}


def test_one_ranks_error_is_raised_on_every_rank_and_reported_by_rank_0(tmp_path: Path) -> None:
    assert _outcomes(tmp_path, {2: "input"}) == {
        0: ["UserInputError", "rank 2: bad input", 2],
        1: ["QuietFailure", "rank 2: bad input", 2],
        2: ["QuietFailure", "rank 2: bad input", 2],
    }


def test_the_first_failed_rank_names_the_error(tmp_path: Path) -> None:
    assert _outcomes(tmp_path, {1: "failure", 2: "input"}) == {
        0: ["GantryError", "rank 1: failed", 1],
        1: ["QuietFailure", "rank 1: failed", 1],
        2: ["QuietFailure", "rank 1: failed", 1],
    }


def test_other_exceptions_are_not_agreed_on(tmp_path: Path) -> None:
    assert _outcomes(tmp_path, {0: "other", 1: "other", 2: "other"}) == {
        0: ["KeyError", "0", None], 1: ["KeyError", "1", None], 2: ["KeyError", "2", None]}

"""Reading the rank labels back (launcher/step_labels.py) and `gantry logs --rank` on a job
directory (launcher/live/job_log.py, launcher/commands/logs.py).

The labelled lines are as the launchers print them (seen on the embedded cluster: srun
22.05, Open MPI 4.1.4; torch 2.13's torchrun with gantry's prefix, run locally, under the
srun label of its node): each rank writes a whole line, then a piece without a newline and,
0.2 s later, the rest of that line. Open MPI and torchrun forward the piece at once, so
another rank's tag follows it on the same line of the file. The real launchers run in
tests/integration/test_ddp_command_jobs.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.job_dir import JobDir, record_submission
from launcher.live.job_log import read_log
from launcher.step_labels import RankFilter, RankLine, scheme_for, split_ranks, strip_label

REPO = Path(__file__).resolve().parents[2]

SRUN = """\
[gantry 2026-12-03T09:00:00Z] launching 4 ranks on n1,n2
1: out 1
3: out 3
1: partial 1
0: out 0
2: out 2
0: partial 0
2: partial 2
3: partial 3
srun: error: n2: task 3: Exited with exit code 1
[gantry 2026-12-03T09:00:05Z] training step failed with exit code 1
"""
SRUN_WIDE = " 0: o 0\n11: o 11\n 9: \n10: o 10\n"
MPIRUN = """\
[1,0]<stdout>:out 0
[1,0]<stdout>:partial 0[1,1]<stdout>:out 1
[1,1]<stdout>:partial 1[1,3]<stdout>:out 3
[1,3]<stdout>:partial 3[1,2]<stdout>:out 2
[1,2]<stdout>:partial 2[1,3]<stdout>: rest
[1,2]<stdout>: rest
[1,0]<stdout>: rest
[1,1]<stdout>: rest
mpirun rc 0
"""
TORCHRUN = """\
0: [torchrun:0] hello from 0
0: [torchrun:0] partial 0[torchrun:2] hello from 2
1: [torchrun:3] hello from 3
0: [torchrun:1] hello from 1
0: [torchrun:1] partial 1[torchrun:2] partial 2[torchrun:0]  rest
0: [torchrun:2]  rest
1: W1203 torch.distributed.run: the agent's own line
1: [torchrun:3] partial 3
0: [torchrun:1]  rest
"""


def lines_of(text: str, scheme: str) -> list[RankLine]:
    return list(split_ranks(text.splitlines(), scheme))  # type: ignore[arg-type]


def by_rank(text: str, scheme: str) -> dict[int | None, list[str]]:
    found: dict[int | None, list[str]] = {}
    for line in lines_of(text, scheme):
        found.setdefault(line.rank, []).append(line.text)
    return found


def test_srun_labels_are_task_numbers_and_other_lines_no_rank() -> None:
    found = by_rank(SRUN, "srun")
    assert found[0] == ["out 0", "partial 0"] and found[3] == ["out 3", "partial 3"]
    assert found[None] == ["[gantry 2026-12-03T09:00:00Z] launching 4 ranks on n1,n2",
                           "srun: error: n2: task 3: Exited with exit code 1",
                           "[gantry 2026-12-03T09:00:05Z] training step failed with exit "
                           "code 1"]
    # Ten tasks or more: right-aligned numbers; an empty line stays a (empty) line.
    assert lines_of(SRUN_WIDE, "srun") == [RankLine(0, "o 0"), RankLine(11, "o 11"),
                                            RankLine(9, ""), RankLine(10, "o 10")]


def test_open_mpi_pieces_are_joined_back_into_each_ranks_lines() -> None:
    found = by_rank(MPIRUN, "mpirun")
    for rank in range(4):
        assert found[rank] == [f"out {rank}", f"partial {rank} rest"], found
    assert found[None] == ["mpirun rc 0"]
    errors = by_rank("[1,2]<stderr>:Traceback\n[1,0]<stddiag>:note\n", "mpirun")
    assert errors == {2: ["Traceback"], 0: ["note"]}


def test_torchrun_ranks_inside_the_node_labels() -> None:
    found = by_rank(TORCHRUN, "srun+torchrun")
    assert found[0] == ["hello from 0", "partial 0 rest"]
    assert found[1] == ["hello from 1", "partial 1 rest"]
    assert found[2] == ["hello from 2", "partial 2 rest"]
    assert found[3] == ["hello from 3", "partial 3"]  # never finished: kept at the end
    assert found[None] == ["W1203 torch.distributed.run: the agent's own line"]
    # The same agents under mpirun: Open MPI's tag outside, torchrun's inside.
    nested = "[1,0]<stdout>:[torchrun:1] a[1,1]<stdout>:[torchrun:2] b\n[1,0]<stdout>:c\n"
    assert by_rank(nested, "mpirun+torchrun") == {2: ["b"], 1: ["ac"]}


def test_a_filter_fed_any_chunks_gives_the_ranks_lines() -> None:
    for scheme, text in (("srun", SRUN), ("mpirun", MPIRUN), ("srun+torchrun", TORCHRUN)):
        for rank in range(4):
            whole = "".join(f"{line.text}\n" for line in lines_of(text, scheme)
                            if line.rank == rank)
            for size in (1, 7, len(text)):
                keep = RankFilter(scheme, rank)  # type: ignore[arg-type]
                got = "".join(keep.feed(text[i:i + size]) for i in range(0, len(text), size))
                assert got + keep.finish() == whole, (scheme, rank, size)


def test_a_users_text_that_looks_like_a_label_is_text() -> None:
    assert lines_of("0: rank 1: [1]: x [rank1]: y\n", "srun") == [
        RankLine(0, "rank 1: [1]: x [rank1]: y")]
    assert lines_of("1: [torchrun:1] [torchrun] step 3: ok\n", "srun+torchrun") == [
        RankLine(1, "[torchrun] step 3: ok")]


def test_scheme_and_strip_label() -> None:
    assert scheme_for("srun", torchrun=False) == "srun"
    assert scheme_for("mpirun", torchrun=True) == "mpirun+torchrun"
    with pytest.raises(ValueError):
        scheme_for("aprun", torchrun=False)
    assert strip_label(" 3: step 1/2 loss 1") == "step 1/2 loss 1"
    assert strip_label("[1,0]<stdout>:step 1/2 loss 1") == "step 1/2 loss 1"
    assert strip_label("[gantry x] y") == "[gantry x] y"


# -- gantry logs on a job directory ------------------------------------------------------


def job(tmp_path: Path, request: dict[str, object], log: str | None) -> Path:
    root = tmp_path / "jobs"
    path = root / "ddp-x"
    (path / "logs").mkdir(parents=True)
    (path / "request.json").write_text(json.dumps(request))
    (path / "meta.json").write_text(json.dumps({"name": "ddp"}))
    record_submission(root, JobDir(path), "42")
    if log is not None:
        (path / "logs" / "slurm-42.out").write_text(log)
    return root


def logs(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "launcher", "logs", "42", "--jobs-dir",
                           str(root), *args], capture_output=True, text=True, cwd=REPO,
                          timeout=60, check=False)


def test_logs_rank_prints_that_ranks_lines_and_whole_keeps_labels(tmp_path: Path) -> None:
    root = job(tmp_path, {"rank_labels": "mpirun", "ranks": 4}, MPIRUN)
    one = logs(root, "--rank", "1")
    assert (one.returncode, one.stdout, one.stderr) == (0, "out 1\npartial 1 rest\n", "")
    whole = logs(root)
    assert whole.returncode == 0 and whole.stdout == MPIRUN
    assert read_log(JobDir(root / "ddp-x"), "42", rank=3) == "out 3\npartial 3 rest\n"


@pytest.mark.parametrize("value, expected", [
    ("x", "--rank 'x' is not allowed (expected a rank number"),
    ("-1", "--rank '-1' is not allowed"),
    ("4", "--rank 4 is not allowed (expected 0 to 3: job 42 has 4 ranks)"),
])
def test_logs_rank_bad_values(tmp_path: Path, value: str, expected: str) -> None:
    root = job(tmp_path, {"rank_labels": "srun", "ranks": 4}, SRUN)
    result = logs(root, f"--rank={value}")
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.startswith(f"error: {expected}"), result.stderr
    assert len(result.stderr.splitlines()) == 1


def test_logs_rank_of_a_job_without_labels_says_so(tmp_path: Path) -> None:
    root = job(tmp_path, {"ranks": 4}, "step 1/2 loss 3.0\n")
    result = logs(root, "--rank", "0")
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.startswith("error: --rank 0: job 42's log has no rank labels")
    assert "`gantry logs 42` prints it whole" in result.stderr
    assert logs(root).stdout == "step 1/2 loss 3.0\n"  # without --rank: as before


def test_logs_rank_before_any_output(tmp_path: Path) -> None:
    root = job(tmp_path, {"rank_labels": "srun", "ranks": 2}, None)
    result = logs(root, "--rank", "1")
    assert result.returncode == 0 and result.stdout == ""
    assert "no output yet" in result.stderr
    assert logs(root, "--rank", "2").returncode == 2  # checked before the file is looked at

"""The Python API's objects without Slurm: keyword overrides checked by name, bad input
refused with the CLI's own message and nothing left behind, `Job.attach` by id, directory
and name, `Job.logs()` equal to what `gantry logs` prints, `Job.result` paths. The
embedded-cluster test (tests/integration/test_api_cluster.py) drives real jobs."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from launcher import api
from launcher.errors import GantryError, UserInputError
from launcher.job_dir import JobDir, record_submission
from launcher.job_overrides import CliOverrides

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "gpt2-tiny-pp2-dp2.yaml"


def cli(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "launcher", *args], capture_output=True,
                          text=True, cwd=REPO, timeout=60, check=False,
                          env={"PATH": "/usr/bin:/bin", "GANTRY_JOBS_DIR": str(cwd / "jobs")})


def fake_submitted(root: Path, name: str, job_id: str, request: dict[str, object]) -> JobDir:
    """A job directory as `gantry submit` leaves it (meta, request, by-id link)."""
    path = root / f"{name}-20261203-000000-abcd"
    (path / "logs").mkdir(parents=True)
    (path / "runs").mkdir()
    (path / "meta.json").write_text(json.dumps({"name": name, "created_at": 1.0}))
    (path / "request.json").write_text(json.dumps(request))
    job_dir = JobDir(path)
    record_submission(root, job_dir, job_id)
    return job_dir


def test_keyword_overrides_are_the_cli_flags_by_field_name() -> None:
    over = api.overrides_from_kwargs({
        "nodes": 2, "time_limit": 30, "env": {"A": "1", "B": "x=y"}, "exclusive": True,
        "sbatch_options": ["--mem=1G"], "command": ["python", "train.py"], "spares": None})
    assert over == CliOverrides(nodes=2, time_limit="30", env=("A=1", "B=x=y"),
                                exclusive=True, sbatch_options=("--mem=1G",),
                                command=("python", "train.py"))


@pytest.mark.parametrize(("given", "message"), [
    ({"nodez": 2}, "submit(): nodez=2 is not allowed (expected one of account, command,"),
    ({"nodes": "2"}, "submit(): nodes='2' is not allowed (expected a whole number)"),
    ({"nodes": True}, "submit(): nodes=True is not allowed (expected a whole number)"),
    ({"command": "python train.py"}, "submit(): command='python train.py' is not allowed "
                                     "(expected a list of strings)"),
    ({"env": ["A=1", 2]}, "(expected a list of strings, or a mapping)"),
    ({"exclusive": False}, "submit(): exclusive=False is not allowed (expected True"),
    ({"partition": 3}, "submit(): partition=3 is not allowed (expected a string)"),
])
def test_bad_keyword_overrides_name_the_keyword(given: dict[str, object], message: str) -> None:
    with pytest.raises(UserInputError) as err:
        api.overrides_from_kwargs(given)
    assert message in str(err.value)


def test_bad_input_is_the_clis_message_and_leaves_nothing(tmp_path: Path) -> None:
    job = tmp_path / "bad.yaml"
    job.write_text("name: bad\nresources: {nodes: 0}\n")
    with pytest.raises(UserInputError) as err:
        api.submit(job, jobs_dir=tmp_path / "jobs")
    shown = cli(tmp_path, "submit", str(job))
    assert shown.returncode == err.value.exit_status == 2
    assert shown.stderr == f"error: {err.value}\n"
    job.write_text("name: bad\nresources: {nodes: 1}\n")
    with pytest.raises(UserInputError) as err:
        api.submit(job, jobs_dir=tmp_path / "jobs", nodes=0)
    assert "with --nodes: resources.nodes: 0 is not allowed" in str(err.value)
    assert not (tmp_path / "jobs").exists()


def test_attach_by_id_directory_and_name(tmp_path: Path) -> None:
    root = tmp_path / "jobs"
    job_dir = fake_submitted(root, "alpha", "41", {})
    expected = api.Job("41", job_dir.path)
    assert api.Job.attach(41, jobs_dir=root) == expected
    assert api.Job.attach("41", jobs_dir=root) == expected
    assert api.Job.attach(job_dir.path) == expected
    assert api.Job.attach("alpha", jobs_dir=root) == expected
    with pytest.raises(UserInputError, match="job 42: not submitted by gantry"):
        api.Job.attach(42, jobs_dir=root)
    unsubmitted = root / "beta-20261203-000000-abcd"
    unsubmitted.mkdir()
    (unsubmitted / "meta.json").write_text(json.dumps({"name": "beta"}))
    with pytest.raises(GantryError, match="never submitted"):
        api.Job.attach(unsubmitted)


def test_logs_are_what_gantry_logs_prints(tmp_path: Path) -> None:
    job_dir = fake_submitted(tmp_path / "jobs", "alpha", "7", {})
    job = api.Job.attach(7, jobs_dir=tmp_path / "jobs")
    assert job.logs() == ""
    # A character cut by the 64 KiB read boundary, and a byte that is not UTF-8.
    data = b"x" * ((1 << 16) - 1) + "é".encode() + b" \xff end\n"
    (job_dir.logs / "slurm-7.out").write_bytes(data)
    (job_dir.logs / "slurm-7.err").write_bytes(b"oops\n")
    text = job.logs()
    assert text == data.decode("utf-8", errors="replace") and "é" in text
    assert text == cli(tmp_path, "logs", "7").stdout
    assert job.logs("err") == "oops\n" == cli(tmp_path, "logs", "7", "--err").stdout
    with pytest.raises(UserInputError, match="has no rank labels"):
        job.logs(rank=0)


def test_result_paths_of_a_trainer_job_and_of_a_command_job(tmp_path: Path) -> None:
    root = tmp_path / "jobs"
    ckpt = tmp_path / "ckpt"
    trainer = fake_submitted(root, "gpt", "5", {"native_library": "/lib.so",
                                                 "checkpoint_dir": str(ckpt)})
    (trainer.runs / "5-0").mkdir()
    (trainer.runs / "5-1").mkdir()
    result = api.Job("5", trainer.path).result
    assert result == api.JobResult(
        job_dir=trainer.path, log=trainer.logs / "slurm-5.out",
        err_log=trainer.logs / "slurm-5.err",
        metrics=trainer.runs / "gpt" / "metrics.jsonl",
        trace=trainer.runs / "gpt" / "trace.json", report_dir=trainer.path / "report",
        checkpoint_dir=ckpt, latest_checkpoint=None,
        attempt_dirs=(trainer.runs / "5-0", trainer.runs / "5-1"))
    command = fake_submitted(root, "ddp", "6", {"native_library": None,
                                                 "checkpoint_dir": None})
    result = api.Job("6", command.path).result
    assert (result.metrics, result.trace, result.checkpoint_dir) == (None, None, None)


def test_bad_arguments_fail_before_slurm_is_asked(tmp_path: Path) -> None:
    job_dir = fake_submitted(tmp_path / "jobs", "alpha", "8", {})
    job = api.Job("8", job_dir.path)
    with pytest.raises(UserInputError, match=r"cancel\(\): signal: 'KILL ME' is not allowed"):
        job.cancel("KILL ME")
    with pytest.raises(ValueError, match="poll_s=0"):
        job.wait(poll_s=0)
    with pytest.raises(ValueError, match="stream 'both'"):
        job.logs("both")


def test_the_docs_example_names_only_what_the_api_has() -> None:
    """docs/jobs.md's example (run by hand against the embedded cluster) compiles and every
    attribute it takes of the module, a Job or a JobResult exists."""
    text = (REPO / "docs" / "jobs.md").read_text(encoding="utf-8")
    code = re.search(r"\*\*From Python\*\*.*?```python\n(.*?)```", text, re.DOTALL)
    assert code is not None
    tree = ast.parse(code.group(1))
    owners = {"api": api, "job": api.Job, "again": api.Job, "result": api.JobResult,
              "Job": api.Job}
    used = [(node.value, node.attr) for node in ast.walk(tree)
            if isinstance(node, ast.Attribute)]
    names = [(owner.attr if isinstance(owner, ast.Attribute) else getattr(owner, "id", ""),
              attr) for owner, attr in used]
    missing = [(owner, attr) for owner, attr in names
               if owner in owners and not hasattr(owners[owner], attr)
               and attr not in getattr(owners[owner], "__dataclass_fields__", {})]
    assert len(names) > 10 and not missing, missing

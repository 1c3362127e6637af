"""Every command's output is all or nothing: when a write fails for real (the kernel refusing
to grow a file past RLIMIT_FSIZE, as a full disk does; a value that is not UTF-8; the output
path replaced meanwhile) the previous file is as it was, no temp file or half-made directory
is left, and the user reads one `error:` line (exit 2; the gate, which has acted by then,
exit 1 saying what it did). Names the file system cannot take are one line too."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from launcher.errors import UserInputError
from launcher.job_dir import create_job_dir, record_submission
from tests.unit.preflight_helpers import FAULTS, HEALTHY, gpu_env
from tests.unit.write_faults import file_size_limit, limit_file_size

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "gpt2-tiny-pp2-dp2.yaml"
LONG = "n" * 256
NOT_UTF8 = os.fsdecode(b"caf\xe9")
"""A file name that is not UTF-8 (Latin-1 é), as the file system and argv carry it."""


def gantry(args: list[str], cwd: Path, limit: int | None = None,
           env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    preexec: Callable[[], None] | None = None if limit is None else limit_file_size(limit)
    return subprocess.run(
        [sys.executable, "-m", "launcher", *args], capture_output=True, text=True,
        errors="backslashreplace", cwd=cwd, check=False, timeout=120, preexec_fn=preexec,
        env={**(env or os.environ), "PYTHONDONTWRITEBYTECODE": "1",
             "PYTHONPATH": str(REPO)})


def one_error(result: subprocess.CompletedProcess[str], status: int = 2) -> str:
    """The one `error:` line of a failed command (notes on other lines are fine)."""
    assert "Traceback" not in result.stderr, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, result.stderr
    assert result.returncode == status, result.stderr
    return errors[0]


def listing(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


# ------------------------------------------------------------------------- render -o --

@pytest.mark.parametrize("fault", ["disk full", "not UTF-8"])
def test_render_output_keeps_the_previous_script(tmp_path: Path, fault: str) -> None:
    job = tmp_path / (f"{NOT_UTF8}.yaml" if fault == "not UTF-8" else "job.yaml")
    shutil.copy(EXAMPLE, job)
    out = tmp_path / "job.sbatch"
    out.write_text("previous\n")
    before = listing(tmp_path)
    result = gantry(["render", job.name, "-o", out.name], tmp_path,
                    limit=1000 if fault == "disk full" else None)
    line = one_error(result)
    assert line.startswith("error: --output: cannot write job.sbatch ("), line
    assert out.read_text() == "previous\n"
    assert listing(tmp_path) == before


# --------------------------------------------------------------------------- submit --

@pytest.mark.parametrize("fault", ["disk full", "not UTF-8"])
def test_submit_leaves_no_job_directory(tmp_path: Path, fault: str) -> None:
    """What `gantry submit` does once the script rendered: the job directory (and a jobs
    root it had to make) is gone again when one of its files cannot be written."""
    path = tmp_path / "jobs" / "deeper" / "job-20260101-000000-abcd"
    script = f"#!/bin/bash\ncd /data/{NOT_UTF8}\n" if fault == "not UTF-8" else "#" * 8192
    limit = file_size_limit(4096) if fault == "disk full" else contextlib.nullcontext()
    with pytest.raises(UserInputError) as info, limit:
        create_job_dir(path, script, {"name": "job"}, {}, {}, "job")
    reason = "File too large" if fault == "disk full" else "not UTF-8 text: "
    assert str(info.value).startswith(f"{path}: cannot create the job directory (job.sbatch: "
                                      f"{reason}"), info.value
    assert listing(tmp_path) == []


def test_submit_says_a_submitted_job_could_not_be_recorded(tmp_path: Path) -> None:
    job = create_job_dir(tmp_path / "jobs" / "job-1", "#!/bin/bash\n", {}, {}, {}, "job")
    meta = (job.path / "meta.json").read_text()
    with file_size_limit(len(meta) + 8), pytest.raises(UserInputError, match="File too large"):
        record_submission(tmp_path / "jobs", job, "123456")
    assert (job.path / "meta.json").read_text() == meta
    assert not [p for p in listing(tmp_path) if p.endswith(".tmp")]


# ---------------------------------------------------------------------------- data --

def test_data_leaves_no_shard_and_no_directory_and_a_rerun_works(tmp_path: Path) -> None:
    (tmp_path / "corpus.txt").write_bytes(bytes(range(256)) * 20)
    args = ["data", "corpus.txt", "--out", "shards/new", "--shard-tokens", "1000"]
    line = one_error(gantry(args, tmp_path, limit=2048))
    assert line.startswith("error: --out: cannot write shards/new/"), line
    assert line.endswith("(File too large)"), line
    assert not (tmp_path / "shards").exists()
    (tmp_path / "kept").mkdir()
    one_error(gantry([*args[:3], "kept", *args[4:]], tmp_path, limit=2048))
    assert listing(tmp_path / "kept") == []
    again = gantry(args, tmp_path)
    assert again.returncode == 0, again.stderr
    assert listing(tmp_path / "shards" / "new") == [
        "train_000000.bin", "train_000001.bin", "train_000002.bin", "train_000003.bin",
        "train_000004.bin", "val_000000.bin"]


# --------------------------------------------------------------- preflight-scripts --

@pytest.mark.parametrize("fault", ["disk full", "not UTF-8"])
def test_preflight_scripts_keep_the_previous_scripts(tmp_path: Path, fault: str) -> None:
    good_site = tmp_path / "site.yaml"
    shutil.copy(REPO / "site_configs" / "local.yaml", good_site)
    first = gantry(["preflight-scripts", "scripts", "--site", good_site.name], tmp_path)
    assert first.returncode == 0, first.stderr
    before = {p.name: (p.read_bytes(), p.stat().st_mode) for p in (tmp_path / "scripts").iterdir()}
    assert len(before) == 3
    site = good_site
    if fault == "not UTF-8":
        site = tmp_path / f"{NOT_UTF8}.yaml"
        shutil.copy(good_site, site)
    limit = 200 if fault == "disk full" else None
    for out in ("scripts", "fresh/dir"):
        line = one_error(gantry(["preflight-scripts", out, "--site", site.name], tmp_path,
                                limit=limit))
        assert "cannot write" in line and "gantry-" in line, line
    after = {p.name: (p.read_bytes(), p.stat().st_mode) for p in (tmp_path / "scripts").iterdir()}
    assert after == before
    assert not (tmp_path / "fresh").exists()


# -------------------------------------------------------------------- report --out --

def _run_dir(root: Path) -> Path:
    timing = {"compute_s": 0.3, "send_s": 0.01, "recv_s": 0.01, "bubble_s": 0.1,
              "sync_s": 0.05, "total_s": 0.47}
    run = root / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text("".join(
        json.dumps({"step": s, "loss": 5.0 - s / 10, "lr": 1e-3, "grad_norm": 1.0,
                    "tokens_per_s": 100.0, "ranks": [timing, timing]}) + "\n"
        for s in range(1, 6)))
    return run


def test_report_out_keeps_the_previous_report_and_removes_what_it_made(tmp_path: Path) -> None:
    _run_dir(tmp_path)
    first = gantry(["report", "run", "--out", "old"], tmp_path)
    assert first.returncode == 0, first.stderr
    before = {p.name: p.read_bytes() for p in (tmp_path / "old").iterdir()}
    for out in ("old", "new/deeper"):  # loss.png (45 KB) fits, report.html (60 KB) does not
        line = one_error(gantry(["report", "run", "--out", out], tmp_path, limit=50_000))
        assert "report.html (File too large)" in line, line
    assert {p.name: p.read_bytes() for p in (tmp_path / "old").iterdir()} == before
    assert not (tmp_path / "new").exists()


def test_report_of_a_run_whose_name_is_not_utf8_shows_it_escaped(tmp_path: Path) -> None:
    run = _run_dir(tmp_path)
    odd = run.rename(tmp_path / NOT_UTF8)
    result = gantry(["report", odd.name, "--out", "out"], tmp_path)
    assert result.returncode == 0, result.stderr
    page = (tmp_path / "out" / "report.html").read_text(encoding="utf-8")
    assert "gantry report: caf\\udce9" in page


# ----------------------------------------------------------------- gate --nodes-out --

def test_gate_says_what_it_did_when_its_output_cannot_be_written(tmp_path: Path) -> None:
    """n2 fails preflight and is drained; then --nodes-out cannot be written (the path was
    made a directory meanwhile, by the fake scontrol's drain): the one error line says the
    drain was done and the job must not run on a guess; exit 1."""
    site = tmp_path / "site.yaml"
    site.write_text('name: fake-h200\nnodes: {names: "n[1-2]", cpus: 1, real_memory_mb: 1, '
                    'gpus_per_node: 2, gpu_model: NVIDIA H200}\n'
                    f"preflight: {{state_dir: {tmp_path / 'state'}}}\n")
    verdicts = []
    for node, smi in (("n1", HEALTHY), ("n2", FAULTS / "remap-pending")):
        ran = gantry(["preflight", "--json", "--site", str(site)], tmp_path,
                     env=gpu_env(smi, SLURMD_NODENAME=node))
        verdicts.append(ran.stdout.strip())
    (tmp_path / "preflight.jsonl").write_text("\n".join(verdicts) + "\n")
    nodes_out, nodelist_out = tmp_path / "nodes", tmp_path / "nodelist"
    nodelist_out.write_text("previous\n")
    fake = tmp_path / "scontrol"
    fake.write_text(f"""#!/bin/sh
echo "$@" >> {tmp_path}/scontrol.log
case "$*" in
  "show node -o") printf 'NodeName=n1 State=IDLE\\nNodeName=n2 State=IDLE\\n' ;;
  update*) mkdir {nodes_out} ;;
  *) exit 1 ;;
esac
""")
    fake.chmod(0o755)
    sinfo = tmp_path / "sinfo"
    sinfo.write_text("#!/bin/sh\nexit 1\n")
    sinfo.chmod(0o755)
    result = gantry(["gate", "--nodes", "n[1-2]", "--need", "1", "--site", str(site),
                     "--job-id", "7", "--reports", "preflight.jsonl",
                     "--nodes-out", str(nodes_out), "--nodelist-out", str(nodelist_out)],
                    tmp_path, env={**gpu_env(HEALTHY), "GANTRY_SCONTROL": str(fake),
                                   "GANTRY_SINFO": str(sinfo)})
    line = one_error(result, status=1)
    assert line == (f"error: --nodes-out: cannot write {nodes_out} (Is a directory); the gate "
                    "had decided go on n1 and drained n2 (gantry:gpu.row_remap:gpu1-pending), "
                    f"as recorded in {tmp_path / 'state'}: the job does not run"), line
    assert "update NodeName=n2 State=DRAIN" in (tmp_path / "scontrol.log").read_text()
    assert nodelist_out.read_text() == "previous\n"
    assert sorted(os.listdir(nodes_out)) == []
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]


# ------------------------------------------------------------------- long names --

@pytest.mark.parametrize("args", [
    ["data", "in.txt", "--out", LONG],
    ["data", "in.txt", "--out", f"{LONG}/x"],
    ["data", LONG, "--out", "o"],
    ["report", LONG],
    ["report", "run", "--out", LONG],
    ["report", "run", "--spec", LONG],
    ["checkpoints", LONG],
    ["checkpoints", "ckpt", "--export-weights", LONG],
    ["preflight-scripts", LONG],
], ids=["data-out", "data-out-parent", "data-input", "report-job", "report-out", "report-spec",
        "checkpoints-dir", "export-weights", "preflight-scripts"])
def test_a_name_over_255_bytes_is_one_line(tmp_path: Path, args: list[str]) -> None:
    (tmp_path / "in.txt").write_text("hello\n")
    _run_dir(tmp_path)
    (tmp_path / "ckpt").mkdir()
    before = listing(tmp_path)
    line = one_error(gantry(args, tmp_path))
    assert "is not allowed (a file name of at most 255 bytes; this one has 256)" in line, line
    assert listing(tmp_path) == before

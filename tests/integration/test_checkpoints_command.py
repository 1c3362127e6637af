"""`gantry checkpoints` on real checkpoints of `gantry train` (pp=2 under mpirun, CPU build):
it lists them, names the one a resume takes, --verify catches a flipped byte (exit 1, resume
falls back to the previous one), an unfinished write shows as incomplete, a job reference
finds the job's checkpoint.dir, and a bad reference is a one-line error (exit 2)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.job_dir import create_job_dir, record_submission
from tests.integration.pipeline_helpers import REPO, gantry_train, write_job

pytestmark = pytest.mark.slow
MODEL = {"n_layer": 2, "n_head": 2, "n_embd": 8, "vocab_size": 40, "seq_len": 5}


def _gantry(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "launcher", "checkpoints", *args],
                          capture_output=True, text=True, cwd=REPO, check=False, timeout=120)


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory, native_lib_path: Path) -> Path:
    root = tmp_path_factory.mktemp("ck")
    job = write_job(root, "ck", pp=2, dp=1, schedule="1f1b", m=2, model=MODEL,
                    train={"steps": 4},
                    checkpoint={"dir": str(root / "ckpt"), "interval": 2, "keep": 3})
    result = gantry_train(job, 2, native_lib_path, run_dir=root / "run")
    assert result.returncode == 0, result.stderr[-3000:]
    return root


def test_lists_verifies_and_names_the_resume_point(trained: Path, tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    shutil.copytree(trained / "ckpt", ckpt)
    listed = _gantry(str(ckpt), "--json")
    assert listed.returncode == 0, listed.stderr
    body = json.loads(listed.stdout)
    assert [(c["step"], c["complete"], c["shards"]) for c in body["checkpoints"]] == [
        (2, True, 2), (4, True, 2)]
    assert body["resume_step"] == 4
    for entry in body["checkpoints"]:
        assert entry["bytes"] == sum(p.stat().st_size for p in
                                     Path(entry["path"]).glob("stage_*.safetensors"))

    shard = ckpt / "step_00000004" / "stage_001.safetensors"
    data = bytearray(shard.read_bytes())
    data[-3] ^= 0xFF
    shard.write_bytes(bytes(data))
    (ckpt / "step_00000006").mkdir()  # a write that never finished: shard, no manifest
    shutil.copy(ckpt / "step_00000002" / "stage_000.safetensors", ckpt / "step_00000006")
    checked = _gantry(str(ckpt), "--verify", "--json")
    assert checked.returncode == 1, checked.stderr
    entries = {c["step"]: c for c in json.loads(checked.stdout)["checkpoints"]}
    assert entries[2]["verified"] is True
    assert entries[4]["verified"] is False
    assert "stage_001.safetensors: checksum mismatch" in entries[4]["problem"]
    assert entries[6]["complete"] is False and entries[6]["verified"] is None
    assert json.loads(checked.stdout)["resume_step"] == 2
    table = _gantry(str(ckpt), "--verify")
    assert table.returncode == 1
    assert "resume: step 2" in table.stdout and "incomplete" in table.stdout


def test_odd_directory_names(trained: Path, tmp_path: Path) -> None:
    """Markup-like characters in the path are printed as they are; step directories sort by
    number; a name that is not step_<ASCII digits> is not a checkpoint."""
    ckpt = tmp_path / "ck[bold]x"
    ckpt.mkdir()
    shutil.copytree(trained / "ckpt" / "step_00000004", ckpt / "step_10")
    shutil.copytree(trained / "ckpt" / "step_00000002", ckpt / "step_9")
    (ckpt / "step_\u00b2").mkdir()
    listed = _gantry(str(ckpt), "--json")
    assert listed.returncode == 0, listed.stderr
    body = json.loads(listed.stdout)
    assert [c["step"] for c in body["checkpoints"]] == [9, 10] and body["resume_step"] == 10
    table = _gantry(str(ckpt))
    assert table.returncode == 0, table.stderr
    assert "ck[bold]x" in table.stdout.replace("\n", "")


def test_a_job_reference_finds_its_checkpoint_dir(trained: Path, tmp_path: Path) -> None:
    jobs = tmp_path / "jobs"
    job_dir = create_job_dir(jobs / "ck-1", "#!/bin/sh\n", {}, {
        "checkpoint_dir": str(trained / "ckpt")}, {}, "ck")
    record_submission(jobs, job_dir, "321")
    for ref in ("321", "ck", str(job_dir.path)):
        result = _gantry(ref, "--jobs-dir", str(jobs), "--json")
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout)["resume_step"] == 4


def test_a_bad_reference_is_one_line(tmp_path: Path) -> None:
    result = _gantry("nosuchjob", "--jobs-dir", str(tmp_path))
    assert result.returncode == 2
    assert result.stderr.startswith("error: job 'nosuchjob'") and result.stderr.count("\n") == 1


def test_export_weights_gives_one_model_file(trained: Path, tmp_path: Path,
                                             native_lib_path: Path) -> None:
    """--export-weights: the newest checkpoint's params (no moments) in one HF-named file that
    PyTorch loads strictly, the tied head dropped after matching wte; it starts a pp=1 job.
    An existing output, a --step without a checkpoint and --step alone are one-line errors."""
    from safetensors.numpy import load_file

    from launcher.native.model_config import GPTConfig
    from launcher.reference import gpt2_torch as ref

    out = tmp_path / "model.safetensors"
    result = _gantry(str(trained / "ckpt"), "--export-weights", str(out), "--json")
    assert result.returncode == 0, result.stderr
    body = json.loads(result.stdout)
    assert body["step"] == 4 and body["head_max_diff"] == 0.0
    exported = load_file(str(out))
    step_dir = trained / "ckpt" / "step_00000004"
    shards = [load_file(str(step_dir / f"stage_00{k}.safetensors")) for k in (0, 1)]
    params = {k: v for shard in shards for k, v in shard.items()
              if not k.startswith("exp_avg") and k != "lm_head.weight"}
    assert sorted(exported) == sorted(params) and body["tensors"] == len(params)
    for name, value in params.items():
        assert (exported[name] == value).all(), name
    model = ref.GPT2(GPTConfig(vocab_size=40, max_seq_len=5, n_layer=2, n_head=2, n_embd=8))
    ref.load_weights(model, out)  # strict: every parameter present, right shapes

    job = write_job(tmp_path, "from-export", pp=1, dp=1, schedule="1f1b", m=2, model=MODEL,
                    train={"steps": 2, "init_weights": str(out)})
    trained_again = gantry_train(job, 1, native_lib_path, run_dir=tmp_path / "run")
    assert trained_again.returncode == 0, trained_again.stderr[-3000:]

    for args, message in (([str(out)], "already exists"),
                          ([str(tmp_path / "b.safetensors"), "--step", "3"],
                           "--step: 3 is not allowed (complete checkpoints: 2, 4)")):
        bad = _gantry(str(trained / "ckpt"), "--export-weights", *args)
        assert bad.returncode == 2 and bad.stderr.startswith(f"error: {args[0]}"
                                                             if message == "already exists"
                                                             else "error: --step")
        assert message in bad.stderr and bad.stderr.count("\n") == 1
    alone = _gantry(str(trained / "ckpt"), "--step", "2")
    assert alone.returncode == 2 and "only with --export-weights" in alone.stderr

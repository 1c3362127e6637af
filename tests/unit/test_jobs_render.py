"""Rendering of batch scripts: golden files, shell safety of every value, #SBATCH validation.

Golden files live in tests/golden/*.sbatch; regenerate them after an intended template change
with ``GANTRY_UPDATE_GOLDEN=1 pytest tests/unit/test_jobs_render.py`` and review the diff.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
from pathlib import Path

import pytest

from launcher.errors import UserInputError
from launcher.sbatch_render import (
    LaunchStep,
    MonitorStep,
    Placement,
    PreflightStep,
    RecoveryStep,
    ScriptInputs,
    render_script,
)

GOLDEN = Path(__file__).resolve().parent.parent / "golden"
NASTY = [
    "$(touch /tmp/CANARY)", "`touch /tmp/CANARY`", "it's \"quoted\"", "a; touch /tmp/CANARY",
    "line1\nline2 $(touch /tmp/CANARY)", "$HOME ${PATH} \\ * ? ~", "",
]


def base_inputs(**changes: object) -> ScriptInputs:
    inputs = ScriptInputs(
        job_name="gpt2-tiny-pp2-dp2", job_dir="/scratch/gantry-jobs/gpt2-tiny-pp2-dp2-x",
        submit_dir="/home/alice/project", generated_by="gantry 0.1.0",
        spec_file="/home/alice/project/examples/gpt2-tiny-pp2-dp2.yaml", site_name="local",
        layout="pp 2 x dp 2 = 4 ranks on 4 nodes x 1 rank (+1 spare)", nodes=4, spares=1,
        ranks_per_node=1, gpus_per_node=0, time_limit="00:10:00", partition="debug",
        env=(("OMPI_MCA_btl", "self,tcp"), ("OMPI_MCA_btl_tcp_if_include", "lo")),
        preflight=PreflightStep(level="quick", check_argv=("gantry", "preflight", "--json"),
                                gate_argv=("gantry", "preflight", "gate"),
                                fabric_argv=("gantry", "preflight", "fabric", "--site",
                                             "/opt/gantry/site_configs/local.yaml")),
        recovery=RecoveryStep(max_recoveries=3, watch_argv=("gantry", "step-watch"),
                              recover_argv=("gantry", "recover", "--site",
                                            "/opt/gantry/site_configs/local.yaml", "--job-dir",
                                            "/scratch/gantry-jobs/gpt2-tiny-pp2-dp2-x",
                                            "--level", "quick")),
        monitor=MonitorStep(argv=("gantry", "monitor", "--site",
                                  "/opt/gantry/site_configs/local.yaml"), interval_s=30.0),
        launch=LaunchStep(launcher="srun", srun_mpi="pmix",
                          argv=("gantry", "train", "/scratch/gantry-jobs/x/spec.yaml",
                                "--site", "/opt/gantry/site_configs/local.yaml")),
    )
    return dataclasses.replace(inputs, **changes)  # type: ignore[arg-type]


VARIANTS: dict[str, ScriptInputs] = {
    "srun-preflight-spare": base_inputs(),
    "mpirun-no-preflight": base_inputs(
        preflight=None, recovery=None, spares=0, requeue=False, nodes=2, ranks_per_node=2,
        layout="pp 2 x dp 2 = 4 ranks on 2 nodes x 2 ranks", monitor=None,
        evict_argv=("gantry", "recover", "--job-dir", "/scratch/gantry-jobs/x"),
        launch=LaunchStep(launcher="mpirun", argv=("python3", "-u", "train.py", "--lr=3e-4"))),
    "gpu-container-placement": base_inputs(
        job_name="llm-350m", nodes=2, spares=0, ranks_per_node=8, gpus_per_node=8,
        cpus_per_task=12, time_limit="1-00:00:00", partition="gpu", account="ml-team",
        qos="high", dependencies=("afterok:1234", "afterany:1235"), signal_lead_s=300,
        max_restarts=5, layout="pp 2 x dp 8 = 16 ranks on 2 nodes x 8 ranks",
        env=(("NCCL_NVLS_ENABLE", "0"), ("NCCL_IB_HCA", "mlx5_0:1,mlx5_1:1")),
        placement=Placement(sbatch_options=("--nodelist=gpu[001-002]", "--switches=1@05:00"),
                            summary="2 nodes under leaf switch sw3 (1 switch)",
                            nodes=("gpu001", "gpu002")),
        launch=LaunchStep(launcher="srun", argv=("gantry", "train", "spec.yaml"),
                          container_image="nvcr.io#nvidia/pytorch:24.10-py3")),
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_golden(variant: str) -> None:
    text = render_script(VARIANTS[variant])
    golden = GOLDEN / f"{variant}.sbatch"
    if os.environ.get("GANTRY_UPDATE_GOLDEN"):
        golden.write_text(text)
    assert golden.exists(), f"{golden} missing: run with GANTRY_UPDATE_GOLDEN=1"
    assert text == golden.read_text()


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_rendered_script_is_valid_bash(variant: str, tmp_path: Path) -> None:
    script = tmp_path / "job.sbatch"
    script.write_text(render_script(VARIANTS[variant]))
    result = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True,
                            check=False)
    assert result.returncode == 0, result.stderr


def environment_section(text: str) -> str:
    start = text.index("# Site MPI/NCCL settings")
    return text[start:text.index("readonly ranks_nodes")]


def test_env_values_and_args_are_carried_literally(tmp_path: Path) -> None:
    env = tuple((f"NASTY_{i}", value) for i, value in enumerate(NASTY))
    argv = ("printf", "%s\\0", *NASTY)
    text = render_script(base_inputs(env=env, launch=LaunchStep(launcher="srun", argv=argv)))
    canary = Path("/tmp/CANARY")
    canary.unlink(missing_ok=True)
    # Run the script's own environment block, then dump what bash exported.
    probe = environment_section(text) + 'env -0 > "$OUT_ENV"\n'
    subprocess.run(["bash", "-c", probe], env={"OUT_ENV": str(tmp_path / "env"),
                                               "PATH": os.environ["PATH"]}, check=True)
    exported = dict(item.split("=", 1) for item in
                    (tmp_path / "env").read_text().split("\0") if "=" in item)
    for key, value in env:
        assert exported[key] == value
    # The launch line, taken from the script and run with the step's argv as a printf.
    marker = "--kill-on-bad-exit=1 \\\n"
    launch = text[text.index(marker) + len(marker):text.index("\nstep_rc=")].strip()
    out = subprocess.run(["bash", "-c", launch], capture_output=True, check=True).stdout
    assert out.decode().split("\0")[:-1] == NASTY
    assert not canary.exists()


@pytest.mark.parametrize(("field", "value"), [
    ("partition", "debug\n#SBATCH --uid=0"), ("account", "a b"), ("qos", "x;id"),
    ("time_limit", "10 --wrap=id"), ("dependencies", ("afterok:1`id`",)),
    ("job_dir", "/tmp/with space"), ("submit_dir", "/tmp/$(id)"),
])
def test_unsafe_sbatch_values_are_refused(field: str, value: object) -> None:
    with pytest.raises(UserInputError, match="is not allowed in an #SBATCH line"):
        render_script(base_inputs(**{field: value}))


def test_placement_options_are_checked() -> None:
    bad = Placement(sbatch_options=("--nodelist=n1 --uid=0",))
    with pytest.raises(UserInputError, match="placement"):
        render_script(base_inputs(placement=bad))
    with pytest.raises(UserInputError, match="long option"):
        render_script(base_inputs(placement=Placement(sbatch_options=("-w n1",))))


def test_bad_env_name_and_mpirun_container_are_refused() -> None:
    with pytest.raises(UserInputError, match=r"env\.BAD NAME"):
        render_script(base_inputs(env=(("BAD NAME", "x"),)))
    with pytest.raises(UserInputError, match="srun"):
        render_script(base_inputs(launch=LaunchStep(launcher="mpirun", argv=("x",),
                                                    container_image="img")))


def test_header_comments_cannot_break_out(tmp_path: Path) -> None:
    text = render_script(base_inputs(spec_file="/tmp/a\ntouch /tmp/CANARY",
                                     placement=Placement(summary="x\n$(touch /tmp/CANARY)")))
    lines = text.splitlines()
    header = lines[:lines.index("set -uo pipefail")]
    assert all(line.startswith("#") or not line for line in header)

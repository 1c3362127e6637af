"""Per-job sbatch options: resources.sbatch_options, --sbatch-option, the first-class sbatch
flags (--constraint, --exclusive, --mem, --hint, --gres) and Slurm's short flags.

The golden file tests/golden/per-job-sbatch-options.sbatch pins where they land (after the
site's and the placement's options); regenerate it with ``GANTRY_UPDATE_GOLDEN=1``.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

import pytest

from launcher.errors import UserInputError
from launcher.job_cli import add_request_args, overrides_from_args
from launcher.job_request import resolve_request
from launcher.job_script import script_inputs
from launcher.job_spec import JobSpec
from launcher.sbatch_options import OWNED, check_option, merge_options
from launcher.sbatch_render import Placement, render_script
from launcher.typed_config import from_mapping
from tests.unit.test_jobs_render import GOLDEN, base_inputs

REPO = Path(__file__).resolve().parents[2]
LOCAL_SITE = REPO / "site_configs" / "local.yaml"


def spec_error(options: object) -> str:
    with pytest.raises(UserInputError) as err:
        from_mapping(JobSpec, {"name": "j", "resources": {"sbatch_options": options}}, "job.yaml")
    return str(err.value)


@pytest.mark.parametrize("option", [
    "--constraint=a100&ib", "--constraint=[rack1|rack2]", "--exclusive", "--exclusive=user",
    "--mem=64G", "--mem-per-cpu=4G", "--hint=nomultithread", "--gres=nvme:1",
    "--licenses=matlab:2", "--mail-type=END,FAIL", "--comment=run-42", "--time-min=30",
])
def test_allowed_options(option: str) -> None:
    assert check_option(option) is None
    assert from_mapping(JobSpec, {"name": "j", "resources": {"sbatch_options": [option]}},
                        "job.yaml").resources.sbatch_options == [option]


@pytest.mark.parametrize(("option", "expected"), [
    ("--nodes=3", "--nodes is not allowed (gantry sets it from resources.nodes"),
    ("--ntasks-per-node=8", "gantry sets it from resources.gpus_per_node"),
    ("--job-name=x", "gantry sets it from name"),
    ("--time=10", "gantry sets it from resources.time_limit"),
    ("--output=/tmp/x", "gantry sets it from the job directory's logs"),
    ("--nodelist=n1", "gantry sets it from gantry's placement"),
    ("--requeue", "gantry sets it from policy.requeue"),
    ("--chd=/tmp", "it abbreviates --chdir, which gantry sets"),
    ("--gres=gpu:a100:2", "GPUs come from resources.gpus_per_node"),
    ("-C", "expected --name or --name=value"),
    ("--mem 64G", "expected --name or --name=value"),
    ("--mem=", "expected a value after '='"),
    ("--comment=a b", "'a b' is not allowed in an #SBATCH line"),
    ("--comment=$(id)", "is not allowed in an #SBATCH line"),
    ("--comment=x\n#SBATCH --uid=0", "no newline or NUL"),
    ("--comment=a\x00", "expected a string"),
    ("--comment=hetjob", "heterogeneous job separator"),
])
def test_refused_options_name_the_field_and_why(option: str, expected: str) -> None:
    message = spec_error(["--mem=1G", option])
    assert message.startswith("job.yaml: resources.sbatch_options[1]: ")
    assert expected in message and "\n" not in message


def test_an_option_given_twice_is_refused() -> None:
    assert "--mem is given twice (first at sbatch_options[0]" in spec_error(
        ["--mem=1G", "--mem=2G"])


def test_every_option_gantry_renders_is_owned() -> None:
    """Each #SBATCH option of gantry's own header (all variants) is refused per job."""
    inputs = base_inputs(gpus_per_node=2, cpus_per_task=2, account="a", qos="q",
                         dependencies=("afterok:1",),
                         placement=Placement(sbatch_options=("--nodelist=n1", "--switches=1",
                                                             "--exclude=n2")))
    for option in inputs.sbatch_options():
        assert option.flag in OWNED, option.flag
        assert check_option(option.text) is not None


def test_merge_replaces_by_name() -> None:
    assert merge_options(["--mem=1G", "--exclusive"], ["--mem=2G"]) == ["--exclusive",
                                                                       "--mem=2G"]


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_request_args(parser)
    args = parser.parse_args(["job.yaml", *argv])
    args.passthrough = []
    return args


def test_slurm_short_flags_are_aliases() -> None:
    short = vars(parse("-N", "3", "-p", "gpu", "-t", "1-12", "-A", "acct", "-q", "high",
                       "-d", "afterok:1", "-J", "n", "-c", "4", "-C", "a100"))
    long = vars(parse("--nodes", "3", "--partition", "gpu", "--time", "1-12", "--account",
                      "acct", "--qos", "high", "--dependency", "afterok:1", "--name", "n",
                      "--cpus-per-task", "4", "--constraint", "a100"))
    assert short == long and short["nodes"] == 3 and short["time_limit"] == "1-12"


def test_cli_options_replace_the_job_files_by_name() -> None:
    raw: dict[str, Any] = {"name": "j", "resources": {
        "sbatch_options": ["--mem=1G", "--hint=compute_bound"]}}
    args = parse("--mem", "8G", "--exclusive", "--sbatch-option=--hint=nomultithread",
                 "--sbatch-option=--licenses=a:1")
    merged, used = overrides_from_args(args).apply(raw)
    assert merged["resources"]["sbatch_options"] == [
        "--exclusive", "--mem=8G", "--hint=nomultithread", "--licenses=a:1"]
    assert used == ["--exclusive", "--mem", "--sbatch-option"]
    assert raw["resources"]["sbatch_options"] == ["--mem=1G", "--hint=compute_bound"]


def test_a_refused_cli_option_names_the_flag(tmp_path: Path) -> None:
    job = tmp_path / "job.yaml"
    job.write_text("name: j\nparallelism: {pp: 1, dp: 1}\n")
    args = parse("--sbatch-option=--ntasks=4")
    with pytest.raises(UserInputError) as err:
        resolve_request(job, LOCAL_SITE, overrides_from_args(args))
    assert str(err.value) == (
        f"{job} with --sbatch-option: resources.sbatch_options[0]: --ntasks is not allowed "
        "(gantry sets it from resources.gpus_per_node)")


def test_job_options_follow_the_sites_and_replace_its_same_name(tmp_path: Path) -> None:
    site = tmp_path / "site.yaml"
    site.write_text(LOCAL_SITE.read_text().replace(
        "slurm:", "slurm:\n  sbatch_options: [--exclusive, --mem=1G]", 1))
    job = tmp_path / "job.yaml"
    job.write_text("name: j\nparallelism: {pp: 1, dp: 1}\n"
                   "resources: {sbatch_options: ['--mem=8G', '--hint=nomultithread']}\n")
    request = resolve_request(job, site)
    inputs = script_inputs(request, tmp_path / "jobdir", tmp_path)
    header = [option.text for option in inputs.sbatch_options()]
    assert header[-3:] == ["--exclusive", "--mem=8G", "--hint=nomultithread"]
    assert "--mem=1G" not in header


def test_golden_per_job_sbatch_options() -> None:
    text = render_script(base_inputs(
        placement=Placement(sbatch_options=("--nodelist=n[1-5]",), summary="planned"),
        job_options=("--constraint=a100&ib", "--exclusive", "--mem=64G",
                     "--hint=nomultithread")))
    golden = GOLDEN / "per-job-sbatch-options.sbatch"
    if os.environ.get("GANTRY_UPDATE_GOLDEN"):
        golden.write_text(text)
    assert golden.exists(), f"{golden} missing: run with GANTRY_UPDATE_GOLDEN=1"
    assert text == golden.read_text()

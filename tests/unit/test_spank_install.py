"""`gantry site install-plugins`: the files it plans and writes, the slurm.conf lines, the
generated scripts run for real (values reach gantry literally), and bad input (one-line
error, exit 2, nothing written)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from launcher.plugins.install import plan_install
from launcher.plugins.scripts import SCRIPT_KINDS, ScriptSpec, render_script, slurm_conf_for
from launcher.site_config import DEFAULT_SITE, load_site

REPO = Path(__file__).resolve().parent.parent.parent


def gantry(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "launcher", *args], capture_output=True,
                          text=True, cwd=REPO, check=False, timeout=300)


def write_site(tmp: Path, **sections: Any) -> Path:
    data = yaml.safe_load(DEFAULT_SITE.read_text())
    for key, value in sections.items():
        data[key] = value
    path = tmp / "site.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_plan_for_local_site(tmp_path: Path) -> None:
    site = load_site(write_site(tmp_path, plugins={
        "enabled": True, "preflight_env": {"GANTRY_NVIDIA_SMI": "/opt/x/nvidia-smi"},
        "health_check_interval_s": 60, "preflight_timeout_s": 30}))
    prefix = tmp_path / "pfx"
    plan = plan_install(site, prefix)
    names = [str(f.path.relative_to(prefix)) for f in plan.files]
    assert names == [
        "bin/gantry", "etc/plugstack.conf", "etc/env/local.env", "etc/preflight.env",
        "libexec/gantry-prolog.sh", "libexec/gantry-epilog.sh",
        "libexec/gantry-healthcheck.sh", "etc/slurm.conf.gantry",
    ]
    assert plan.slurm_conf_lines == [
        f"PlugStackConfig={prefix}/etc/plugstack.conf",
        f"Prolog={prefix}/libexec/gantry-prolog.sh",
        f"Epilog={prefix}/libexec/gantry-epilog.sh",
        f"HealthCheckProgram={prefix}/libexec/gantry-healthcheck.sh",
        "HealthCheckInterval=60",
        "HealthCheckNodeState=ANY",
    ]
    text = {str(f.path.relative_to(prefix)): f.text for f in plan.files}
    assert text["etc/plugstack.conf"].splitlines()[-1] == (
        f"required {prefix}/lib/gantry_spank.so gantry={prefix}/bin/gantry "
        f"site={site.path} level=quick timeout=30 env_dir={prefix}/etc/env default_env=local "
        f"preflight_env={prefix}/etc/preflight.env"
    )
    env_lines = [ln for ln in text["etc/env/local.env"].splitlines() if not ln.startswith("#")]
    assert env_lines == ["OMPI_MCA_btl=self,tcp", "OMPI_MCA_btl_tcp_if_include=lo",
                         "OMPI_MCA_oob_tcp_if_include=lo"]
    assert "GANTRY_NVIDIA_SMI=/opt/x/nvidia-smi" in text["etc/preflight.env"].splitlines()


def test_parts_can_be_left_out_and_deep_becomes_standard(tmp_path: Path) -> None:
    site = load_site(write_site(
        tmp_path, plugins={"prolog": False, "epilog": False, "health_check": False},
        preflight={"level": "deep"}))
    plan = plan_install(site, tmp_path / "p")
    assert plan.slurm_conf_lines == [f"PlugStackConfig={tmp_path}/p/etc/plugstack.conf"]
    plugstack = next(f.text for f in plan.files if f.path.name == "plugstack.conf")
    assert " level=standard " in plugstack


def test_embedded_default_prefix_is_under_run_dir(tmp_path: Path) -> None:
    site = load_site(write_site(tmp_path, slurm={
        "embedded": True, "cluster_name": "c", "run_dir": "run"}))
    plan = plan_install(site)
    assert plan.layout.prefix == tmp_path / "run" / "plugins"


def test_script_passes_env_and_paths_literally(tmp_path: Path) -> None:
    """The generated script really runs: hostile values arrive unexpanded at gantry."""
    fake = tmp_path / "fake gantry"
    record = tmp_path / "record.txt"
    fake.write_text(
        "#!/bin/sh\n"
        f"printf '%s\\n' \"$@\" \"TOOL=$GANTRY_NVIDIA_SMI\" \"NODE=$SLURMD_NODENAME\" "
        f"> '{record}'\nexit 1\n"
    )
    fake.chmod(0o755)
    hostile = "/opt/a b/$(touch pwned);`id`"
    script = tmp_path / "prolog.sh"
    script.write_text(render_script(ScriptSpec(
        "prolog", (str(fake),), "/s p/site.yaml", "standard", "test",
        (("GANTRY_NVIDIA_SMI", hostile),), pythonpath="/p $(touch pwned)")))
    script.chmod(0o755)
    env = {"PATH": os.environ["PATH"], "SLURMD_NODENAME": "n7"}
    result = subprocess.run([str(script)], env=env, cwd=tmp_path, capture_output=True,
                            text=True, check=False)
    assert result.returncode == 0  # a failing check never fails the prolog
    assert record.read_text().splitlines() == [
        "preflight", "--site", "/s p/site.yaml", "--level", "standard", "--drain", "--quiet",
        f"TOOL={hostile}", "NODE=n7",
    ]
    assert not (tmp_path / "pwned").exists()


def test_epilog_and_healthcheck_run_quick() -> None:
    for kind in SCRIPT_KINDS:
        text = render_script(ScriptSpec(kind, ("/g",), "/s.yaml", "standard", "test"))
        level = "standard" if kind == "prolog" else "quick"
        assert f"/g preflight --site /s.yaml --level {level} --drain --quiet || true\nexit 0\n" \
            in text


def test_both_writers_use_one_generator(tmp_path: Path) -> None:
    """`gantry preflight-scripts` and `gantry site install-plugins` write the same scripts
    but for the command that runs gantry, the writer and the exports."""
    out = tmp_path / "scripts"
    result = gantry("preflight-scripts", str(out), "--site", str(DEFAULT_SITE))
    assert result.returncode == 0, result.stderr
    level = load_site(DEFAULT_SITE).config.preflight.level
    for kind in SCRIPT_KINDS:
        written = (out / f"gantry-{kind}.sh").read_text()
        spec = ScriptSpec(kind, (sys.executable, "-m", "launcher"), str(DEFAULT_SITE.resolve()),
                          level, "gantry preflight-scripts", pythonpath=str(REPO),
                          slurm_conf=tuple(slurm_conf_for(kind, (out / f"gantry-{kind}.sh"))))
        assert written == render_script(spec)
        assert f"--level {level if kind == 'prolog' else 'quick'} --drain --quiet" in written


def test_install_writes_files_and_builds_plugin(tmp_path: Path) -> None:
    site = write_site(tmp_path)
    prefix = tmp_path / "pfx"
    result = gantry("site", "install-plugins", "--site", str(site), "--prefix", str(prefix))
    assert result.returncode == 0, result.stderr
    assert (prefix / "lib" / "gantry_spank.so").is_file()
    assert os.access(prefix / "bin" / "gantry", os.X_OK)
    assert f"  PlugStackConfig={prefix}/etc/plugstack.conf" in result.stdout.splitlines()
    # the wrapper runs this checkout's gantry
    version = subprocess.run([str(prefix / "bin" / "gantry"), "--version"],
                             capture_output=True, text=True, check=True)
    assert version.stdout.startswith("gantry ")
    review = (prefix / "etc" / "slurm.conf.gantry").read_text()
    assert f"Prolog={prefix}/libexec/gantry-prolog.sh" in review


def test_dry_run_changes_nothing(tmp_path: Path) -> None:
    prefix = tmp_path / "pfx"
    result = gantry("site", "install-plugins", "--site", str(write_site(tmp_path)),
                    "--prefix", str(prefix), "--dry-run")
    assert result.returncode == 0, result.stderr
    assert f"would write {prefix}/etc/plugstack.conf" in result.stdout
    assert not prefix.exists()


@pytest.mark.parametrize(
    ("sections", "prefix", "expected"),
    [
        ({}, "with space", "--prefix: '{tmp}/with space' is not allowed (expected a path"),
        ({"slurm": {"embedded": False}}, None,
         "plugins.prefix: not set and the site is not embedded (pass --prefix DIR"),
        ({"name": "bad@name"}, "p", "name: 'bad@name' is not allowed for the plugin suite"),
        ({"plugins": {"preflight_env": {"1BAD": "x"}}}, "p",
         "plugins.preflight_env: '1BAD' is not allowed as a variable name"),
        ({"plugins": {"preflight_env": {"A": "x\ny"}}}, "p",
         "plugins.preflight_env.A: 'x\\ny' is not allowed (expected one line)"),
        ({"plugins": {"preflight_timeout_s": 0}}, "p",
         "plugins.preflight_timeout_s: 0 is not allowed (expected seconds in 1..3600)"),
        ({"plugins": {"spank": "yes"}}, "p",
         "plugins.spank: 'yes' is not allowed (expected true or false)"),
        ({"nccl": {"env": {"NCCL-X": "1"}}}, "p",
         "nccl.env: 'NCCL-X' is not allowed as a variable name"),
    ],
)
def test_bad_input_one_line_exit_2_nothing_written(
    tmp_path: Path, sections: dict[str, Any], prefix: str | None, expected: str
) -> None:
    site = write_site(tmp_path, **sections)
    args = ["site", "install-plugins", "--site", str(site)]
    if prefix is not None:
        args += ["--prefix", str(tmp_path / prefix)]
    result = gantry(*args)
    assert result.returncode == 2, result
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert expected.format(tmp=tmp_path) in lines[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["site.yaml"]


def test_prefix_that_is_a_file_is_refused(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    result = gantry("site", "install-plugins", "--site", str(write_site(tmp_path)),
                    "--prefix", str(blocker))
    assert result.returncode == 2
    assert result.stderr == f"error: --prefix: {blocker} exists and is not a directory\n"


def test_embedded_cluster_slurm_conf_loads_the_suite_only_when_enabled(tmp_path: Path) -> None:
    from launcher.cluster.lifecycle import make_plan

    run_root = Path(tempfile.mkdtemp(prefix="gantry-spank-"))  # munged must traverse it
    run_root.chmod(0o755)
    slurm = {"embedded": True, "cluster_name": "c", "run_dir": str(run_root / "run"),
             "partition": "debug"}
    off = make_plan(load_site(write_site(tmp_path, slurm=slurm))).rendered.slurm_conf
    assert "PlugStackConfig" not in off and "Prolog=" not in off
    on = make_plan(load_site(write_site(tmp_path, slurm=slurm, plugins={
        "enabled": True, "epilog": False}))).rendered.slurm_conf.splitlines()
    pfx = run_root / "run" / "plugins"
    start = on.index(f"PlugStackConfig={pfx}/etc/plugstack.conf")
    assert on[start:start + 5] == [
        f"PlugStackConfig={pfx}/etc/plugstack.conf",
        f"Prolog={pfx}/libexec/gantry-prolog.sh",
        f"HealthCheckProgram={pfx}/libexec/gantry-healthcheck.sh",
        "HealthCheckInterval=300",
        "HealthCheckNodeState=ANY",
    ]
    run_root.rmdir()  # planning wrote nothing

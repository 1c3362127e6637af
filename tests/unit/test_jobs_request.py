"""Job request resolution (CLI flags > job YAML > site) and bad input through the real CLI."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.errors import UserInputError
from launcher.job_overrides import CliOverrides
from launcher.job_request import resolve_request
from launcher.job_script import render_job

REPO = Path(__file__).resolve().parent.parent.parent
EXAMPLE = REPO / "examples" / "gpt2-tiny-pp2-dp2.yaml"


def write(tmp_path: Path, text: str, name: str = "job.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_precedence_cli_over_yaml_over_site(tmp_path: Path) -> None:
    plain = resolve_request(EXAMPLE)
    assert plain.partition == "debug"  # site default (local.yaml)
    assert plain.spec.resources.time_limit == "00:10:00"  # job YAML
    assert plain.nodes_total == 5 and plain.ranks_per_node == 1 and plain.gpus_per_node == 0
    job = write(tmp_path, EXAMPLE.read_text().replace(
        "resources: {nodes: 4, ", "resources: {nodes: 4, partition: fromyaml, ")
        + "env: {A: yaml, B: yaml}\n")
    assert "partition: fromyaml" in job.read_text()
    over = resolve_request(job, None, CliOverrides(
        partition="fromcli", time_limit="5", spares=0, env=("B=cli", "C=x=y"),
        dependencies=("afterok:7",), command=("echo", "hi")))
    assert over.partition == "fromcli"
    assert over.spec.resources.time_limit == "5" and over.nodes_total == 4
    assert over.spec.env == {"A": "yaml", "B": "cli", "C": "x=y"}
    assert over.spec.resources.dependencies == ["afterok:7"]
    assert over.spec.command == ["echo", "hi"]
    assert "--partition" in over.overrides_used and "--env" in over.overrides_used
    yaml_only = resolve_request(job)
    assert yaml_only.partition == "fromyaml"


def test_site_env_then_job_env_in_script(tmp_path: Path) -> None:
    job = write(tmp_path, EXAMPLE.read_text() + "env: {OMPI_MCA_btl: 'self,vader', X: '1'}\n")
    text = render_job(resolve_request(job), tmp_path / "jd", tmp_path, gantry=("gantry",))
    exports = [line for line in text.splitlines() if line.startswith("export ")]
    assert "export OMPI_MCA_btl=self,vader" in exports
    assert "export OMPI_MCA_btl=self,tcp" not in exports
    assert exports.index("export OMPI_MCA_btl_tcp_if_include=lo") < exports.index("export X=1")


@pytest.mark.parametrize(("policy", "flag", "level"), [
    ("", None, "standard"),  # the job says nothing: the site's preflight.level
    ("policy: {preflight_level: quick}\n", None, "quick"),  # the job file wins
    ("policy: {preflight_level: quick}\n", "deep", "deep"),  # the flag wins over both
    ("", "off", None),
])
def test_preflight_level_job_or_flag_over_site(tmp_path: Path, policy: str, flag: str | None,
                                              level: str | None) -> None:
    site = write(tmp_path, (REPO / "site_configs" / "local.yaml").read_text()
                 .replace("preflight:\n  level: quick\n", "preflight:\n  level: standard\n"),
                 "site.yaml")
    assert "level: standard" in site.read_text()
    job = write(tmp_path, EXAMPLE.read_text() + policy)
    request = resolve_request(job, site, CliOverrides(preflight_level=flag))
    assert request.preflight_level == (level or "off")
    text = render_job(request, tmp_path / "jd", tmp_path, gantry=("gantry",))
    levels = [line.split("--level ")[1].split()[0] for line in text.splitlines()
              if "--level " in line and " recover " not in line]
    assert levels == ([level] if level else [])


@pytest.mark.parametrize(("text", "overrides", "message"), [
    ("name: a\nparallelism: {pp: 2, dp: 3}\nresources: {nodes: 4}\n", CliOverrides(),
     "pp(2) * dp(3) = 6 ranks but 4 nodes x 1 GPU = 4"),
    ("name: a\nresources: {nodes: 7, spares: 2}\nparallelism: {dp: 7}\n", CliOverrides(),
     "nodes(7) + spares(2) = 9 nodes but site local has 8"),
    ("name: a\n", CliOverrides(nodes=0), "with --nodes: resources.nodes: 0 is not allowed"),
    ("name: a\n", CliOverrides(time_limit="soon"), "resources.time_limit: 'soon'"),
    ("name: a\n", CliOverrides(env=("NOEQUALS",)), "--env: 'NOEQUALS' is not allowed"),
    ("name: a\nresources: {nodes: two}\n", CliOverrides(), "resources.nodes: 'two'"),
])
def test_bad_requests(tmp_path: Path, text: str, overrides: CliOverrides, message: str) -> None:
    with pytest.raises(UserInputError, match=message.replace("(", r"\(").replace(")", r"\)")
                       .replace("*", r"\*").replace("+", r"\+")):
        resolve_request(write(tmp_path, text), None, overrides)


def gantry(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "SLURM_CONF": str(cwd / "no-such.conf"),
           "GANTRY_JOBS_DIR": str(cwd / "jobs")}
    return subprocess.run([sys.executable, "-m", "launcher", *args], capture_output=True,
                          text=True, cwd=cwd, env=env, check=False)


BAD_FILES = {
    "malformed": "name: a\nresources: {nodes: [1,\n",
    "unknown_key": "name: a\nresources: {nodez: 2}\n",
    "wrong_type": "name: a\ntrain: {steps: many}\n",
    "layout": "name: a\nparallelism: {pp: 2, dp: 2}\nresources: {nodes: 3}\n",
    "bad_name": "name: 'a;touch /tmp/x'\n",
    "empty": "",
    "injection_partition": "name: a\nresources: {partition: \"debug\\n#SBATCH --uid=0\"}\n",
}


@pytest.mark.parametrize("case", sorted(BAD_FILES))
@pytest.mark.parametrize("command", ["submit", "render"])
def test_bad_input_is_one_line_exit_2_nothing_created(tmp_path: Path, case: str,
                                                      command: str) -> None:
    job = write(tmp_path, BAD_FILES[case])
    result = gantry(command, str(job), cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert str(job) in lines[0] or case == "injection_partition"
    assert "Traceback" not in result.stderr and result.stdout == ""
    assert not (tmp_path / "jobs").exists()


@pytest.mark.parametrize("args", [
    ["--nodes", "x"], ["--time", "tomorrow"], ["--env", "JUSTKEY"], ["--preflight", "max"],
    ["--site", "no-such-site.yaml"],
])
def test_bad_flags_exit_2(tmp_path: Path, args: list[str]) -> None:
    result = gantry("submit", str(EXAMPLE), *args, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "jobs").exists()


def test_dry_run_prints_script_and_creates_nothing(tmp_path: Path) -> None:
    result = gantry("submit", str(EXAMPLE), "--dry-run", "--nodes", "2", "--spares", "0",
                    "--gpus-per-node", "2", "--env", "X=$(id)", "--", "echo", "a b", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "#SBATCH --nodes=2\n" in result.stdout
    assert "export X='$(id)'\n" in result.stdout
    assert " -- echo 'a b'\n" in result.stdout
    assert not (tmp_path / "jobs").exists()


def test_status_and_logs_of_unknown_jobs(tmp_path: Path) -> None:
    result = gantry("status", cwd=tmp_path)
    assert result.returncode == 0 and "no jobs under" in result.stdout
    for command in (["logs", "123"], ["cancel", "123"], ["status", "nosuchjob"]):
        result = gantry(*command, cwd=tmp_path)
        assert result.returncode == 2 and result.stderr.startswith("error: job "), result.stderr
    result = gantry("status", "--json", cwd=tmp_path)
    assert result.stdout.strip() == "[]"


def test_a_job_value_no_sbatch_line_can_carry_names_the_job_file(tmp_path: Path) -> None:
    job = write(tmp_path, EXAMPLE.read_text().replace(
        "resources: {nodes: 4, ", "resources: {nodes: 4, qos: 'x;id', "))
    with pytest.raises(UserInputError) as info:
        render_job(resolve_request(job), tmp_path / "jd", tmp_path, gantry=("gantry",))
    assert str(info.value).startswith(f"{job}: resources.qos: 'x;id' is not allowed in an "
                                      "#SBATCH line")
    over = resolve_request(EXAMPLE, None, CliOverrides(account="a b"))
    with pytest.raises(UserInputError) as info:
        render_job(over, tmp_path / "jd", tmp_path, gantry=("gantry",))
    assert str(info.value).startswith(f"{EXAMPLE} with --account: resources.account: 'a b'")


NOT_UTF8_TAIL = ("is not allowed (expected UTF-8 text: a byte that is not UTF-8, or a lone "
                 "surrogate, cannot be written into the batch script)")


@pytest.mark.parametrize(("args", "flag", "shown"), [
    ([b"--env", b"A=\xff"], "--env", "'A=\\udcff'"),
    ([b"--container-image", b"img\xff"], "--container-image", "'img\\udcff'"),
    ([b"--", b"python3", b"\xff"], "-- COMMAND", "'\\udcff'"),
])
@pytest.mark.parametrize("command", ["submit", "render"])
def test_flag_bytes_that_are_not_utf8_are_refused_naming_the_flag(
        tmp_path: Path, args: list[bytes], flag: str, shown: str, command: str) -> None:
    """Argv bytes that are not UTF-8 reach Python as lone surrogates: `render` printed them
    into the script, `render -o` and `submit` raised UnicodeEncodeError writing it."""
    out = tmp_path / "job.sbatch"
    argv: list[str | bytes] = [sys.executable, "-m", "launcher", command, str(EXAMPLE)]
    argv += ["-o", str(out)] if command == "render" else []
    env = {**os.environ, "PYTHONPATH": str(REPO), "SLURM_CONF": str(tmp_path / "no.conf"),
           "GANTRY_JOBS_DIR": str(tmp_path / "jobs")}
    result = subprocess.run([*argv, *args], capture_output=True, cwd=tmp_path, env=env,
                            check=False)
    stderr = result.stderr.decode("utf-8", "backslashreplace")
    assert result.returncode == 2, stderr
    assert stderr.splitlines() == [f"error: {flag}: {shown} {NOT_UTF8_TAIL}"]
    assert result.stdout == b""
    assert not out.exists() and not (tmp_path / "jobs").exists()


@pytest.mark.parametrize(("line", "field", "shown"), [
    ('env: {A: "\\udcff"}', "env.A", "'\\udcff'"),
    ('command: [python3, "\\ud800"]', "command[1]", "'\\ud800'"),
])
def test_yaml_escapes_of_lone_surrogates_are_refused_naming_the_field(
        tmp_path: Path, line: str, field: str, shown: str) -> None:
    job = write(tmp_path, EXAMPLE.read_text() + line + "\n")
    with pytest.raises(UserInputError) as info:
        resolve_request(job)
    assert str(info.value) == f"{job}: {field}: {shown} {NOT_UTF8_TAIL}"


def test_one_table_gives_the_options_the_record_and_the_fields() -> None:
    """CliOverrides' Flag table is the only list: every option `gantry submit` accepts in its
    overrides group comes from it, and giving each one sets exactly its job field."""
    import argparse

    from launcher.job_cli import add_request_args, overrides_from_args

    parser = argparse.ArgumentParser()
    add_request_args(parser)
    group = next(g for g in parser._action_groups if g.title and "overrides" in g.title)
    table = CliOverrides.flags()
    assert [a.option_strings[0] for a in group._group_actions] == [f.flag for _, f in table]
    argv = ["job.yaml"]
    for _, flag in table:
        value = {"--nodes": "3", "--spares": "1", "--gpus-per-node": "2",
                 "--cpus-per-task": "4", "--preflight": "deep", "--env": "K=V",
                 "--sbatch-option": "--licenses=v", "--exclusive": None,
                 "--launch": "torchrun"}.get(flag.flag, "v")
        argv += [flag.flag] if value is None else [f"{flag.flag}={value}"]
    args = parser.parse_args(argv)
    args.passthrough = ["echo"]
    merged, used = overrides_from_args(args).apply({"resources": {"dependencies": ["d0"]}})
    repeatable = ("--dependency", "--sbatch-option", "--env")
    assert used == [f.flag for _, f in table if f.flag not in repeatable] + [
        *repeatable, "-- COMMAND"]
    for _, flag in table:
        where = merged if flag.section is None else merged[flag.section]
        assert flag.key in where, flag
    assert merged["resources"]["dependencies"] == ["d0", "v"] and merged["env"] == {"K": "V"}
    assert merged["resources"]["nodes"] == 3 and merged["command"] == ["echo"]
    assert merged["resources"]["sbatch_options"] == [
        "--constraint=v", "--exclusive", "--mem=v", "--hint=v", "--gres=v", "--licenses=v"]

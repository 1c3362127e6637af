"""`gantry plan` end to end (a real subprocess): tree view, JSON, one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys

from topology import hostlists


def gantry(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "launcher", "plan", "--slurm-version", "22.05.8", "--offline",
         *args],
        capture_output=True,
        text=True,
        check=False,
    )


def test_plain_tree_with_stage_labels_when_piped() -> None:
    result = gantry("--nodes", "4", "--spares", "1", "--pp", "2", "--dp", "2", "--unhealthy", "n2")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "\x1b[" not in out  # no colour codes when piped
    assert out.splitlines()[0] == "core  (3 leaf switches)"
    assert "n1  spare" in out
    assert "n3  replica 0 · stage 0" in out and "n4  replica 0 · stage 1" in out
    assert (
        "spanned: 3 leaf switches (lower bound 3 with the free nodes, 3 on an idle cluster)" in out
    )
    assert "slurm options: --nodes=5 --nodelist=n[1,3-6] --switches=3@10:00 --exclude=n2" in out


def test_json_for_scripts() -> None:
    result = gantry("--nodes", "2", "--pp", "2", "--free", "n[3-6]", "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["spanned"] == ["leaf2"] and data["lower_bound"] == 1
    assert [(r["node"], r["ranks"]) for r in data["roles"]] == [
        ("n3", [{"replica": 0, "stage": 0}]),
        ("n4", [{"replica": 0, "stage": 1}]),
    ]
    options = dict(o.split("=", 1) for o in data["slurm_options"])
    assert hostlists.expand(options["--nodelist"]) == ["n3", "n4"]
    assert data["slurm_version"] == "22.05.8"


def test_bad_flags_are_one_line_exit_2() -> None:
    for args, message in [
        (
            ("--nodes", "4", "--dp", "3"),
            "error: command line: dp: pp(1) * dp(3) = 3 ranks but nodes(4)",
        ),
        (("--nodes", "2", "--free", "n[1-3"), "error: --free: bad hostlist 'n[1-3'"),
        (("--nodes", "2", "--free", "n[1-3],zz"), "error: free nodes: zz is not in the topology"),
    ]:
        result = gantry(*args)
        assert result.returncode == 2, args
        assert len(result.stderr.splitlines()) == 1 and result.stderr.startswith(message)
        assert "Traceback" not in result.stderr


def test_impossible_request_is_one_line_exit_1() -> None:
    result = gantry("--nodes", "3", "--free", "n[1,3,5,7]")
    assert result.returncode == 0  # 3 of 4 free nodes under core
    result = gantry("--nodes", "5", "--free", "n[1-4]")  # the site has them, Slurm not now
    assert result.returncode == 1
    assert result.stderr.startswith("error: the job needs 5 nodes")
    result = gantry("--nodes", "9")  # more than the site has: bad input, as in `gantry render`
    assert result.returncode == 2
    assert result.stderr == "error: command line: nodes(9) + spares(0) = 9 nodes but site " \
        "local has 8\n"

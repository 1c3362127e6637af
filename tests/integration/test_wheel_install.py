"""The wheel works on its own (issue #32): built from the project's sources, installed into a
fresh venv outside the checkout, its `gantry render`, `gantry plan`, `gantry build` and
`gantry submit --follow` run from a directory outside the checkout on the embedded cluster.

The venv holds the wheel and nothing else (no pip, no system site packages); its
dependencies come from this interpreter's site directories, named in a .pth file as plain
paths (so the editable-install hook of a checkout's venv is not run), and PYTHONPATH is
unset: nothing can import the checkout's launcher/. The wheel is built offline
(``pip wheel --no-deps --no-build-isolation --no-index``) from a copy of the sources, so the
checkout gets no build/ tree. One cluster (the session's), a two-rank command job.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
import yaml

from launcher.step_labels import strip_label
from tests.embedded_cluster import REPO_ROOT, EmbeddedCluster

pytestmark = pytest.mark.slow

SOURCES = ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md", "LICENSE", "launcher",
           "topology", "sbatch_templates", "site_configs", "native")
LEFT_OUT = shutil.ignore_patterns("build", "_data", "__pycache__", "*.o", "*.so", "*.pyc")
RANK_PROGRAM = ("import os, launcher; "
                "print('wheel-rank', os.environ['SLURM_PROCID'], launcher.__file__, flush=True)")


def offline(*argv: str, cwd: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check",
                           "--no-cache-dir", *argv], capture_output=True, text=True, cwd=cwd,
                          timeout=300, check=False)
    assert done.returncode == 0, (argv, done.stdout[-2000:], done.stderr[-2000:])


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with the wheel built from this checkout's sources installed."""
    root = tmp_path_factory.mktemp("wheel")
    src = root / "src"
    src.mkdir()
    for name in SOURCES:
        if (REPO_ROOT / name).is_dir():
            shutil.copytree(REPO_ROOT / name, src / name, ignore=LEFT_OUT)
        else:
            shutil.copy2(REPO_ROOT / name, src / name)
    offline("wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q", "-w",
            str(root / "dist"), str(src), cwd=root)
    (wheel,) = (root / "dist").glob("slurm_gantry-*.whl")
    env_dir = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env_dir)], check=True,
                   timeout=120)
    python = env_dir / "bin" / "python"
    offline("--python", str(python), "install", "--no-deps", "--no-index", "-q", str(wheel),
            cwd=root)
    site_dir = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True, timeout=60).stdout.strip()
    deps = dict.fromkeys(sysconfig.get_paths()[k] for k in ("purelib", "platlib"))
    (Path(site_dir) / "gantry-test-deps.pth").write_text("".join(f"{p}\n" for p in deps))
    shutil.rmtree(src)
    return env_dir


def gantry(venv: Path, cluster: EmbeddedCluster, cwd: Path,
           *args: str) -> subprocess.CompletedProcess[str]:
    """The venv's `gantry` console script, run in ``cwd`` without PYTHONPATH."""
    env = {k: v for k, v in cluster.env.items() if k != "PYTHONPATH"}
    env.update(GANTRY_JOBS_DIR=str(cwd / "jobs"), GANTRY_BUILD_CACHE=str(cwd / "cache"))
    return subprocess.run([str(venv / "bin" / "gantry"), *args], capture_output=True,
                          text=True, cwd=cwd, env=env, timeout=300, check=False)


def test_the_installed_wheel_renders_plans_builds_and_runs_a_job(
        venv: Path, embedded_cluster: EmbeddedCluster, tmp_path: Path) -> None:
    assert not tmp_path.resolve().is_relative_to(REPO_ROOT)
    c = embedded_cluster
    python = str(venv / "bin" / "python")
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump({
        "name": "wheel-smoke",
        "command": [python, "-c", RANK_PROGRAM],
        "parallelism": {"pp": 1, "dp": 2},
        "resources": {"nodes": 2, "time_limit": "00:05:00"},
        "policy": {"preflight_level": "quick"},
    }))

    # render, with the site the wheel carries (site_configs/local.yaml as package data)
    done = gantry(venv, c, tmp_path, "render", str(job), "-o", str(tmp_path / "job.sbatch"))
    assert done.returncode == 0, done.stderr
    script = (tmp_path / "job.sbatch").read_text()
    carried = venv.resolve() / "lib"
    assert f"{python} -m launcher preflight --json --site {carried}" in script, script
    assert "PYTHONPATH" not in script and str(REPO_ROOT) not in script

    done = gantry(venv, c, tmp_path, "plan", str(job), "--site", str(c.site_path), "--json")
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)
    assert plan["cluster_state"]["source"] != "offline"  # the live cluster answered
    assert [role["spare"] for role in plan["roles"]] == [False, False]

    done = gantry(venv, c, tmp_path, "build", "--site", str(c.site_path), "--json")
    assert done.returncode == 0, done.stderr
    built = json.loads(done.stdout)
    assert Path(built["library"]).is_file()
    assert Path(built["library"]).is_relative_to(tmp_path / "cache")

    try:
        done = gantry(venv, c, tmp_path, "submit", str(job), "--site", str(c.site_path),
                      "--follow")
    finally:
        c.cancel_all()
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-3000:])
    logs = "".join(p.read_text() for p in (tmp_path / "jobs").rglob("slurm-*.out"))
    # srun --label: "R: wheel-rank R <path>" (launcher/step_labels.py)
    ranks = sorted(strip_label(line).split()[1:] for line in logs.splitlines()
                   if strip_label(line).startswith("wheel-rank"))
    assert all(f"{r}: wheel-rank {r} " in logs for r in (0, 1)), logs[-3000:]
    installed = str(venv.resolve() / "lib")
    assert [rank for rank, _ in ranks] == ["0", "1"], logs[-3000:]
    assert all(path.startswith(installed) for _, path in ranks), ranks

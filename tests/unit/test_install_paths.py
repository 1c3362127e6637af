"""Where gantry's data is (the wheel's package data, else the checkout's) and the PYTHONPATH a
job step gets: none when gantry is installed, else gantry's directory before the user's."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from launcher import install_paths
from launcher.job_request import resolve_request
from launcher.job_script import render_job

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "gpt2-tiny-pp2-dp2.yaml"


def test_a_checkout_reads_its_own_directories() -> None:
    assert install_paths.package_dir() == REPO / "launcher"
    for name in install_paths.DATA_DIRS:
        assert install_paths.data_dir(name) == REPO / name


def test_a_wheel_reads_its_package_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    package = tmp_path / "site-packages" / "launcher"
    (package / install_paths.BUNDLE / "native").mkdir(parents=True)
    monkeypatch.setattr(install_paths, "package_dir", lambda: package)
    assert install_paths.data_dir("native") == package / "_data" / "native"


def test_an_installed_gantry_needs_no_pythonpath(monkeypatch: pytest.MonkeyPatch) -> None:
    assert install_paths.import_root() == REPO  # this checkout: not a site directory
    assert install_paths.prepend_pythonpath("/user/lib") == f"{REPO}:/user/lib"
    assert install_paths.prepend_pythonpath(None) == str(REPO)
    monkeypatch.setattr("site.getsitepackages", lambda: [str(REPO)])
    assert install_paths.import_root() is None
    assert install_paths.prepend_pythonpath("/user/lib") == "/user/lib"


def script_pythonpath(script: str, user: str | None) -> str:
    """PYTHONPATH after the script's environment lines ran with ``user`` set (or unset)."""
    lines = [ln for ln in script.splitlines() if ln.startswith("export PYTHONPATH")]
    env = {"PATH": "/usr/bin:/bin", **({"PYTHONPATH": user} if user is not None else {})}
    done = subprocess.run(["bash", "-c", "\n".join([*lines, 'printf %s "${PYTHONPATH-}"'])],
                          capture_output=True, text=True, env=env, check=True, timeout=30)
    return done.stdout


def test_the_script_prepends_a_checkout_and_keeps_the_users(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    odd = tmp_path / "it's a $(checkout)"
    monkeypatch.setattr("launcher.job_script.import_root", lambda: odd)
    script = render_job(resolve_request(EXAMPLE), tmp_path / "jd", tmp_path)
    assert script_pythonpath(script, "/user/lib") == f"{odd}:/user/lib"
    assert script_pythonpath(script, None) == str(odd)


def test_the_script_of_an_installed_gantry_sets_no_pythonpath(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("launcher.job_script.import_root", lambda: None)
    script = render_job(resolve_request(EXAMPLE), tmp_path / "jd", tmp_path)
    assert "PYTHONPATH" not in script
    assert script_pythonpath(script, "/user/lib") == "/user/lib"

"""The CMake options `gantry build` derives from a site's build section (no compiler run)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from launcher import build
from launcher.errors import UserInputError
from launcher.site_config import DEFAULT_SITE, LoadedSite, load_site


def _site(tmp_path: Path, build_section: dict[str, object]) -> Path:
    data = yaml.safe_load(DEFAULT_SITE.read_text())
    data["build"] = build_section
    path = tmp_path / "site.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _loaded(tmp_path: Path, build_section: dict[str, object]) -> LoadedSite:
    return load_site(_site(tmp_path, build_section))


def test_cpu_site_names_only_its_backend(tmp_path: Path) -> None:
    site = _loaded(tmp_path, {"backend": "cpu", "cmake_args": ["-DMPI_HOME=/opt/mpi"]})
    assert build.backend_options(site) == ["-DGANTRY_BACKEND=cpu", "-DMPI_HOME=/opt/mpi"]


def test_cuda_site_compiles_for_exactly_its_architectures(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(build, "DEPS_FRONTEND_DIR", tmp_path / "no-such-dir")
    site = _loaded(tmp_path, {"backend": "cuda", "cuda_archs": ["90a", "80"]})
    options = build.backend_options(site)
    assert options[:2] == ["-DGANTRY_BACKEND=cuda", "-DGANTRY_CUDA_ARCHS=90a;80"]
    # no cudnn-frontend headers anywhere: the reference attention, said explicitly
    assert options[2:] == ["-DGANTRY_CUDNN=OFF"]


def test_cuda_site_uses_the_checkouts_frontend_headers(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    deps = tmp_path / "deps"
    deps.mkdir()
    (deps / "cudnn_frontend.h").write_text("/* header */\n")
    monkeypatch.setattr(build, "DEPS_FRONTEND_DIR", deps)
    site = _loaded(tmp_path, {"backend": "cuda", "cuda_archs": ["90a"]})
    assert f"-DGANTRY_CUDNN_FRONTEND_DIR={deps}" in build.backend_options(site)


def test_site_frontend_dir_resolves_against_the_site_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FRONTEND_ROOT", "vendor")
    site = _loaded(tmp_path, {"backend": "cuda", "cuda_archs": ["90a"],
                              "cudnn_frontend_dir": "$FRONTEND_ROOT/include"})
    assert (f"-DGANTRY_CUDNN_FRONTEND_DIR={tmp_path / 'vendor' / 'include'}"
            in build.backend_options(site))


def test_build_key_changes_with_the_architectures(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(build, "DEPS_FRONTEND_DIR", tmp_path / "no-such-dir")
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    hopper = _loaded(tmp_path / "a", {"backend": "cuda", "cuda_archs": ["90a"]})
    ampere = _loaded(tmp_path / "b", {"backend": "cuda", "cuda_archs": ["80"]})
    assert build.build_key(hopper) != build.build_key(ampere)


@pytest.mark.parametrize(("archs", "message"), [
    ([], "build.cuda_archs: backend 'cuda' needs at least one architecture"),
    (["90a;80"], "build.cuda_archs: '90a;80' is not allowed (an architecture like '90a' or "
                 "'80': letters and digits)"),
])
def test_bad_architectures_are_input_errors(tmp_path: Path, archs: list[str],
                                            message: str) -> None:
    path = _site(tmp_path, {"backend": "cuda", "cuda_archs": archs})
    with pytest.raises(UserInputError) as err:
        load_site(path)
    assert message in str(err.value)

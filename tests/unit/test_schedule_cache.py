"""The schedule table is generated once per job layout: cached in the job directory, read
back byte for byte, and a cache file that does not check out is never trusted (warned about,
rebuilt, replaced)."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.schedules import ScheduleError, generate, simulate
from launcher.train import schedule_cache


def test_first_start_generates_and_caches_later_starts_read(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    blob = schedule_cache.table_bytes("zb-interleaved", 2, 8, 2, tmp_path)
    assert blob == generate("zb-interleaved", 2, 8, 2).to_bytes()
    path = schedule_cache.cache_path(tmp_path, "zb-interleaved", 2, 8, 2)
    assert path.is_file() and path.parent == tmp_path / "schedules"
    assert path.name.startswith("zb-interleaved-pp2-m8-v2-g")

    def no_generate(*args: object) -> None:
        raise AssertionError("generated again")

    monkeypatch.setattr(schedule_cache, "generate", no_generate)
    again = schedule_cache.table_bytes("zb-interleaved", 2, 8, 2, tmp_path)
    assert again == blob
    table = schedule_cache.load(again, "zb-interleaved")
    assert simulate(table).makespan == pytest.approx(24.5)
    assert capsys.readouterr().err == ""


def test_layouts_have_their_own_files(tmp_path: Path) -> None:
    a = schedule_cache.cache_path(tmp_path, "1f1b", 4, 8, 1)
    assert a != schedule_cache.cache_path(tmp_path, "1f1b", 4, 16, 1)
    assert a != schedule_cache.cache_path(tmp_path, "zb-h1", 4, 8, 1)
    assert a != schedule_cache.cache_path(tmp_path, "1f1b", 2, 8, 1)
    assert "-pp4-m8-v1-" in a.name


@pytest.mark.parametrize("damage", ["flip", "quiet-flip", "truncate", "empty", "other-layout"])
def test_a_bad_cache_file_is_warned_about_and_rebuilt(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], damage: str) -> None:
    good = generate("1f1b", 4, 8).to_bytes()
    schedule_cache.table_bytes("1f1b", 4, 8, 1, tmp_path)
    path = schedule_cache.cache_path(tmp_path, "1f1b", 4, 8, 1)
    data = path.read_bytes()
    if damage == "flip":
        data = data[:40] + bytes([data[40] ^ 1]) + data[41:]
    elif damage == "quiet-flip":  # still parses: the last WAIT names another request
        data = data[:-36] + bytes([data[-36] ^ 1]) + data[-35:]
    elif damage == "truncate":
        data = data[:-7]
    elif damage == "empty":
        data = b""
    else:  # a consistent file of another layout under this name
        other = schedule_cache.cache_path(tmp_path, "1f1b", 4, 16, 1)
        schedule_cache.table_bytes("1f1b", 4, 16, 1, tmp_path)
        data = other.read_bytes()
    path.write_bytes(data)
    assert schedule_cache.table_bytes("1f1b", 4, 8, 1, tmp_path) == good
    err = capsys.readouterr().err
    assert err.startswith(f"warning: {path}: schedule cache ") and err.endswith("rebuilt\n")
    assert err.count("\n") == 1
    assert path.read_bytes()[:-32] == good  # replaced by the good table
    assert schedule_cache.table_bytes("1f1b", 4, 8, 1, tmp_path) == good
    assert capsys.readouterr().err == ""


def test_unwritable_cache_is_a_warning_not_a_failure(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "schedules").write_text("a file where the directory goes")
    blob = schedule_cache.table_bytes("gpipe", 2, 4, 1, tmp_path)
    assert blob == generate("gpipe", 2, 4).to_bytes()
    assert "schedule table not cached" in capsys.readouterr().err


def test_no_job_dir_no_cache_and_bad_layouts_still_fail(tmp_path: Path) -> None:
    assert schedule_cache.table_bytes("gpipe", 2, 4, 1, None) == generate("gpipe", 2, 4).to_bytes()
    with pytest.raises(ScheduleError, match="multiple of pp"):
        schedule_cache.table_bytes("interleaved", 4, 6, 2, tmp_path)
    assert not (tmp_path / "schedules").exists()


def test_the_key_follows_the_compiled_search_source(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    import types

    (tmp_path / "__init__.py").write_text("# generators\n")
    (tmp_path / "zb_native.c").write_text("int search(void) { return 1; }\n")
    monkeypatch.setattr(schedule_cache, "schedules",
                        types.SimpleNamespace(__file__=str(tmp_path / "__init__.py")))
    key = schedule_cache.generator_key.__wrapped__  # uncached
    before = key()
    (tmp_path / "zb_native.c").write_text("int search(void) { return 2; }\n")
    assert key() != before

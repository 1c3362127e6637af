"""launcher/atomic_write.py: a write that fails for real (the kernel refusing to grow the file,
text that cannot be UTF-8, a name the file system refuses) leaves the previous file as it was
and no temp file; modes are kept or set as asked; several files go in place together."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from launcher import atomic_write
from launcher.atomic_write import FileExists, FileSet, WriteError, made_directories
from tests.unit.write_faults import file_size_limit


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_write_past_the_size_limit_leaves_the_old_file_and_no_temp(tmp_path: Path) -> None:
    target = tmp_path / "out.txt"
    target.write_text("previous\n")
    with file_size_limit(4096), pytest.raises(WriteError) as info:
        atomic_write.write_text(target, "x" * 10_000, label="--out")
    assert str(info.value) == f"--out: cannot write {target} (File too large)"
    assert target.read_text() == "previous\n"
    assert os.listdir(tmp_path) == ["out.txt"]


def test_a_streamed_write_that_fails_half_way_changes_nothing(tmp_path: Path) -> None:
    target = tmp_path / "shard.bin"
    with (file_size_limit(1 << 16), pytest.raises(WriteError, match=r"\(File too large\)$"),
          atomic_write.open_atomic(target) as handle):
        for _ in range(8):
            handle.write(b"\0" * 16_384)
    assert os.listdir(tmp_path) == []


def test_text_that_is_not_utf8_is_refused_before_anything_is_created(tmp_path: Path) -> None:
    target = tmp_path / "job.sbatch"
    target.write_text("old\n")
    value = os.fsdecode(b"/data/caf\xe9")  # a non-UTF-8 name, as argv carries it
    with pytest.raises(WriteError) as info:
        atomic_write.write_text(target, f"#!/bin/sh\ncd {value}\n")
    assert str(info.value).startswith(f"cannot write {target} (not UTF-8 text: ")
    assert "caf\\udce9" in str(info.value) and "\n" not in str(info.value)
    assert target.read_text() == "old\n" and os.listdir(tmp_path) == ["job.sbatch"]


def test_an_error_inside_the_block_removes_the_temp_and_propagates(tmp_path: Path) -> None:
    target = tmp_path / "report.html"
    with pytest.raises(ZeroDivisionError), atomic_write.open_atomic(target) as handle:
        handle.write(b"half")
        _ = 1 // 0
    assert os.listdir(tmp_path) == []


def test_modes_kept_on_replace_default_for_new_files_exact_when_asked(tmp_path: Path) -> None:
    umask = os.umask(0o022)
    try:
        fresh = tmp_path / "fresh"
        atomic_write.write_text(fresh, "a")
        assert _mode(fresh) == 0o644
        script = tmp_path / "run.sh"
        atomic_write.write_text(script, "#!/bin/sh\n", mode=0o755)
        assert _mode(script) == 0o755
        private = tmp_path / "private"
        private.write_text("old")
        private.chmod(0o600)
        atomic_write.write_text(private, "new")
        assert _mode(private) == 0o600 and private.read_text() == "new"
    finally:
        os.umask(umask)


def test_a_symlink_is_followed_and_its_target_replaced(tmp_path: Path) -> None:
    real = tmp_path / "real.txt"
    real.write_text("old")
    link = tmp_path / "link.txt"
    link.symlink_to(real.name)
    atomic_write.write_text(link, "new")
    assert link.is_symlink() and real.read_text() == "new"


def test_overwrite_false_refuses_an_existing_file(tmp_path: Path) -> None:
    target = tmp_path / "weights.safetensors"
    atomic_write.write_bytes(target, b"one", overwrite=False)
    with pytest.raises(FileExists) as info:
        atomic_write.write_bytes(target, b"two", overwrite=False)
    assert str(info.value) == f"cannot write {target} (it already exists)"
    assert target.read_bytes() == b"one" and os.listdir(tmp_path) == [target.name]


def test_a_name_of_255_bytes_is_written_through_a_shorter_temp(tmp_path: Path) -> None:
    target = tmp_path / ("é" * 127 + "x")  # 255 bytes
    atomic_write.write_text(target, "ok")
    assert target.read_text() == "ok" and os.listdir(tmp_path) == [target.name]
    assert len(os.fsencode(atomic_write.temp_name(target.name))) <= 255


def test_a_name_too_long_is_one_write_error(tmp_path: Path) -> None:
    with pytest.raises(WriteError, match=r"\(File name too long\)$"):
        atomic_write.write_text(tmp_path / ("x" * 256), "no")


def test_a_file_set_changes_no_file_when_one_of_them_fails(tmp_path: Path) -> None:
    first, second = tmp_path / "loss.png", tmp_path / "report.html"
    first.write_bytes(b"old png")
    second.write_text("old html")
    with (file_size_limit(4096), pytest.raises(WriteError, match=r"report\.html"),
          FileSet() as files):
        files.write_bytes(first, b"new png")
        files.write_text(second, "x" * 10_000)
    assert first.read_bytes() == b"old png" and second.read_text() == "old html"
    assert sorted(os.listdir(tmp_path)) == ["loss.png", "report.html"]


def test_a_file_set_temp_path_serves_writers_that_take_a_name(tmp_path: Path) -> None:
    target = tmp_path / "trace.json"
    with FileSet() as files, files.temp_path(target) as temp:
        assert temp.parent == tmp_path and atomic_write.is_temp_name(temp.name)
        temp.write_text("{}")
        assert not target.exists()
    assert target.read_text() == "{}" and os.listdir(tmp_path) == ["trace.json"]
    with (file_size_limit(1), pytest.raises(WriteError) as info, FileSet() as files,
          files.temp_path(target) as temp):
        temp.write_text("{...}")  # a writer that takes a name fails filling it
    assert str(info.value) == f"cannot write {target} (File too large)"
    assert target.read_text() == "{}" and os.listdir(tmp_path) == ["trace.json"]


def test_made_directories_are_removed_again_when_the_block_fails(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    with pytest.raises(ValueError), made_directories(tmp_path / "a" / "b" / "c") as made:
        assert made.is_dir()
        raise ValueError
    assert os.listdir(tmp_path) == ["a"] and os.listdir(tmp_path / "a") == []
    (tmp_path / "file").write_text("")
    with pytest.raises(WriteError) as info, made_directories(tmp_path / "file" / "x", "--out"):
        pass
    assert str(info.value) == (f"--out: cannot create the directory {tmp_path / 'file' / 'x'} "
                               "(Not a directory)")
    with made_directories(tmp_path / "a" / "b") as made:
        (made / "kept").write_text("x")
    assert (tmp_path / "a" / "b" / "kept").is_file()

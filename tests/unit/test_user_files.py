"""Every reader of a file the user names refuses a FIFO at once (opening one to read waits for
a writer forever) with one line naming it, and a file past its size limit."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from launcher import job_dir
from launcher.data.shards import read_shard
from launcher.errors import UserInputError
from launcher.train import checkpoint
from launcher.train.layout import read_rank_order
from launcher.typed_config import load_yaml_file
from topology.source_file import read_source
from topology.user_files import (
    require_output_dir,
    require_regular_file,
    require_short_names,
    require_writable_file,
)


def _refusal(read: Callable[[], object], fifo: Path) -> str:
    """The UserInputError ``read`` raises, run in a thread so that a reader that blocks on the
    FIFO fails the test (after 30 s) instead of hanging it."""
    outcome: list[BaseException] = []

    def run() -> None:
        try:
            read()
        except BaseException as err:  # handed to the test thread
            outcome.append(err)

    reader = threading.Thread(target=run, daemon=True)
    reader.start()
    reader.join(30)
    if reader.is_alive():  # let the blocked open return
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        reader.join(30)
        pytest.fail(f"{read} blocked on a FIFO")
    assert len(outcome) == 1 and isinstance(outcome[0], UserInputError), outcome
    return str(outcome[0])


@pytest.mark.parametrize(
    ("name", "read", "expected"),
    [
        ("site.yaml", load_yaml_file, "a YAML file"),
        ("topology.conf", read_source, "a topology file"),
        ("train_000.bin", read_shard, "a token shard"),
        ("order.yaml", lambda p: read_rank_order(p, 2), "a rank order file (YAML list)"),
        (job_dir.CHECKPOINT_MANIFEST_FILE, lambda p: checkpoint.read_manifest(p.parent),
         "the checkpoint's JSON manifest"),
    ],
)
def test_a_fifo_is_refused_at_once(
    tmp_path: Path, name: str, read: Callable[[Path], object], expected: str
) -> None:
    fifo = tmp_path / name
    os.mkfifo(fifo)
    message = _refusal(lambda: read(fifo), fifo)
    assert message == f"{fifo}: not a regular file (expected {expected})"


def test_size_limit_and_missing_files(tmp_path: Path) -> None:
    big = tmp_path / "big.json"
    big.write_bytes(b"x" * 101)
    with pytest.raises(UserInputError) as info:
        require_regular_file(big, "a manifest", max_bytes=100)
    assert str(info.value) == (f"{big}: 101 bytes is not allowed (expected a manifest of at "
                               "most 100 bytes)")
    require_regular_file(big, "a manifest", max_bytes=101)
    require_regular_file(tmp_path / "absent", "anything")  # the caller says "no such file"
    with pytest.raises(UserInputError, match="not a regular file"):
        require_regular_file(tmp_path, "a file")


def test_an_output_file_is_checked_before_anything_is_done(tmp_path: Path) -> None:
    require_writable_file(tmp_path / "new.txt", "--out")
    with pytest.raises(UserInputError) as info:
        require_writable_file(tmp_path, "--out")
    assert str(info.value) == f"--out: {tmp_path} is a directory (expected a file name)"
    with pytest.raises(UserInputError, match=r"^--out: .*/absent is not a directory$"):
        require_writable_file(tmp_path / "absent" / "x", "--out")
    with pytest.raises(UserInputError, match=r"^--out: x{40}\.\.\. is not allowed"):
        require_writable_file(tmp_path / ("x" * 300), "--out")


def test_names_the_file_system_cannot_take_are_refused_naming_the_flag(tmp_path: Path) -> None:
    long_part = "d" * 256
    for path in (tmp_path / long_part / "x", Path(os.fsdecode(b"\xff" * 256))):
        with pytest.raises(UserInputError) as info:
            require_short_names(path, "--out")
        assert str(info.value).startswith("--out: ") and "at most 255 bytes" in str(info.value)
    with pytest.raises(UserInputError, match=r"^--out: .* \(a path of at most 4095 bytes; "
                                             r"this one has 5\d{3}\)$"):
        require_short_names(Path("/".join(["p" * 200] * 26)), "--out")
    require_short_names(tmp_path / ("é" * 127 + "x"), "--out")  # 255 bytes: fine
    with pytest.raises(UserInputError, match=r"^out_dir: d{40}\.\.\. is not allowed"):
        require_output_dir(tmp_path / long_part, "out_dir")
    (tmp_path / "file").write_text("")
    with pytest.raises(UserInputError) as info:
        require_output_dir(tmp_path / "file", "--out")
    assert str(info.value) == f"--out: {tmp_path / 'file'} exists and is not a directory"
    require_output_dir(tmp_path / "new" / "dir", "--out")

"""The incremental reader: its lines are ``Path.read_text(errors="replace").splitlines()``
whatever the bytes and however the file grew; only appended lines are folded again; a
half-written last line counts until it changes; a replaced, shortened or rewritten file is
read from the start; a missing one is forgotten."""

from __future__ import annotations

import os
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from launcher.report.read_cache import GUARD, Fold, ReadCache, fold_lines

LINES = Fold("lines", None, lambda state, line: (None, line))
PIECES = st.lists(st.sampled_from([b"\n", b"\r", b"\r\n", b"a", b"{}", b"\xc3", b"\xa9",
                                   b"\xe2\x86\x93", b"\x80", "\u2028".encode(), b"\x1e",
                                   b"\x85", b" "]), max_size=40)


def whole(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8", errors="replace").splitlines()


@settings(max_examples=300, deadline=None)
@given(PIECES, st.lists(st.integers(0, 12), max_size=12))
def test_lines_are_read_texts_at_every_point_of_a_growth(pieces: list[bytes],
                                                         cuts: list[int]) -> None:
    import tempfile

    data = b"".join(pieces)
    with tempfile.TemporaryDirectory() as where:
        path = Path(where) / "f.jsonl"
        path.write_bytes(b"")
        cache = ReadCache()
        written = 0
        for size in [*cuts, len(data)]:
            with open(path, "ab") as handle:
                handle.write(data[written:written + size])
            written = min(written + size, len(data))
            assert fold_lines(path, LINES, cache) == whole(path)
            assert fold_lines(path, LINES) == whole(path)


def counting(calls: list[str]) -> Fold[int, tuple[int, str]]:
    """Numbers the lines it folds (state: lines before); ``calls`` gets every line folded."""

    def step(count: int, line: str) -> tuple[int, tuple[int, str]]:
        calls.append(line)
        return count + 1, (count, line)

    return Fold("numbered", 0, step)


def test_only_appended_lines_are_folded_and_a_torn_line_waits(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    path.write_text("one\ntwo\nthr")
    calls: list[str] = []
    fold = counting(calls)
    cache = ReadCache()
    assert fold_lines(path, fold, cache) == [(0, "one"), (1, "two"), (2, "thr")]
    assert calls == ["one", "two", "thr"]
    calls.clear()
    with open(path, "a") as handle:
        handle.write("ee\nfour\n")
    assert fold_lines(path, fold, cache) == [(0, "one"), (1, "two"), (2, "three"),
                                             (3, "four")]
    assert calls == ["three", "four"]  # the torn line again, whole; nothing before it
    calls.clear()
    assert fold_lines(path, fold, cache) == fold_lines(path, fold)
    assert calls == ["one", "two", "three", "four"]  # the cache-less read: all of it


def test_a_replaced_or_shortened_file_is_read_from_the_start(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    path.write_text("a\nb\n")
    cache = ReadCache()
    assert fold_lines(path, LINES, cache) == ["a", "b"]
    temp = tmp_path / "new"
    temp.write_text("a\nb\nc\n")  # another inode, longer, the same first lines
    os.replace(temp, path)
    assert fold_lines(path, LINES, cache) == ["a", "b", "c"]
    with open(path, "r+") as handle:  # the same inode, shorter
        handle.truncate(2)
    assert fold_lines(path, LINES, cache) == ["a"]
    with open(path, "r+") as handle:  # the same inode rewritten in place, longer
        handle.write("x\ny\nz\n")
    assert fold_lines(path, LINES, cache) == ["x", "y", "z"]


def test_a_file_of_another_inode_is_read_again_even_when_its_end_is_the_same(
        tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    common = "".join(f"record {i:03d}\n" for i in range(12))
    path.write_text("first\n" + common)
    cache = ReadCache()
    assert fold_lines(path, LINES, cache)[0] == "first"
    temp = tmp_path / "new"
    temp.write_text("other\n" + common + "more\n")  # the same size up to the offset and end
    os.replace(temp, path)
    assert fold_lines(path, LINES, cache) == ["other", *common.splitlines(), "more"]


def test_a_rewrite_in_place_is_seen_in_the_bytes_before_the_offset(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    first = "".join(f"line {i:03d}\n" for i in range(20))
    path.write_text(first)
    cache = ReadCache()
    assert fold_lines(path, LINES, cache) == first.splitlines()
    changed = first[:-GUARD] + first[-GUARD:].replace("line", "LINE") + "more\n"
    path.write_text(changed)  # open("w"): same inode, longer
    assert fold_lines(path, LINES, cache) == changed.splitlines()


def test_a_missing_file_gives_nothing_and_is_forgotten(tmp_path: Path) -> None:
    path = tmp_path / "gone.jsonl"
    cache = ReadCache()
    assert fold_lines(path, LINES, cache) == []
    path.write_text("a\n")
    assert fold_lines(path, LINES, cache) == ["a"] and len(cache) == 1
    path.unlink()
    assert fold_lines(path, LINES, cache) == [] and len(cache) == 0
    assert fold_lines(tmp_path, LINES, cache) == []  # a directory: not readable as a file


def test_the_limit_reads_only_the_first_bytes(tmp_path: Path) -> None:
    path = tmp_path / "node-health.jsonl"
    path.write_text("aaaa\nbbbb\ncccc\n")
    cache = ReadCache()
    assert fold_lines(path, LINES, cache, limit=7) == ["aaaa", "bb"]
    with open(path, "a") as handle:
        handle.write("dddd\n")
    assert fold_lines(path, LINES, cache, limit=7) == ["aaaa", "bb"]
    assert fold_lines(path, LINES, cache, limit=12) == ["aaaa", "bbbb", "cc"]


def test_once_reads_a_file_again_only_for_another_inode(tmp_path: Path) -> None:
    path = tmp_path / "0.start"
    path.write_text("first")
    cache = ReadCache()
    reads: list[str] = []

    def parse(p: Path) -> str:
        reads.append(p.read_text())
        return reads[-1]

    inode = path.stat().st_ino
    assert cache.once(path, inode, "start", parse) == "first"
    assert cache.once(path, inode, "start", parse) == "first"
    temp = tmp_path / "tmp"
    temp.write_text("second")
    os.replace(temp, path)
    assert cache.once(path, path.stat().st_ino, "start", parse) == "second"
    assert reads == ["first", "second"]

"""`gantry data` reads its inputs as streams: memory stays bounded whatever their size, a
device such as /dev/zero is refused (it was read until memory ran out), and a failure leaves
neither shards nor the token spool behind."""

from __future__ import annotations

import os
import threading
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from launcher.cli import main
from launcher.data import token_stream
from launcher.data.byte_tokenizer import EOT_TOKEN
from launcher.data.shards import read_shard
from tests.unit.test_data_gpt2 import vocab_dir  # noqa: F401 (a fixture)


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/null", "link"])
def test_a_device_input_is_refused_before_anything_is_written(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], device: str) -> None:
    if device == "link":  # the check follows links: corpus.txt -> /dev/zero
        (tmp_path / "corpus.txt").symlink_to("/dev/zero")
        device = str(tmp_path / "corpus.txt")
    out = tmp_path / "shards"
    assert main(["data", device, "--out", str(out)]) == 2
    assert capsys.readouterr().err == (
        f"error: {device}: a character device (expected a text file, or a FIFO streaming "
        "one)\n")
    assert not out.exists()


def test_a_large_input_is_streamed_in_bounded_memory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """8 MiB of text read in 64 KiB pieces: the peak of Python's allocations (numpy's
    included) stays below the input's size; reading it whole took its bytes, their tokens and
    a concatenated copy (over 5 times the size)."""
    monkeypatch.setattr(token_stream, "READ_BYTES", 64 << 10)
    monkeypatch.setattr(token_stream, "COPY_TOKENS", 32 << 10)
    size = 8 << 20
    corpus = tmp_path / "corpus.txt"
    pattern = np.arange(size, dtype=np.uint64) * 2654435761 % 251
    corpus.write_bytes(pattern.astype(np.uint8).tobytes())
    del pattern
    out = tmp_path / "shards"
    tracemalloc.start()
    try:
        assert main(["data", str(corpus), "--out", str(out), "--shard-tokens", "3000000"]) == 0
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < size, peak
    capsys.readouterr()
    names = sorted(p.name for p in out.iterdir())
    assert names == ["train_000000.bin", "train_000001.bin", "train_000002.bin",
                     "val_000000.bin"]  # no spool left
    tokens = np.concatenate([read_shard(out / name) for name in names])
    assert tokens[-1] == EOT_TOKEN and len(tokens) == size + 1
    assert tokens[:-1].astype(np.uint8).tobytes() == corpus.read_bytes()


def test_a_fifo_of_several_pieces_keeps_documents_in_order(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(token_stream, "READ_BYTES", 7)
    fifo, plain = tmp_path / "stream", tmp_path / "b.txt"
    os.mkfifo(fifo)
    plain.write_bytes(b"second document")
    writer = threading.Thread(target=lambda: fifo.write_bytes(b"first, from a FIFO " * 9),
                              daemon=True)
    writer.start()
    out = tmp_path / "o"
    assert main(["data", str(fifo), str(plain), "--out", str(out), "--val-fraction", "0.25",
                 "--shard-tokens", "40", "--json"]) == 0
    writer.join(30)
    tokens = np.concatenate([read_shard(p) for p in sorted(out.glob("train_*.bin"))]
                            + [read_shard(p) for p in sorted(out.glob("val_*.bin"))])
    expected = [*b"first, from a FIFO " * 9, EOT_TOKEN, *b"second document", EOT_TOKEN]
    assert tokens.tolist() == expected
    assert [len(read_shard(p)) for p in sorted(out.glob("val_*.bin"))] == [40, 7]  # 188 // 4


def test_a_failure_leaves_no_spool_and_no_directory(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "empty.txt"
    empty.write_bytes(b"")
    out = tmp_path / "new" / "shards"
    assert main(["data", str(empty), "--out", str(out), "--val-fraction", "0"]) == 2
    assert "inputs: 1 tokens leave 1 for training (need at least 2)" in capsys.readouterr().err
    assert not (tmp_path / "new").exists()
    kept = tmp_path / "kept"
    kept.mkdir()
    assert main(["data", str(empty), "--out", str(kept), "--val-fraction", "0"]) == 2
    assert list(kept.iterdir()) == []


def test_a_gpt2_document_past_the_cap_is_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, vocab_dir: Path,  # noqa: F811
        capsys: pytest.CaptureFixture[str]) -> None:
    """The GPT-2 tokenizer encodes a document whole: one larger than the cap is refused, as
    it is read (a FIFO of /dev/zero's bytes would otherwise take all memory)."""
    monkeypatch.setattr(token_stream, "MAX_GPT2_DOCUMENT_BYTES", 100)
    monkeypatch.setattr(token_stream, "READ_BYTES", 16)
    doc = tmp_path / "doc.txt"
    doc.write_text("The quick brown fox. " * 4)
    out = tmp_path / "o"
    args = ["--out", str(out), "--tokenizer", "gpt2", "--tokenizer-files", str(vocab_dir)]
    assert main(["data", str(doc), *args]) == 0
    big = tmp_path / "big.txt"
    big.write_text("The quick brown fox. " * 6)
    assert main(["data", str(big), *args[:1], str(tmp_path / "o2"), *args[2:]]) == 2
    assert capsys.readouterr().err.endswith(
        f"error: {big}: a document of more than 100 bytes is not allowed with --tokenizer "
        "gpt2 (it encodes each document whole; split the text into several files)\n")
    assert not (tmp_path / "o2").exists()

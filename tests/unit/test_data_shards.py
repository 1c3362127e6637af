"""Token shards (Python writer/reader, llm.c layout), the byte tokenizer and `gantry data`."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import numpy as np
import pytest

from launcher.cli import main
from launcher.data.byte_tokenizer import EOT_TOKEN, decode, encode_document
from launcher.data.shards import HEADER_BYTES, SHARD_MAGIC, read_shard, write_shard
from launcher.errors import UserInputError
from launcher.train.data import read_shards


def test_shard_layout_and_round_trip(tmp_path: Path) -> None:
    tokens = np.array([1, 2, 300, 65535, 0], dtype=np.uint16)
    path = tmp_path / "s.bin"
    write_shard(path, tokens)
    raw = path.read_bytes()
    header = np.frombuffer(raw[:HEADER_BYTES], dtype="<i4")
    assert list(header[:3]) == [SHARD_MAGIC, 1, 5] and not header[3:].any()
    assert len(raw) == HEADER_BYTES + 10
    np.testing.assert_array_equal(read_shard(path), tokens)


@pytest.mark.parametrize(
    ("mangle", "message"),
    [
        (lambda raw: raw[:-1], "truncated or oversized token shard: header says 5 tokens"),
        (lambda raw: raw[:100], "truncated token shard: 100 bytes"),
        (lambda raw: b"\x01\x02\x03\x04" + raw[4:], "not a token shard: magic"),
    ],
    ids=["cut-tokens", "cut-header", "bad-magic"],
)
def test_bad_shards_name_the_file(tmp_path: Path, mangle: object, message: str) -> None:
    path = tmp_path / "s.bin"
    write_shard(path, np.arange(5, dtype=np.uint16))
    path.write_bytes(mangle(path.read_bytes()))  # type: ignore[operator]
    with pytest.raises(UserInputError) as err:
        read_shard(path)
    assert str(err.value).startswith(f"{path}: ") and message in str(err.value)


def test_byte_tokenizer() -> None:
    tokens = encode_document("héllo".encode())
    assert tokens[-1] == EOT_TOKEN and len(tokens) == len("héllo".encode()) + 1
    assert decode(tokens) == "héllo".encode()


def test_gantry_data_makes_train_and_val_shards(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text("abcdefghij" * 10)
    b.write_text("0123456789")
    out = tmp_path / "shards"
    status = main(["data", str(a), str(b), "--out", str(out), "--val-fraction", "0.1",
                   "--shard-tokens", "50", "--json"])
    assert status == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["train_tokens"] + summary["val_tokens"] == 112
    assert summary["val_tokens"] == 11
    assert summary["train_shards"] == ["train_000000.bin", "train_000001.bin", "train_000002.bin"]
    train = np.concatenate([read_shard(out / n) for n in summary["train_shards"]])
    val = read_shard(out / "val_000000.bin")
    everything = np.concatenate([train, val])
    assert decode(everything) == a.read_bytes() + b.read_bytes()
    assert list(np.flatnonzero(everything == EOT_TOKEN)) == [100, 111]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--val-fraction", "1.5"], "--val-fraction: 1.5 is not allowed"),
        (["--shard-tokens", "0"], "--shard-tokens: 0 is not allowed"),
        (["MISSING"], "MISSING: input text file does not exist"),
        (["DIR"], "is a directory (expected a text file)"),
        (["STALE"], "already holds token shards (train_000000.bin and 1 more; expected a new "
         "or empty directory)"),
    ],
)
def test_gantry_data_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    text = tmp_path / "a.txt"
    text.write_text("hello")
    args = ["data", str(text), "--out", str(tmp_path / "o"), *extra]
    if extra == ["MISSING"]:
        args = ["data", "MISSING", "--out", str(tmp_path / "o")]
    if extra == ["DIR"]:
        args = ["data", str(tmp_path), "--out", str(tmp_path / "o")]
    if extra == ["STALE"]:  # an earlier run's shards: a train_*.bin glob would mix them in
        (tmp_path / "o").mkdir()
        write_shard(tmp_path / "o" / "train_000000.bin", np.array([1], dtype=np.uint16))
        write_shard(tmp_path / "o" / "val_000000.bin", np.array([1], dtype=np.uint16))
        args = ["data", str(text), "--out", str(tmp_path / "o")]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and "Traceback" not in err
    if extra == ["STALE"]:
        assert sorted(p.name for p in (tmp_path / "o").iterdir()) == [
            "train_000000.bin", "val_000000.bin"]
    else:
        assert not (tmp_path / "o").exists()  # nothing half-done


def test_gantry_data_reads_a_fifo_as_a_stream(tmp_path: Path) -> None:
    fifo = tmp_path / "corpus"
    os.mkfifo(fifo)
    writer = threading.Thread(target=lambda: fifo.write_bytes(b"hello fifo"), daemon=True)
    writer.start()
    assert main(["data", str(fifo), "--out", str(tmp_path / "o"), "--val-fraction", "0"]) == 0
    writer.join(30)
    assert read_shard(tmp_path / "o" / "train_000000.bin").tolist()[:5] == list(b"hello")


def test_training_shards_are_checked_against_the_vocabulary_before_any_step(
    tmp_path: Path,
) -> None:
    write_shard(tmp_path / "train_000000.bin", np.array([1, 2, 3], dtype=np.uint16))
    write_shard(tmp_path / "train_000001.bin", np.array([5, EOT_TOKEN, 7], dtype=np.uint16))
    pattern = str(tmp_path / "train_*.bin")
    assert read_shards(pattern, EOT_TOKEN + 1).tolist() == [1, 2, 3, 5, EOT_TOKEN, 7]
    with pytest.raises(UserInputError) as info:
        read_shards(pattern, EOT_TOKEN)
    assert str(info.value) == (
        f"{tmp_path}/train_000001.bin: token 256 is not allowed (expected tokens below the "
        "model's vocab_size 256; `gantry data` writes 0..256, so vocab_size >= 257)")
    (tmp_path / "train_000002.bin").mkdir()
    with pytest.raises(UserInputError, match=r"train_000002\.bin: not a regular file"):
        read_shards(pattern, EOT_TOKEN + 1)

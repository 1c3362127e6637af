"""`gantry data --tokenizer gpt2`: GPT-2-style byte-level BPE shards through the `tokenizers`
library, from vocabulary files given offline. The vocabulary here is a small byte-level BPE
trained in-process (GPT-2's own files are never downloaded in tests); its files have GPT-2's
format and names."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from launcher.cli import main
from launcher.data import gpt2_tokenizer
from launcher.data.shards import read_shard

TEXTS = [
    "The quick brown fox jumps over the lazy dog. " * 20,
    "Pipeline parallel training splits the layers of a model across GPUs. " * 20,
    "héllo wörld — ünïcode 文字 and emoji 🙂 too.\n\n  spaces   and\ttabs\n",
]


@pytest.fixture(scope="module")
def vocab_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """vocab.json + merges.txt of a byte-level BPE (some 380 tokens, <|endoftext|> among them)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=[gpt2_tokenizer.EOT_TEXT],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tokenizer.train_from_iterator(TEXTS, trainer)
    directory = tmp_path_factory.mktemp("vocab")
    tokenizer.model.save(str(directory))
    assert sorted(p.name for p in directory.iterdir()) == ["merges.txt", "vocab.json"]
    return directory


def _inputs(tmp_path: Path) -> list[Path]:
    paths = []
    for k, text in enumerate(TEXTS):
        path = tmp_path / f"doc{k}.txt"
        path.write_text(text, encoding="utf-8")
        paths.append(path)
    return paths


def test_gpt2_shards_hold_bpe_tokens_with_eot_before_each_document(
    tmp_path: Path, vocab_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "shards"
    status = main(["data", *map(str, _inputs(tmp_path)), "--out", str(out), "--tokenizer",
                   "gpt2", "--tokenizer-files", str(vocab_dir), "--val-fraction", "0.1",
                   "--shard-tokens", "100", "--json"])
    assert status == 0
    summary = json.loads(capsys.readouterr().out)
    tokenizer = gpt2_tokenizer.load(vocab_dir)
    vocab = json.loads((vocab_dir / "vocab.json").read_text())
    assert summary["tokenizer"] == "gpt2" and summary["vocab_size"] == len(vocab) > 300
    tokens = np.concatenate([read_shard(out / n) for n in
                             summary["train_shards"] + summary["val_shards"]])
    assert len(summary["train_shards"]) > 1 and tokens.dtype == np.uint16
    assert summary["train_tokens"] + summary["val_tokens"] == len(tokens)
    # <|endoftext|> starts every document, and the tokens between decode to its text
    eot = vocab[gpt2_tokenizer.EOT_TEXT]
    starts = [int(i) for i in np.flatnonzero(tokens == eot)]
    assert len(starts) == len(TEXTS) and starts[0] == 0
    bounds = [*starts, len(tokens)]
    for k, text in enumerate(TEXTS):
        doc = tokens[bounds[k] + 1 : bounds[k + 1]]
        assert tokenizer.decode(doc) == text
        # BPE really merged: far fewer tokens than bytes
        assert len(doc) < len(text.encode()) / 3 or k == 2


def test_a_literal_endoftext_in_the_text_is_text(tmp_path: Path, vocab_dir: Path) -> None:
    tokenizer = gpt2_tokenizer.load(vocab_dir)
    tokens = tokenizer.encode_document("a <|endoftext|> b")
    assert list(tokens).count(tokenizer.eot) == 1 and tokens[0] == tokenizer.eot
    assert tokenizer.decode(tokens[1:]) == "a <|endoftext|> b"


def test_openai_file_names_are_read_too(tmp_path: Path, vocab_dir: Path) -> None:
    (tmp_path / "encoder.json").write_bytes((vocab_dir / "vocab.json").read_bytes())
    (tmp_path / "vocab.bpe").write_bytes((vocab_dir / "merges.txt").read_bytes())
    ours, theirs = gpt2_tokenizer.load(vocab_dir), gpt2_tokenizer.load(tmp_path)
    assert theirs.merges_file.name == "vocab.bpe"
    np.testing.assert_array_equal(ours.encode_document(TEXTS[0]),
                                  theirs.encode_document(TEXTS[0]))


def _mangle(case: str, vocab_dir: Path, tmp_path: Path) -> Path:
    files = tmp_path / "files"
    files.mkdir()
    vocab = (vocab_dir / "vocab.json").read_text()
    merges = (vocab_dir / "merges.txt").read_text()
    if case == "no-merges":
        (files / "vocab.json").write_text(vocab)
    elif case == "bad-json":
        (files / "vocab.json").write_text(vocab[:50])
        (files / "merges.txt").write_text(merges)
    elif case == "no-eot":
        table = json.loads(vocab)
        table.pop(gpt2_tokenizer.EOT_TEXT)
        (files / "vocab.json").write_text(json.dumps(table))
        (files / "merges.txt").write_text(merges)
    elif case == "too-big":
        table = json.loads(vocab)
        table["Ġzzzz"] = 70000
        (files / "vocab.json").write_text(json.dumps(table))
        (files / "merges.txt").write_text(merges)
    elif case == "missing-dir":
        files.rmdir()
    return files


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("no-flag", "--tokenizer gpt2: needs GPT-2's vocabulary files, which gantry never "
         "downloads: give --tokenizer-files DIR"),
        ("missing-dir", "files does not exist"),
        ("empty-dir", "holds no GPT-2 vocabulary files (expected vocab.json + merges.txt or "
         "encoder.json + vocab.bpe)"),
        ("no-merges", "has vocab.json but no merges.txt"),
        ("bad-json", "vocab.json / merges.txt in "),
        ("no-eot", "has no '<|endoftext|>' token"),
        ("too-big", "70001 tokens do not fit uint16 token shards"),
        ("byte-with-files", "--tokenizer-files: only used with --tokenizer gpt2"),
        ("not-utf8", "not UTF-8 text (byte 1: invalid start byte)"),
    ],
)
def test_bad_tokenizer_input_is_one_line(
    tmp_path: Path, vocab_dir: Path, capsys: pytest.CaptureFixture[str], case: str,
    message: str,
) -> None:
    text = tmp_path / "a.txt"
    text.write_bytes(b"a\xffb" if case == "not-utf8" else b"hello")
    out = tmp_path / "o"
    files = vocab_dir if case == "not-utf8" else _mangle(case, vocab_dir, tmp_path)
    args = ["data", str(text), "--out", str(out), "--tokenizer", "gpt2", "--tokenizer-files",
            str(files)]
    if case == "no-flag":
        args = args[:-2]
    if case == "byte-with-files":
        args[args.index("gpt2")] = "byte"
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err, err
    assert "Traceback" not in err and err.count("\n") == 1
    assert not out.exists()  # nothing half-done


def test_without_the_tokenizers_package_the_error_says_so(
    tmp_path: Path, vocab_dir: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "tokenizers", None)  # import fails as if not installed
    text = tmp_path / "a.txt"
    text.write_text("hello")
    assert main(["data", str(text), "--out", str(tmp_path / "o"), "--tokenizer", "gpt2",
                 "--tokenizer-files", str(vocab_dir)]) == 2
    err = capsys.readouterr().err
    assert "needs the Python package 'tokenizers' (pip install tokenizers)" in err

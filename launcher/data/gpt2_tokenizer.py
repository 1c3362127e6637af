"""GPT-2's byte-level BPE tokenizer, through the `tokenizers` library, from vocabulary files
the user has offline (nothing is ever downloaded).

The files are GPT-2's two: the token table (``vocab.json``, which OpenAI names
``encoder.json``) and the merge list (``merges.txt``, OpenAI's ``vocab.bpe``), as found in a
Hugging Face ``gpt2`` snapshot or shipped by a package. Documents are encoded as llm.c's GPT-2
data scripts do: ``<|endoftext|>`` before each document, its text as ordinary BPE tokens (a
literal ``<|endoftext|>`` inside the text is text, not the special token).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from launcher.errors import UserInputError, shown
from topology.user_files import require_regular_file

EOT_TEXT = "<|endoftext|>"
GPT2_VOCAB_SIZE = 50257
"""GPT-2's vocabulary (50,000 merges + 256 bytes + <|endoftext|>, id 50256)."""
FILE_PAIRS = (("vocab.json", "merges.txt"), ("encoder.json", "vocab.bpe"))
"""The names the two files go by: Hugging Face's, then OpenAI's."""
MAX_FILE_BYTES = 64 << 20
MAX_VOCAB = 1 << 16
"""Shards hold uint16 tokens."""
MISSING_FILES_HINT = (
    "needs GPT-2's vocabulary files, which gantry never downloads: give --tokenizer-files DIR "
    "holding vocab.json and merges.txt (a Hugging Face gpt2 snapshot) or encoder.json and "
    "vocab.bpe (OpenAI's names)")


@dataclass(frozen=True)
class Gpt2Tokenizer:
    tokenizer: Any
    """The `tokenizers.Tokenizer`."""
    eot: int
    vocab_size: int
    vocab_file: Path
    merges_file: Path

    def encode_document(self, text: str) -> npt.NDArray[np.uint16]:
        """<|endoftext|>, then the text's tokens."""
        ids = self.tokenizer.encode(text, add_special_tokens=False).ids
        tokens = np.empty(len(ids) + 1, dtype=np.uint16)
        tokens[0] = self.eot
        tokens[1:] = ids
        return tokens

    def decode(self, tokens: npt.NDArray[np.uint16]) -> str:
        return str(self.tokenizer.decode([int(t) for t in tokens], skip_special_tokens=False))


def _files_in(directory: Path) -> tuple[Path, Path]:
    if not directory.exists():
        raise UserInputError(f"--tokenizer-files: {directory} does not exist")
    if not directory.is_dir():
        raise UserInputError(f"--tokenizer-files: {directory} is not a directory")
    for vocab_name, merges_name in FILE_PAIRS:
        vocab, merges = directory / vocab_name, directory / merges_name
        if vocab.exists() or merges.exists():
            have, lacks = (vocab, merges) if vocab.exists() else (merges, vocab)
            if not lacks.exists():
                raise UserInputError(f"--tokenizer-files: {directory} has {have.name} but no "
                                     f"{lacks.name}")
            for path in (vocab, merges):
                require_regular_file(path, "a tokenizer vocabulary file", MAX_FILE_BYTES)
            return vocab, merges
    names = " or ".join(f"{v} + {m}" for v, m in FILE_PAIRS)
    raise UserInputError(f"--tokenizer-files: {directory} holds no GPT-2 vocabulary files "
                         f"(expected {names})")


def load(directory: Path | None) -> Gpt2Tokenizer:
    """The tokenizer of the files in ``directory``; a UserInputError naming what is missing or
    broken (no files given, the `tokenizers` package not installed, unreadable or non-BPE
    files, no <|endoftext|>, more tokens than a uint16 shard holds)."""
    if directory is None:
        raise UserInputError(f"--tokenizer gpt2: {MISSING_FILES_HINT}")
    vocab, merges = _files_in(directory)
    try:
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    except ImportError:
        raise UserInputError("--tokenizer gpt2: needs the Python package 'tokenizers' "
                             "(pip install tokenizers), which is not installed") from None
    try:
        bpe = models.BPE.from_file(str(vocab), str(merges))
    except Exception as err:  # the library raises plain Exception on bad files
        detail = shown(str(err).splitlines()[0] if str(err) else type(err).__name__)
        raise UserInputError(f"--tokenizer-files: {vocab.name} / {merges.name} in {directory} "
                             f"are not a BPE vocabulary ({detail})") from None
    tokenizer = Tokenizer(bpe)
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    eot = tokenizer.token_to_id(EOT_TEXT)
    if eot is None:
        raise UserInputError(f"{vocab}: has no {EOT_TEXT!r} token (GPT-2's end of text, put "
                             "before every document)")
    size = max(tokenizer.get_vocab(with_added_tokens=True).values()) + 1  # ids may have holes
    if size > MAX_VOCAB:
        raise UserInputError(f"{vocab}: {size} tokens do not fit uint16 token shards "
                             f"(at most {MAX_VOCAB})")
    return Gpt2Tokenizer(tokenizer, int(eot), int(size), vocab, merges)

"""`gantry data`: make llm.c-layout token shards (uint16) from text files.

Every input file is one document. --tokenizer byte (the default): its bytes, then EOT (256),
vocabulary 257, no files needed. --tokenizer gpt2: GPT-2's BPE (vocabulary 50257) from the
vocabulary files in --tokenizer-files DIR, never downloaded; <|endoftext|> before each
document's tokens, as llm.c's GPT-2 data scripts write them. The last --val-fraction of the
tokens goes to val_*.bin, the rest to train_*.bin, at most --shard-tokens tokens per shard.
Inputs are read as streams in bounded memory (a file of any size, or a FIFO such as
<(zcat corpus.gz)); a device such as /dev/zero is refused.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from launcher.errors import UserInputError
from topology.user_files import require_output_dir, require_short_names

if TYPE_CHECKING:  # the tokenizers and shards (numpy) load when data is made
    import numpy as np

    from launcher.atomic_write import FileSet
    from launcher.data import gpt2_tokenizer
    from launcher.data.token_stream import Encoder, TokenSpool

DEFAULT_SHARD_TOKENS = 100_000_000
TOKENIZERS = ("byte", "gpt2")


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "data", help="make token shards from text files (byte or GPT-2 BPE tokens)",
        description=__doc__,
    )
    parser.add_argument("inputs", nargs="+", type=Path, help="text files (one document each)")
    parser.add_argument("--out", type=Path, required=True, help="output directory")
    parser.add_argument("--tokenizer", choices=TOKENIZERS, default="byte",
                        help="byte (default: bytes + EOT, vocabulary 257) or gpt2 (GPT-2's BPE, "
                             "vocabulary 50257; needs --tokenizer-files)")
    parser.add_argument("--tokenizer-files", type=Path, default=None, metavar="DIR",
                        help="gpt2: directory with vocab.json + merges.txt (or encoder.json + "
                             "vocab.bpe); nothing is downloaded")
    parser.add_argument("--val-fraction", type=float, default=0.1,
                        help="fraction of tokens for validation, in [0, 1) (default 0.1)")
    parser.add_argument("--shard-tokens", type=int, default=DEFAULT_SHARD_TOKENS,
                        help=f"max tokens per shard (default {DEFAULT_SHARD_TOKENS})")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    parser.set_defaults(func=run)


def _validate(args: argparse.Namespace) -> gpt2_tokenizer.Gpt2Tokenizer | None:
    """Checks every flag before anything is written; the GPT-2 tokenizer when asked for."""
    from launcher.data import gpt2_tokenizer
    from launcher.data.token_stream import require_stream_input

    if args.tokenizer != "gpt2" and args.tokenizer_files is not None:
        raise UserInputError("--tokenizer-files: only used with --tokenizer gpt2 (the byte "
                             "tokenizer needs no files)")
    if not 0.0 <= args.val_fraction < 1.0:
        raise UserInputError(
            f"--val-fraction: {args.val_fraction} is not allowed (expected a number in [0, 1))"
        )
    if not 1 <= args.shard_tokens <= 2**31 - 1:
        raise UserInputError(
            f"--shard-tokens: {args.shard_tokens} is not allowed (expected 1..{2**31 - 1})"
        )
    require_output_dir(args.out, "--out")
    for path in args.inputs:  # a FIFO (`<(zcat corpus.gz)`) is read as a stream
        require_short_names(path, "inputs")
        if path.is_dir():
            raise UserInputError(f"{path}: is a directory (expected a text file)")
        if not path.exists():
            raise UserInputError(f"{path}: input text file does not exist")
        require_stream_input(path)  # /dev/zero never ends: refused, not read
    if args.out.exists() and not args.out.is_dir():
        raise UserInputError(f"--out: {args.out} exists and is not a directory")
    earlier = sorted(args.out.glob("train_*.bin")) + sorted(args.out.glob("val_*.bin")) \
        if args.out.is_dir() else []
    if earlier:  # a train_*.bin glob would mix them with the new ones
        raise UserInputError(f"--out: {args.out} already holds token shards ({earlier[0].name}"
                             f"{f' and {len(earlier) - 1} more' if len(earlier) > 1 else ''}; "
                             "expected a new or empty directory)")
    return gpt2_tokenizer.load(args.tokenizer_files) if args.tokenizer == "gpt2" else None


def _encode(path: Path, data: bytes,
            gpt2: gpt2_tokenizer.Gpt2Tokenizer | None) -> np.ndarray:
    from launcher.data import byte_tokenizer

    if gpt2 is None:
        return byte_tokenizer.encode_document(data)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise UserInputError(f"{path}: not UTF-8 text (byte {err.start}: {err.reason}); "
                             "--tokenizer gpt2 reads UTF-8") from None
    return gpt2.encode_document(text)


def _write_split(files: FileSet, out: Path, split: str, spool: TokenSpool, start: int,
                 count: int, shard_tokens: int) -> list[str]:
    """Shards of the spool's tokens ``start`` .. ``start + count``, copied a piece at a time."""
    from launcher.data.shards import shard_header

    names = []
    for index, first in enumerate(range(start, start + count, shard_tokens)):
        size = min(shard_tokens, start + count - first)
        path = out / f"{split}_{index:06d}.bin"
        with files.open(path) as handle:
            handle.write(shard_header(size))
            spool.copy_to(handle, first, size)
        names.append(path.name)
    return names


def run(args: argparse.Namespace) -> int:
    from launcher.atomic_write import FileSet, made_directories
    from launcher.console import make_console, print_json
    from launcher.data import byte_tokenizer
    from launcher.data.token_stream import TokenSpool, spool_document

    gpt2 = _validate(args)
    vocab_size = gpt2.vocab_size if gpt2 is not None else byte_tokenizer.VOCAB_SIZE
    encode: Encoder | None = None
    if gpt2 is not None:
        def encode(path: Path, data: bytes) -> np.ndarray:
            return _encode(path, data, gpt2)
    # All shards or none: a failure leaves no shard (a rerun would refuse the directory), no
    # spool, and removes the --out directories this run made. Inputs are streamed through the
    # spool (launcher/data/token_stream.py): memory stays bounded whatever their size.
    with made_directories(args.out, "--out"), TokenSpool(args.out, "--out") as spool, \
            FileSet() as files:
        for path in args.inputs:
            spool_document(spool, path, encode)
        total = spool.count
        n_val = int(total * args.val_fraction)
        if args.val_fraction > 0 and n_val == 0:
            n_val = 1
        n_train = total - n_val
        if n_train < 2:
            raise UserInputError(
                f"inputs: {total} tokens leave {n_train} for training (need at least 2)")
        train_shards = _write_split(files, args.out, "train", spool, 0, n_train,
                                    args.shard_tokens)
        val_shards = _write_split(files, args.out, "val", spool, n_train, n_val,
                                  args.shard_tokens)
    summary: dict[str, Any] = {
        "out": str(args.out),
        "tokenizer": args.tokenizer,
        "vocab_size": vocab_size,
        "documents": len(args.inputs),
        "train_tokens": n_train,
        "val_tokens": n_val,
        "train_shards": train_shards,
        "val_shards": val_shards,
    }
    if args.json:
        print_json(summary)
    else:
        what = (f"GPT-2 BPE from {gpt2.vocab_file.parent}, vocab {vocab_size}: "
                f"<|endoftext|> = {gpt2.eot} before each document" if gpt2 is not None else
                f"byte tokenizer, vocab {vocab_size}: bytes 0-255, EOT 256")
        make_console().print(
            f"wrote {len(train_shards)} train shard(s) ({n_train} tokens) and "
            f"{len(val_shards)} val shard(s) ({n_val} tokens) to {args.out} ({what})"
        )
    return 0

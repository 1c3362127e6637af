"""Byte-level tokenizer: token i < 256 is the byte i; token 256 ends a document.

No vocabulary file and no download. A model trained on these tokens needs vocab_size >= 257
(257 itself works on every backend: the CUDA backend pads its logits inside).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

EOT_TOKEN = 256
"""End-of-document token, appended after every document."""
VOCAB_SIZE = 257
"""Tokens the tokenizer emits (256 bytes + EOT)."""


def encode_document(data: bytes) -> npt.NDArray[np.uint16]:
    """The document's bytes as tokens, followed by EOT."""
    tokens = np.empty(len(data) + 1, dtype=np.uint16)
    tokens[:-1] = np.frombuffer(data, dtype=np.uint8)
    tokens[-1] = EOT_TOKEN
    return tokens


def decode(tokens: npt.NDArray[np.uint16]) -> bytes:
    """Bytes of the tokens, with EOT shown as a newline-free separator (dropped)."""
    return bytes(int(t) for t in tokens if int(t) < 256)

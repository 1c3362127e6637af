"""The GPT-2 model shape shared by the native library binding and the PyTorch reference."""

from __future__ import annotations

from dataclasses import dataclass

from launcher.typed_config import FieldError


@dataclass(frozen=True)
class GPTConfig:
    """Shape of a GPT-2 model (the fields of the C ``gt_config``)."""

    vocab_size: int
    """V: rows of the token embedding, the real vocabulary (e.g. GPT-2's 50257) on every
    backend: the loss is a softmax over exactly V classes (the CUDA backend pads its logits
    inside, never wte)."""
    max_seq_len: int
    """maxT: rows of the position embedding."""
    n_layer: int
    """L: transformer blocks."""
    n_head: int
    """NH: attention heads; must divide n_embd (the head size may be odd)."""
    n_embd: int
    """C: channels."""

    def validate(self) -> None:
        for name in ("vocab_size", "max_seq_len", "n_layer", "n_head", "n_embd"):
            value = getattr(self, name)
            if value < 1:
                raise FieldError(name, f"{value!r} is not allowed (expected an integer >= 1)")
        if self.n_embd % self.n_head != 0:
            raise FieldError(
                "n_embd", f"{self.n_embd} is not divisible by n_head ({self.n_head})"
            )

    @property
    def head_size(self) -> int:
        """Channels per attention head (C / NH)."""
        return self.n_embd // self.n_head

"""PyTorch reference of gantry's GPT-2 (the model the native library computes), fp32.

Module names follow Hugging Face's ``GPT2LMHeadModel`` so the state dict has the HF names
(``transformer.h.{i}.attn.c_attn.weight`` in Conv1D layout (in, out), ...); the output head is
tied to ``transformer.wte.weight``. Helpers make deterministic weights, save/load safetensors,
compute the loss and gradients of a batch and run AdamW steps with global-norm clipping and the
same learning-rate schedule as the C library (``gt_lr_at``). torch is an optional dependency.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import nn
from torch.nn import functional as F

from launcher.native.model_config import GPTConfig


class Conv1D(nn.Module):
    """HF's Conv1D: y = x @ weight + bias with weight (in_features, out_features)."""

    def __init__(self, in_features: int, out_features: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(in_features, out_features))
        self.bias = nn.Parameter(torch.zeros(out_features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.addmm(self.bias, x.reshape(-1, x.shape[-1]), self.weight)
        return out.reshape(*x.shape[:-1], -1)


class Attention(nn.Module):
    """Causal self-attention with fused qkv (c_attn) and output projection (c_proj)."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.n_head = config.n_head
        self.c_attn = Conv1D(config.n_embd, 3 * config.n_embd)
        self.c_proj = Conv1D(config.n_embd, config.n_embd)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        hs = C // self.n_head
        q = q.view(B, T, self.n_head, hs).transpose(1, 2)  # (B, NH, T, hs)
        k = k.view(B, T, self.n_head, hs).transpose(1, 2)
        v = v.view(B, T, self.n_head, hs).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))  # (B, NH, T, T)
        mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        out: torch.Tensor = self.c_proj(y)
        return out


class MLP(nn.Module):
    """c_fc (C -> 4C), tanh-GELU, c_proj (4C -> C)."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.c_fc = Conv1D(config.n_embd, 4 * config.n_embd)
        self.c_proj = Conv1D(4 * config.n_embd, config.n_embd)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))
        return out


class Block(nn.Module):
    """Pre-LayerNorm transformer block."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd, eps=1e-5)
        self.attn = Attention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd, eps=1e-5)
        self.mlp = MLP(config)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        out: torch.Tensor = x + self.mlp(self.ln_2(x))
        return out


class Transformer(nn.Module):
    """The ``transformer.*`` part of HF's GPT2LMHeadModel: embeddings, blocks, ln_f."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.wpe = nn.Embedding(config.max_seq_len, config.n_embd)
        self.h = nn.ModuleList([Block(config) for _ in range(config.n_layer)])
        self.ln_f = nn.LayerNorm(config.n_embd, eps=1e-5)


class GPT2(nn.Module):
    """GPT-2 with the head tied to wte; ``forward`` returns the mean cross-entropy loss."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.config = config
        self.transformer = Transformer(config)

    def forward(self, tokens: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        _, T = tokens.shape
        t = self.transformer
        pos = torch.arange(T, device=tokens.device)
        x = t.wte(tokens) + t.wpe(pos)
        for block in t.h:
            x = block(x)
        x = t.ln_f(x)
        logits = x @ t.wte.weight.t()
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def init_weights(model: GPT2, seed: int, *, randomize_all: bool = False) -> None:
    """Deterministic GPT-2 init (normal std 0.02, residual projections 0.02/sqrt(2L), zero
    biases, unit LayerNorms). ``randomize_all`` also perturbs biases and LayerNorms, so that
    tests exercise every parameter."""
    gen = torch.Generator().manual_seed(seed)
    proj_std = 0.02 / math.sqrt(2 * model.config.n_layer)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith(("ln_1.weight", "ln_2.weight", "ln_f.weight")):
                param.fill_(1.0)
                if randomize_all:
                    param.add_(torch.randn(param.shape, generator=gen) * 0.1)
            elif param.dim() == 1:
                param.zero_()
                if randomize_all:
                    param.add_(torch.randn(param.shape, generator=gen) * 0.02)
            else:
                std = proj_std if name.endswith("c_proj.weight") else 0.02
                param.copy_(torch.randn(param.shape, generator=gen) * std)


def make_model(config: GPTConfig, seed: int, *, randomize_all: bool = False) -> GPT2:
    model = GPT2(config)
    init_weights(model, seed, randomize_all=randomize_all)
    return model


def save_weights(model: GPT2, path: Path) -> None:
    """Writes the state dict (HF names, fp32, contiguous) as safetensors."""
    tensors = {name: t.detach().contiguous().clone() for name, t in model.state_dict().items()}
    save_file(tensors, str(path), metadata={"format": "pt"})


def load_weights(model: GPT2, path: Path) -> None:
    """Loads HF-named weights (an optional tied ``lm_head.weight`` is ignored)."""
    tensors = load_file(str(path))
    tensors.pop("lm_head.weight", None)
    model.load_state_dict(tensors, strict=True)


def loss_and_grads(
    model: GPT2, tokens: torch.Tensor, targets: torch.Tensor
) -> tuple[float, dict[str, torch.Tensor]]:
    """Mean loss of the batch and the gradient of every parameter (HF names)."""
    model.zero_grad(set_to_none=True)
    loss = model(tokens, targets)
    loss.backward()
    grads = {
        name: p.grad.detach().clone()
        for name, p in model.named_parameters()
        if p.grad is not None
    }
    return float(loss.item()), grads


def lr_at(
    step: int, max_lr: float, min_lr: float, warmup_steps: int, total_steps: int, *,
    cosine: bool,
) -> float:
    """Learning rate at 0-based ``step``; the same formula as the C ``gt_lr_at``."""
    if step < warmup_steps:
        return max_lr * (step + 1) / warmup_steps
    if not cosine:
        return max_lr
    decay_steps = total_steps - warmup_steps
    ratio = (step - warmup_steps) / decay_steps if decay_steps > 0 else 1.0
    ratio = min(max(ratio, 0.0), 1.0)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (max_lr - min_lr)


@dataclass(frozen=True)
class TrainSettings:
    """Optimizer and schedule settings of a reference training run."""

    max_lr: float = 1e-3
    """Peak learning rate."""
    min_lr: float = 1e-4
    """Learning rate at the end of the cosine decay."""
    warmup_steps: int = 3
    """Linear warmup steps."""
    total_steps: int = 10
    """Steps of the whole schedule (warmup + decay)."""
    cosine: bool = True
    """Cosine decay after warmup (else constant)."""
    beta1: float = 0.9
    """AdamW beta1."""
    beta2: float = 0.95
    """AdamW beta2."""
    eps: float = 1e-8
    """AdamW epsilon."""
    weight_decay: float = 0.1
    """Decoupled weight decay for 2-D tensors (matrices and embeddings)."""
    grad_clip: float = 1.0
    """Max global gradient norm (0 disables clipping)."""


def make_optimizer(model: GPT2, settings: TrainSettings) -> torch.optim.AdamW:
    """AdamW with decay on 2-D parameters only (biases and LayerNorms get none)."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    return torch.optim.AdamW(
        [
            {"params": decay, "weight_decay": settings.weight_decay},
            {"params": no_decay, "weight_decay": 0.0},
        ],
        lr=settings.max_lr,
        betas=(settings.beta1, settings.beta2),
        eps=settings.eps,
        foreach=False,
    )


def train(
    model: GPT2,
    batches: list[tuple[torch.Tensor, torch.Tensor]],
    settings: TrainSettings,
) -> list[tuple[float, float]]:
    """One AdamW step per batch with clipping and the LR schedule; returns (loss, grad norm)
    per step (the loss before the step, the norm before clipping)."""
    optimizer = make_optimizer(model, settings)
    history = []
    for step, (tokens, targets) in enumerate(batches):
        lr = lr_at(step, settings.max_lr, settings.min_lr, settings.warmup_steps,
                   settings.total_steps, cosine=settings.cosine)
        for group in optimizer.param_groups:
            group["lr"] = lr
        optimizer.zero_grad(set_to_none=True)
        loss = model(tokens, targets)
        loss.backward()
        max_norm = settings.grad_clip if settings.grad_clip > 0 else float("inf")
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        optimizer.step()
        history.append((float(loss.item()), float(norm.item())))
    return history

"""A small GPT-style decoder (pre-norm blocks, causal attention, GELU MLP) with a pluggable norm class.

The norm is the only thing the stages swap inside the model (nn.LayerNorm or Apex FusedLayerNorm);
both have `weight` and `bias` parameters with the same names, so one initial state dict fits every stage.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

NormFactory = Callable[[int], nn.Module]


class Block(nn.Module):
    def __init__(self, d_model: int, heads: int, norm: NormFactory) -> None:
        super().__init__()
        self.heads = heads
        self.ln1 = norm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.ln2 = norm(d_model)
        self.fc = nn.Linear(d_model, 4 * d_model)
        self.out = nn.Linear(4 * d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(att.transpose(1, 2).reshape(b, t, d))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class TinyGPT(nn.Module):
    def __init__(
        self, *, vocab: int, seq: int, d_model: int, layers: int, heads: int, norm: NormFactory
    ) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, d_model)
        self.pos = nn.Embedding(seq, d_model)
        self.blocks = nn.ModuleList(Block(d_model, heads, norm) for _ in range(layers))
        self.ln_f = norm(d_model)
        self.head = nn.Linear(d_model, vocab, bias=False)
        self.head.weight = self.tok.weight  # tied, as in GPT-2
        self._init_weights(layers)

    def _init_weights(self, layers: int) -> None:
        # GPT-2's scheme: N(0, 0.02), residual projections scaled down by depth
        for name, p in self.named_parameters():
            if p.dim() >= 2:
                std = 0.02 / math.sqrt(2 * layers) if name.endswith(("proj.weight", "out.weight")) else 0.02
                nn.init.normal_(p, 0.0, std)
            elif name.endswith("bias") and "ln" not in name:
                nn.init.zeros_(p)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.tok(idx) + self.pos(pos)
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


def build(*, vocab: int, seq: int, d_model: int, layers: int, heads: int, norm: NormFactory) -> TinyGPT:
    return TinyGPT(vocab=vocab, seq=seq, d_model=d_model, layers=layers, heads=heads, norm=norm)


def param_count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    # the loss in fp32 whatever the autocast dtype, as training recipes do
    return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.reshape(-1))

"""Llama-style transformer matching treespec's C++ forward pass exactly.

    h = tok_embeddings[tokens]
    per layer:
        h += Wo . Attn(RoPE(Wq . rmsnorm(h)), RoPE(Wk . rmsnorm(h)), Wv . rmsnorm(h))
        h += W2 . (silu(W1 . rmsnorm(h)) * (W3 . rmsnorm(h)))
    logits = output(rmsnorm(h))          (output tied to tok_embeddings if tie_embeddings)

RMSNorm: x * rsqrt(mean(x^2) + eps) * weight, eps = 1e-5.
RoPE: llama2.c / GGML "normal" convention: ADJACENT pairs (x[2i], x[2i+1])
  of each head are rotated by pos * theta^(-2i/head_dim), theta = 10000.
Attention: causal, scaled by 1/sqrt(head_dim); grouped-query: kv head j
  serves query heads j*g .. j*g+g-1 (g = n_heads / n_kv_heads).
No biases anywhere.
"""
import math
from dataclasses import dataclass, asdict

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class ModelConfig:
    vocab_size: int = 2048
    dim: int = 256
    n_layers: int = 6
    n_heads: int = 8
    n_kv_heads: int = 4
    ffn_dim: int = 688
    max_seq_len: int = 256
    norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    tie_embeddings: bool = True

    def to_dict(self):
        return asdict(self)


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).type_as(x) * self.weight


def rope_tables(head_dim, seq_len, theta):
    inv = theta ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    ang = torch.arange(seq_len, dtype=torch.float64)[:, None] * inv[None, :]
    return torch.cos(ang).float(), torch.sin(ang).float()  # [seq, head_dim/2]


def apply_rope(x, cos, sin):
    """x: [batch, heads, seq, head_dim]; rotate adjacent pairs (2i, 2i+1)."""
    x0 = x[..., 0::2]
    x1 = x[..., 1::2]
    c = cos[: x.shape[-2]].to(x.dtype)
    s = sin[: x.shape[-2]].to(x.dtype)
    y0 = x0 * c - x1 * s
    y1 = x0 * s + x1 * c
    return torch.stack((y0, y1), dim=-1).flatten(-2)


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.n_heads, self.n_kv = cfg.n_heads, cfg.n_kv_heads
        self.hd = cfg.dim // cfg.n_heads
        self.attn_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.wq = nn.Linear(cfg.dim, cfg.n_heads * self.hd, bias=False)
        self.wk = nn.Linear(cfg.dim, cfg.n_kv_heads * self.hd, bias=False)
        self.wv = nn.Linear(cfg.dim, cfg.n_kv_heads * self.hd, bias=False)
        self.wo = nn.Linear(cfg.n_heads * self.hd, cfg.dim, bias=False)
        self.ffn_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.w1 = nn.Linear(cfg.dim, cfg.ffn_dim, bias=False)  # gate
        self.w2 = nn.Linear(cfg.ffn_dim, cfg.dim, bias=False)  # down
        self.w3 = nn.Linear(cfg.dim, cfg.ffn_dim, bias=False)  # up

    def forward(self, x, cos, sin, mask):
        B, T, _ = x.shape
        h = self.attn_norm(x)
        q = self.wq(h).view(B, T, self.n_heads, self.hd).transpose(1, 2)
        k = self.wk(h).view(B, T, self.n_kv, self.hd).transpose(1, 2)
        v = self.wv(h).view(B, T, self.n_kv, self.hd).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        g = self.n_heads // self.n_kv
        if g > 1:  # consecutive query heads share one kv head
            k = k.repeat_interleave(g, dim=1)
            v = v.repeat_interleave(g, dim=1)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(self.hd))
        att = att.masked_fill(mask[:T, :T], float("-inf"))
        att = torch.softmax(att.float(), dim=-1).type_as(q)
        y = (att @ v).transpose(1, 2).reshape(B, T, -1)
        x = x + self.wo(y)
        h = self.ffn_norm(x)
        return x + self.w2(F.silu(self.w1(h)) * self.w3(h))


class Llama(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        assert cfg.dim % cfg.n_heads == 0 and cfg.n_heads % cfg.n_kv_heads == 0
        self.cfg = cfg
        self.tok_embeddings = nn.Embedding(cfg.vocab_size, cfg.dim)
        self.layers = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.output = None if cfg.tie_embeddings else nn.Linear(cfg.dim, cfg.vocab_size, bias=False)
        cos, sin = rope_tables(cfg.dim // cfg.n_heads, cfg.max_seq_len, cfg.rope_theta)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)
        mask = torch.triu(torch.ones(cfg.max_seq_len, cfg.max_seq_len, dtype=torch.bool), 1)
        self.register_buffer("mask", mask, persistent=False)
        self.apply(self._init)
        # GPT-2 style scaled init of the residual projections
        for n, p in self.named_parameters():
            if n.endswith("wo.weight") or n.endswith("w2.weight"):
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * cfg.n_layers))

    @staticmethod
    def _init(m):
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, 0.0, 0.02)

    def forward(self, tokens):
        x = self.tok_embeddings(tokens)
        for layer in self.layers:
            x = layer(x, self.cos, self.sin, self.mask)
        x = self.norm(x)
        w = self.tok_embeddings.weight if self.output is None else self.output.weight
        return F.linear(x, w)

    def n_params(self):
        return sum(p.numel() for p in self.parameters())

# SPDX-License-Identifier: MIT
"""A small decoder-only language model for the lab: pre-norm, RMSNorm, SwiGLU, grouped-query attention, causal
``scaled_dot_product_attention``, a KV cache, and a pluggable positional encoding (:mod:`ropekit.lab.encodings`).

Every forward takes explicit positions; the causal mask is built from them (a key is visible when its position is
<= the query's), so decoding with a cache, and RoPE offsets from it, need nothing special. Work that depends only
on the positions -- RoPE's cos/sin tables, the mask and relative biases -- is done once per forward and shared by
every layer (:class:`Step`). When the positions are the default ``0..s-1`` with no cache and no bias, the mask is
exactly the causal one and SDPA's ``is_causal`` path is used instead of a materialised mask.

Precision: attention and the rotation always run in float32 (exact phases; on CPU, SDPA in bfloat16 is also
slower). Under ``torch.autocast`` (the trainer's ``precision="bf16"``) only the linear layers run in bfloat16.

Shapes: b batch, s new tokens, t cached + new tokens, h heads, g kv heads, d head dim, D model width, V vocab.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ropekit.lab.encodings import ENCODINGS, TAKES_TRAIN_LEN, build_encoding
from ropekit.lab.encodings.base import PositionalEncoding

__all__ = ["KVCache", "LMConfig", "Step", "TinyLM"]

KVCache = list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]  # per layer: keys, values, key positions


@dataclass(frozen=True)
class LMConfig:
    """The model's sizes and encoding. Refused at construction (ValueError naming the field, its value and what
    was expected): a size that is not a positive int, an unknown encoding, ``d_model`` that does not split into
    ``n_heads`` heads of even width, or ``n_heads`` that does not split into ``n_kv_heads`` groups."""

    vocab: int = 256  # bytes
    d_model: int = 128
    n_layers: int = 4
    n_heads: int = 4
    n_kv_heads: int = 2
    ffn: int = 344  # SwiGLU hidden, ~8/3 of d_model
    encoding: str = "rope"
    max_positions: int = 128  # learned table size (the training length)

    def __post_init__(self) -> None:
        for f in fields(self):
            val = getattr(self, f.name)
            if f.name == "encoding":
                if val not in ENCODINGS:
                    raise ValueError(f"LMConfig.encoding must be one of {sorted(ENCODINGS)}, got {val!r}")
            elif type(val) is not int or val < 1:
                raise ValueError(f"LMConfig.{f.name} must be a positive int, got {val!r}")
        if self.d_model % self.n_heads or self.head_dim % 2:
            raise ValueError(
                f"LMConfig.d_model={self.d_model} must split into n_heads={self.n_heads} heads of even width "
                f"(d_model a multiple of 2 * n_heads)"
            )
        if self.n_heads % self.n_kv_heads:
            raise ValueError(
                f"LMConfig.n_kv_heads={self.n_kv_heads} must divide n_heads={self.n_heads} (grouped-query attention)"
            )

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


@dataclass
class Step:
    """What every layer of one forward shares: positions [b, s], key positions [b, t], the additive mask
    ([b or 1, 1 or h, s, t] float32, or None for the plain causal case) and the encoding's prepared state."""

    positions: torch.Tensor
    k_positions: torch.Tensor
    mask: torch.Tensor | None
    state: Any


class RMSNorm(nn.Module):
    def __init__(self, d: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # x * rsqrt(mean(x^2) + eps) * weight, as one fused op (same formula; fewer passes over x, forward and back)
        return F.rms_norm(x, (x.shape[-1],), self.weight, self.eps)


class Attention(nn.Module):
    def __init__(self, cfg: LMConfig) -> None:
        super().__init__()
        self.cfg = cfg
        hd = cfg.head_dim
        self.wq = nn.Linear(cfg.d_model, cfg.n_heads * hd, bias=False)
        self.wk = nn.Linear(cfg.d_model, cfg.n_kv_heads * hd, bias=False)
        self.wv = nn.Linear(cfg.d_model, cfg.n_kv_heads * hd, bias=False)
        self.wo = nn.Linear(cfg.n_heads * hd, cfg.d_model, bias=False)
        self.last_attention: torch.Tensor | None = None  # filled when record=True (analysis)

    def forward(
        self,
        x: torch.Tensor,
        pe: PositionalEncoding,
        st: Step,
        cache: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None,
        record: bool = False,
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        b, s, _ = x.shape
        c, hd = self.cfg, self.cfg.head_dim
        q = self.wq(x).view(b, s, c.n_heads, hd)  # (b, s, h, d)
        k = self.wk(x).view(b, s, c.n_kv_heads, hd)
        v = self.wv(x).view(b, s, c.n_kv_heads, hd)
        with torch.autocast(x.device.type, enabled=False):  # rotation and attention in float32
            q, k, v = q.float(), k.float(), v.float()
            q, k = pe.rotate(q, k, st.positions, st.state)  # q and the new keys at their own positions
            if cache is not None:
                k, v = torch.cat([cache[0], k], 1), torch.cat([cache[1], v], 1)
            new_cache = (k, v, st.k_positions)
            qh, kh, vh = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # (b, h|g, s|t, d)
            if record:
                rep = c.n_heads // c.n_kv_heads
                logits = qh @ kh.repeat_interleave(rep, 1).transpose(-1, -2) / hd**0.5
                if st.mask is not None:
                    logits = logits + st.mask
                else:
                    logits = logits.masked_fill(~torch.ones(s, s, dtype=torch.bool).tril(), float("-inf"))
                self.last_attention = logits.softmax(-1).detach()
            gqa = c.n_heads != c.n_kv_heads
            if st.mask is None:
                out = F.scaled_dot_product_attention(qh, kh, vh, is_causal=True, enable_gqa=gqa)
            else:
                out = F.scaled_dot_product_attention(qh, kh, vh, attn_mask=st.mask, enable_gqa=gqa)
        return self.wo(out.transpose(1, 2).reshape(b, s, -1)), new_cache


class Block(nn.Module):
    def __init__(self, cfg: LMConfig) -> None:
        super().__init__()
        self.attn_norm, self.ffn_norm = RMSNorm(cfg.d_model), RMSNorm(cfg.d_model)
        self.attn = Attention(cfg)
        self.w1 = nn.Linear(cfg.d_model, cfg.ffn, bias=False)
        self.w3 = nn.Linear(cfg.d_model, cfg.ffn, bias=False)
        self.w2 = nn.Linear(cfg.ffn, cfg.d_model, bias=False)

    def forward(
        self,
        x: torch.Tensor,
        pe: PositionalEncoding,
        st: Step,
        cache: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None,
        record: bool = False,
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        h, new_cache = self.attn(self.attn_norm(x), pe, st, cache, record)
        x = x + h
        y = self.ffn_norm(x)
        return x + self.w2(F.silu(self.w1(y)) * self.w3(y)), new_cache


class TinyLM(nn.Module):
    """Byte-level decoder LM; ``encoding_kw`` go to the positional encoding (e.g. ``spec=`` for RoPE)."""

    def __init__(self, cfg: LMConfig, **encoding_kw: object) -> None:
        super().__init__()
        self.cfg = cfg
        if cfg.encoding in TAKES_TRAIN_LEN:
            encoding_kw.setdefault("max_positions", cfg.max_positions)
        self.pe = build_encoding(cfg.encoding, cfg.d_model, cfg.n_heads, cfg.head_dim, **encoding_kw)
        self.embed = nn.Embedding(cfg.vocab, cfg.d_model)
        self.blocks = nn.ModuleList(
            Block(cfg) for _ in range(cfg.n_layers)
        )  # the encoding is passed at call time
        self.norm = RMSNorm(cfg.d_model)
        self.apply(self._init)

    @staticmethod
    def _init(m: nn.Module) -> None:
        if isinstance(m, (nn.Linear, nn.Embedding)) and not hasattr(m, "_lab_skip"):
            nn.init.normal_(m.weight, std=0.02)

    def step(self, b: int, s: int, positions: torch.Tensor | None, cache: KVCache | None, dev: Any) -> Step:
        """The per-forward shared state (see :class:`Step`); positions default to cache length + arange(s)."""
        plain = positions is None and cache is None  # 0..s-1 for every row, nothing cached
        if positions is None:
            start = 0 if cache is None else int(cache[0][2][0, -1]) + 1
            positions = torch.arange(start, start + s, device=dev).expand(b, s)
        k_pos = positions if cache is None else torch.cat([cache[0][2], positions], 1)
        # work that depends on positions only is done on one row when every row has the same positions
        same = plain or (bool((positions == positions[:1]).all()) and bool((k_pos == k_pos[:1]).all()))
        pq, pk = (positions[:1], k_pos[:1]) if same else (positions, k_pos)
        bias = self.pe.bias(pq, pk)  # (b or 1, h, s, t) or None
        mask = None
        if not plain or bias is not None:
            visible = pk.unsqueeze(1) <= pq.unsqueeze(2)  # (b or 1, s, t)
            mask = torch.zeros(visible.shape, device=dev).masked_fill(~visible, float("-inf")).unsqueeze(1)
            if bias is not None:
                mask = mask + bias.float()
        state = self.pe.prepare(pq)
        return Step(positions, k_pos, mask, state)

    def forward(
        self,
        tokens: torch.Tensor,
        positions: torch.Tensor | None = None,
        cache: KVCache | None = None,
        record: bool = False,
    ) -> tuple[torch.Tensor, KVCache]:
        """tokens [b, s] -> logits [b, s, V] (float32); positions default to cache length + arange(s)."""
        b, s = tokens.shape
        st = self.step(b, s, positions, cache, tokens.device)
        x = self.pe.embed(self.embed(tokens), st.positions)
        new_cache: KVCache = []
        for i, blk in enumerate(self.blocks):
            x, c = blk(x, self.pe, st, None if cache is None else cache[i], record)
            new_cache.append(c)
        return (self.norm(x) @ self.embed.weight.T).float(), new_cache  # tied output embedding

    @torch.no_grad()
    def generate(self, tokens: torch.Tensor, max_new: int) -> torch.Tensor:
        """Greedy decoding with the KV cache; positions continue from the prompt. Returns the ``max_new`` new
        tokens [b, max_new] (none for 0); a negative or non-int ``max_new`` is refused (ValueError)."""
        if type(max_new) is not int or max_new < 0:
            raise ValueError(f"max_new must be a non-negative int, got {max_new!r}")
        if max_new == 0:
            return tokens.new_empty(tokens.shape[0], 0)
        logits, cache = self(tokens)
        out = [logits[:, -1].argmax(-1, keepdim=True)]
        for _ in range(max_new - 1):
            logits, cache = self(out[-1], cache=cache)
            out.append(logits[:, -1].argmax(-1, keepdim=True))
        return torch.cat(out, 1)

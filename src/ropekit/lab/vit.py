# SPDX-License-Identifier: MIT
"""A small ViT for the vision lab, with five position encodings, all rotations through ropekit's own APIs:

- ``none``: no position information (a bag of patches);
- ``learned``: a learned absolute table for the training grid, resized bicubically to the evaluation grid (as
  DeiT / RoPE-ViT do at a new resolution: :func:`interpolate_pos_table`); the class token's entry is kept;
- ``rope-1d``: 1-D RoPE over the raster order ``row * g + col`` (:func:`ropekit.rope_tables` +
  :func:`ropekit.apply_rope_tables`);
- ``rope-axial``: 2-D axial RoPE-ViT (:func:`ropekit.presets_vl.rope_vit_axial_spec`, x block then y block,
  base 100; tables from :func:`ropekit.axis_tables.axis_tables`, as :func:`ropekit.axis_tables.apply_rope_axes`);
- ``rope-mixed``: RoPE-Mixed, learned per-head 2-D frequencies, one :class:`ropekit.MixedRotary` per block
  (Heo et al., ECCV 2024, arXiv 2403.13298).

RoPE positions are integer patch coordinates at every grid (RoPE-ViT: a larger image extrapolates to larger
positions); the class token is not rotated (position 0 on every axis: the identity, :func:`with_prefix`).

Shapes: b batch, g grid side, K input channels per patch, s = 1 + g*g tokens, h heads, d head dim.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ropekit.axis_tables import axis_tables
from ropekit.mixed import MixedRotary
from ropekit.phases import rope_tables
from ropekit.positions.grid import grid_positions, with_prefix
from ropekit.presets_vl import rope_vit_axial_spec
from ropekit.rotation.apply import apply_rope_tables
from ropekit.spec import RopeSpec

__all__ = ["ENCODINGS", "TinyViT", "ViTConfig", "interpolate_pos_table"]

ENCODINGS = ("none", "learned", "rope-1d", "rope-axial", "rope-mixed")


@dataclass(frozen=True)
class ViTConfig:
    encoding: str = "rope-axial"
    dim: int = 64
    depth: int = 4
    heads: int = 4
    mlp_ratio: int = 4
    in_channels: int = 3
    classes: int = 4
    train_grid: int = 8  # the learned table's side
    base: float = 100.0  # RoPE base for rope-1d and rope-axial (RoPE-ViT's 100)

    def __post_init__(self) -> None:
        if self.encoding not in ENCODINGS:
            raise ValueError(f"encoding must be one of {ENCODINGS}, got {self.encoding!r}")
        for name in ("dim", "depth", "heads", "mlp_ratio", "in_channels", "classes", "train_grid"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"ViTConfig.{name} must be a positive int, got {v!r}")
        if self.dim % self.heads or (self.dim // self.heads) % 4:
            raise ValueError(
                f"ViTConfig.dim={self.dim} must split into heads={self.heads} of a head dim divisible by 4"
            )

    @property
    def head_dim(self) -> int:
        return self.dim // self.heads


def interpolate_pos_table(table: torch.Tensor, grid: int) -> torch.Tensor:
    """Resize a learned [g0*g0, C] patch-position table to [grid*grid, C]: bicubic (Keys, a = -0.75),
    half-pixel centres (``align_corners=False``), edges replicated -- ``torch.nn.functional.interpolate``'s
    bicubic, the resizing DeiT / timm / RoPE-ViT apply to absolute embeddings at a new resolution."""
    n, c = table.shape
    g0 = math.isqrt(n)
    if g0 * g0 != n:
        raise ValueError(f"table must hold a square grid of rows, got {n} rows")
    if isinstance(grid, bool) or not isinstance(grid, int) or grid < 1:
        raise ValueError(f"grid must be a positive int, got {grid!r}")
    if grid == g0:
        return table
    img = table.reshape(1, g0, g0, c).permute(0, 3, 1, 2)
    out = F.interpolate(img, size=(grid, grid), mode="bicubic", align_corners=False)
    return out.permute(0, 2, 3, 1).reshape(grid * grid, c)


class _Block(nn.Module):
    def __init__(self, cfg: ViTConfig, mixed: MixedRotary | None) -> None:
        super().__init__()
        self.heads, self.head_dim = cfg.heads, cfg.head_dim
        self.norm1, self.norm2 = nn.LayerNorm(cfg.dim), nn.LayerNorm(cfg.dim)
        self.qkv, self.proj = nn.Linear(cfg.dim, 3 * cfg.dim), nn.Linear(cfg.dim, cfg.dim)
        hidden = cfg.mlp_ratio * cfg.dim
        self.mlp = nn.Sequential(nn.Linear(cfg.dim, hidden), nn.GELU(), nn.Linear(hidden, cfg.dim))
        self.mixed = mixed

    def forward(self, x: torch.Tensor, rope: Any) -> torch.Tensor:
        b, s, _ = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, s, 3, self.heads, self.head_dim).unbind(2)  # [b, s, h, d]
        if self.mixed is not None:
            q, k = self.mixed(q, k, positions=rope)
        elif rope is not None:
            cos, sin, spec = rope
            q, k = apply_rope_tables(q, k, cos, sin, spec, format="bshd")
        assert k is not None
        att = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
        x = x + self.proj(att.transpose(1, 2).reshape(b, s, -1))
        out: torch.Tensor = x + self.mlp(self.norm2(x))
        return out


class TinyViT(nn.Module):
    """Pre-LN ViT with a class token; input [b, g, g, K] patches (any g), output logits [b, classes]."""

    def __init__(self, cfg: ViTConfig, *, generator: torch.Generator | None = None) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Linear(cfg.in_channels, cfg.dim)
        self.cls = nn.Parameter(torch.zeros(1, 1, cfg.dim))
        nn.init.trunc_normal_(self.cls, std=0.02)
        self.pos: nn.Parameter | None = None
        if cfg.encoding == "learned":
            self.pos = nn.Parameter(torch.zeros(1 + cfg.train_grid**2, cfg.dim))
            nn.init.trunc_normal_(self.pos, std=0.02)
        mixed = cfg.encoding == "rope-mixed"
        self.blocks = nn.ModuleList(
            [
                _Block(cfg, MixedRotary(cfg.head_dim, cfg.heads, generator=generator) if mixed else None)
                for _ in range(cfg.depth)
            ]
        )
        self.norm, self.head = nn.LayerNorm(cfg.dim), nn.Linear(cfg.dim, cfg.classes)
        self.spec: RopeSpec | None = None
        if cfg.encoding == "rope-1d":
            self.spec = RopeSpec(cfg.head_dim, base=cfg.base, layout="interleaved")
        elif cfg.encoding == "rope-axial":
            self.spec = rope_vit_axial_spec(cfg.head_dim, base=cfg.base)
        self._tables: dict[int, Any] = {}

    def no_weight_decay(self) -> set[str]:
        """Parameters kept out of weight decay: class token, position table, RoPE-Mixed frequencies."""
        return {n for n, _ in self.named_parameters() if n in ("cls", "pos") or n.endswith("freqs")}

    def positions(self, grid: int) -> torch.Tensor:
        """RoPE positions of the s = 1 + grid^2 tokens: [s] raster (rope-1d) or [2, s] (x, y) = (col, row);
        the class token first, at 0 (unrotated)."""
        rows, cols = grid_positions((grid, grid))
        if self.cfg.encoding == "rope-1d":
            return with_prefix((rows * grid + cols)[None], 1)[0]
        return with_prefix(torch.stack([cols, rows]), 1)

    def _rope(self, grid: int) -> Any:
        enc = self.cfg.encoding
        if enc == "rope-mixed":
            return self.positions(grid)
        if self.spec is None:
            return None
        if grid not in self._tables:
            pos = self.positions(grid)
            cos, sin = rope_tables(pos, self.spec) if enc == "rope-1d" else axis_tables(pos, self.spec)
            self._tables[grid] = (cos, sin, self.spec)
        return self._tables[grid]

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        if images.dim() != 4 or images.shape[1] != images.shape[2] or images.shape[3] != self.cfg.in_channels:
            raise ValueError(
                f"images must be [batch, g, g, {self.cfg.in_channels}], got {tuple(images.shape)}"
            )
        b, g = images.shape[0], images.shape[1]
        x = torch.cat([self.cls.expand(b, 1, -1), self.embed(images.reshape(b, g * g, -1))], dim=1)
        if self.pos is not None:
            x = x + torch.cat([self.pos[:1], interpolate_pos_table(self.pos[1:], g)])[None]
        rope = self._rope(g)
        for blk in self.blocks:
            x = blk(x, rope)
        logits: torch.Tensor = self.head(self.norm(x[:, 0]))
        return logits

# SPDX-License-Identifier: MIT
"""``DinoV3Rotary``: DINOv3's 2-D RoPE as an ``nn.Module`` whose coordinate augmentations apply in training mode
only (Simeoni et al. 2025, "DINOv3", arXiv 2508.10104; ``facebookresearch/dinov3``
``dinov3/layers/rope_position_encoding.py``; ``shared/reference/multiaxis.md`` section 8.5).

Coordinates are pixel centres normalised to [-1, 1] (:func:`ropekit.positions.grid.normalized_grid`); in
``.train()`` mode, in this order: shift ``+ U(-shift, shift)`` per axis, jitter ``x logU[1/jitter, jitter]`` per
axis, rescale ``x logU[1/rescale, rescale]`` shared by both axes -- one draw per forward call, from the module's
seeded generator. In ``.eval()`` mode the coordinates are the plain grid. Angles ``2*pi * coord / period``,
period ``base^(4k/D)`` (:func:`ropekit.presets_vl.dinov3_spec`), rows then columns, half-split pairs, exact
float64 phases (:func:`ropekit.axis_tables.apply_rope_axes`). Prefix tokens (class, registers) come first and are
not rotated.

Shapes: b batch, s = n_prefix + H*W tokens, h heads, D head dim.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import nn

from ropekit.axis_tables import apply_rope_axes
from ropekit.positions.grid import normalized_grid, with_prefix
from ropekit.presets_vl import dinov3_spec

__all__ = ["DinoV3Rotary"]


class DinoV3Rotary(nn.Module):
    """DINOv3 RoPE for q and k of a ViT block, with training-only coordinate augmentations.

    Args:
        head_dim: D, a multiple of 4.
        base: period base (DINOv3: 100).
        normalize: "separate" (rows by H, columns by W), "max" or "min" (both by max/min(H, W)).
        shift, jitter, rescale: the augmentations (None = off; jitter and rescale > 1). DINOv3's shipped
            ViT-7B / ViT-L configs use ``rescale=2`` only.
        n_prefix: unrotated tokens before the patches (class + registers).
        format: "bshd" or "bhsd".
        seed: seed of the module's generator for the augmentations (reproducible training runs).

    Example:
        >>> rope = DinoV3Rotary(64, rescale=2.0, n_prefix=1, seed=0)
        >>> q = k = torch.randn(2, 1 + 14 * 14, 6, 64)
        >>> q_rot, k_rot = rope(q, k, grid=(14, 14))  # augmented in training mode; rope.eval() turns it off
    """

    def __init__(
        self,
        head_dim: int,
        *,
        base: float = 100.0,
        normalize: Literal["separate", "max", "min"] = "separate",
        shift: float | None = None,
        jitter: float | None = None,
        rescale: float | None = None,
        n_prefix: int = 1,
        format: Literal["bshd", "bhsd"] = "bshd",
        seed: int = 0,
    ) -> None:
        super().__init__()
        self.spec = dinov3_spec(head_dim, base)
        normalized_grid(1, 1, normalize=normalize, shift=shift, jitter=jitter, rescale=rescale)  # validates
        if isinstance(n_prefix, bool) or not isinstance(n_prefix, int) or n_prefix < 0:
            raise ValueError(f"n_prefix must be a non-negative int, got {n_prefix!r}")
        if format not in ("bshd", "bhsd"):
            raise ValueError(f"format must be 'bshd' or 'bhsd', got {format!r}")
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise TypeError(f"seed must be an int, got {seed!r}")
        self.normalize, self.shift, self.jitter, self.rescale = normalize, shift, jitter, rescale
        self.n_prefix, self.format = n_prefix, format
        self.generator = torch.Generator().manual_seed(seed)

    def positions(self, grid: tuple[int, int]) -> torch.Tensor:
        """float64 [2, n_prefix + H*W] (rows, cols): prefix at 0, then the (augmented, in training) grid."""
        if not isinstance(grid, (tuple, list)) or len(grid) != 2:
            raise ValueError(f"grid must be (H, W), got {grid!r}")
        aug = self.training
        coords = normalized_grid(
            grid[0],
            grid[1],
            normalize=self.normalize,
            shift=self.shift if aug else None,
            jitter=self.jitter if aug else None,
            rescale=self.rescale if aug else None,
            generator=self.generator,
        )
        return with_prefix(coords, self.n_prefix)

    def forward(
        self, q: torch.Tensor, k: torch.Tensor | None = None, *, grid: tuple[int, int]
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Rotate q (and k) for an H x W patch grid after ``n_prefix`` unrotated tokens."""
        pos = self.positions(grid)
        seq = q.shape[1] if self.format == "bshd" else q.shape[2]
        if q.dim() != 4 or seq != pos.shape[1]:
            raise ValueError(
                f"q must be a 4-D {self.format} tensor with n_prefix + H*W = {pos.shape[1]} tokens for "
                f"grid={tuple(grid)}, got shape {tuple(q.shape)}"
            )
        return apply_rope_axes(q, k, pos, self.spec, format=self.format)

    def extra_repr(self) -> str:
        return (
            f"head_dim={self.spec.head_dim}, normalize={self.normalize!r}, shift={self.shift}, "
            f"jitter={self.jitter}, rescale={self.rescale}, n_prefix={self.n_prefix}, format={self.format!r}"
        )

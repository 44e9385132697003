# SPDX-License-Identifier: MIT
"""Positions of 2-D / 3-D patch grids for vision towers, computed from the grid (any size, no fixed table).

- :func:`grid_positions`: integer (row, col) or (frame, row, col) coordinates in raster order, 0-based (RoPE-ViT,
  Pixtral, Qwen ViT) or 1-based (Llama 4 vision: ``start=1``);
- :func:`merge_block_positions`: Qwen2/2.5/3-VL ViT order (each ``m x m`` merge block contiguous), per frame;
- :func:`normalized_grid`: DINOv3 coordinates, pixel centres mapped to [-1, 1], with the optional training-time
  shift / jitter / rescale augmentations (Simeoni et al. 2025, "DINOv3", arXiv 2508.10104);
- :func:`with_prefix`: class / register tokens that are not rotated (position 0 on every axis: cos 1, sin 0);
- :func:`pixtral_patch_ids` / :func:`pixtral_positions_from_ids`: Pixtral's ``row * max_width + col`` ids.

Shapes: A axes (2 or 3), N = number of patches; results are [A, N].
"""

from __future__ import annotations

import math
from typing import Literal

import torch

__all__ = [
    "grid_positions",
    "merge_block_positions",
    "normalized_grid",
    "pixtral_patch_ids",
    "pixtral_positions_from_ids",
    "with_prefix",
]


def _pos_int(name: str, v: object) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
        raise ValueError(f"{name} must be a positive int, got {v!r}")
    return v


def grid_positions(shape: tuple[int, ...], *, start: int = 0) -> torch.Tensor:
    """Integer coordinates of every cell of a grid, raster order (last axis fastest).

    Args:
        shape: (rows, cols) or (frames, rows, cols), each positive.
        start: coordinate of the first cell on every axis (0; Llama 4 vision uses 1).

    Returns:
        int64 [len(shape), prod(shape)].

    Example:
        >>> grid_positions((2, 3)).tolist()
        [[0, 0, 0, 1, 1, 1], [0, 1, 2, 0, 1, 2]]
    """
    if not isinstance(shape, (tuple, list)) or not 1 <= len(shape) <= 4:
        raise ValueError(f"shape must be a tuple of 1 to 4 positive ints, got {shape!r}")
    dims = [_pos_int("shape entries", s) for s in shape]
    if isinstance(start, bool) or not isinstance(start, int):
        raise TypeError(f"start must be an int, got {start!r}")
    axes = torch.meshgrid(*[torch.arange(d, dtype=torch.int64) for d in dims], indexing="ij")
    return torch.stack([a.reshape(-1) for a in axes]) + start


def merge_block_positions(grid_thw: tuple[int, int, int], merge: int = 2) -> torch.Tensor:
    """Qwen ViT (row, col) per patch in merge-block-major order, repeated for every frame.

    Args:
        grid_thw: (T, h, w) patches (h and w divisible by ``merge``).
        merge: spatial merge size m.

    Returns:
        int64 [2, T * h * w].
    """
    if not isinstance(grid_thw, (tuple, list)) or len(grid_thw) != 3:
        raise ValueError(f"grid_thw must be (T, h, w), got {grid_thw!r}")
    t, h, w = (_pos_int("grid_thw entries", int(v)) for v in grid_thw)
    m = _pos_int("merge", merge)
    if h % m or w % m:
        raise ValueError(f"grid_thw={tuple(grid_thw)}: h and w must be divisible by merge={m}")
    rows = torch.arange(h).view(h // m, m, 1, 1).expand(h // m, m, w // m, m)
    cols = torch.arange(w).view(1, 1, w // m, m).expand(h // m, m, w // m, m)
    # block-major: (block row, block col, row in block, col in block)
    rows, cols = rows.permute(0, 2, 1, 3).reshape(-1), cols.permute(0, 2, 1, 3).reshape(-1)
    return torch.stack([rows, cols]).repeat(1, t)


def normalized_grid(
    height: int,
    width: int,
    *,
    normalize: Literal["separate", "max", "min"] = "separate",
    shift: float | None = None,
    jitter: float | None = None,
    rescale: float | None = None,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """DINOv3 coordinates: pixel centres ``(i + 0.5) / H`` mapped to ``2c - 1``, optionally augmented.

    Args:
        height, width: patches per side.
        normalize: "separate" divides rows by H and columns by W; "max" / "min" divide both by max/min(H, W).
        shift: training only: add U(-shift, shift) per axis.
        jitter: training only: multiply by logU[1/jitter, jitter] per axis (jitter > 1).
        rescale: training only: multiply both axes by one logU[1/rescale, rescale] (rescale > 1).
        generator: random source for the augmentations.

    Returns:
        float64 [2, H * W] (rows, cols), raster order. Leave the augmentations None at evaluation.

    Example:
        >>> normalized_grid(4, 1)[0].tolist()
        [-0.75, -0.25, 0.25, 0.75]
    """
    h, w = _pos_int("height", height), _pos_int("width", width)
    if normalize not in ("separate", "max", "min"):
        raise ValueError(f"normalize must be 'separate', 'max' or 'min', got {normalize!r}")
    if normalize == "separate":
        dh, dw = float(h), float(w)
    else:
        dh = dw = float(max(h, w) if normalize == "max" else min(h, w))
    ch = (torch.arange(h, dtype=torch.float64) + 0.5) / dh
    cw = (torch.arange(w, dtype=torch.float64) + 0.5) / dw
    coords = torch.stack(torch.meshgrid(ch, cw, indexing="ij")).reshape(2, -1) * 2.0 - 1.0
    for name, v, lo in (("shift", shift, 0.0), ("jitter", jitter, 1.0), ("rescale", rescale, 1.0)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not v > lo):
            raise ValueError(f"{name} must be None or a number > {lo}, got {v!r}")
    g = generator
    if shift is not None:
        coords = coords + (torch.rand(2, 1, dtype=torch.float64, generator=g) * 2 - 1) * shift
    if jitter is not None:
        lj = math.log(jitter)
        coords = coords * torch.exp((torch.rand(2, 1, dtype=torch.float64, generator=g) * 2 - 1) * lj)
    if rescale is not None:
        lr = math.log(rescale)
        coords = coords * torch.exp((torch.rand(1, 1, dtype=torch.float64, generator=g) * 2 - 1) * lr)
    return coords


def with_prefix(
    positions: torch.Tensor, n_prefix: int, *, where: Literal["first", "last"] = "first"
) -> torch.Tensor:
    """Add ``n_prefix`` unrotated tokens (class, registers): position 0 on every axis, i.e. the identity.

    Args:
        positions: [A, N] patch positions. For an identity at 0 the patches must not also sit at all-zero unless
            that is intended (0-based integer grids put patch (0, 0) there: RoPE-ViT does the same).
        n_prefix: number of extra tokens (>= 0).
        where: "first" (ViT, DINOv3) or "last" (Llama 4 vision appends its class token).

    Returns:
        [A, N + n_prefix] of the positions' dtype.
    """
    if not isinstance(positions, torch.Tensor) or positions.dim() != 2:
        raise ValueError(
            f"positions must be an [axes, tokens] tensor, got {getattr(positions, 'shape', positions)!r}"
        )
    if isinstance(n_prefix, bool) or not isinstance(n_prefix, int) or n_prefix < 0:
        raise ValueError(f"n_prefix must be a non-negative int, got {n_prefix!r}")
    if where not in ("first", "last"):
        raise ValueError(f"where must be 'first' or 'last', got {where!r}")
    zeros = positions.new_zeros(positions.shape[0], n_prefix)
    return torch.cat([zeros, positions] if where == "first" else [positions, zeros], dim=1)


def pixtral_patch_ids(height: int, width: int, max_width: int) -> torch.Tensor:
    """Pixtral's patch ids ``row * max_width + col`` for one image (restart at 0 per image)."""
    h, w, mw = _pos_int("height", height), _pos_int("width", width), _pos_int("max_width", max_width)
    if w > mw or h > mw:
        raise ValueError(
            f"a {h} x {w} patch grid does not fit Pixtral's max_width={mw} (image_size // patch_size)"
        )
    rows, cols = grid_positions((h, w))
    ids: torch.Tensor = rows * mw + cols
    return ids


def pixtral_positions_from_ids(ids: torch.Tensor, max_width: int) -> torch.Tensor:
    """(row, col) [2, N] from Pixtral ids; ids beyond the ``max_width x max_width`` table are refused."""
    mw = _pos_int("max_width", max_width)
    if not isinstance(ids, torch.Tensor) or ids.dtype.is_floating_point or ids.dim() != 1:
        raise ValueError(f"ids must be a 1-D integer tensor, got {getattr(ids, 'dtype', type(ids).__name__)}")
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= mw * mw):
        raise ValueError(
            f"ids must be in [0, max_width**2 = {mw * mw}), got range [{int(ids.min())}, {int(ids.max())}]"
        )
    ids = ids.to(torch.int64)
    return torch.stack([ids // mw, ids % mw])

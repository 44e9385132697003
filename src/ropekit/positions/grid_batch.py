# SPDX-License-Identifier: MIT
"""Vision grids for padded batches and for a resolution other than the training one.

- :func:`resized_grid_positions`: the coordinates of a (H, W) (or (T, H, W)) patch grid rescaled onto the grid the
  model was trained at, ``(i + offset) * ref / size`` per axis -- EVA-02's scheme that timm's rotary embeddings
  apply with ``ref_feat_shape`` (``timm.layers.pos_embed_sincos``, index mode ``x / feat_shape * ref_feat_shape``;
  pixel mode ``linspace(-1, 1, size)`` rescaled the same way). A model trained at 16 x 16 patches then sees
  positions spanning [0, 16) at any resolution: position interpolation for vision RoPE.
- :func:`padded_grid_positions`: images of different patch-grid sizes in one batch, as [A, b, L] positions (the
  per-sequence shape :func:`ropekit.apply_rope_axes` takes) and a [b, L] bool mask of the real tokens. Layout
  "sequence": each image's tokens in raster order, then padding (NaFlexViT's packing, its ``patch_coord`` /
  ``patch_valid``); layout "grid": every image in the top-left corner of one (max H, max W) grid, raster order over
  that grid. Optionally each image rescaled onto ``ref_shape`` (as above, with its own size).

Both are float64 when rescaled (int64 otherwise); add class / register tokens with
:func:`ropekit.positions.grid.with_prefix` (it takes [A, b, L]).

Shapes: A axes (2 or 3), b images, N = prod(shape) patches, L tokens per padded row.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from typing import Literal

import torch

from ropekit.integers import whole
from ropekit.positions.ids import check_int

__all__ = ["padded_grid_positions", "resized_grid_positions"]


def _shape(name: str, shape: object) -> tuple[int, ...]:
    """A grid shape: 2 or 3 positive ints (Python / NumPy ints or 0-d integer tensors; bools and floats refused)."""
    if isinstance(shape, torch.Tensor) and shape.dim() == 1:
        shape = shape.tolist()
    if not isinstance(shape, (tuple, list)) or len(shape) not in (2, 3):
        raise ValueError(f"{name} must be 2 or 3 positive ints ((H, W) or (T, H, W)), got {shape!r}")
    return tuple(whole(v, 1, f"{name} must be 2 or 3 positive ints, got {shape!r}") for v in shape)


def _offset(offset: object) -> float:
    if isinstance(offset, bool) or not isinstance(offset, numbers.Real) or not math.isfinite(float(offset)):
        raise ValueError(f"offset must be a finite real number, got {offset!r}")
    return float(offset)


def _axis_coords(size: int, ref: int | None, offset: float, mode: str) -> torch.Tensor:
    """float64 [size] coordinates of one axis, rescaled onto ``ref`` cells when given."""
    if mode == "pixel":  # timm: torch.linspace(-1, 1, size)
        t = torch.linspace(-1.0, 1.0, size, dtype=torch.float64)
    else:
        t = torch.arange(size, dtype=torch.float64) + offset
    return t if ref is None else t / size * ref


def resized_grid_positions(
    shape: Sequence[int],
    ref_shape: Sequence[int] | None,
    *,
    offset: float = 0.0,
    mode: Literal["index", "pixel"] = "index",
) -> torch.Tensor:
    """Coordinates of a patch grid rescaled onto the training grid (timm's ``ref_feat_shape``).

    Args:
        shape: the grid now, (H, W) or (T, H, W) patches.
        ref_shape: the grid the model was trained at (same length as ``shape``), or None for no rescaling.
        offset: added to the integer index before rescaling (timm's ``grid_offset``; index mode only).
        mode: "index" (``arange(size) + offset``, EVA-02 / RoPE-ViT) or "pixel" (``linspace(-1, 1, size)``).

    Returns:
        float64 [len(shape), prod(shape)], raster order (last axis fastest); row a is axis a scaled by
        ``ref_shape[a] / shape[a]``.

    Example:
        >>> resized_grid_positions((2, 4), (1, 2)).tolist()
        [[0.0, 0.0, 0.0, 0.0, 0.5, 0.5, 0.5, 0.5], [0.0, 0.5, 1.0, 1.5, 0.0, 0.5, 1.0, 1.5]]
    """
    dims = _shape("shape", shape)
    refs = None if ref_shape is None else _shape("ref_shape", ref_shape)
    if refs is not None and len(refs) != len(dims):
        raise ValueError(f"ref_shape must have as many axes as shape {dims}, got {refs}")
    if mode not in ("index", "pixel"):
        raise ValueError(f"mode must be 'index' or 'pixel', got {mode!r}")
    off = _offset(offset)
    if mode == "pixel" and off != 0.0:
        raise ValueError(
            f"offset applies to mode='index' only (timm ignores it in pixel mode), got {offset!r}"
        )
    axes = [_axis_coords(d, None if refs is None else refs[a], off, mode) for a, d in enumerate(dims)]
    return torch.stack([m.reshape(-1) for m in torch.meshgrid(*axes, indexing="ij")])


def _sizes(sizes: object) -> list[tuple[int, ...]]:
    """Per-image grid shapes: a sequence of (H, W) / (T, H, W) or an integer tensor [b, A]; one rank for all."""
    if isinstance(sizes, torch.Tensor):
        if sizes.dim() != 2 or sizes.dtype.is_floating_point or sizes.dtype == torch.bool:
            raise ValueError(
                f"sizes must be an integer tensor [batch, axes], got {sizes.dtype} {tuple(sizes.shape)}"
            )
        sizes = sizes.tolist()
    if not isinstance(sizes, (tuple, list)) or not sizes:
        raise ValueError(
            f"sizes must be a non-empty sequence of grid shapes (H, W) or (T, H, W), got {sizes!r}"
        )
    out = [_shape(f"sizes[{i}]", s) for i, s in enumerate(sizes)]
    if len({len(s) for s in out}) != 1:
        raise ValueError(f"sizes must all have the same number of axes, got {out}")
    return out


def padded_grid_positions(
    sizes: Sequence[Sequence[int]] | torch.Tensor,
    *,
    layout: Literal["sequence", "grid"] = "sequence",
    ref_shape: Sequence[int] | None = None,
    offset: float = 0.0,
    start: int = 0,
    length: int | None = None,
    pad_position: int = 0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Positions and mask for a batch of patch grids of different sizes padded to one token count.

    Args:
        sizes: per image (H, W) or (T, H, W) patches; a sequence, or an integer tensor [b, A].
        layout: "sequence" (image i's ``prod(sizes[i])`` tokens first, raster order, then padding) or "grid"
            (every image in the top-left corner of one grid of the largest size on every axis, raster order over
            that grid: cell (r, c) is real when r < H_i and c < W_i).
        ref_shape: the training grid: each image's coordinates are rescaled onto it, ``(i + offset) * ref / size``
            with the image's own size (:func:`resized_grid_positions`); None keeps integer coordinates.
        offset: added to every coordinate (integer coordinates: must be an int).
        start: coordinate of the first cell on every axis without ``ref_shape`` (0; Llama 4 vision uses 1).
        length: tokens per row L (default: the fewest that hold every image); refused if too small.
        pad_position: coordinate of the padding tokens on every axis (they are masked out of attention).

    Returns:
        (positions, mask): positions [A, b, L] (int64, or float64 with ``ref_shape``), mask [b, L] bool, True for
        real tokens.

    Example:
        >>> pos, mask = padded_grid_positions([(1, 2), (2, 2)])
        >>> pos[:, 0].tolist(), mask[0].tolist()
        ([[0, 0, 0, 0], [0, 1, 0, 0]], [True, True, False, False])
    """
    shapes = _sizes(sizes)
    if layout not in ("sequence", "grid"):
        raise ValueError(f"layout must be 'sequence' or 'grid', got {layout!r}")
    pad = check_int("pad_position", pad_position)
    start = check_int("start", start)
    off = _offset(offset)
    if ref_shape is None and not off.is_integer():
        raise ValueError(
            f"offset must be a whole number for integer coordinates (no ref_shape), got {offset!r}"
        )
    if ref_shape is not None and start != 0:
        raise ValueError(
            f"start applies to integer coordinates only (use offset= with ref_shape), got {start}"
        )
    big = tuple(max(s[a] for s in shapes) for a in range(len(shapes[0])))
    need = math.prod(big) if layout == "grid" else max(math.prod(s) for s in shapes)
    n = need if length is None else whole(length, 1, f"length must be a positive int, got {length!r}")
    if n < need:
        raise ValueError(f"length={n} cannot hold the largest image ({need} tokens in layout={layout!r})")
    dtype = torch.int64 if ref_shape is None else torch.float64
    a_n, b_n = len(big), len(shapes)
    positions = torch.full((a_n, b_n, n), pad, dtype=dtype)
    mask = torch.zeros(b_n, n, dtype=torch.bool)
    cells = torch.stack(
        [m.reshape(-1) for m in torch.meshgrid(*[torch.arange(d) for d in big], indexing="ij")]
    )
    for i, s in enumerate(shapes):
        if ref_shape is None:
            own = torch.stack(
                [m.reshape(-1) for m in torch.meshgrid(*[torch.arange(d) for d in s], indexing="ij")]
            ) + (start + int(off))
        else:
            own = resized_grid_positions(s, ref_shape, offset=off)
        if layout == "sequence":
            positions[:, i, : own.shape[1]] = own.to(dtype)
            mask[i, : own.shape[1]] = True
        else:
            real = torch.ones(cells.shape[1], dtype=torch.bool)
            for a in range(a_n):
                real &= cells[a] < s[a]
            positions[:, i, : cells.shape[1]][:, real] = own.to(dtype)
            mask[i, : cells.shape[1]] = real
    return positions, mask

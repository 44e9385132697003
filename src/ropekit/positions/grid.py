# SPDX-License-Identifier: MIT
"""Positions of 2-D / 3-D patch grids for vision towers, computed from the grid (any size, no fixed table).

- :func:`grid_positions`: integer (row, col) or (frame, row, col) coordinates in raster order, 0-based (RoPE-ViT,
  Pixtral, Qwen ViT) or 1-based (Llama 4 vision: ``start=1``);
- :func:`merge_block_positions`: Qwen2/2.5/3-VL ViT order (each ``m x m`` merge block contiguous), per frame;
- :func:`normalized_grid`: DINOv3 coordinates, pixel centres mapped to [-1, 1], with the optional training-time
  shift / jitter / rescale augmentations (Simeoni et al. 2025, "DINOv3", arXiv 2508.10104);
- :func:`with_prefix`: class / register tokens that are not rotated (position 0 on every axis: cos 1, sin 0);
- :func:`pixtral_patch_ids` / :func:`pixtral_positions_from_ids`: Pixtral's ``row * max_width + col`` ids.

Shapes: A axes (2 or 3), N = number of patches, b batch; results are [A, N] (``with_prefix``: also [A, b, N]).
"""

from __future__ import annotations

import math
import numbers
from typing import Literal

import torch

from ropekit.integers import whole
from ropekit.positions.ids import check_int

__all__ = [
    "grid_positions",
    "merge_block_positions",
    "normalized_grid",
    "pixtral_patch_ids",
    "pixtral_positions_from_ids",
    "with_prefix",
]


def _pos_int(name: str, v: object) -> int:
    v = whole(v, 1, f"{name} must be a positive int, got {v!r}")
    return v


def _int_tensor(t: torch.Tensor) -> bool:
    """An integer dtype (not bool, not floating, not complex)."""
    return not (t.dtype == torch.bool or t.dtype.is_floating_point or t.dtype.is_complex)


def _grid_thw_ints(grid_thw: object, name: str = "grid_thw") -> tuple[int, int, int]:
    """(T, h, w) as three positive Python ints, refusing what ``int()`` would truncate or reinterpret.

    Accepted: a tuple / list of three entries, each an int, a NumPy integer or a 0-d integer tensor; or a 1-D
    integer tensor of 3 entries (a row of a processor's ``image_grid_thw`` / ``video_grid_thw``). Refused, naming
    the value: floats (``4.5`` would become 4), bools (``True`` would become 1), floating / bool tensors, other
    lengths, entries <= 0.
    """
    if isinstance(grid_thw, torch.Tensor):
        if grid_thw.dim() != 1 or grid_thw.numel() != 3 or not _int_tensor(grid_thw):
            raise ValueError(
                f"{name} must be three positive ints (T, h, w) or a 1-D integer tensor of 3 entries, got "
                f"{grid_thw!r}"
            )
        entries: list[object] = list(grid_thw.tolist())
    elif isinstance(grid_thw, (tuple, list)) and len(grid_thw) == 3:
        entries = list(grid_thw)
    else:
        raise ValueError(
            f"{name} must be three positive ints (T, h, w) or a 1-D integer tensor of 3 entries, got {grid_thw!r}"
        )
    out = []
    for v in entries:
        int_0d = isinstance(v, torch.Tensor) and v.dim() == 0 and _int_tensor(v)
        # Python and NumPy integers (NumPy's bool_ is not Integral; Python's bool is, and is refused)
        integral = isinstance(v, numbers.Integral) and not isinstance(v, bool)
        if not (int_0d or integral):
            raise ValueError(f"{name} must be three positive ints (T, h, w), got {v!r} in {grid_thw!r}")
        n = int(v)  # type: ignore[call-overload]
        if n <= 0:
            raise ValueError(f"{name} must be three positive ints (T, h, w), got {n} in {grid_thw!r}")
        out.append(n)
    return out[0], out[1], out[2]


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
    start = check_int("start", start)
    if not -(1 << 63) <= start <= (1 << 63) - max(dims):
        raise ValueError(
            f"start and start + {max(dims) - 1} (the last cell) must fit int64, got start={start}"
        )
    axes = torch.meshgrid(*[torch.arange(d, dtype=torch.int64) for d in dims], indexing="ij")
    return torch.stack([a.reshape(-1) for a in axes]) + start


def merge_block_positions(grid_thw: tuple[int, int, int] | torch.Tensor, merge: int = 2) -> torch.Tensor:
    """Qwen ViT (row, col) per patch in merge-block-major order, repeated for every frame.

    Args:
        grid_thw: (T, h, w) patches (h and w divisible by ``merge``): three positive ints (Python, NumPy or 0-d
            integer tensors) or a 1-D integer tensor of 3 entries such as transformers' ``image_grid_thw[i]``.
            Floats and bools are refused (no silent truncation).
        merge: spatial merge size m.

    Returns:
        int64 [2, T * h * w].
    """
    t, h, w = _grid_thw_ints(grid_thw)
    m = _pos_int("merge", merge)
    if h % m or w % m:
        raise ValueError(f"grid_thw={(t, h, w)}: h and w must be divisible by merge={m}")
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
        shift: training only: add U(-shift, shift) per axis (finite, > 0).
        jitter: training only: multiply by logU[1/jitter, jitter] per axis (finite, > 1).
        rescale: training only: multiply both axes by one logU[1/rescale, rescale] (finite, > 1).
        generator: random source for the augmentations (None: the global RNG). A ``torch.Generator`` cannot be
            traced by ``torch.compile(fullgraph=True)``; :class:`ropekit.DinoV3Rotary` keeps its generator's state
            in a tensor and compiles with its augmentations.

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
    _check_augmentations(shift, jitter, rescale)
    n = _augmentation_draws(shift, jitter, rescale)
    if n == 0:
        return coords
    return _augment(coords, torch.rand(n, dtype=torch.float64, generator=generator), shift, jitter, rescale)


def _check_augmentations(shift: object, jitter: object, rescale: object) -> None:
    """Refuse augmentation strengths that are not None or a finite number above their bound (shift > 0,
    jitter > 1, rescale > 1), naming the argument: an infinite one would put the coordinates at +-inf."""
    for name, v, lo in (("shift", shift, 0.0), ("jitter", jitter, 1.0), ("rescale", rescale, 1.0)):
        if v is not None and (
            isinstance(v, bool) or not isinstance(v, (int, float)) or not (math.isfinite(v) and v > lo)
        ):
            raise ValueError(f"{name} must be None or a finite number > {lo}, got {v!r}")


def _augmentation_draws(shift: float | None, jitter: float | None, rescale: float | None) -> int:
    """How many U[0, 1) numbers one augmentation draw takes: 2 for shift, 2 for jitter, 1 for rescale."""
    return (
        (2 if shift is not None else 0) + (2 if jitter is not None else 0) + (1 if rescale is not None else 0)
    )


def _augment(
    coords: torch.Tensor, u: torch.Tensor, shift: float | None, jitter: float | None, rescale: float | None
) -> torch.Tensor:
    """DINOv3's augmentations of coords [2, N] from the U[0, 1) draws ``u`` [_augmentation_draws(...)], consumed in
    the order shift (rows, cols), jitter (rows, cols), rescale (shared): shift ``+ (2u - 1) * shift``, jitter
    ``* exp((2u - 1) * log(jitter))``, rescale ``* exp((2u - 1) * log(rescale))``. float64."""
    i = 0
    if shift is not None:
        coords = coords + (u[i : i + 2].view(2, 1) * 2 - 1) * shift
        i += 2
    if jitter is not None:
        lj = math.log(jitter)
        coords = coords * torch.exp((u[i : i + 2].view(2, 1) * 2 - 1) * lj)
        i += 2
    if rescale is not None:
        lr = math.log(rescale)
        coords = coords * torch.exp((u[i : i + 1].view(1, 1) * 2 - 1) * lr)
    return coords


def with_prefix(
    positions: torch.Tensor, n_prefix: int, *, where: Literal["first", "last"] = "first"
) -> torch.Tensor:
    """Add ``n_prefix`` unrotated tokens (class, registers): position 0 on every axis, i.e. the identity.

    Args:
        positions: [A, N] patch positions shared by the batch, or [A, b, N] per sequence (the multi-axis shapes
            :func:`ropekit.apply_rope_axes` takes; e.g. :func:`ropekit.positions.batch_grid_positions`). For an
            identity at 0 the patches must not also sit at all-zero unless that is intended (0-based integer grids
            put patch (0, 0) there: RoPE-ViT does the same).
        n_prefix: number of extra tokens (>= 0).
        where: "first" (ViT, DINOv3) or "last" (Llama 4 vision appends its class token).

    Returns:
        [A, N + n_prefix] or [A, b, N + n_prefix] of the positions' dtype (and device).
    """
    if not isinstance(positions, torch.Tensor) or positions.dim() not in (2, 3):
        raise ValueError(
            "positions must be an [axes, tokens] or [axes, batch, tokens] tensor, got "
            f"{getattr(positions, 'shape', positions)!r}"
        )
    n_prefix = whole(n_prefix, 0, f"n_prefix must be a non-negative int, got {n_prefix!r}")
    if where not in ("first", "last"):
        raise ValueError(f"where must be 'first' or 'last', got {where!r}")
    zeros = positions.new_zeros(*positions.shape[:-1], n_prefix)
    return torch.cat([zeros, positions] if where == "first" else [positions, zeros], dim=-1)


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
    if not isinstance(ids, torch.Tensor) or not _int_tensor(ids) or ids.dim() != 1:
        got = f"{ids.dtype} {tuple(ids.shape)}" if isinstance(ids, torch.Tensor) else type(ids).__name__
        raise ValueError(f"ids must be a 1-D integer tensor (not bool, not floating), got {got}")
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= mw * mw):
        raise ValueError(
            f"ids must be in [0, max_width**2 = {mw * mw}), got range [{int(ids.min())}, {int(ids.max())}]"
        )
    ids = ids.to(torch.int64)
    return torch.stack([ids // mw, ids % mw])

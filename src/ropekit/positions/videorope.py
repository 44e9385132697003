# SPDX-License-Identifier: MIT
"""VideoRoPE position ids [3, L] (Wei et al. 2025, arXiv 2502.05173) for interleaved text and vision blocks.

Diagonal layout with adjustable temporal spacing (the paper's section 3): a vision block's
frames step by ``delta`` in time, and its rows and columns are spatially centred and move with the frame. The
segments are those of :func:`ropekit.positions.multimodal.mrope_positions` (ints for text runs,
:class:`~ropekit.positions.multimodal_blocks.VisionBlock` for images and videos).

Shapes: L tokens; T, H', W' frames and merged rows / columns of a block.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ropekit.positions.multimodal_blocks import VisionBlock, _pos_finite, _pos_int
from ropekit.positions.time import _check_real_start, _check_steps

__all__ = ["videorope_positions"]


def videorope_positions(
    segments: Sequence[int | VisionBlock], *, delta: float = 1.0, spatial_merge_size: int = 2, start: int = 0
) -> torch.Tensor:
    """VideoRoPE ids (Wei et al. 2025, arXiv 2502.05173): diagonal layout + adjustable temporal spacing.

    A vision block at offset s gets ``t = s + i * delta`` per frame, ``h = row - (H'-1) // 2 + t`` and
    ``w = col - (W'-1) // 2 + t`` (spatially centred, moving with the frame); the next token starts at
    ``max(t row) + 1``. Use with :func:`ropekit.presets_vl.videorope_spec` (low-frequency
    temporal allocation).

    Returns:
        [3, L]: int64 when ``delta`` and ``start`` are integers, float64 otherwise (fractional positions are
        exact).

    Raises:
        ValueError: naming the argument (delta not finite and > 0, start not finite, bad segments, positions
            reaching 2^53, where float64 cannot step by 1).
        TypeError: start not a real number.
    """
    if not _pos_finite(delta):
        raise ValueError(f"delta must be a finite number > 0, got {delta!r}")
    m = spatial_merge_size
    if not _pos_int(m):
        raise ValueError(f"spatial_merge_size must be a positive int, got {m!r}")
    cur = _check_real_start(start)
    parts: list[torch.Tensor] = []
    for seg in segments:
        if isinstance(seg, VisionBlock):
            t, h, w = seg.grid_thw
            if h % m or w % m:
                raise ValueError(f"VisionBlock.grid_thw={seg.grid_thw} has h or w not divisible by {m}")
            hh, ww = h // m, w // m
            tt = cur + torch.arange(t, dtype=torch.float64) * float(delta)
            ti, ri, ci = torch.meshgrid(
                tt,
                torch.arange(hh, dtype=torch.float64),
                torch.arange(ww, dtype=torch.float64),
                indexing="ij",
            )
            ids = torch.stack([ti, ri - (hh - 1) // 2 + ti, ci - (ww - 1) // 2 + ti]).reshape(3, -1)
            cur = float(tt.max()) + 1.0
        elif isinstance(seg, int) and not isinstance(seg, bool) and seg >= 0:
            ids = (torch.arange(seg, dtype=torch.float64) + cur).expand(3, seg)
            cur += seg
        else:
            raise ValueError(f"segments must hold non-negative ints (text runs) or VisionBlocks, got {seg!r}")
        parts.append(ids)
    out = _check_steps(
        torch.cat(parts, dim=1) if parts else torch.zeros(3, 0, dtype=torch.float64), "videorope"
    )
    return out.to(torch.int64) if float(delta).is_integer() and float(start).is_integer() else out

# SPDX-License-Identifier: MIT
"""Builders of explicit position ids, the only way positions enter ropekit.

- :mod:`ropekit.positions.ids`: 1-D ids (offsets, padding masks, packed documents).
- :mod:`ropekit.positions.grid`: 2-D / 3-D grids for vision towers (integer, 1-based, normalised [-1, 1]),
  prefix tokens that are not rotated.
- :mod:`ropekit.positions.grid_batch`: padded batches of grids of different sizes ([A, b, L] positions and a
  mask) and grids rescaled onto the training resolution (timm's ``ref_feat_shape``).
- :mod:`ropekit.positions.multimodal`: M-RoPE ids [3, b, s] for interleaved text, images and video (Qwen2-VL,
  Qwen2.5-VL, Qwen3-VL, GLM-4V) and the rope deltas that continue them during decoding;
  :mod:`ropekit.positions.multimodal_blocks` holds the vision block and the checks they share,
  :mod:`ropekit.positions.multimodal_decode` the ids of generated tokens (both re-exported by ``multimodal``).
- :mod:`ropekit.positions.videorope`: VideoRoPE's diagonal ids [3, L] (Wei et al. 2025).
- :mod:`ropekit.positions.time`: continuous positions (float timestamps, V2PE fractional steps).
"""

from ropekit.positions.grid_batch import padded_grid_positions, resized_grid_positions
from ropekit.positions.ids import positions_from_cu_seqlens, positions_from_mask, positions_with_offset

__all__ = [
    "padded_grid_positions",
    "positions_from_cu_seqlens",
    "positions_from_mask",
    "positions_with_offset",
    "resized_grid_positions",
]

# SPDX-License-Identifier: MIT
"""transformers' partial-rotary arithmetic, exactly: the rotary dim of ``int(head_dim * partial_rotary_factor)`` (a
float product, floored), the bands 'proportional' RoPE keeps, and the factors ``to_hf`` writes so that those
expressions map back to a spec's rotary dim / kept bands (the next float up where the plain quotient floors below).
"""

from __future__ import annotations

import math

__all__: list[str] = []


def _hf_rotary_dim(head_dim: int, factor: float) -> int:
    """The rotary dim transformers computes: ``int(head_dim * partial_rotary_factor)``, exactly (a float product,
    floored: 88 * (60 / 88) = 59.99999999999999 gives 59, as in transformers)."""
    return int(head_dim * factor)


def _hf_partial_factor(head_dim: int, rotary_dim: int) -> float:
    """A partial_rotary_factor that transformers' ``int(head_dim * factor)`` maps back to ``rotary_dim`` exactly.

    ``rotary_dim / head_dim`` when that float is exact enough (it is for most pairs), else the next float up:
    88 * (60 / 88) = 59.99999999999999 in floating point, which transformers floors to 59."""
    f = rotary_dim / head_dim
    while _hf_rotary_dim(head_dim, f) < rotary_dim:
        f = math.nextafter(f, math.inf)
    return f


def _hf_kept_bands(head_dim: int, factor: float) -> int:
    """The bands transformers' 'proportional' RoPE keeps: ``int(partial_rotary_factor * head_dim // 2)``, exactly."""
    return int(factor * head_dim // 2)


def _hf_proportional_factor(head_dim: int, kept: int, p: float) -> float:
    """A partial_rotary_factor that transformers' 'proportional' expression maps to ``kept`` bands: ``p`` itself when
    it does, else ``kept / (head_dim / 2)`` nudged up to the next float that does."""
    if _hf_kept_bands(head_dim, p) == kept:
        return p
    f = kept / (head_dim // 2)
    while _hf_kept_bands(head_dim, f) < kept:
        f = math.nextafter(f, math.inf)
    return f

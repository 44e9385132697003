# SPDX-License-Identifier: MIT
"""ALiBi (Press et al. 2022, "Train Short, Test Long", arXiv 2108.12409): logits get -m_h * (q - k) for keys behind
the query, with head slopes m_h = 2^(-8h/H), h = 1..H (for H not a power of two: the closest power of two's
slopes, then every other slope of twice as many heads, as in the paper's code)."""

from __future__ import annotations

import math

import torch

from ropekit.lab.encodings.base import PositionalEncoding

__all__ = ["ALiBi", "alibi_slopes"]


def alibi_slopes(n_heads: int) -> list[float]:
    def pow2(n: int) -> list[float]:
        start = 2 ** (-8 / n)
        return [start ** (i + 1) for i in range(n)]

    if math.log2(n_heads).is_integer():
        return pow2(n_heads)
    p = 2 ** math.floor(math.log2(n_heads))
    return pow2(p) + pow2(2 * p)[0::2][: n_heads - p]


class ALiBi(PositionalEncoding):
    name = "alibi"
    paper = "Press et al. 2022"
    slopes: torch.Tensor  # registered buffer [h]

    def __init__(self, d_model: int, n_heads: int, head_dim: int) -> None:
        super().__init__(d_model, n_heads, head_dim)
        self.register_buffer("slopes", torch.tensor(alibi_slopes(n_heads)), persistent=False)

    def bias(self, q_positions: torch.Tensor, k_positions: torch.Tensor) -> torch.Tensor:
        dist = (
            (q_positions.unsqueeze(-1) - k_positions.unsqueeze(-2)).clamp_min(0).to(torch.float32)
        )  # [b, s, t]
        return -self.slopes.view(1, -1, 1, 1) * dist.unsqueeze(1)

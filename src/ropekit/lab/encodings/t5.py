# SPDX-License-Identifier: MIT
"""T5 relative position bias (Raffel et al. 2020, "Exploring the Limits of Transfer Learning", arXiv 1910.10683):
a learned scalar per (bucket, head) added to the logits. Causal buckets: distances below num_buckets/2 get their
own bucket, larger ones share logarithmically wider buckets up to max_distance (everything beyond: the last)."""

from __future__ import annotations

import math

import torch
from torch import nn

from ropekit.lab.encodings.base import PositionalEncoding

__all__ = ["T5Bias", "t5_bucket"]


def t5_bucket(distance: torch.Tensor, num_buckets: int = 32, max_distance: int = 128) -> torch.Tensor:
    """Bucket of a causal distance q - k >= 0."""
    n = distance.clamp_min(0)
    exact = num_buckets // 2
    log_ratio = torch.log(n.float().clamp_min(1) / exact) / math.log(max_distance / exact)
    large = (exact + (log_ratio * (num_buckets - exact)).long()).clamp_max(num_buckets - 1)
    return torch.where(n < exact, n, large)


class T5Bias(PositionalEncoding):
    name = "t5"
    paper = "Raffel et al. 2020"

    def __init__(
        self, d_model: int, n_heads: int, head_dim: int, num_buckets: int = 32, max_distance: int = 128
    ) -> None:
        super().__init__(d_model, n_heads, head_dim)
        self.table = nn.Embedding(num_buckets, n_heads)
        nn.init.zeros_(self.table.weight)
        self.num_buckets, self.max_distance = num_buckets, max_distance

    def bias(self, q_positions: torch.Tensor, k_positions: torch.Tensor) -> torch.Tensor:
        dist = q_positions.unsqueeze(-1) - k_positions.unsqueeze(-2)  # [b, s, t]
        out: torch.Tensor = self.table(t5_bucket(dist, self.num_buckets, self.max_distance))  # [b, s, t, h]
        return out.permute(0, 3, 1, 2)

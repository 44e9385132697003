# SPDX-License-Identifier: MIT
"""KERPLE (Chi et al. 2022, "KERPLE: Kernelized Relative Positional Embedding for Length Extrapolation", NeurIPS,
arXiv 2205.09921): a conditionally positive definite kernel of the distance added to the logits, with learned
positive parameters per head:

- logarithmic: ``b(m, n) = -r1 * log(1 + r2 * |m - n|)``, r1, r2 > 0;
- power: ``b(m, n) = -r1 * |m - n| ** r2``, r1 > 0, 0 < r2 <= 2.

As in the paper's code the constraints are kept by clamping (r >= 1e-2, r2 <= 2 for power). Keys ahead of the
query are masked anyway; their distance is taken as 0. Initial values r1 = 1, r2 = 1 (log) or 0.5 (power).
Shapes: positions [b, s] and [b, t] -> bias [b, h, s, t].
"""

from __future__ import annotations

import torch
from torch import nn

from ropekit.lab.encodings.base import PositionalEncoding

__all__ = ["KerpleLog", "KerplePower"]

_MIN = 1e-2


class _Kerple(PositionalEncoding):
    paper = "Chi et al. 2022"
    r2_init = 1.0

    def __init__(self, d_model: int, n_heads: int, head_dim: int) -> None:
        super().__init__(d_model, n_heads, head_dim)
        self.r1 = nn.Parameter(torch.ones(n_heads))
        self.r2 = nn.Parameter(torch.full((n_heads,), self.r2_init))

    def _distance(self, q_positions: torch.Tensor, k_positions: torch.Tensor) -> torch.Tensor:
        return (
            (q_positions.unsqueeze(-1) - k_positions.unsqueeze(-2))
            .clamp_min(0)
            .to(torch.float32)
            .unsqueeze(1)
        )

    def params(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(r1, r2) as used, each [1, h, 1, 1]: the learned values clamped to the paper's constraints."""
        r1 = self.r1.clamp_min(_MIN).view(1, -1, 1, 1)
        r2 = self.r2.clamp_min(_MIN).view(1, -1, 1, 1)
        return r1, r2


class KerpleLog(_Kerple):
    name = "kerple-log"

    def bias(self, q_positions: torch.Tensor, k_positions: torch.Tensor) -> torch.Tensor:
        r1, r2 = self.params()
        return -r1 * torch.log1p(r2 * self._distance(q_positions, k_positions))


class KerplePower(_Kerple):
    name = "kerple-power"
    r2_init = 0.5

    def params(self) -> tuple[torch.Tensor, torch.Tensor]:
        r1, r2 = super().params()
        return r1, r2.clamp_max(2.0)

    def bias(self, q_positions: torch.Tensor, k_positions: torch.Tensor) -> torch.Tensor:
        r1, r2 = self.params()
        return -r1 * self._distance(q_positions, k_positions).pow(r2)

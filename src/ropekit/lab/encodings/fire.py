# SPDX-License-Identifier: MIT
"""FIRE (Li et al. 2023, "Functional Interpolation for Relative Positions Improves Long Context Transformers",
ICLR 2024, arXiv 2310.04418): a learned function of the *progressively interpolated* distance added to the logits,

    b(i, j) = f_theta( psi(i - j) / psi(max(L, i)) ),   psi(x) = log(c * x + 1),

for a query at i and a key at j <= i. f_theta is an MLP from 1 input to one output per head (here one hidden layer
of 32 ReLU units; the width and the inits below are this lab's choice, not checked against the paper); c > 0 and the
threshold L are learned. The normalisation by psi(max(L, i)) maps
every distance into [0, 1] whatever the query position, which is what lets FIRE run past its training length.
Here c starts at 1 and L at the training length; c and L are kept >= 1e-2 and >= 1 by clamping. One FIRE is shared
by all layers (the lab's encodings are per model).
Shapes: positions [b, s] and [b, t] -> bias [b, h, s, t].
"""

from __future__ import annotations

import torch
from torch import nn

from ropekit.lab.encodings.base import PositionalEncoding

__all__ = ["FIRE"]


class FIRE(PositionalEncoding):
    name = "fire"
    paper = "Li et al. 2023"

    def __init__(
        self, d_model: int, n_heads: int, head_dim: int, max_positions: int = 128, hidden: int = 32
    ) -> None:
        super().__init__(d_model, n_heads, head_dim)
        self.mlp = nn.Sequential(nn.Linear(1, hidden), nn.ReLU(), nn.Linear(hidden, n_heads))
        for m in self.mlp:
            if isinstance(m, nn.Linear):
                setattr(m, "_lab_skip", True)  # noqa: B010 - keep PyTorch's default init (the model's std 0.02 would flatten the MLP)
        self.c = nn.Parameter(torch.tensor(1.0))
        self.threshold = nn.Parameter(torch.tensor(float(max_positions)))

    def psi(self, x: torch.Tensor) -> torch.Tensor:
        return torch.log1p(self.c.clamp_min(1e-2) * x)

    def normalized_distance(self, q_positions: torch.Tensor, k_positions: torch.Tensor) -> torch.Tensor:
        """psi(i - j) / psi(max(L, i)), [b, s, t] (keys ahead of the query: distance 0)."""
        qp = q_positions.to(torch.float32)
        dist = (qp.unsqueeze(-1) - k_positions.to(torch.float32).unsqueeze(-2)).clamp_min(0)
        norm = self.psi(torch.maximum(qp, self.threshold.clamp_min(1.0)))
        return self.psi(dist) / norm.unsqueeze(-1)

    def bias(self, q_positions: torch.Tensor, k_positions: torch.Tensor) -> torch.Tensor:
        x = self.normalized_distance(q_positions, k_positions)
        out: torch.Tensor = self.mlp(x.unsqueeze(-1)).permute(0, 3, 1, 2)
        return out

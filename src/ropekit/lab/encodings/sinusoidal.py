# SPDX-License-Identifier: MIT
"""Sinusoidal absolute encoding added to the embeddings (Vaswani et al. 2017, "Attention Is All You Need"):
PE[p, 2i] = sin(p / 10000^(2i/d)), PE[p, 2i+1] = cos(p / 10000^(2i/d)); computed for any position (float64 phases).
As in the paper (section 3.4), the token embeddings are multiplied by sqrt(d_model) before the encoding is added,
so that a unit-amplitude encoding does not swamp embeddings initialised at small scale."""

from __future__ import annotations

import math

import torch

from ropekit.lab.encodings.base import PositionalEncoding

__all__ = ["Sinusoidal"]


class Sinusoidal(PositionalEncoding):
    name = "sinusoidal"
    paper = "Vaswani et al. 2017"

    def embed(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        d = self.d_model
        freq = torch.exp(
            -math.log(10_000.0) * torch.arange(0, d, 2, dtype=torch.float64, device=x.device) / d
        )
        ang = positions.to(torch.float64).unsqueeze(-1) * freq  # [b, s, d/2]
        pe = torch.stack([ang.sin(), ang.cos()], -1).flatten(-2).to(x.dtype)
        return x * math.sqrt(d) + pe

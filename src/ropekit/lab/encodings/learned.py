# SPDX-License-Identifier: MIT
"""Learned absolute position embeddings (GPT-2 / BERT style; Devlin et al. 2019): a trained table of
``max_positions`` rows added to the token embeddings. It has no rows past the training length: positions beyond
the table use its last row (``clamp``), which is how the extrapolation experiment evaluates it -- the experiment's
report says so -- or raise (``error``)."""

from __future__ import annotations

import torch
from torch import nn

from ropekit.lab.encodings.base import PositionalEncoding

__all__ = ["Learned"]


class Learned(PositionalEncoding):
    name = "learned"
    paper = "Devlin et al. 2019 (BERT); Radford et al. 2019 (GPT-2)"

    def __init__(
        self, d_model: int, n_heads: int, head_dim: int, max_positions: int = 128, beyond: str = "clamp"
    ) -> None:
        super().__init__(d_model, n_heads, head_dim)
        if beyond not in ("clamp", "error"):
            raise ValueError(f"beyond must be 'clamp' or 'error', got {beyond!r}")
        self.table = nn.Embedding(max_positions, d_model)
        nn.init.normal_(self.table.weight, std=0.02)
        self.max_positions, self.beyond = max_positions, beyond

    def embed(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        if self.beyond == "error" and int(positions.max()) >= self.max_positions:
            raise ValueError(
                f"position {int(positions.max())} is past the learned table of {self.max_positions} rows"
            )
        rows: torch.Tensor = self.table(positions.clamp(0, self.max_positions - 1))
        return x + rows

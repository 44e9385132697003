# SPDX-License-Identifier: MIT
"""The interface every positional encoding of the lab implements; each hook defaults to "does nothing".

Positions are explicit global ids everywhere (as in ropekit itself): ``positions`` [b, s] for the tokens of this
forward, ``k_positions`` [b, t] for the keys (cache + new tokens).

- ``embed(x, positions)``: absolute encodings add to the token embeddings (sinusoidal, learned);
- ``prepare(positions)``: work that depends only on the positions (RoPE's cos/sin tables), done once per forward
  and handed to every layer's ``rotate`` as ``state``; ``positions`` may be a single row [1, s] shared by the batch;
- ``rotate(q, k, positions, state)``: rotations of q and the new keys ([b, s, h, d]: RoPE, xPos, ...);
- ``bias(q_positions, k_positions)``: relative biases added to attention logits ([b, h, s, t]: ALiBi, T5, ...).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

__all__ = ["PositionalEncoding"]


class PositionalEncoding(nn.Module):
    name = "base"
    paper = ""

    def __init__(self, d_model: int, n_heads: int, head_dim: int) -> None:
        super().__init__()
        self.d_model, self.n_heads, self.head_dim = d_model, n_heads, head_dim

    def embed(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        return x

    def prepare(self, positions: torch.Tensor) -> Any:
        return None

    def rotate(
        self, q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor, state: Any = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return q, k

    def bias(self, q_positions: torch.Tensor, k_positions: torch.Tensor) -> torch.Tensor | None:
        return None

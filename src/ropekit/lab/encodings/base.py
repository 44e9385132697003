# SPDX-License-Identifier: MIT
"""The interface every positional encoding of the lab implements; each hook defaults to "does nothing".

Positions are explicit global ids everywhere (as in ropekit itself): ``positions`` [b, s] for the tokens of this
forward, ``k_positions`` [b, t] for the keys (cache + new tokens).

- ``embed(x, positions)``: absolute encodings add to the token embeddings (sinusoidal, learned);
- ``rotate(q, k, q_positions, k_positions)``: RoPE rotates q and the new keys ([b, s, h, d]);
- ``bias(q_positions, k_positions)``: relative biases add to attention logits ([b, h, s, t]: ALiBi, T5).
"""

from __future__ import annotations

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

    def rotate(
        self, q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return q, k

    def bias(self, q_positions: torch.Tensor, k_positions: torch.Tensor) -> torch.Tensor | None:
        return None

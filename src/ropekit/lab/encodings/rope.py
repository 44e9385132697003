# SPDX-License-Identifier: MIT
"""RoPE through ropekit (Su et al. 2021, RoFormer): any RopeSpec -- partial rotary, p-RoPE (Barbero et al. 2025),
and scaling schemes swapped in at inference (``set_spec``) for the scaling experiment.

The exact cos/sin tables are computed once per forward (``prepare``) and every layer rotates with them
(:func:`ropekit.apply_rope_tables`); ``rotate`` without a prepared state computes them itself (:func:`apply_rope`).
Shapes: q [b, s, h, d], k [b, s, g, d], positions [b, s] or [1, s], tables [s, d_rot/2] or [b, s, d_rot/2].
"""

from __future__ import annotations

from typing import Any

import torch

from ropekit.lab.encodings.base import PositionalEncoding
from ropekit.phases import rope_tables
from ropekit.rotation.apply import apply_rope, apply_rope_tables
from ropekit.spec import RopeSpec

__all__ = ["RoPE"]


class RoPE(PositionalEncoding):
    name = "rope"
    paper = "Su et al. 2021"

    def __init__(self, d_model: int, n_heads: int, head_dim: int, spec: RopeSpec | None = None) -> None:
        super().__init__(d_model, n_heads, head_dim)
        self.spec = spec if spec is not None else RopeSpec(head_dim)
        if self.spec.head_dim != head_dim:
            raise ValueError(f"spec.head_dim={self.spec.head_dim} must equal the model's head_dim={head_dim}")

    def set_spec(self, spec: RopeSpec) -> None:
        if spec.head_dim != self.head_dim:
            raise ValueError(f"spec.head_dim={spec.head_dim} must equal the model's head_dim={self.head_dim}")
        self.spec = spec

    def prepare(self, positions: torch.Tensor) -> tuple[torch.Tensor, ...]:
        pos = positions.reshape(-1) if positions.dim() == 2 and positions.shape[0] == 1 else positions
        return rope_tables(pos, self.spec)  # float32, exact phases

    def rotate(
        self, q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor, state: Any = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if state is None:
            qr, kr = apply_rope(q, k, positions, self.spec, format="bshd")
        else:
            qr, kr = apply_rope_tables(q, k, state[0], state[1], self.spec, format="bshd")
        return qr, kr  # type: ignore[return-value]

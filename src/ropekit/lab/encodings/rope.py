# SPDX-License-Identifier: MIT
"""RoPE through ropekit (Su et al. 2021, RoFormer): any RopeSpec -- partial rotary, p-RoPE (Barbero et al. 2025),
and scaling schemes swapped in at inference (``set_spec``) for the scaling experiment."""

from __future__ import annotations

import torch

from ropekit.lab.encodings.base import PositionalEncoding
from ropekit.rotation.apply import apply_rope
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

    def rotate(
        self, q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        qr, kr = apply_rope(q, k, positions, self.spec, format="bshd")
        return qr, kr  # type: ignore[return-value]

# SPDX-License-Identifier: MIT
"""xPos (Sun et al. 2022, "A Length-Extrapolatable Transformer", arXiv 2212.10554): RoPE plus an exponential decay
per band. With zeta_i = (i / (d/2) + gamma) / (1 + gamma), gamma = 0.4, and scale base B = 512, the query at
position n is rotated by n * theta_i and scaled by zeta_i^(n/B), the key at m rotated by m * theta_i and scaled by
zeta_i^(-m/B), so the logit of band i carries zeta_i^((n - m)/B): a decay with distance that is strongest on the
highest frequencies (i = 0). The paper's blockwise causal attention at inference is not part of this encoding.

The scales are computed in float64 from the positions and applied in float32; the key's scale zeta^(-m/B) grows
with m, so positions past ``max_position`` (where it would leave float32's range) are refused.
Shapes: q [b, s, h, d], k [b, s, g, d], positions [b, s] or [1, s], scale tables [s, d/2] or [b, s, d/2].
"""

from __future__ import annotations

from typing import Any, cast

import torch

from ropekit.lab.encodings.rope import RoPE
from ropekit.rotation.apply import apply_rope_tables

__all__ = ["XPos", "xpos_zeta"]


def xpos_zeta(head_dim: int, gamma: float = 0.4) -> torch.Tensor:
    """zeta_i = (i / (d/2) + gamma) / (1 + gamma) for the d/2 bands (float64)."""
    n = head_dim // 2
    return (torch.arange(n, dtype=torch.float64) / n + gamma) / (1 + gamma)


class XPos(RoPE):
    name = "xpos"
    paper = "Sun et al. 2022"

    def __init__(
        self, d_model: int, n_heads: int, head_dim: int, gamma: float = 0.4, scale_base: float = 512.0
    ) -> None:
        super().__init__(d_model, n_heads, head_dim)
        if not gamma > 0 or not scale_base > 0:
            raise ValueError(
                f"xPos needs gamma > 0 and scale_base > 0, got gamma={gamma}, scale_base={scale_base}"
            )
        self.gamma, self.scale_base = gamma, scale_base
        self.register_buffer("log_zeta", xpos_zeta(head_dim, gamma).log(), persistent=False)
        # exp(+-80) stays well inside float32 (3.4e38) with room for the q and k values themselves
        self.max_position = int(80 * scale_base / -float(xpos_zeta(head_dim, gamma).log().min()))

    def prepare(self, positions: torch.Tensor) -> tuple[torch.Tensor, ...]:
        cos, sin = super().prepare(positions)
        pos = positions.reshape(-1) if positions.dim() == 2 and positions.shape[0] == 1 else positions
        far = int(pos.abs().max()) if pos.numel() else 0
        if far > self.max_position:
            raise ValueError(
                f"xPos position {far} exceeds max_position={self.max_position}: zeta^(-m/{self.scale_base:g}) "
                "would overflow float32"
            )
        log_zeta = cast(torch.Tensor, self.log_zeta)
        e = pos.to(torch.float64).unsqueeze(-1) / self.scale_base * log_zeta.to(pos.device)  # [*, d/2]
        up, down = e.exp().float(), (-e).exp().float()
        return cos, sin, up, down

    def rotate(
        self, q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor, state: Any = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        cos, sin, up, down = state if state is not None else self.prepare(positions)
        qr, kr = apply_rope_tables(q, k, cos, sin, self.spec, format="bshd")
        assert kr is not None
        return qr * _channels(up).to(q.dtype), kr * _channels(down).to(k.dtype)


def _channels(t: torch.Tensor) -> torch.Tensor:
    """[s, n] or [b, s, n] band scales -> channels of the half layout (i and i + n), broadcastable on [b, s, h, d]."""
    t = torch.cat([t, t], -1).unsqueeze(-2)
    return t if t.dim() == 4 else t.unsqueeze(0)

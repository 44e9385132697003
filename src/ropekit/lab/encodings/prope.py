# SPDX-License-Identifier: MIT
"""p-RoPE as an encoding of its own (Barbero et al. 2025, "Round and Round We Go! What makes Rotary Positional
Encodings useful?", ICLR, arXiv 2410.06205; seed 001): of the d/2 bands, the int(p * d/2) highest frequencies
rotate as in RoPE, the others get frequency 0 and carry no position. p = 0.75 (the paper's best) by default; p = 1
is RoPE. Through ropekit's ``RopeSpec(p=...)``.
Shapes: as :class:`ropekit.lab.encodings.rope.RoPE`.
"""

from __future__ import annotations

from ropekit.lab.encodings.rope import RoPE
from ropekit.spec import RopeSpec

__all__ = ["PRoPE"]


class PRoPE(RoPE):
    name = "p-rope"
    paper = "Barbero et al. 2025"

    def __init__(self, d_model: int, n_heads: int, head_dim: int, p: float = 0.75) -> None:
        if not 0 < p <= 1:
            raise ValueError(f"p-RoPE needs 0 < p <= 1, got p={p}")
        super().__init__(d_model, n_heads, head_dim, spec=RopeSpec(head_dim, p=p))
        self.p = p

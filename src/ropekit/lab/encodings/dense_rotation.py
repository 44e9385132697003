# SPDX-License-Identifier: MIT
"""Counter-example of seed 004, section 8.3: a dense (not block-diagonal) rotation U_p of the whole head.

q at position p becomes U_p q, k at m becomes U_m k, so the logit is q^T U_p^T U_m k: relative only if
U_p^T U_m = U_(m-p), i.e. if p -> U_p is a one-parameter group exp(p A). A generic dense family is not. This
encoding builds one from two dense generators,

    U_p = exp(p A_1) exp(p A_2),   A_j = Q_j J Q_j^T,

with Q_j fixed random orthogonal matrices (seeded) and J the block generator of RoPE's frequencies
theta_i = 10000^(-2i/d): each factor alone is RoPE in a rotated basis, but the factors do not commute, so
U_p^T U_m depends on p and m and not only on m - p -- a common shift of query and key changes the logit. With
``generators=1`` (U_p = exp(p A_1)) the family is a group and the logit *is* relative: that is the seed's
"orthogonal invariance" (RoPE in another basis), shown as the control, and it costs a d x d product per token
instead of RoPE's d/2 planar rotations. Measured in ``ropekit lab invariance``.

Matrices are built in float64 from cos/sin of p * theta_i (no matrix exponential needed) and applied in float32.
Shapes: q [b, s, h, d], U [s, d, d] or [b, s, d, d].
"""

from __future__ import annotations

from typing import Any, cast

import torch

from ropekit.lab.encodings.base import PositionalEncoding

__all__ = ["DenseRotation", "block_rotation"]


def block_rotation(positions: torch.Tensor, head_dim: int, base: float = 10_000.0) -> torch.Tensor:
    """RoPE's block-diagonal R(p) in the interleaved pairing (2i, 2i+1), float64: [*P] -> [*P, d, d]."""
    n = head_dim // 2
    theta = base ** (-2 * torch.arange(n, dtype=torch.float64) / head_dim)
    ang = positions.to(torch.float64).unsqueeze(-1) * theta  # [*P, n]
    c, s = ang.cos(), ang.sin()
    r = torch.zeros(*ang.shape[:-1], head_dim, head_dim, dtype=torch.float64)
    i = torch.arange(n)
    r[..., 2 * i, 2 * i], r[..., 2 * i, 2 * i + 1] = c, -s
    r[..., 2 * i + 1, 2 * i], r[..., 2 * i + 1, 2 * i + 1] = s, c
    return r


def _orthogonal(d: int, gen: torch.Generator) -> torch.Tensor:
    q, r = torch.linalg.qr(torch.randn(d, d, dtype=torch.float64, generator=gen))
    out: torch.Tensor = q * torch.sign(torch.diagonal(r))
    return out


class DenseRotation(PositionalEncoding):
    name = "dense-rotation"
    paper = "seed 004 section 8.3 (counter-example)"

    def __init__(self, d_model: int, n_heads: int, head_dim: int, generators: int = 2, seed: int = 0) -> None:
        super().__init__(d_model, n_heads, head_dim)
        if generators not in (1, 2):
            raise ValueError(f"generators must be 1 or 2, got {generators}")
        gen = torch.Generator().manual_seed(seed)
        self.generators = generators
        self.register_buffer("bases", torch.stack([_orthogonal(head_dim, gen) for _ in range(generators)]))

    def matrices(self, positions: torch.Tensor) -> torch.Tensor:
        """U_p in float64, [*P, d, d]."""
        r = block_rotation(positions.cpu(), self.head_dim)
        u = torch.eye(self.head_dim, dtype=torch.float64)
        for q in cast(torch.Tensor, self.bases).cpu():
            u = u @ (q @ r @ q.T)
        return u

    def prepare(self, positions: torch.Tensor) -> torch.Tensor:
        pos = positions.reshape(-1) if positions.dim() == 2 and positions.shape[0] == 1 else positions
        return self.matrices(pos).to(torch.float32).to(positions.device)

    def rotate(
        self, q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor, state: Any = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        u = state if state is not None else self.prepare(positions)
        eq = "sed,bshd->bshe" if u.dim() == 3 else "bsed,bshd->bshe"
        return torch.einsum(eq, u.to(q.dtype), q), torch.einsum(eq, u.to(k.dtype), k)

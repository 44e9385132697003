# SPDX-License-Identifier: MIT
"""What a model with weights does with its bands (Barbero et al. 2025, "Round and Round We Go!", arXiv 2410.06205;
seed 001, seed 004 section 15).

- per-band norms: the mean norm sqrt(x_i^2 + y_i^2) of each 2-D band of the queries (keys) that are about to be
  rotated, per layer. Barbero et al. find the low frequencies carry most of the norm (semantics) and the high
  frequencies are used by a few positional heads;
- positional heads: a head's mean attention on the previous token (offset 1) and on the token itself (offset 0);
  above 0.5 it attends by position (previous-token or diagonal head).

Shapes: b batch, s sequence, h heads, d head dim, n bands, l layers.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ropekit.spec import RopeSpec

__all__ = ["POSITIONAL_THRESHOLD", "WeightAnalysis", "band_norms", "positional_scores"]

POSITIONAL_THRESHOLD = 0.5


def band_norms(x: torch.Tensor, spec: RopeSpec) -> torch.Tensor:
    """[n] float64 mean over b, s, h of each band's norm; ``x`` is [b, s, h, d] in the spec's layout."""
    if x.dim() != 4 or x.shape[-1] != spec.head_dim:
        raise ValueError(f"x must be [b, s, h, head_dim={spec.head_dim}], got {tuple(x.shape)}")
    xs, ys = spec.pairs()
    x = x.to(torch.float64)
    return (x[..., xs].pow(2) + x[..., ys].pow(2)).sqrt().mean(dim=(0, 1, 2))


def positional_scores(attn: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean attention on the previous token and on the token itself, per head: two [h] float64 tensors.

    ``attn`` is [b, h, s, s] softmax weights (rows: queries, columns: keys).
    """
    if attn.dim() != 4 or attn.shape[-1] != attn.shape[-2] or attn.shape[-1] < 2:
        raise ValueError(f"attn must be [b, h, s, s] with s >= 2, got {tuple(attn.shape)}")
    a = attn.to(torch.float64)
    prev = a.diagonal(offset=-1, dim1=-2, dim2=-1).mean(dim=(0, 2))
    diag = a.diagonal(dim1=-2, dim2=-1).mean(dim=(0, 2))
    return prev, diag


@dataclass(frozen=True)
class WeightAnalysis:
    """Per-layer band norms and positional scores of a model run on ``tokens`` inputs."""

    q_norms: torch.Tensor  # [l, n]
    k_norms: torch.Tensor  # [l, n]
    previous: torch.Tensor  # [l, h] mean attention on offset 1
    diagonal: torch.Tensor  # [l, h] mean attention on offset 0
    inputs: str  # what the model was run on, e.g. "2 x 64 random token ids"

    def positional_heads(self, threshold: float = POSITIONAL_THRESHOLD) -> list[dict[str, object]]:
        """Heads whose previous-token or diagonal score exceeds ``threshold``."""
        out: list[dict[str, object]] = []
        for kind, table in (("previous-token", self.previous), ("diagonal", self.diagonal)):
            for layer, head in (table > threshold).nonzero().tolist():
                out.append({"layer": layer, "head": head, "kind": kind, "score": float(table[layer, head])})
        return out

    def as_dict(self) -> dict[str, object]:
        return {
            "q_norms": self.q_norms.tolist(),
            "k_norms": self.k_norms.tolist(),
            "previous_token_score": self.previous.tolist(),
            "diagonal_score": self.diagonal.tolist(),
            "positional_heads": self.positional_heads(),
            "inputs": self.inputs,
        }

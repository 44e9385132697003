# SPDX-License-Identifier: MIT
"""Llama 3.1 frequency scaling (Meta, "The Llama 3 Herd of Models", 2024).

With L0 = original_max_position_embeddings and wavelength lambda_i = 2 pi / theta_i:
lambda_i < L0 / high_freq_factor keeps theta_i; lambda_i > L0 / low_freq_factor divides by ``factor``; in between
g = (L0 / lambda_i - low) / (high - low) and theta'_i = (1 - g) theta_i / factor + g theta_i (boundaries fall in the
smoothed band). No attention factor. Llama 3.1: factor 8, low 1, high 4, L0 8192; Llama 3.2 1B/3B: factor 32.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from ropekit.scaling.base import Scaling, check_length, check_number

__all__ = ["Llama3"]


@dataclass(frozen=True)
class Llama3(Scaling):
    """Llama 3.1 wavelength-band scaling; see the module docstring for the formula.

    Args:
        factor: s >= 1, applied in full to bands longer than L0 / low_freq_factor.
        low_freq_factor: > 0; bands with wavelength above L0 / low_freq_factor are divided by s.
        high_freq_factor: > low_freq_factor; bands with wavelength below L0 / high_freq_factor are kept.
        original_max_position_embeddings: the pretraining length L0 (a positive int).
    """

    factor: float
    low_freq_factor: float
    high_freq_factor: float
    original_max_position_embeddings: int
    rope_type = "llama3"

    def __post_init__(self) -> None:
        object.__setattr__(self, "factor", check_number("Llama3", "factor", self.factor, lo=1.0))
        lo = check_number("Llama3", "low_freq_factor", self.low_freq_factor, lo=0.0, lo_open=True)
        hi = check_number("Llama3", "high_freq_factor", self.high_freq_factor, lo=0.0, lo_open=True)
        if hi <= lo:
            raise ValueError(
                f"Llama3.high_freq_factor must be > low_freq_factor, got high={hi!r} <= low={lo!r}"
            )
        object.__setattr__(self, "low_freq_factor", lo)
        object.__setattr__(self, "high_freq_factor", hi)
        L0 = check_length("Llama3", "original_max_position_embeddings", self.original_max_position_embeddings)
        object.__setattr__(self, "original_max_position_embeddings", L0)

    def scale(
        self, theta: torch.Tensor, *, base: float, rotary_dim: int, seq_len: int | None
    ) -> torch.Tensor:
        L0, lo, hi, s = (
            self.original_max_position_embeddings,
            self.low_freq_factor,
            self.high_freq_factor,
            self.factor,
        )
        wavelen = torch.where(
            theta > 0, 2 * math.pi / theta.clamp_min(1e-300), torch.full_like(theta, math.inf)
        )
        g = (L0 / wavelen - lo) / (hi - lo)
        out = torch.where(wavelen > L0 / lo, theta / s, theta)
        medium = (wavelen >= L0 / hi) & (wavelen <= L0 / lo)
        return torch.where(medium, (1 - g) * theta / s + g * theta, out)

    def to_hf(self) -> dict[str, Any]:
        return {
            "rope_type": "llama3",
            "factor": self.factor,
            "low_freq_factor": self.low_freq_factor,
            "high_freq_factor": self.high_freq_factor,
            "original_max_position_embeddings": self.original_max_position_embeddings,
        }

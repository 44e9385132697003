# SPDX-License-Identifier: MIT
"""Phase maps: how a position becomes a phase, phi_i(p) = g(p) * theta_i (seed 004, sections 4.3, 11.2, 11.5).

A phase map is the "surface" part of RoPE that long-context schemes change. Every map here is a frozen,
hashable dataclass with two pure functions:

- ``frequencies(base_freqs, head_dim, rotary_dim, seq_len)``: the effective per-band frequencies (float64),
  given the spec's unscaled ones. A map that multiplies every position by ``1/s`` is the same as dividing every
  frequency by ``s`` (position interpolation), and a per-band map changes each band separately.
- ``attention_factor``: the factor that multiplies both cos and sin (so attention logits scale by its square,
  as in Hugging Face transformers). 1.0 for the maps here.

The foundation ships the identity map (``None`` on the spec) and :class:`Linear` (Chen et al. 2023, "Extending
Context Window of Large Language Models via Positional Interpolation", arXiv 2306.15595), which is the seed's own
worked example (section 7.3). The other schemes join through the same interface.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

__all__ = ["Scaling", "Linear"]


class Scaling:
    """Base class of phase maps. Subclasses are frozen dataclasses."""

    #: True when the frequencies depend on the current sequence length (then cached keys can go stale).
    dynamic: bool = False

    def frequencies(
        self, base_freqs: torch.Tensor, *, head_dim: int, rotary_dim: int, seq_len: int | None
    ) -> torch.Tensor:  # pragma: no cover - interface
        """Return the effective frequencies (float64, shape like ``base_freqs``)."""
        raise NotImplementedError

    @property
    def attention_factor(self) -> float:
        """Factor multiplying cos and sin; logits scale by its square."""
        return 1.0


@dataclass(frozen=True)
class Linear(Scaling):
    """Position interpolation: g(p) = p / factor, i.e. every frequency divided by ``factor``.

    Args:
        factor: the context extension ratio s >= 1 (e.g. 8 maps 32k positions into a 4k trained range).

    Raises:
        ValueError: if ``factor`` is not a finite number >= 1.
    """

    factor: float

    def __post_init__(self) -> None:
        f = self.factor
        if isinstance(f, bool) or not isinstance(f, (int, float)) or not math.isfinite(f) or f < 1.0:
            raise ValueError(f"Linear.factor must be a finite number >= 1, got {f!r}")
        object.__setattr__(self, "factor", float(f))

    def frequencies(
        self, base_freqs: torch.Tensor, *, head_dim: int, rotary_dim: int, seq_len: int | None
    ) -> torch.Tensor:
        return base_freqs / self.factor

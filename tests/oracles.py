"""Independent oracles written from the seed's formulas (never from ropekit's own code paths)."""

from __future__ import annotations

import math

import torch

from ropekit import RopeSpec
from ropekit.rotation.reference import layout_permutation, reference_frequencies, reference_rope

__all__ = ["TOL", "atomic_score", "reference_rope", "theta", "to_interleaved"]

# Absolute tolerance of a rotated unit-scale value per dtype: one rounding of the output (plus float32 math).
TOL = {torch.float64: 1e-12, torch.float32: 1e-6, torch.bfloat16: 1.6e-2, torch.float16: 2e-3}


def theta(spec: RopeSpec) -> list[float]:
    return reference_frequencies(spec)


def to_interleaved(x: torch.Tensor, spec: RopeSpec) -> torch.Tensor:
    """Reorder the last dim of x from the spec's layout into the seed's pairing (2i, 2i+1)."""
    perm = layout_permutation(spec)
    inv = torch.empty_like(perm)
    inv[perm] = torch.arange(perm.numel())
    return x[..., inv]


def atomic_score(q: torch.Tensor, k: torch.Tensor, p: float, m: float, spec: RopeSpec) -> float:
    """Theorem 13.1: sum_i a_i cos((m-p) theta_i) + b_i sin((m-p) theta_i) plus the pass-through dot product.

    q, k: [d] vectors in the spec's layout; returns the unnormalised score <R_p q, R_m k>.
    """
    qi, ki = to_interleaved(q.double(), spec).tolist(), to_interleaved(k.double(), spec).tolist()
    r = int(spec.rotary_dim)
    total = 0.0
    for i, t in enumerate(theta(spec)):
        a = qi[2 * i] * ki[2 * i] + qi[2 * i + 1] * ki[2 * i + 1]
        b = qi[2 * i + 1] * ki[2 * i] - qi[2 * i] * ki[2 * i + 1]
        total += a * math.cos((m - p) * t) + b * math.sin((m - p) * t)
    total += sum(qi[j] * ki[j] for j in range(r, spec.head_dim))
    return total

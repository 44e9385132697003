# SPDX-License-Identifier: MIT
"""What a RoPE configuration does at a given context length, band by band.

- Per band i (seed 004 sections 3.3, 7.4, 12.3): theta_i, wavelength 2*pi/theta_i, rotations completed within the
  context L (L * theta_i / 2*pi), and whether the band wraps (completes at least one full turn inside L).
- Critical dimension (Liu et al. 2024, "Scaling Laws of RoPE-based Extrapolation", arXiv 2310.05209):
  d_extra = 2 * ceil((d/2) * log_base(L / 2*pi)), clipped to [0, d] -- the leading dims whose period fits inside the
  training context; T_extra = 2*pi * base^(d_extra/d) is the length beyond which the next band sees unseen angles.
- Base lower bound (Men et al. 2024, "Base of RoPE Bounds Context Length", arXiv 2405.14591): the smallest base b
  with B(m) = sum_i cos(m * b^(-2i/d)) >= 0 for every 0 <= m <= L.

Shapes: n bands, L context length.
"""

from __future__ import annotations

import functools
import math
from dataclasses import asdict, dataclass

import torch

from ropekit.analysis.threads import single_thread
from ropekit.spec import RopeSpec

__all__ = [
    "Band",
    "band_table",
    "base_bound_margin",
    "base_lower_bound",
    "critical_dim",
    "extrapolation_bound",
]

_TWO_PI = 2.0 * math.pi


@dataclass(frozen=True)
class Band:
    """One 2-D band at context length L."""

    index: int
    theta: float
    wavelength: float  # tokens per full turn; inf for a zero (p-RoPE) frequency
    rotations: float  # full turns completed within L
    wraps: bool  # rotations >= 1: every relative angle in [0, 2*pi) is seen during training

    def as_dict(self) -> dict[str, float | int | bool]:
        d = asdict(self)
        if math.isinf(self.wavelength):
            d["wavelength"] = None
        return d


def band_table(spec: RopeSpec, context: int) -> list[Band]:
    """The bands of ``spec`` (after p-RoPE and the phase map at ``context``) at context length ``context``."""
    _check_context(context)
    theta = spec.frequencies(context).tolist()
    out = []
    for i, t in enumerate(theta):
        wl = _TWO_PI / t if t > 0 else math.inf
        rot = context * t / _TWO_PI
        out.append(Band(i, t, wl, rot, rot >= 1.0))
    return out


def critical_dim(rotary_dim: int, base: float, context: int) -> int:
    """Liu et al.'s critical dimension d_extra (number of leading channels, even), clipped to [0, rotary_dim]."""
    _check_context(context)
    x = (rotary_dim / 2) * math.log(context / _TWO_PI) / math.log(base)
    return int(min(rotary_dim, max(0, 2 * math.ceil(x - 1e-12))))


def extrapolation_bound(rotary_dim: int, base: float, context: int) -> float:
    """T_extra = 2*pi * base^(d_extra / d): Liu et al.'s predicted extrapolation limit (inf if every dim wraps)."""
    de = critical_dim(rotary_dim, base, context)
    return math.inf if de >= rotary_dim else _TWO_PI * base ** (de / rotary_dim)


def base_bound_margin(
    rotary_dim: int, base: float, context: int, *, chunk: int = 256
) -> tuple[float, int | None]:
    """min over 0 <= m <= L of B(m) / (d/2), and the first m with B(m) < 0 (None if the condition holds).

    B(m) = sum_i cos(m theta_i) is evaluated for every m in float64 by angle addition on a K x K grid
    (m = a K + k, K = ceil(sqrt(L + 1))): cos(m theta) = cos(aK theta) cos(k theta) - sin(aK theta) sin(k theta),
    so B for ``chunk`` rows of the grid is two small matrix products instead of (L + 1) * d/2 cosines.
    """
    _check_context(context)
    n = rotary_dim // 2
    theta = torch.tensor(base, dtype=torch.float64).pow(
        -torch.arange(0, n, dtype=torch.float64) * 2 / rotary_dim
    )
    K = math.isqrt(context) + 1  # K * K > context
    k_angle = torch.arange(K, dtype=torch.float64).unsqueeze(-1) * theta  # [K, n]
    ck, sk = torch.cos(k_angle).T, torch.sin(k_angle).T  # [n, K]
    worst, first = math.inf, None
    rows = (context // K) + 1
    for start in range(0, rows, chunk):
        a = torch.arange(start, min(rows, start + chunk), dtype=torch.float64)
        a_angle = (a * K).unsqueeze(-1) * theta  # [A, n]
        b = torch.cos(a_angle) @ ck - torch.sin(a_angle) @ sk  # [A, K]: B(aK + k)
        m = (a * K).unsqueeze(-1) + torch.arange(K, dtype=torch.float64)
        b = b.masked_fill(m > context, math.inf).flatten()
        worst = min(worst, float(b.min()) / n)
        neg = torch.nonzero(b < 0)
        if first is None and neg.numel():
            first = int(m.flatten()[neg[0, 0]])
    return worst, first


@functools.lru_cache(maxsize=128)  # pure function of numbers; inspect asks for the same bound repeatedly
def base_lower_bound(
    rotary_dim: int, context: int, *, grid: float = 1.01, max_base: float = 1e15
) -> float | None:
    """Smallest base on a geometric grid (ratio ``grid``) satisfying Men et al.'s condition; None above ``max_base``.

    The condition is not monotone in the base near the bound (d 128, L 1024: 4300 passes, 4350..6000 fail, 6033
    passes), so this is a lower bound -- every base below it fails -- and a base above it can still fail:
    check a concrete base with :func:`base_bound_margin`. Bases are scanned by doublings until one passes, then
    the grid is walked upward from a quarter of that base.
    """
    _check_context(context)
    if not grid > 1.0:
        raise ValueError(f"grid must be > 1, got {grid!r}")
    with single_thread():
        return _scan_bases(rotary_dim, context, grid, max_base)


def _scan_bases(rotary_dim: int, context: int, grid: float, max_base: float) -> float | None:
    hi = 2.0
    while base_bound_margin(rotary_dim, hi, context)[1] is not None:
        hi *= 2.0
        if hi > max_base:
            return None
    b = max(1.0 + 1e-6, hi / 4.0)
    while b < hi:
        if base_bound_margin(rotary_dim, b, context)[1] is None:
            return b
        b *= grid
    return hi


def _check_context(context: int) -> None:
    if isinstance(context, bool) or not isinstance(context, int) or context < 1:
        raise ValueError(f"context must be a positive int, got {context!r}")

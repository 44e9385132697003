"""Shared by the KV-cache write tests: the float64 RoFormer rotation they compare with, and the tolerance of one
rounding (the ``backend`` fixture is in conftest.py)."""

from __future__ import annotations

import torch

BASE = 10_000.0


def rope64(x: torch.Tensor, pos: torch.Tensor, r: int, layout: str) -> torch.Tensor:
    """RoFormer eq. 34 in float64: x [..., T, H, D], pos [..., T]; pairs (i, i + r/2) or (2i, 2i + 1)."""
    x = x.double().clone()
    n = r // 2
    theta = torch.tensor([BASE ** (-2.0 * i / r) for i in range(n)], dtype=torch.float64)
    ang = pos.double()[..., None, None] * theta  # [..., T, 1, n]
    c, s = torch.cos(ang), torch.sin(ang)
    if layout == "half":
        ia, ib = torch.arange(n), torch.arange(n) + n
    else:
        ia, ib = 2 * torch.arange(n), 2 * torch.arange(n) + 1
    a, b = x[..., ia], x[..., ib]
    x[..., ia], x[..., ib] = a * c - b * s, b * c + a * s
    return x


def close(out: torch.Tensor, ref: torch.Tensor) -> None:
    if out.dtype == torch.float32:
        torch.testing.assert_close(out.double(), ref, rtol=1e-5, atol=1e-6)
    else:  # one rounding to bfloat16 of a float32 result: within one bf16 ulp of the float64 value
        torch.testing.assert_close(out.double(), ref, rtol=2.0**-7, atol=1e-6)

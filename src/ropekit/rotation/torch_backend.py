# SPDX-License-Identifier: MIT
"""Pure-PyTorch rotation backend (every device, every dtype; the fallback of the fused backends).

For band i with channels (x, y) and phase phi (seed 004 section 3.4):

    x' = x cos(phi) - y sin(phi),    y' = y cos(phi) + x sin(phi)

computed in float32 (float64 for float64 inputs) from float32 tables and rounded once to the input dtype.
Channels past ``rotary_dim`` pass through unchanged (in place they are not touched at all). Autograd: see
:mod:`ropekit.rotation.autograd`.

Shapes: ... leading dims, r rotary_dim, n = r // 2; ``cos``/``sin`` broadcast against x[..., :n].
"""

from __future__ import annotations

import torch

from ropekit.rotation.autograd import make_rotate

__all__ = ["raw_rotate", "rotate"]


def _rotate_into(
    dst: torch.Tensor, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, r: int, layout: str
) -> None:
    """Write the rotation of x's first r channels into dst (dst may be x itself)."""
    n = r // 2
    cdt = torch.float64 if x.dtype == torch.float64 else torch.float32
    if layout == "half":
        a, b = x[..., :n].to(cdt), x[..., n:r].to(cdt)
        dst_a, dst_b = dst[..., :n], dst[..., n:r]
    else:
        xp = torch.unflatten(x[..., :r], -1, (n, 2))  # [..., n, 2]: (x_2i, x_2i+1)
        a, b = xp[..., 0].to(cdt), xp[..., 1].to(cdt)
        dp = torch.unflatten(dst[..., :r], -1, (n, 2))
        dst_a, dst_b = dp[..., 0], dp[..., 1]
    c, s = cos.to(cdt), sin.to(cdt)
    out_a = a * c - b * s  # both outputs are formed before either is written (in-place safety)
    out_b = b * c + a * s
    dst_a.copy_(out_a)
    dst_b.copy_(out_b)


def raw_rotate(
    x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, r: int, layout: str, inplace: bool, sign: int = 1
) -> torch.Tensor:
    if sign < 0:
        sin = -sin
    if inplace:
        _rotate_into(x, x, cos, sin, r, layout)
        return x
    out = torch.empty_like(x)
    if x.shape[-1] > r:
        out[..., r:].copy_(x[..., r:])
    _rotate_into(out, x, cos, sin, r, layout)
    return out


rotate = make_rotate(raw_rotate, "torch")

# SPDX-License-Identifier: MIT
"""Pure-PyTorch rotation backend (every device, every dtype), with an explicit autograd rule.

For band i with channels (x, y) and phase phi (seed 004 section 3.4):

    x' = x cos(phi) - y sin(phi),    y' = y cos(phi) + x sin(phi)

computed in float32 (float64 for float64 inputs) from float32 tables and rounded once to the input dtype.
Channels past ``rotary_dim`` pass through unchanged (in place they are not touched at all).

Backward: a rotation is orthogonal, so the gradient of x' = R(phi) x is R(phi)^T g = R(-phi) g -- the same
rotation with the sine negated. Only the tables are saved, never the activations.

Shapes: ... leading dims, r rotary_dim, n = r // 2; ``cos``/``sin`` broadcast against x[..., :n].
"""

from __future__ import annotations

import torch

__all__ = ["rotate"]


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
        xp = x[..., :r].unflatten(-1, (n, 2))  # [..., n, 2]: (x_2i, x_2i+1)
        a, b = xp[..., 0].to(cdt), xp[..., 1].to(cdt)
        dp = dst[..., :r].unflatten(-1, (n, 2))
        dst_a, dst_b = dp[..., 0], dp[..., 1]
    c, s = cos.to(cdt), sin.to(cdt)
    out_a = a * c - b * s  # both outputs are formed before either is written (in-place safety)
    out_b = b * c + a * s
    dst_a.copy_(out_a)
    dst_b.copy_(out_b)


def _rotate_raw(
    x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, r: int, layout: str, inplace: bool
) -> torch.Tensor:
    if inplace:
        _rotate_into(x, x, cos, sin, r, layout)
        return x
    out = torch.empty_like(x)
    if x.shape[-1] > r:
        out[..., r:].copy_(x[..., r:])
    _rotate_into(out, x, cos, sin, r, layout)
    return out


class _Rotate(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, cos, sin, r, layout, inplace):  # type: ignore[override]
        out = _rotate_raw(x, cos, sin, r, layout, inplace)
        if inplace:
            ctx.mark_dirty(x)
        ctx.save_for_backward(cos, sin)
        ctx.r, ctx.layout = r, layout
        return out

    @staticmethod
    def backward(ctx, grad):  # type: ignore[override]
        cos, sin = ctx.saved_tensors
        # d/dx [R(phi) x] applied to grad is R(phi)^T grad = R(-phi) grad: the same op, sine negated.
        return _Rotate.apply(grad, cos, -sin, ctx.r, ctx.layout, False), None, None, None, None, None


def rotate(
    x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, *, rotary_dim: int, layout: str, inplace: bool
) -> torch.Tensor:
    """Rotate the first ``rotary_dim`` channels of x by the tabulated phases. Inputs are assumed validated.

    Args:
        x: [..., d] float tensor.
        cos, sin: tables broadcastable to [..., rotary_dim // 2] (float32, or float64 for float64 x).
        rotary_dim: even number of leading channels that rotate.
        layout: "half" or "interleaved".
        inplace: write into x's storage and return x.
    """
    if torch.is_grad_enabled() and x.requires_grad:
        return _Rotate.apply(x, cos, sin, rotary_dim, layout, inplace)
    return _rotate_raw(x, cos, sin, rotary_dim, layout, inplace)

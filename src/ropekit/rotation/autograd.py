# SPDX-License-Identifier: MIT
"""One autograd rule for every backend: the backward of a rotation is the rotation by the negative angle.

A backend provides a raw kernel ``raw(x, cos, sin, rotary_dim, layout, inplace, sign) -> Tensor`` (sign -1 rotates
by -phi). :func:`make_rotate` turns it into ``rotate(x, cos, sin, *, rotary_dim, layout, inplace)`` that records
the operation for autograd when x requires grad, saving only the tables (never the activations). The backward
calls the same rotate with the opposite sign, so double backward works too.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import torch

__all__ = ["RawKernel", "make_rotate"]

RawKernel = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, int, str, bool, int], torch.Tensor]


def make_rotate(raw: RawKernel, name: str) -> Callable[..., torch.Tensor]:
    class _Rotate(torch.autograd.Function):
        @staticmethod
        def forward(
            ctx: Any,
            x: torch.Tensor,
            cos: torch.Tensor,
            sin: torch.Tensor,
            r: int,
            layout: str,
            inplace: bool,
            sign: int,
        ) -> torch.Tensor:
            out = raw(x, cos, sin, r, layout, inplace, sign)
            if inplace:
                ctx.mark_dirty(x)
            ctx.save_for_backward(cos, sin)
            ctx.r, ctx.layout, ctx.sign = r, layout, sign
            return out

        @staticmethod
        def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None, None, None, None, None]:
            cos, sin = ctx.saved_tensors
            # d/dx [R(phi) x] applied to grad is R(phi)^T grad = R(-phi) grad.
            g = apply(grad.contiguous(), cos, sin, ctx.r, ctx.layout, False, -ctx.sign)
            return g, None, None, None, None, None, None

    # torch.autograd.Function.apply is an untyped classmethod in torch's stubs; this is its real signature here.
    apply = cast(Callable[..., torch.Tensor], _Rotate.apply)

    def rotate(
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        *,
        rotary_dim: int,
        layout: str,
        inplace: bool,
        sign: int = 1,
    ) -> torch.Tensor:
        """Rotate the first ``rotary_dim`` channels of x (cos/sin broadcast against x[..., :rotary_dim // 2])."""
        if torch.is_grad_enabled() and x.requires_grad:
            return apply(x, cos, sin, rotary_dim, layout, inplace, sign)
        return raw(x, cos, sin, rotary_dim, layout, inplace, sign)

    rotate.__name__ = rotate.__qualname__ = f"rotate_{name}"
    return rotate

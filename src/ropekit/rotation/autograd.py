# SPDX-License-Identifier: MIT
"""One autograd rule for every backend: the backward of a rotation is the rotation by the negative angle.

A backend provides a raw kernel ``raw(x, cos, sin, rotary_dim, layout, inplace, sign) -> Tensor`` (sign -1 rotates
by -phi). :func:`make_rotate` turns it into ``rotate(x, cos, sin, *, rotary_dim, layout, inplace)`` that records
the operation for autograd when x (or a table) requires grad, saving only the tables (never the activations, unless
a table requires grad). The backward calls the same rotate with the opposite sign, so double backward works too.

Tables that require grad (learnable frequencies: cos/sin computed from a parameter) get their gradient on every
backend: with ``x' = x cos - y sin``, ``y' = y cos + x sin`` per band, ``dL/dcos = g_x x + g_y y`` and
``dL/dsin = g_y x - g_x y``, summed over the dimensions the table was broadcast along (heads, and the batch for a
table shared by the batch). Then x is saved for the backward (an in-place call rotates a copy of x and writes the
result back).

Forward-mode AD and ``torch.func``: a raw kernel writes through pointers that neither a dual tensor's tangent nor
a functorch wrapper (vmap, grad, jvp, jacrev, ...) can follow. :func:`transformed` detects both before any kernel
runs, and ``rotate`` then computes the rotation with differentiable PyTorch ops (the PyTorch backend's formula,
recorded by autograd, forward AD and functorch like any torch op). Callers that choose a kernel explicitly
(``backend="cpu"`` / ``"triton"``) refuse such tensors instead (:mod:`ropekit.rotation.dispatch`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import torch
import torch.autograd.forward_ad as _fwad

__all__ = ["RawKernel", "make_rotate", "rotation_backward", "table_grads", "transformed", "transforms_active"]

RawKernel = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, int, str, bool, int], torch.Tensor]

#: whether a torch.func transform (vmap, grad, jvp, jacrev, functionalize, ...) is running: one C call, what
#: torch.autograd.Function.apply itself asks (torch 2.6 to 2.13)
_functorch_active: Callable[[], bool] = torch._C._are_functorch_transforms_active


def transforms_active() -> bool:
    """Whether a forward-AD dual level is open or a torch.func transform is running: the cheap gate (a module
    attribute and one C call, ~0.1 us) in front of the fast paths, which call kernels on raw pointers."""
    return _fwad._current_level >= 0 or _functorch_active()


def transformed(*tensors: torch.Tensor | None) -> bool:
    """Whether a rotation of these tensors must be computed by differentiable PyTorch ops: a torch.func transform
    is running (its wrapped tensors have no storage a kernel could read), or one of them carries a forward-mode
    tangent at the open dual level (``torch.autograd.forward_ad.make_dual``; a kernel would drop it silently)."""
    if _functorch_active():
        return True
    if _fwad._current_level < 0:
        return False
    return any(t is not None and _fwad.unpack_dual(t).tangent is not None for t in tensors)  # type: ignore[no-untyped-call]


def table_grads(
    x: torch.Tensor,
    grad: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    r: int,
    layout: str,
    sign: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Gradients of ``<grad, R(sign * phi) x>`` with respect to cos and sin (each of the table's shape and dtype).

    Per band with channels (a, b): ``out_a = a cos - b s``, ``out_b = b cos + a s``, ``s = sign * sin``; so
    ``dL/dcos = g_a a + g_b b`` and ``dL/dsin = sign (g_b a - g_a b)``, summed over the dimensions along which the
    table was broadcast against ``x[..., :r // 2]``. Plain torch ops: differentiable again (double backward).
    """
    n = r // 2
    cdt = torch.float64 if x.dtype == torch.float64 else torch.float32
    if layout == "half":
        a, b, ga, gb = x[..., :n], x[..., n:r], grad[..., :n], grad[..., n:r]
    else:  # interleaved: band i is the pair (2i, 2i + 1)
        xp, gp = torch.unflatten(x[..., :r], -1, (n, 2)), torch.unflatten(grad[..., :r], -1, (n, 2))
        a, b, ga, gb = xp[..., 0], xp[..., 1], gp[..., 0], gp[..., 1]
    a, b, ga, gb = a.to(cdt), b.to(cdt), ga.to(cdt), gb.to(cdt)
    gcos = ga * a + gb * b
    gsin = gb * a - ga * b
    if sign < 0:
        gsin = -gsin
    return gcos.sum_to_size(cos.shape).to(cos.dtype), gsin.sum_to_size(sin.shape).to(sin.dtype)


def rotation_backward(
    ctx: Any,
    grad: torch.Tensor,
    layout: str,
    rotate_back: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor],
) -> tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None, None, None, None, None]:
    """The backward of a rotation recorded with ``ctx.save_for_backward(cos, sin, x or None)``, ``ctx.r`` and
    ``ctx.sign`` (inputs x, cos, sin, then four non-tensors): x's gradient is ``rotate_back(grad, cos, sin)``, the
    rotation by the opposite angle (R(phi)^T = R(-phi)); the tables' is :func:`table_grads` when x was saved."""
    cos, sin, x = ctx.saved_tensors
    gx = gcos = gsin = None
    if ctx.needs_input_grad[0]:
        gx = rotate_back(grad.contiguous(), cos, sin)
    if x is not None:
        gcos, gsin = table_grads(x, grad, cos, sin, ctx.r, layout, ctx.sign)
        gcos = gcos if ctx.needs_input_grad[1] else None
        gsin = gsin if ctx.needs_input_grad[2] else None
    return gx, gcos, gsin, None, None, None, None


def _differentiable(
    x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, r: int, layout: str, inplace: bool, sign: int
) -> torch.Tensor:
    """The rotation as out-of-place PyTorch ops that autograd, forward AD and torch.func record themselves (no
    kernel, no autograd.Function, no write into a fresh buffer: torch.func.grad refuses those), the PyTorch
    backend's arithmetic (float32, float64 for float64 x; rounded once to x's dtype). In place: copied into x."""
    n = r // 2
    cdt = torch.float64 if x.dtype == torch.float64 else torch.float32
    if layout == "half":
        a, b = x[..., :n], x[..., n:r]
    else:
        xp = torch.unflatten(x[..., :r], -1, (n, 2))
        a, b = xp[..., 0], xp[..., 1]
    a, b, c, s = a.to(cdt), b.to(cdt), cos.to(cdt), sin.to(cdt)
    if sign < 0:
        s = -s
    out_a, out_b = a * c - b * s, b * c + a * s
    rot = torch.cat((out_a, out_b), -1) if layout == "half" else torch.stack((out_a, out_b), -1).flatten(-2)
    out = torch.cat((rot.to(x.dtype), x[..., r:]), -1) if x.shape[-1] > r else rot.to(x.dtype)
    return x.copy_(out) if inplace else out


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
            # a table that requires grad needs x in its backward (``rotate`` never rotates such a call in place:
            # a saved dirty input would be the rotated values)
            tables = bool(ctx.needs_input_grad[1] or ctx.needs_input_grad[2])
            out = raw(x, cos, sin, r, layout, inplace, sign)
            if inplace:
                ctx.mark_dirty(x)
            ctx.save_for_backward(cos, sin, x if tables else None)
            ctx.r, ctx.layout, ctx.sign = r, layout, sign
            return out

        @staticmethod
        def backward(
            ctx: Any, grad: torch.Tensor
        ) -> tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None, None, None, None, None]:
            return rotation_backward(
                ctx, grad, ctx.layout, lambda g, c, s: apply(g, c, s, ctx.r, ctx.layout, False, -ctx.sign)
            )

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
        if transformed(x, cos, sin):  # dual tensors, torch.func: ops they can follow (module docstring)
            return _differentiable(x, cos, sin, rotary_dim, layout, inplace, sign)
        if torch.is_grad_enabled() and (x.requires_grad or cos.requires_grad or sin.requires_grad):
            if inplace and (cos.requires_grad or sin.requires_grad):
                # the table gradients need x as it was: rotate a copy (recorded by autograd, so double backward
                # reaches x through it) and write the result back
                return x.copy_(apply(x.clone(), cos, sin, rotary_dim, layout, False, sign))
            return apply(x, cos, sin, rotary_dim, layout, inplace, sign)
        return raw(x, cos, sin, rotary_dim, layout, inplace, sign)

    rotate.__name__ = rotate.__qualname__ = f"rotate_{name}"
    return rotate

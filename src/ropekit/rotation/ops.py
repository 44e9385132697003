# SPDX-License-Identifier: MIT
"""ropekit's rotation as registered torch custom ops, so ``torch.compile(fullgraph=True)`` sees no graph break.

``ropekit::rotate`` (out of place, differentiable: its backward is the same op with the opposite sign and the same
backend; tables that require grad get :func:`ropekit.rotation.autograd.table_grads`, x then being saved) and ``ropekit::rotate_`` (in place, mutates x). Both take the backend name of the call: "auto" picks the
best backend for the tensor (fused CPU kernel, Triton on GPUs, PyTorch otherwise); "torch", "cpu" and "triton" run
that backend and no other (the caller has validated that it can take the tensor; a kernel that cannot raises
rather than run another backend). Both have fake implementations for tracing. :func:`ropekit.apply_rope` routes
through them while compiling; in eager mode it calls the backends directly (no dispatcher overhead).
"""

from __future__ import annotations

from typing import Any

import torch

from ropekit.rotation.autograd import RawKernel, table_grads

__all__ = ["backend_raw", "rotate_inplace_op", "rotate_op"]


def backend_raw(x: torch.Tensor, backend: str = "auto") -> RawKernel:
    """The raw kernel of ``backend`` ("auto": the best backend for x)."""
    from ropekit.rotation import cpu_backend, torch_backend

    if backend == "torch":
        return torch_backend.raw_rotate
    if backend == "cpu":
        return cpu_backend.raw_rotate
    if backend == "triton":
        from ropekit.rotation import triton_backend

        return triton_backend.raw_rotate
    if backend != "auto":
        raise ValueError(f"backend must be 'auto', 'torch', 'cpu' or 'triton', got {backend!r}")
    if cpu_backend.supports(x):
        return cpu_backend.raw_rotate
    if x.device.type == "cuda":
        from ropekit.rotation import triton_backend

        if triton_backend.supports(x):
            return triton_backend.raw_rotate
    return torch_backend.raw_rotate


@torch.library.custom_op("ropekit::rotate", mutates_args=())
def rotate_op(
    x: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    rotary_dim: int,
    interleaved: bool,
    sign: int,
    backend: str = "auto",
) -> torch.Tensor:
    layout = "interleaved" if interleaved else "half"
    return backend_raw(x, backend)(x, cos, sin, rotary_dim, layout, False, sign)


@rotate_op.register_fake
def _rotate_fake(
    x: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    rotary_dim: int,
    interleaved: bool,
    sign: int,
    backend: str = "auto",
) -> torch.Tensor:
    return torch.empty_like(x)


def _setup_context(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
    x, cos, sin, rotary_dim, interleaved, sign, backend = inputs
    # learnable tables (cos/sin requiring grad) need x in their backward; otherwise only the tables are kept
    ctx.save_for_backward(cos, sin, x if (cos.requires_grad or sin.requires_grad) else None)
    ctx.rotary_dim, ctx.interleaved, ctx.sign, ctx.backend = rotary_dim, interleaved, sign, backend


def _backward(
    ctx: Any, grad: torch.Tensor
) -> tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None, None, None, None, None]:
    cos, sin, x = ctx.saved_tensors
    gx = gcos = gsin = None
    if ctx.needs_input_grad[0]:
        gx = rotate_op(grad.contiguous(), cos, sin, ctx.rotary_dim, ctx.interleaved, -ctx.sign, ctx.backend)
    if x is not None:
        layout = "interleaved" if ctx.interleaved else "half"
        gcos, gsin = table_grads(x, grad, cos, sin, ctx.rotary_dim, layout, ctx.sign)
        gcos = gcos if ctx.needs_input_grad[1] else None
        gsin = gsin if ctx.needs_input_grad[2] else None
    return gx, gcos, gsin, None, None, None, None


rotate_op.register_autograd(_backward, setup_context=_setup_context)


@torch.library.custom_op("ropekit::rotate_", mutates_args=("x",))
def rotate_inplace_op(
    x: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    rotary_dim: int,
    interleaved: bool,
    sign: int,
    backend: str = "auto",
) -> None:
    layout = "interleaved" if interleaved else "half"
    backend_raw(x, backend)(x, cos, sin, rotary_dim, layout, True, sign)


@rotate_inplace_op.register_fake
def _rotate_inplace_fake(
    x: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    rotary_dim: int,
    interleaved: bool,
    sign: int,
    backend: str = "auto",
) -> None:
    return None

# SPDX-License-Identifier: MIT
"""ropekit's rotation as registered torch operators, so ``torch.compile(fullgraph=True)`` sees no graph break.

``ropekit::rotate`` (out of place, differentiable: its backward is the same op with the opposite sign and the same
backend; tables that require grad get :func:`ropekit.rotation.autograd.table_grads`, x then being saved) and
``ropekit::rotate_`` (in place, mutates x; not differentiable: a call whose x or tables require grad is refused).
Both take the backend name of the call: "auto" picks the best backend for the tensor (fused CPU kernel, Triton on
GPUs, PyTorch otherwise); "torch", "cpu" and "triton" run that backend and no other (the caller has validated that it
can take the tensor; a kernel that cannot raises rather than run another backend). Both have fake implementations
for tracing. :func:`ropekit.apply_rope` routes through them while compiling; in eager mode it calls the backends
directly (no dispatcher at all).

The ops are defined with ``torch.library.Library`` and plain kernels rather than ``torch.library.custom_op``: a
compiled graph calls them on every step, and custom_op's Python wrapper (its autograd.Function even when nothing
requires grad, its aliasing check on every output) cost ~50-80 us per call on the project's 2-core machine, more
than the kernel itself for a decode step (32 sequences x 32 heads x 128: ~30 us). Here a call that needs no
gradient costs one dispatcher trip: the Autograd kernel runs the backend itself when nothing but the CPU key is left
below autograd (no mode, no subclass, no fake or meta tensor: those are handed on with ``redispatch``), through a
prepared C call kept per call geometry (:func:`_cpu_call`, as the eager fast path does). Measured, a compiled
decode step (apply_rope on 32 x 1 tokens, 32 q / 8 kv heads, 128) in docs/kernels.md "torch.compile".

Shapes: x [..., d]; cos/sin broadcast against x[..., :rotary_dim // 2]; rotary_dim even, <= d.
"""

from __future__ import annotations

from typing import Any, cast

import torch

from ropekit.rotation.autograd import RawKernel, rotation_backward

__all__ = ["backend_raw", "rotate_inplace_op", "rotate_op"]

_ARGS = "Tensor cos, Tensor sin, int rotary_dim, bool interleaved, int sign, str backend='auto'"
#: the ops' owner, kept for the process's life (untyped in torch's stubs)
_LIB: Any = cast(Any, torch.library.Library)("ropekit", "FRAGMENT")
_LIB.define(f"rotate(Tensor x, {_ARGS}) -> Tensor")
_LIB.define(f"rotate_(Tensor(a!) x, {_ARGS}) -> ()")

_register_fake: Any = torch.library.register_fake  # untyped in torch's stubs

#: the registered overloads (``torch.ops.ropekit.rotate.default`` / ``rotate_.default``)
_ROTATE = torch.ops.ropekit.rotate.default
_ROTATE_ = torch.ops.ropekit.rotate_.default
#: the dispatch keys below autograd: what the Autograd kernels hand a call on to when nothing needs a gradient
_BELOW_AUTOGRAD = torch._C._after_autograd_keyset
_CPU = torch._C.DispatchKey.CPU


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


def _layout(interleaved: bool) -> str:
    return "interleaved" if interleaved else "half"


# ---------------------------------------------------------------- kernels below autograd (every device)
#: prepared C calls of the fused CPU kernel by call geometry (a compiled graph calls the ops with the same shapes
#: on every step): a hit skips the per-call Python of ``cpu_backend.raw_rotate`` (support checks, table strides,
#: geometry), ~20 us of a decode step's ~45
_PLANS: dict[tuple[Any, ...], Any] = {}
_MAX_PLANS = 256


def _plan_key(
    x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, r: int, il: bool, inplace: bool, sign: int
) -> tuple[Any, ...]:
    """Everything :func:`cpu_backend.plannable` and the plan's geometry read: equal keys, equal plans."""
    return (
        x.dtype, x.device, x.shape, x.stride(), x.is_conj(),
        cos.dtype, cos.device, cos.shape, cos.stride(),
        sin.dtype, sin.device, sin.shape, sin.stride(),
        r, il, inplace, sign,
    )  # fmt: skip


def _cpu_call(
    x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, r: int, il: bool, inplace: bool, sign: int
) -> torch.Tensor | None:
    """The fused CPU kernel through a prepared plan; None where no plan applies (the caller takes the raw path,
    which also raises for an explicit backend that cannot take x)."""
    from ropekit.rotation import cpu_backend

    key = _plan_key(x, cos, sin, r, il, inplace, sign)
    plan = _PLANS.get(key)
    if plan is None:
        if not (cpu_backend.plannable(x, cos, sin) and cos.device == x.device and sin.device == x.device):
            return None
        if len(_PLANS) >= _MAX_PLANS:
            _PLANS.clear()
        plan = _PLANS[key] = cpu_backend.Plan(x, None, cos, r, _layout(il), inplace, sign)
    out: torch.Tensor = plan(x, None, cos, sin)[0]
    return out


def _rotate_kernel(
    x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, r: int, il: bool, sign: int, backend: str = "auto"
) -> torch.Tensor:
    if backend in ("auto", "cpu") and x.device.type == "cpu":
        out = _cpu_call(x, cos, sin, r, il, False, sign)
        if out is not None:
            return out
    return backend_raw(x, backend)(x, cos, sin, r, _layout(il), False, sign)


def _rotate_inplace_kernel(
    x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, r: int, il: bool, sign: int, backend: str = "auto"
) -> None:
    if (
        backend in ("auto", "cpu")
        and x.device.type == "cpu"
        and _cpu_call(x, cos, sin, r, il, True, sign) is not None
    ):
        return
    backend_raw(x, backend)(x, cos, sin, r, _layout(il), True, sign)


_LIB.impl("rotate", _rotate_kernel, "CompositeExplicitAutograd")
_LIB.impl("rotate_", _rotate_inplace_kernel, "CompositeExplicitAutograd")


def _rotate_fake(
    x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, r: int, il: bool, sign: int, backend: str = "auto"
) -> torch.Tensor:
    return torch.empty_like(x)


def _rotate_inplace_fake(
    x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, r: int, il: bool, sign: int, backend: str = "auto"
) -> None:
    return None


_register_fake("ropekit::rotate", _rotate_fake, lib=_LIB)
_register_fake("ropekit::rotate_", _rotate_inplace_fake, lib=_LIB)


# ---------------------------------------------------------------- autograd
class _Rotate(torch.autograd.Function):
    """``ropekit::rotate`` recorded for autograd: the backward rotates by the opposite angle (the same op, so
    double backward works), and tables that require grad get :func:`~ropekit.rotation.autograd.table_grads` (x then saved)."""

    @staticmethod
    def forward(
        ctx: Any,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        r: int,
        il: bool,
        sign: int,
        backend: str,
    ) -> torch.Tensor:
        tables = bool(ctx.needs_input_grad[1] or ctx.needs_input_grad[2])
        ctx.save_for_backward(cos, sin, x if tables else None)
        ctx.r, ctx.il, ctx.sign, ctx.backend = r, il, sign, backend
        out: torch.Tensor = _ROTATE(x, cos, sin, r, il, sign, backend)  # grad mode is off here: no recursion
        return out

    @staticmethod
    def backward(
        ctx: Any, grad: torch.Tensor
    ) -> tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None, None, None, None, None]:
        return rotation_backward(
            ctx,
            grad,
            _layout(ctx.il),
            lambda g, c, s: _ROTATE(g, c, s, ctx.r, ctx.il, -ctx.sign, ctx.backend),
        )


_rotate_fn = cast(Any, _Rotate.apply)  # untyped classmethod in torch's stubs


def _needs_grad(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> bool:
    return torch.is_grad_enabled() and (x.requires_grad or cos.requires_grad or sin.requires_grad)


def _rotate_autograd(
    keyset: Any,
    x: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    r: int,
    il: bool,
    sign: int,
    backend: str = "auto",
) -> torch.Tensor:
    if _needs_grad(x, cos, sin):
        out: torch.Tensor = _rotate_fn(x, cos, sin, r, il, sign, backend)
        return out
    below = keyset & _BELOW_AUTOGRAD
    if (
        below.highestPriorityTypeId() == _CPU
    ):  # plain CPU tensors, no mode or subclass below: the kernel itself
        return _rotate_kernel(x, cos, sin, r, il, sign, backend)
    return cast(torch.Tensor, _ROTATE.redispatch(below, x, cos, sin, r, il, sign, backend))


def _rotate_inplace_autograd(
    keyset: Any,
    x: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    r: int,
    il: bool,
    sign: int,
    backend: str = "auto",
) -> None:
    if _needs_grad(x, cos, sin):
        raise RuntimeError(
            "ropekit::rotate_ (in place) is not differentiable, but x, cos or sin requires grad "
            f"(x.requires_grad={x.requires_grad}, cos.requires_grad={cos.requires_grad}, "
            f"sin.requires_grad={sin.requires_grad}); use the out-of-place ropekit::rotate"
        )
    below = keyset & _BELOW_AUTOGRAD
    if below.highestPriorityTypeId() == _CPU:
        _rotate_inplace_kernel(x, cos, sin, r, il, sign, backend)
        return
    _ROTATE_.redispatch(below, x, cos, sin, r, il, sign, backend)


_LIB.impl("rotate", _rotate_autograd, "Autograd", with_keyset=True)
_LIB.impl("rotate_", _rotate_inplace_autograd, "Autograd", with_keyset=True)


def rotate_op(
    x: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    rotary_dim: int,
    interleaved: bool,
    sign: int,
    backend: str = "auto",
) -> torch.Tensor:
    """``torch.ops.ropekit.rotate``: x rotated out of place (differentiable)."""
    return cast(torch.Tensor, _ROTATE(x, cos, sin, rotary_dim, interleaved, sign, backend))


def rotate_inplace_op(
    x: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    rotary_dim: int,
    interleaved: bool,
    sign: int,
    backend: str = "auto",
) -> None:
    """``torch.ops.ropekit.rotate_``: x rotated in place (not differentiable)."""
    _ROTATE_(x, cos, sin, rotary_dim, interleaved, sign, backend)

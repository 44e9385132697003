# SPDX-License-Identifier: MIT
"""Backend selection: which kernel rotates a given tensor.

"auto" picks the fused CPU kernel for CPU tensors (:mod:`ropekit.rotation.cpu_backend`), Triton for CUDA tensors
(:mod:`ropekit.rotation.triton_backend`, q and k in one launch when no autograd is needed) and the PyTorch backend
otherwise or where a kernel cannot take the tensor (a last dim that is not contiguous, float64, the CPU kernel not
built). An explicit backend runs that backend or raises: one that cannot take q or k (their device, dtype, last-dim
stride, the kernel not built) is refused with a ValueError before anything is written, in eager mode and under
torch.compile alike.

Dual tensors (forward-mode AD) and tensors under a ``torch.func`` transform (vmap, grad, jvp, ...) are rotated by
differentiable PyTorch ops under "auto" and "torch" (:mod:`ropekit.rotation.autograd`); the kernels write through
raw pointers that cannot follow their tangents or wrappers, so an explicit "cpu" or "triton" refuses them.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING

import torch

from ropekit.rotation import cpu_backend, torch_backend
from ropekit.rotation.autograd import transformed

if TYPE_CHECKING:
    from ropekit.spec import RopeSpec

__all__ = ["BACKENDS", "device_tables", "fused_positions"]

_Backend = Callable[..., torch.Tensor]


def _triton_rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, **kw: object) -> torch.Tensor:
    from ropekit.rotation import triton_backend  # lazy: importing triton is slow and optional

    return triton_backend.rotate(x, cos, sin, **kw)


#: name -> rotate(x, cos, sin, *, rotary_dim, layout, inplace). "auto" picks the fused CPU kernel for CPU tensors,
#: Triton for CUDA tensors, and the PyTorch backend otherwise (or where a kernel cannot take the tensor's strides).
BACKENDS: dict[str, _Backend] = {
    "torch": torch_backend.rotate,
    "cpu": cpu_backend.rotate,
    "triton": _triton_rotate,
}


def _check_backend(backend: str, x: torch.Tensor) -> None:
    """Refuse an explicit backend that cannot run on x's device (before anything is written)."""
    if backend == "cpu" and x.device.type != "cpu":
        raise ValueError(f"backend='cpu' needs CPU tensors, got q on {x.device}")
    if backend == "triton":
        from ropekit.rotation import triton_backend

        if not triton_backend.available():
            raise ValueError("backend='triton' needs the triton package (pip install 'ropekit[triton]')")
        if x.device.type != "cuda" and not (x.device.type == "cpu" and triton_backend._interpret()):
            raise ValueError(
                f"backend='triton' needs CUDA tensors (or TRITON_INTERPRET=1 on the CPU), got q on {x.device}"
            )


def _check_transformed(backend: str, *named: tuple[str, torch.Tensor | None]) -> None:
    """Refuse an explicit "cpu" or "triton" backend for tensors that carry a forward-mode tangent or run under a
    torch.func transform: its kernel would drop the tangent silently (or fail on a wrapper without storage)."""
    if backend not in ("cpu", "triton") or torch.compiler.is_compiling():  # traced: ops.py's custom ops
        return
    for name, x in named:
        if x is not None and transformed(x):
            raise ValueError(
                f"backend={backend!r} cannot rotate {name}: it carries a forward-mode AD tangent "
                "(torch.autograd.forward_ad) or runs under a torch.func transform (vmap, grad, jvp, ...), which the "
                "kernel's raw-pointer writes cannot follow; use backend='torch' (or 'auto', which rotates such "
                "tensors with differentiable PyTorch ops)"
            )


def _check_backend_inputs(backend: str, q: torch.Tensor, k: torch.Tensor | None) -> None:
    """Refuse an explicit "cpu" or "triton" backend that cannot rotate q or k (dtype, last-dim stride, the kernel
    not built, a tangent or torch.func wrapper it cannot follow): a ValueError naming the backend, the tensor, the
    reason and what the backend takes, raised before anything is written. An explicit backend never silently runs
    another one; "auto" chooses."""
    _check_transformed(backend, ("q", q), ("k", k))
    if backend == "cpu":
        for name, x in (("q", q), ("k", k)):
            if x is not None and (reason := cpu_backend.unsupported(x)) is not None:
                raise ValueError(cpu_backend.refusal(name, x, reason))
    elif backend == "triton":
        from ropekit.rotation import triton_backend

        for name, x in (("q", q), ("k", k)):
            if x is not None and (reason := triton_backend.unsupported(x)) is not None:
                raise ValueError(triton_backend.refusal(name, x, reason))


def _pick_backend(backend: str, x: torch.Tensor) -> _Backend:
    if backend == "auto":
        if cpu_backend.supports(x):
            return BACKENDS["cpu"]
        if x.device.type == "cuda":
            from ropekit.rotation import triton_backend

            if triton_backend.supports(x):
                return BACKENDS["triton"]
        return BACKENDS["torch"]
    return BACKENDS[backend]


def _to_bshd(x: torch.Tensor, fmt: str) -> torch.Tensor:
    return x.transpose(1, 2) if fmt == "bhsd" else x


def _results(
    q: torch.Tensor,
    k: torch.Tensor | None,
    qo: torch.Tensor,
    ko: torch.Tensor | None,
    fmt: str,
    inplace: bool,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """What the caller gets back: q and k themselves in place, else the [b, s, h, d] outputs in its format."""
    if inplace:
        return q, k
    return _to_bshd(qo, fmt), None if ko is None else _to_bshd(ko, fmt)


def _positions_kernels(positions: torch.Tensor, spec: RopeSpec) -> ModuleType | None:
    """:mod:`ropekit.rotation.triton_positions` when its kernels take these positions (Triton installed, integer
    CUDA positions, a static spec), else None."""
    from ropekit.rotation import triton_backend

    if positions.device.type != "cuda" or not triton_backend.available():
        return None
    from ropekit.rotation import triton_positions

    return triton_positions if triton_positions.positions_ok(positions, spec) else None


def _fused_triton(
    q: torch.Tensor,
    k: torch.Tensor | None,
    cos: torch.Tensor,
    sin: torch.Tensor,
    spec: RopeSpec,
    fmt: str,
    inplace: bool,
    backend: str,
    fast_key: tuple[object, ...] | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None] | None:
    """q and k in one Triton launch (CUDA; with autograd, one launch forward and one backward); None when it does
    not apply. With ``fast_key`` the launch is remembered for repeated calls (:mod:`ropekit.rotation.fastpath`)."""
    if k is None or backend not in ("auto", "triton") or q.dtype != k.dtype or q.dtype == torch.float64:
        return None
    if q.device.type != "cuda" and backend != "triton":
        return None
    if torch.is_grad_enabled() and (cos.requires_grad or sin.requires_grad):
        return None  # learnable tables: the per-tensor autograd rule differentiates them (ropekit.rotation.autograd)
    if transformed(
        q, k, cos, sin
    ):  # dual tensors, torch.func: differentiable PyTorch ops (explicit "triton" refuses)
        return None
    grad = torch.is_grad_enabled() and (q.requires_grad or k.requires_grad)
    if grad and inplace:
        return None
    from ropekit.rotation import triton_backend

    if not (triton_backend.supports(q) and triton_backend.supports(k)):
        return None
    # rotate_qk wants tables [b | 1, s, n] ([t, n] as they come for "thd")
    c, s = (t.unsqueeze(0) if t.dim() == 2 and fmt != "thd" else t for t in (cos, sin))
    qv, kv = _to_bshd(q, fmt), _to_bshd(k, fmt)
    r = 2 * spec.n_bands
    if grad:
        qo, ko2 = triton_backend.rotate_qk_autograd(qv, kv, c, s, r, spec.layout)
        ko: torch.Tensor | None = ko2
    else:
        (qo, ko), plan = triton_backend.tables_plan(qv, kv, c, s, r, spec.layout, inplace)
        if plan is not None and fast_key is not None:
            from ropekit.rotation import fastpath

            fastpath.store(fast_key, spec, plan)
    return _results(q, k, qo, ko, fmt, inplace)


def fused_positions(
    q: torch.Tensor,
    k: torch.Tensor | None,
    positions: torch.Tensor,
    spec: RopeSpec,
    fmt: str,
    inplace: bool,
    backend: str,
    apply_key: tuple[object, ...] | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None] | None:
    """q and k rotated at validated integer positions in one Triton launch that reads or computes the exact rows
    itself (CUDA, no autograd, no host sync); None when it does not apply. With ``apply_key`` (positions already
    on q's device) the launch is remembered for repeated calls."""
    if backend not in ("auto", "triton") or q.device.type != "cuda" or q.dtype == torch.float64:
        return None
    if k is not None and (k.dtype != q.dtype or (torch.is_grad_enabled() and k.requires_grad)):
        return None
    if torch.is_grad_enabled() and q.requires_grad:
        return None
    if transformed(q, k):
        return None
    pos = positions if positions.device == q.device else positions.to(q.device)
    kernels = _positions_kernels(pos, spec)
    if kernels is None:
        return None
    from ropekit.rotation import triton_backend

    if not triton_backend.supports(q) or (k is not None and not triton_backend.supports(k)):
        return None
    # positions [s] (shared by the batch) or [t] ("thd") are read with a zero batch stride
    (qo, ko), plan = kernels.positions_plan(
        _to_bshd(q, fmt), None if k is None else _to_bshd(k, fmt), pos, spec, inplace
    )
    if plan is not None and apply_key is not None and pos is positions:
        from ropekit.rotation import fastpath

        fastpath.apply_store_plan(apply_key, spec, plan)
    return _results(q, k, qo, ko, fmt, inplace)


def device_tables(positions: torch.Tensor, spec: RopeSpec) -> tuple[torch.Tensor, torch.Tensor] | None:
    """Exact float32 tables of integer CUDA positions in one Triton launch (no host sync), or None where that
    does not apply (no Triton, dynamic scaling, float positions, another device)."""
    kernels = _positions_kernels(positions, spec)
    return None if kernels is None else kernels.exact_tables(positions, spec)

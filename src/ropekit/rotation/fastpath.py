# SPDX-License-Identifier: MIT
"""Low-latency path for repeated calls with the same tensor geometry (decoding: every layer, every step).

The first call with a given geometry is validated in full and, when the fused CPU kernel applies, leaves a
prepared :class:`ropekit.rotation.cpu_backend.Plan` keyed by everything validation looked at: the spec (by
identity), format, in-place flag (a bool: any other value gets no key, so it always meets validation), backend,
and the dtype/device/shape/strides of q, k, cos and sin (each of them: a table on another device than the one
validated is a bad pointer for the kernel), plus whether q and k share storage and at which relative
offset. A later call with an equal key skips the Python checks (they would give the same answer) and makes one C
call. Calls that need autograd, or run under torch.compile, never take this path.

:func:`ropekit.apply_rope` has a second level (:func:`apply_key`): its key adds the positions' dtype, shape and
device to q's and k's geometry, so a repeated call with integer positions skips validation, reads its tables from
the spec's shared :class:`ropekit.table_cache.TableCache` (:func:`shared_tables`) and calls the stored plan when
the tables have the geometry the plan was built for.

On CUDA the stored plan is a Triton launch (:class:`ropekit.rotation.triton_backend.Plan`): with tables given it is
called like the CPU plan; for :func:`ropekit.apply_rope` it reads the positions on the device itself
(``plan.from_pos``), so a repeated call is one launch with no Python checks and no host sync.
"""

from __future__ import annotations

from typing import Any

import torch

from ropekit.phases import INT_DTYPES
from ropekit.rotation import cpu_backend
from ropekit.table_cache import SHARED_LIMIT, TableCache, is_row_view, shared_cache, shared_tables

__all__ = [
    "SHARED_LIMIT",
    "apply_key",
    "apply_store_plan",
    "build",
    "key",
    "lookup",
    "run_cached",
    "shared_cache",
    "shared_tables",
    "store",
]

#: a stored plan: the fused CPU kernel's :class:`~ropekit.rotation.cpu_backend.Plan` or a Triton launch
#: (:class:`ropekit.rotation.triton_backend.Plan`); both are called as plan(q, k, cos, sin) -> (q_rot, k_rot)
_PLANS: dict[tuple[Any, ...], tuple[object, Any]] = {}
_MAX = 256


def _k_geometry(q: torch.Tensor, k: torch.Tensor | None) -> tuple[Any, ...] | None:
    if k is None:
        return None
    same = q.untyped_storage().data_ptr() == k.untyped_storage().data_ptr()
    return (
        k.dtype,
        k.device,
        k.shape,
        k.stride(),
        (q.storage_offset() - k.storage_offset()) if same else None,
    )


def key(
    q: torch.Tensor,
    k: torch.Tensor | None,
    cos: torch.Tensor,
    sin: torch.Tensor,
    spec: object,
    fmt: str,
    inplace: bool,
    backend: str,
) -> tuple[Any, ...] | None:
    """The geometry key, or None when the fast path cannot apply (autograd, compile, non-tensors, an ``inplace``
    that is not a bool: 1 == True would find True's plan, so validation would be skipped)."""
    if inplace is not True and inplace is not False:
        return None
    try:
        if torch.is_grad_enabled() and (q.requires_grad or (k is not None and k.requires_grad)):
            return None
        kk = _k_geometry(q, k)
        return (
            id(spec),
            fmt,
            inplace,
            backend,
            q.dtype,
            q.device,
            q.shape,
            q.stride(),
            cos.dtype,
            cos.device,
            cos.shape,
            cos.stride(),
            sin.dtype,
            sin.device,  # as cos's: a plan validated for CPU tables must never be handed a meta/CUDA sin
            sin.shape,
            sin.stride(),
            kk,
        )
    except (AttributeError, TypeError, RuntimeError):
        return None


def lookup(k: tuple[Any, ...] | None, spec: object) -> Any:
    """The plan stored for key ``k`` (built for this very spec object), or None."""
    hit = _PLANS.get(k) if k is not None else None
    return hit[1] if hit is not None and hit[0] is spec else None


def store(k: tuple[Any, ...], spec: object, plan: object) -> None:
    """Remember a plan (a Triton launch) for the geometry key ``k``."""
    if len(_PLANS) >= _MAX:
        _PLANS.clear()
    _PLANS[k] = (spec, plan)


def build(
    k: tuple[Any, ...] | None,
    spec: object,
    q: torch.Tensor,
    kt: torch.Tensor | None,
    cos_b: torch.Tensor,
    sin_b: torch.Tensor,
    r: int,
    layout: str,
    inplace: bool,
) -> cpu_backend.Plan | None:
    """A plan for validated arguments (cos_b/sin_b: the broadcast tables), or None if the kernel does not apply."""
    if k is None or (kt is not None and kt.dtype != q.dtype):
        return None
    if not cpu_backend.plannable(q, cos_b, sin_b) or (
        kt is not None and not cpu_backend.plannable(kt, cos_b, sin_b)
    ):
        return None
    plan = cpu_backend.Plan(q, kt, cos_b, r, layout, inplace)
    if len(_PLANS) >= _MAX:
        _PLANS.clear()
    _PLANS[k] = (spec, plan)  # the spec object is kept alive, so its id cannot be reused while the key lives
    return plan


# ---------------------------------------------------------------- apply_rope: validated calls and shared tables
_APPLY: dict[tuple[Any, ...], tuple[object, Any]] = {}


def apply_key(
    q: torch.Tensor,
    k: torch.Tensor | None,
    positions: torch.Tensor,
    spec: object,
    fmt: str,
    inplace: bool,
    backend: str,
) -> tuple[Any, ...] | None:
    """Key of an apply_rope call with integer positions, or None when it cannot take the fast path (as for
    :func:`key`, also for an ``inplace`` that is not a bool)."""
    if inplace is not True and inplace is not False:
        return None
    try:
        if positions.dtype not in INT_DTYPES or (
            torch.is_grad_enabled() and (q.requires_grad or (k is not None and k.requires_grad))
        ):
            return None
        return (
            id(spec),
            fmt,
            inplace,
            backend,
            q.dtype,
            q.device,
            q.shape,
            q.stride(),
            _k_geometry(q, k),
            positions.dtype,
            positions.shape,
            positions.stride(),
            positions.device,
        )
    except (AttributeError, TypeError, RuntimeError):
        return None


def apply_lookup(k: tuple[Any, ...] | None, spec: object) -> tuple[Any] | None:
    """The plan stored for this call geometry; it expects float32 [*P, n] row views of the packed table cache
    (:func:`ropekit.table_cache.is_row_view`), which is what :func:`shared_tables` returns."""
    hit = _APPLY.get(k) if k is not None else None
    return (hit[1],) if hit is not None and hit[0] is spec else None


def apply_store(k: tuple[Any, ...] | None, spec: object, plan: cpu_backend.Plan, cos: torch.Tensor) -> None:
    """Remember ``plan`` for the call key ``k`` if it was built for row views of the packed table cache (what
    every later cache read returns; tables computed past the cache's limit are contiguous and not remembered)."""
    if k is None or not is_row_view(cos) or not isinstance(plan, cpu_backend.Plan):
        return
    if len(_APPLY) >= _MAX:
        _APPLY.clear()
    _APPLY[k] = (spec, plan)


def apply_store_plan(k: tuple[Any, ...], spec: object, plan: object) -> None:
    """Remember a Triton launch at positions (``plan.from_pos``: it reads the positions itself, no tables)."""
    if len(_APPLY) >= _MAX:
        _APPLY.clear()
    _APPLY[k] = (spec, plan)


def run_cached(
    plan: cpu_backend.Plan,
    q: torch.Tensor,
    k: torch.Tensor | None,
    cache: TableCache,
    positions: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor | None] | None:
    """A stored plan (built on row views of a table cache) run on the rows of ``cache`` at ``positions`` [*P]
    (CPU, read flat): the kernel reads the rows in place when the positions are contiguous int64 and all cached,
    else one gather of the rows (growing the cache if needed); None when a position is outside [0, limit) or the
    cache's rows are not on the CPU (a module moved to meta after the plan was stored), for the caller's checked
    slow path. Bit-identical to passing the cache's row views as tables (the same rows are read)."""
    rows = cache.rows
    if not rows.is_cpu:  # moved to meta (or CUDA) since the plan was stored: the caller's checked path
        return None
    if positions.dtype == torch.int64 and positions.is_contiguous():
        got = plan.call_gather(q, k, rows, positions)
        if got is not None:
            return got
    packed = cache.packed_rows(positions.reshape(-1))  # grows the cache, or None past its limit
    return None if packed is None else plan.call_packed(q, k, packed)

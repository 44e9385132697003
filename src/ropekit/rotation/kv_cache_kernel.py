# SPDX-License-Identifier: MIT
"""The C side of :mod:`ropekit.rotation.kv_cache`: the kernel call and its prepared plans for decoding.

The first call with a given geometry (shapes, strides, dtypes and devices of k, v, the caches, q, the tables --
or the integer positions -- and the index tensor; the spec) is validated in full by :mod:`ropekit.rotation.kv_cache`
and leaves a plan: the kernel's parameter block and the memory span of every tensor. Later calls with the same
geometry only check what a geometry cannot fix -- every slot/offset value (in C), and that the caches do not overlap
the other tensors at their current addresses -- and then make the one kernel call. With positions (given, or the
default ``offsets[b] + s``) the kernel reads the rows of the spec's exact shared cache at each token's position
(``CW_TB`` in ``kernels/rope_cache_write.h``; positions checked in C before anything is written): bit-identical to
the validated call's tables, which are row views of that cache. Anything unusual (a bad value, an overlap, a new
geometry, autograd -- k, v, a cache or q requiring grad with grad mode on) falls back to the full path, which
validates and raises the usual error. Every kernel write bumps the version counters of cache_k, cache_v and q
(torch does not see writes through raw pointers), so a tensor saved by an autograd node and then written here
makes that node's backward raise torch's "modified by an inplace operation" error, as a torch in-place op does.

Shapes: as in :mod:`ropekit.rotation.kv_cache` (all tensors seen as bshd views; caches [B or blocks, rows, H, D]).
"""

from __future__ import annotations

import ctypes
from typing import Any

import torch

from ropekit.kernels import cpu_build
from ropekit.phases import INT_DTYPES
from ropekit.rotation import cpu_backend
from ropekit.rotation.cpu_backend import bump_versions
from ropekit.spec import RopeSpec
from ropekit.table_cache import TableCache, is_row_view, shared_cache

__all__ = ["fast_write", "kernel_write", "plan_key", "use_kernel"]

_FN = {
    torch.float32: "ropekit_cache_write_f32",
    torch.bfloat16: "ropekit_cache_write_bf16",
    torch.float16: "ropekit_cache_write_f16",
}
_MAX_PLANS = 64
_PLANS: dict[tuple[Any, ...], _Plan] = {}


class _Plan:
    __slots__ = ("a", "b", "cache", "fn", "mode", "n_index", "params", "spans", "work")

    def __init__(self, fn: Any, params: list[int], spans: list[int], mode: int, n_index: int, a: int, b: int):
        self.fn, self.mode, self.n_index, self.spans = fn, mode, n_index, spans
        self.cache: TableCache | None = None  # positions plans: the kernel reads the exact rows from here
        self.params = (ctypes.c_int64 * len(params))(*params)
        self.a, self.b = a, b  # mode 0: (S, rows); mode 1: (capacity, unused)
        self.work = params[0] * params[1] * (params[2] * (params[4] + params[5]) + params[3] * params[4])


def use_kernel(*xs: torch.Tensor | None) -> bool:
    ts = [x for x in xs if x is not None]
    return (
        not torch.compiler.is_compiling()  # ctypes does not trace: the PyTorch path in a compiled graph
        and all(x.device.type == "cpu" and x.stride(-1) == 1 for x in ts)
        and ts[0].dtype in _FN
        and cpu_build.load() is not None
    )


def _span(x: torch.Tensor) -> int:
    n = 1
    for size, st in zip(x.shape, x.stride(), strict=True):
        n += (size - 1) * abs(st)
    return n * x.element_size()


def plan_key(
    kind: str,
    k: object,
    v: object,
    cache_k: object,
    cache_v: object,
    index: object,
    q: object,
    positions: object,
    tables: object,
    spec: RopeSpec,
) -> tuple[Any, ...] | None:
    """The prepared-plan arguments of a call (the key is :func:`_key` of them), or None when it cannot have one:
    tables given, or integer positions (given, or the default offsets[b] + s) read from the exact shared cache."""
    if not isinstance(index, torch.Tensor) or torch.compiler.is_compiling():
        return None
    if tables is not None and positions is None:
        return (kind, k, v, cache_k, cache_v, index, q, tables, spec)
    if tables is None and (
        positions is None or (isinstance(positions, torch.Tensor) and positions.dtype in INT_DTYPES)
    ):
        return (
            kind,
            k,
            v,
            cache_k,
            cache_v,
            index,
            q,
            ("positions", positions),
            spec,
        )  # positions None: the default
    return None


def _key(args: tuple[Any, ...]) -> tuple[Any, ...] | None:
    kind, k, v, ck, cv, idx, q, tables, spec = args
    if not (isinstance(tables, tuple) and len(tables) == 2):
        return None
    by_pos = isinstance(tables[0], str)
    parts: list[Any] = [kind, spec, q is None, by_pos, by_pos and tables[1] is None]
    for x in (k, v, ck, cv, idx, *((tables[1],) if by_pos else tables), q):
        if x is None:
            continue
        if not isinstance(x, torch.Tensor):
            return None
        parts += (x.shape, x.stride(), x.dtype, x.device, x.requires_grad)
    return tuple(parts)


def fast_write(args: tuple[Any, ...]) -> bool:
    """Write through a prepared plan when one fits (True), else leave everything to the full path (False)."""
    if not _PLANS:
        return False
    key = _key(args)
    plan = _PLANS.get(key) if key is not None else None
    _, k, v, ck, cv, idx, q, tables, _ = args
    if plan is None:
        return False
    if torch.is_grad_enabled() and (
        k.requires_grad
        or v.requires_grad
        or ck.requires_grad
        or cv.requires_grad
        or (
            q is not None and q.requires_grad
        )  # q is rotated in place: checked on every call, as k, v, caches
    ):  # the full path refuses a tensor in an autograd graph with its ValueError
        return False
    lib = cpu_build.load()
    if lib is None:
        return False
    bad = ctypes.c_int64(0)
    if plan.mode == 1:
        rc = lib.ropekit_check_slots(idx.data_ptr(), plan.n_index, plan.a, ctypes.byref(bad))
    else:
        rc = lib.ropekit_check_offsets(idx.data_ptr(), plan.n_index, plan.a, plan.b, ctypes.byref(bad))
    if rc:
        return False
    ts = (ck, cv, k, v, idx, q) if q is not None else (ck, cv, k, v, idx)
    ranges = [(t.data_ptr(), t.data_ptr() + s) for t, s in zip(ts, plan.spans, strict=False)]
    for i in (0, 1):
        a0, a1 = ranges[i]
        for j in range(i + 1, len(ranges)):
            if a0 < ranges[j][1] and ranges[j][0] < a1:
                return False
    if q is not None:  # q is rotated in place and k, v must not change: the full path decides (exactly)
        q0, q1 = ranges[5]
        if any(q0 < ranges[j][1] and ranges[j][0] < q1 for j in (2, 3)):
            return False
    plan.params[27] = cpu_backend.threads_for(2 * plan.work, k.dtype)
    ptrs = (k.data_ptr(), v.data_ptr(), ck.data_ptr(), cv.data_ptr(), q.data_ptr() if q is not None else None)
    written = (ck, cv) if q is None else (ck, cv, q)
    if not isinstance(tables[0], str):
        plan.fn(*ptrs, tables[0].data_ptr(), tables[1].data_ptr(), idx.data_ptr(), None, 0, plan.params)
        bump_versions(written)  # written through raw pointers: as a torch in-place op does
        return True
    # positions: the kernel reads the exact cache rows at them (checked in C before anything is written)
    if plan.cache is None:
        return False
    tpos = None if tables[1] is None else tables[1].data_ptr()

    def call(
        rows: torch.Tensor,
    ) -> int:  # rows: held while the kernel reads them, whatever another thread grows
        sin_ptr = (
            rows.data_ptr() + rows.element_size() * rows.shape[-1]
        )  # a row's sin, n floats after its cos
        return int(plan.fn(*ptrs, rows.data_ptr(), sin_ptr, idx.data_ptr(), tpos, rows.shape[0], plan.params))

    if plan.cache.grown_call(call) != 0:  # nothing written: the full path, exact tables for these positions
        return False
    bump_versions(written)
    return True


def _table_strides(t: torch.Tensor) -> tuple[int, int]:
    """Element strides of a [.., n] table over (b, s) after broadcasting to [B, S, n] (0 where broadcast)."""
    pad = 3 - t.dim()
    st = [0] * pad + list(t.stride())
    sz = [1] * pad + list(t.shape)
    return (0 if sz[0] == 1 else st[0]), (0 if sz[1] == 1 else st[1])


def kernel_write(
    kb: torch.Tensor,
    vb: torch.Tensor,
    ckb: torch.Tensor,
    cvb: torch.Tensor,
    qb: torch.Tensor | None,
    cos: torch.Tensor,
    sin: torch.Tensor,
    index: torch.Tensor,
    bs_shape: tuple[int, int],
    mode: int,
    block_size: int,
    spec: RopeSpec,
    plan_args: tuple[Any, ...] | None = None,
) -> None:
    """The C kernel (arguments validated by the caller); leaves a plan for ``plan_args`` when it can."""
    plannable = plan_args is not None and plan_args[5] is index and index.is_contiguous()
    by_pos = plannable and plan_args is not None and isinstance(plan_args[7][0], str)
    if by_pos and not is_row_view(cos):  # positions plans read cache rows: only a call that read them plans
        plannable = False
    if cos.shape != sin.shape:  # one geometry for both: broadcast them against each other
        nd = max(cos.dim(), sin.dim())
        a, b = [1] * (nd - cos.dim()) + list(cos.shape), [1] * (nd - sin.dim()) + list(sin.shape)
        shape = [max(x, y) for x, y in zip(a, b, strict=True)]
        cos, sin, plannable = cos.expand(shape), sin.expand(shape), False
    if cos.stride(-1) != 1 or sin.stride() != cos.stride():
        cos, sin, plannable = cos.contiguous(), sin.contiguous(), False
    B, S = bs_shape
    index = index.contiguous()
    qs = list(qb.stride()[:3]) if qb is not None else [0, 0, 0]
    work = kb.numel() + vb.numel() + (qb.numel() if qb is not None else 0)
    p = [
        B,
        S,
        kb.shape[2],
        qb.shape[2] if qb is not None else 0,
        kb.shape[3],
        vb.shape[3],
        *kb.stride()[:3],
        *vb.stride()[:3],
        *qs,
        *ckb.stride()[:3],
        *cvb.stride()[:3],
        *_table_strides(cos),
        mode,
        block_size,
        int(spec.rotary_dim or spec.head_dim),
        int(spec.layout == "interleaved"),
        cpu_backend.threads_for(2 * work, kb.dtype),
        0,  # table mode 0: the tables given, by their strides (a positions plan sets 1 or 2 below)
        0,
        0,
    ]
    fn = getattr(cpu_build.load(), _FN[kb.dtype])
    fn(
        kb.data_ptr(),
        vb.data_ptr(),
        ckb.data_ptr(),
        cvb.data_ptr(),
        qb.data_ptr() if qb is not None else None,
        cos.data_ptr(),
        sin.data_ptr(),
        index.data_ptr(),
        None,
        0,
        (ctypes.c_int64 * len(p))(*p),
    )
    bump_versions((ckb, cvb) if qb is None else (ckb, cvb, qb))  # raw-pointer writes: tell autograd
    if plannable and plan_args is not None and (key := _key(plan_args)) is not None:
        if len(_PLANS) >= _MAX_PLANS:
            _PLANS.clear()
        spans = [_span(t) for t in (ckb, cvb, kb, vb, index) + ((qb,) if qb is not None else ())]
        lim = (block_size * ckb.shape[0], 0) if mode == 1 else (S, ckb.shape[1])
        if by_pos:  # later calls: the kernel reads the cache rows at the positions (CW_TB)
            pos = plan_args[7][1]
            if pos is None:
                p[28:31] = [1, 0, 0]  # the default positions offsets[b] + s
            elif pos.dtype == torch.int64:
                p[28:31] = [2, *_table_strides(pos.unsqueeze(-1))]
            else:
                return
        plan = _Plan(fn, p, spans, mode, index.numel(), *lim)
        if by_pos:
            plan.cache = shared_cache(spec, kb.device)
            if plan.cache is None:
                return
        _PLANS[key] = plan

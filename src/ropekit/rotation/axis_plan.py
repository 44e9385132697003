# SPDX-License-Identifier: MIT
"""Repeated multi-axis calls on the CPU in one C call: :func:`ropekit.apply_rope_axes` without a table pass.

M-RoPE (Wang et al. 2024, "Qwen2-VL", arXiv 2409.12191) and axial 2-D RoPE (Heo et al. 2024) turn band j of a
token at the position of its axis ``slots[j]``. The first validated call with a given geometry stores the 1-D
plan of the same call (:class:`ropekit.rotation.cpu_backend.Plan`, built on row views of the spec's shared exact
cache, as :func:`ropekit.apply_rope` does); a later call with an equal key makes one C call
(``ropekit_plan_axes_*``) in which the kernel reads each token's row from the cache at its position, or, when its
axes are at different positions (image and video tokens), the row blended from its axes' rows by a pre-pass over
those tokens only (``axis_blend`` and ``table_row`` in ``kernels/rope_cpu.c``). The rows read are the ones
:func:`ropekit.axis_tables.axis_tables` gathers, so the result is bit-identical to the tables path; no [N, n]
tables are written for text tokens and no equality test of the axes runs in Python.

Shapes: A axes, P the token shape of the call ([s], [b, s] or [t]), N = prod(P), n bands.
    positions [A, *P] int64 -> read as [A, N]; slots [n] int64; cache rows [L, 2, n] float32
"""

from __future__ import annotations

from typing import Any

import torch

from ropekit.axis_gather import slots as band_slots
from ropekit.rotation import cpu_backend, fastpath
from ropekit.rotation.apply import _broadcast_table
from ropekit.spec import RopeSpec
from ropekit.table_cache import TableCache, shared_cache

__all__ = ["remember", "run_planned"]

#: floats of blended rows the kernel keeps on its stack (kernels/rope_cpu.c: AXIS_STACK_FLOATS); larger calls
#: pass a scratch tensor
STACK_FLOATS = 8192
#: the kernel's limits (kernels/rope_cpu.c: GATHER_MAX_AXES, GATHER_MAX_N); specs past them are never planned
MAX_AXES, MAX_BANDS = 8, 256

#: call key (fastpath.apply_key of the multi-axis call) -> (spec, plan, cache, slots); the spec is held, so its id
#: cannot be reused while the entry lives
_PLANS: dict[tuple[Any, ...], tuple[RopeSpec, cpu_backend.Plan, TableCache, torch.Tensor]] = {}
_MAX = 64


def run_planned(
    q: torch.Tensor,
    k: torch.Tensor | None,
    positions: torch.Tensor,
    spec: RopeSpec,
    fmt: str,
    inplace: bool,
    backend: str,
) -> tuple[torch.Tensor, torch.Tensor | None] | None:
    """The call through a stored plan (its geometry validated before), or None: no plan for this key, or a
    position the kernel cannot read (negative, past the cache's limit); the caller then validates and rotates."""
    if not isinstance(q, torch.Tensor) or q.device.type != "cpu" or torch.compiler.is_compiling():
        return None
    akey = fastpath.apply_key(q, k, positions, spec, fmt, inplace, backend)
    hit = _PLANS.get(akey) if akey is not None else None
    if hit is None or hit[0] is not spec:
        return None
    _, plan, cache, slots = hit
    flat = positions.view(positions.shape[0], -1)  # the key holds: int64, contiguous, CPU (see remember)
    n_tok = flat.shape[1]
    scratch = None if n_tok * 2 * slots.shape[0] <= STACK_FLOATS else torch.empty(n_tok, 2 * slots.shape[0])
    done: list[tuple[torch.Tensor, torch.Tensor | None]] = []

    def call(rows: torch.Tensor) -> int:
        got = plan.call_axes(q, k, rows, flat, slots, scratch)
        if isinstance(got, int):
            return got
        done.append(got)
        return 0

    return done[0] if cache.grown_call(call) == 0 else None  # None: a negative position, or one past the limit


def remember(
    q: torch.Tensor,
    k: torch.Tensor | None,
    positions: torch.Tensor,
    row: torch.Tensor,
    spec: RopeSpec,
    one: RopeSpec,
    fmt: str,
    inplace: bool,
    backend: str,
) -> None:
    """After a validated call: store the 1-D plan of its geometry for :func:`run_planned` when the C kernel can
    take it (CPU, int64 contiguous positions, float32/bfloat16/float16 q and k of one dtype, no autograd, backend
    "auto" or "cpu"). ``row``: the validated positions of axis 0 in the token shape the call rotates ([s], [b, s]
    or [t]); ``one``: the spec without its axes."""
    if (
        backend not in ("auto", "cpu")
        or spec.axes is None
        or spec.axes.n_axes > MAX_AXES
        or spec.n_bands > MAX_BANDS
        or torch.compiler.is_compiling()
        or positions.device.type != "cpu"
        or positions.dtype != torch.int64
        or not positions.is_contiguous()
        or not cpu_backend.supports(q)
        or (k is not None and (k.dtype != q.dtype or not cpu_backend.supports(k)))
    ):
        return
    akey = fastpath.apply_key(q, k, positions, spec, fmt, inplace, backend)
    cache = shared_cache(one, q.device)
    if akey is None or cache is None or akey in _PLANS:
        return
    views = cache.lookup(row)  # row views of the cache: the geometry every later call's rows are read in
    if views is None:
        return
    cos, sin = views
    tkey = fastpath.key(q, k, cos, sin, one, fmt, inplace, backend)
    plan = fastpath.build(
        tkey, one, q, k, _broadcast_table(cos, fmt), _broadcast_table(sin, fmt), 2 * one.n_bands, one.layout, inplace
    )
    if plan is None:
        return
    if len(_PLANS) >= _MAX:
        _PLANS.clear()
    _PLANS[akey] = (spec, plan, cache, band_slots(spec, q.device))

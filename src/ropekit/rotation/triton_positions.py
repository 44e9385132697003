# SPDX-License-Identifier: MIT
"""Rotation at integer positions read on the device: exact rows with no host sync (Triton, CUDA).

The position kernels (``FROM_POS`` in :mod:`ropekit.rotation.triton_kernels`) read each token's position and take
its float32 cos/sin row from the spec's immutable exact table when 0 <= p < :data:`DEVICE_ROWS`, else compute it
exactly in float64 (the split of :func:`ropekit.reduction.reduced_turns`). Nothing is read on the host, so
:func:`ropekit.apply_rope`, :class:`ropekit.Rotary` and :func:`ropekit.apply_rope_varlen` on CUDA make one launch
that a CUDA graph can capture, and :func:`exact_tables` (``rope_tables`` on CUDA) is one launch. The table is built
once per (spec, device) and never resized: a captured graph never points at freed memory.

Multi-axis specs (``spec.axes``: M-RoPE, Wang et al. 2024, "Qwen2-VL"; axial 2-D RoPE, Heo et al. 2024) use the
same kernels: positions [A, ...] hold one row per axis and band j reads the row of its axis (``AXES`` in
:mod:`ropekit.rotation.triton_kernels`); the table is the one of the same spec without axes (same frequencies).

Shapes: q, k [b, s, h, d] (or [t, h, d]); positions [b or 1, s] ([t]), multi-axis [A, b or 1, s] ([A, s], [A, t]);
rows [L, 2, n]; consts [9, n]; slots [n] int32.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from ropekit.rotation import triton_backend as _tb
from ropekit.rotation import triton_kernels as _k

if TYPE_CHECKING:
    from ropekit.spec import RopeSpec

__all__ = [
    "DEVICE_ROWS",
    "band_slots",
    "device_rows",
    "exact_tables",
    "positions_ok",
    "positions_plan",
    "rotate_qk_positions",
]

#: rows of the immutable per-(spec, device) table the position kernels read; positions past it are computed
#: exactly on the fly (float64). 8 MiB for 64 bands.
DEVICE_ROWS = 16384
#: the tables, one per distinct spec (by equality) and device, kept for the life of the process: never freed or
#: resized, so a captured CUDA graph never reads a freed table
_TABLES: dict[tuple[RopeSpec, torch.device], tuple[torch.Tensor, torch.Tensor]] = {}
#: per spec object, the same tables without hashing the spec on every call (references only: clearing it frees nothing)
_BY_ID: dict[tuple[int, torch.device], tuple[RopeSpec, torch.Tensor, torch.Tensor]] = {}


def _flat(spec: RopeSpec) -> RopeSpec:
    """The spec without its axis map (same frequencies, phase map and factor): the table a multi-axis spec reads."""
    return spec if spec.axes is None else getattr(spec, "_one_axis")  # noqa: B009 (set in RopeSpec.__post_init__)


#: int32 [n] axis of each band, per multi-axis spec and device; kept for the life of the process (CUDA graphs)
_SLOTS: dict[tuple[RopeSpec, torch.device], torch.Tensor] = {}


def band_slots(spec: RopeSpec, device: torch.device) -> torch.Tensor:
    """int32 [n]: the axis each band of a multi-axis spec reads (``spec.axes.slots``) on ``device``."""
    assert spec.axes is not None
    key = (spec, device)
    hit = _SLOTS.get(key)
    if hit is None:
        hit = _SLOTS[key] = torch.tensor(spec.axes.slots, dtype=torch.int32, device=device)
    return hit


def device_rows(spec: RopeSpec, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """(rows [L, 2, n] float32 exact, consts [9, n] float64) of a static spec on ``device``, built once per
    distinct spec and device (a multi-axis spec reads the table of the same spec without axes)."""
    spec = _flat(spec)
    key = (id(spec), device)
    hit = _BY_ID.get(key)
    if hit is not None and hit[0] is spec:
        return hit[1], hit[2]
    tables = _TABLES.get((spec, device))
    if tables is None:
        tables = _TABLES[(spec, device)] = _build(spec, device)
    if len(_BY_ID) >= 256:
        _BY_ID.clear()
    _BY_ID[key] = (spec, *tables)
    return tables


def _build(spec: RopeSpec, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    from ropekit.phases import _rope_tables, band_constant_tensor

    n = spec.n_bands
    base = band_constant_tensor(spec, None, device)
    extra = torch.tensor(
        [[spec.attention_factor], [2 * 3.141592653589793]], dtype=torch.float64, device=device
    )
    consts = torch.cat((base, extra.expand(2, n)), dim=0).contiguous()
    cos, sin = _rope_tables(torch.arange(DEVICE_ROWS, device=device), spec)
    rows = torch.stack((cos, sin), dim=1).contiguous()
    return rows, consts


def positions_ok(positions: torch.Tensor, spec: RopeSpec) -> bool:
    """The position kernels take integer positions of a static spec (float positions and dynamic scaling go
    through the host tables)."""
    return (
        not spec.dynamic and positions.dtype in (torch.int64, torch.int32) and positions.device.type == "cuda"
    )


def rotate_qk_positions(
    q: torch.Tensor,
    k: torch.Tensor | None,
    positions: torch.Tensor,
    spec: RopeSpec,
    inplace: bool,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """One launch for q and k ([b, s, h, d] or [t, h, d]) at integer positions [b or 1, s] ([t] for thd),
    validated by the caller. Rows: the spec's exact table, or exact float64 on the fly past its end."""
    return positions_plan(q, k, positions, spec, inplace)[0]


def positions_plan(
    q: torch.Tensor,
    k: torch.Tensor | None,
    positions: torch.Tensor,
    spec: RopeSpec,
    inplace: bool,
) -> tuple[tuple[torch.Tensor, torch.Tensor | None], _tb.Plan | None]:
    """:func:`rotate_qk_positions`, and the :class:`Plan` that repeats it (None: out of place with
    pass-through channels). A multi-axis spec takes positions [A, ...] (one row per axis)."""
    rows, consts = device_rows(spec, q.device)
    r = 2 * spec.n_bands
    qo, ko = _tb._outputs(q, k, r, inplace)
    pos, slots, t_sa = positions, None, 0
    if spec.axes is not None:
        pos, slots, t_sa = positions[0], band_slots(spec, q.device), positions.stride(0)
    if pos.dim() == 1:
        t_sb, t_ss = 0, pos.stride(0)
    else:
        t_sb = 0 if pos.shape[0] == 1 else pos.stride(0)
        t_ss = pos.stride(1)
    plan = _tb.Plan(
        q, k, qo, ko, t_sb, t_ss, spec.n_bands, spec.layout, 1, True, rows, consts, inplace, slots, t_sa
    )
    plan.launch(q, k, qo, ko, pos, pos, rows, consts)
    return (qo, ko), plan if _tb._repeatable(q, k, qo, ko, r, inplace) else None


def exact_tables(positions: torch.Tensor, spec: RopeSpec) -> tuple[torch.Tensor, torch.Tensor]:
    """float32 (cos, sin) [*P, n] of integer positions on a CUDA device in one launch, no host sync; equal to
    :func:`ropekit.rope_tables` to within one float32 rounding. A multi-axis spec takes positions [A, *P] (band j
    at axis ``spec.axes.slots[j]``, as :func:`ropekit.axis_tables`)."""
    if positions.is_cuda and positions.device.index != torch.cuda.current_device():
        with torch.cuda.device(positions.device):  # Triton launches on the current device
            return exact_tables(positions, spec)
    rows, consts = device_rows(spec, positions.device)
    n = spec.n_bands
    axes = spec.axes is not None
    flat = (positions.reshape(positions.shape[0], -1) if axes else positions.reshape(-1)).contiguous()
    count = flat.shape[-1]
    slots = band_slots(spec, positions.device) if axes else consts  # not read without AXES
    cos = torch.empty((count, n), dtype=torch.float32, device=positions.device)
    sin = torch.empty_like(cos)
    if count:
        bt = 4
        _k.tables_kernel[(-(-count // bt),)](
            flat, cos, sin, rows, consts, slots, rows.shape[0], count, N=n, BLOCK_N=_tb._pow2(n), BLOCK_T=bt,
            AXES=axes,
        )  # fmt: skip
    shape = (*(positions.shape[1:] if axes else positions.shape), n)
    return cos.view(shape), sin.view(shape)

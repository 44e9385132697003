# SPDX-License-Identifier: MIT
"""The multi-axis side of :class:`ropekit.Rotary`: per-token tables gathered from the module's exact 1-D cache and
remembered across a model's layers (:mod:`ropekit.axis_memo`), then one rotation of the given tables.

On CUDA the module does not come here: :func:`ropekit.apply_rope_axes` makes one Triton launch that reads every
band's axis position itself (:mod:`ropekit.rotation.triton_positions`). M-RoPE: Wang et al. 2024, "Qwen2-VL",
arXiv 2409.12191; axial 2-D RoPE: Heo et al. 2024, arXiv 2403.13298.

Shapes: A axes, P any position shape, n bands; positions [A, *P] -> cos, sin [*P, n].
"""

from __future__ import annotations

import torch

from ropekit.axis_gather import gather_bands as _gather_bands
from ropekit.axis_memo import _MEMO, _stamp, memo_hit
from ropekit.axis_tables import axis_tables, check_axes_shape, check_axis_positions
from ropekit.rotation.apply import apply_rope_tables
from ropekit.spec import RopeSpec

__all__ = ["cached_axis_tables", "rotary_forward_axes"]


def rotary_forward_axes(
    rotary: torch.nn.Module, q: torch.Tensor, k: torch.Tensor | None, positions: torch.Tensor, inplace: bool
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """:class:`ropekit.Rotary`'s forward for a multi-axis spec: per-axis rows from its cache, then selection."""
    spec: RopeSpec = rotary.spec  # type: ignore[assignment]
    fmt: str = rotary.format  # type: ignore[assignment]
    memo = memo_hit(rotary, positions)
    pos = memo[3] if memo is not None else check_axis_positions(positions, spec)
    if not isinstance(q, torch.Tensor) or q.dim() != (3 if fmt == "thd" else 4):
        shape = tuple(q.shape) if isinstance(q, torch.Tensor) else type(q).__name__
        raise ValueError(f"q must be a {3 if fmt == 'thd' else 4}-D tensor for format={fmt!r}, got {shape}")
    check_axes_shape(pos, q, fmt)
    if memo is not None:
        cos, sin = memo[4], memo[5]
    else:
        checked = pos
        if fmt != "thd" and pos.dim() == 3 and pos.shape[1] == 1:
            pos = pos[:, 0]
        cos, sin = cached_axis_tables(rotary, pos, spec)
        stamp = _stamp(positions)
        if stamp is not None:
            rotary.__dict__[_MEMO] = (positions, stamp, rotary.inv_freq.device, checked, cos, sin)
    cos, sin = cos.to(q.device), sin.to(q.device)
    return apply_rope_tables(q, k, cos, sin, spec, format=fmt, inplace=inplace)  # type: ignore[arg-type]


def cached_axis_tables(
    rotary: torch.nn.Module, pos: torch.Tensor, spec: RopeSpec
) -> tuple[torch.Tensor, torch.Tensor]:
    """[A, *P] -> [*P, n] from the module's exact 1-D cache: one gather of every band's row (the work of a 1-D
    lookup). Positions the cache cannot serve (float, negative, beyond its limit) take the exact banded path."""
    assert spec.axes is not None
    dev: torch.device = rotary.inv_freq.device  # type: ignore[assignment]
    if (
        pos.dtype.is_floating_point
        or pos.numel() == 0
        or dev.type == "meta"
        or pos.device.type == "meta"
        or dev.type == "cuda"  # one Triton launch reads each band's axis position (no host sync)
        or torch.compiler.is_compiling()  # traced: the gather reads the growing cache (host syncs, C call)
    ):  # meta positions give meta tables (shapes only): a meta call of a module that lives on the CPU
        return axis_tables(pos, spec, device="meta" if pos.device.type == "meta" else dev)
    cache = getattr(rotary, "_cache", None)  # ropekit.table_cache.TableCache: rows [L, 2, n], exact
    hit = _gather_bands(cache, pos.to(dev), spec) if hasattr(cache, "rows") else None
    return hit if hit is not None else axis_tables(pos, spec, device=dev)  # still exact without the cache

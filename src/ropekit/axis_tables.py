# SPDX-License-Identifier: MIT
"""Exact multi-axis cos/sin tables and the ``apply_rope``-level entry point for multi-axis positions.

A multi-axis spec (``RopeSpec.axes``, :mod:`ropekit.axes`) turns band j by ``pos[a(j)] * theta_j``. The tables
are the exact 1-D tables of :mod:`ropekit.phases` (exact reduction over the whole int64 range, shared cache for
integer positions) at each axis's positions, with band j gathered from axis ``a(j)``: each entry is bit-identical
to the 1-D table at that band's axis position (tested against :func:`ropekit.rope_tables`). Float32 tables of
integer positions are one gather of every band's row from the spec's exact 1-D cache (:mod:`ropekit.axis_gather`);
float positions, float64 tables and positions past the cache cost one 1-D table per axis plus a selection. The
result has the 1-D shape [*P, n], so every rotation backend (torch, fused CPU, Triton) rotates it unchanged:
multi-axis RoPE needs no new rotation path. On CUDA, integer positions of a static spec skip the tables: the 1-D
position kernels read each band's axis position themselves (an axis map in the same launch,
:mod:`ropekit.rotation.triton_positions`; no host sync, so a CUDA graph can capture it). M-RoPE: Wang et al.
2024, "Qwen2-VL", arXiv 2409.12191; 2-D: Heo et al. 2024, arXiv 2403.13298.

Shapes: A axes, P any position shape, n = rotary_dim // 2 bands.
    positions [A, *P] (integer or float32/float64) -> cos, sin [*P, n]
"""

from __future__ import annotations

from typing import Any, cast

import torch

from ropekit.axis_gather import gather_bands as _gather_bands
from ropekit.axis_memo import _fresh, _stamp
from ropekit.phases import _check_meta_device, check_positions, rope_tables
from ropekit.rotation import axis_plan, fastpath
from ropekit.rotation.apply import apply_rope, apply_rope_tables
from ropekit.rotation.apply_checks import FORMATS, Format, _batch_seq, shape_hint, shape_in
from ropekit.rotation.apply_checks import _validate as validate
from ropekit.rotation.autograd import transforms_active
from ropekit.rotation.dispatch import device_tables, fused_positions
from ropekit.spec import RopeSpec, check_seq_len
from ropekit.table_cache import shared_cache

__all__ = [
    "apply_rope_axes",
    "axis_tables",
    "check_axes_shape",
    "check_axis_positions",
    "equal_axes_row",
    "select_axes",
]


def check_axis_positions(positions: object, spec: RopeSpec, name: str = "positions") -> torch.Tensor:
    """Validate [A, *P] positions for a multi-axis spec and return them (raises before computing anything)."""
    if not isinstance(spec, RopeSpec):
        raise TypeError(f"spec must be a ropekit.RopeSpec, got {type(spec).__name__}")
    if spec.axes is None:
        raise ValueError(
            "spec has no axes (a 1-D spec); use ropekit.apply_rope / rope_tables, or give the spec an AxisMap"
        )
    pos = check_positions(positions, name)
    a = spec.axes.n_axes
    if pos.dim() < 1 or pos.shape[0] != a:
        raise ValueError(
            f"{name} must have shape [n_axes={a}, ...] with rows {spec.axes.names} for this spec, "
            f"got {tuple(pos.shape)}"
        )
    return pos


def select_axes(per_axis: torch.Tensor, spec: RopeSpec) -> torch.Tensor:
    """[A, *P, n] per-axis tables -> [*P, n]: band j taken from axis ``spec.axes.slots[j]``."""
    assert spec.axes is not None
    slots = torch.tensor(spec.axes.slots, dtype=torch.int64, device=per_axis.device)
    idx = slots.expand(*per_axis.shape[1:]).unsqueeze(0)  # [1, *P, n]
    return per_axis.gather(0, idx).squeeze(0)


def axis_tables(
    positions: torch.Tensor,
    spec: RopeSpec,
    *,
    seq_len: int | None = None,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact cos/sin tables for multi-axis positions.

    Args:
        positions: [A, *P] integer or float32/float64 positions, row a = axis ``spec.axes.names[a]``
            (e.g. t, h, w). Float rows are continuous positions (timestamps, V2PE fractional steps); float positions
            that require grad give tables differentiable in them (:mod:`ropekit.positions_grad`).
        spec: a spec with ``axes``.
        seq_len: current sequence length for dynamic phase maps (default: the largest position + 1, over all
            axes, so every axis uses the same frequencies).
        dtype: float32 (default) or float64.
        device: where the tables go (default: the positions' device).

    Returns:
        (cos, sin), each [*P, n] of ``dtype``, times ``spec.attention_factor``.

    Raises:
        ValueError, TypeError: naming the argument (no axes, wrong leading dimension, bad positions, a ``seq_len``
            that is neither None nor an int >= 1, also for a static spec, as :func:`ropekit.rope_tables`; positions
            on the meta device with a ``device`` that is not meta: meta positions have no values, so only
            shape-only meta tables can be made from them, as :func:`ropekit.rope_tables`).
    """
    if isinstance(positions, torch.Tensor) and positions.requires_grad:
        from ropekit.positions_grad import position_grad_tables  # float positions that require grad

        return position_grad_tables(positions, spec, seq_len=seq_len, dtype=dtype, device=device)
    seq_len = check_seq_len(seq_len)  # a traced symbolic length stays symbolic
    pos = check_axis_positions(positions, spec)
    _check_meta_device(pos, device)  # meta positions have no values: meta tables only, as rope_tables
    if dtype not in (torch.float32, torch.float64):
        raise ValueError(f"axis_tables dtype must be torch.float32 or torch.float64, got {dtype}")
    if spec.dynamic and seq_len is None and pos.numel() and pos.device.type != "meta":
        seq_len = int(pos.max().item()) + 1
    out_device = torch.device(device) if device is not None else pos.device
    n = spec.n_bands
    if out_device.type == "meta" or pos.device.type == "meta":
        shape = (*pos.shape[1:], n)
        return torch.empty(shape, dtype=dtype, device="meta"), torch.empty(shape, dtype=dtype, device="meta")
    flat = _one_axis(spec)
    if (
        dtype == torch.float32
        and pos.numel()
        and not pos.dtype.is_floating_point
        and not torch.compiler.is_compiling()
        and not transforms_active()  # the cache gathers read the positions' memory, which torch.func wraps
    ):
        if out_device.type == "cuda":  # one Triton launch reads each band's axis position: no host sync
            got = device_tables(pos.to(out_device), spec)
            if got is not None:
                return got
        # integer positions: every band's row gathered from the exact 1-D cache in one pass (bit-identical: the
        # rows rope_tables returns), not three axes' tables cut apart and stacked
        cache = shared_cache(flat, out_device)
        hit = None if cache is None else _gather_bands(cache, pos.to(out_device), spec)
        if hit is not None:
            return hit
    per_axis = [
        rope_tables(pos[a], flat, seq_len=seq_len if spec.dynamic else None, dtype=dtype, device=out_device)
        for a in range(pos.shape[0])
    ]  # each [*P, n]: the exact 1-D tables (shared cache for integer rows) at that axis's positions
    cos = select_axes(torch.stack([c for c, _ in per_axis]), spec)
    sin = select_axes(torch.stack([s for _, s in per_axis]), spec)
    return cos, sin


def _one_axis(spec: RopeSpec) -> RopeSpec:
    """The same spec without its axis map: same frequencies, phase map, factor and layout (made by RopeSpec)."""
    return cast(RopeSpec, getattr(spec, "_one_axis"))  # noqa: B009 (set in __post_init__, not a field)


def apply_rope_axes(
    q: torch.Tensor,
    k: torch.Tensor | None,
    positions: torch.Tensor,
    spec: RopeSpec,
    *,
    format: Format = "bshd",
    inplace: bool = False,
    backend: str = "auto",
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Rotate q and k by multi-axis RoPE: :func:`ropekit.apply_rope` with positions [A, ...].

    Args:
        q, k: as :func:`ropekit.apply_rope` (k may be None).
        positions: [A, s] (shared by the batch) or [A, b, s] ([A, t] for "thd"); integer or float32/float64.
            For the 4-row ``[text; t; h; w]`` form of Qwen3-VL / ERNIE pass ``position_ids[1:]``. Float positions
            that require grad are differentiated (d phase / dp = theta, :mod:`ropekit.positions_grad`).
        spec: a spec with ``axes`` (A = ``spec.axes.n_axes``).
        format, inplace, backend: as :func:`ropekit.apply_rope`.

    Returns:
        (q_rot, k_rot), like :func:`ropekit.apply_rope`.

    Raises:
        TypeError, ValueError: naming the argument, before any tensor is modified (also positions on the meta
            device, which have no values, with q not on meta: only a meta q takes meta positions, as
            :func:`ropekit.apply_rope`).
    """
    if isinstance(positions, torch.Tensor) and positions.requires_grad:
        from ropekit.positions_grad import apply_rope_position_grad  # float positions that require grad

        return apply_rope_position_grad(
            q, k, positions, spec, format=format, inplace=inplace, backend=backend
        )
    need64 = (isinstance(q, torch.Tensor) and q.dtype == torch.float64) or (
        isinstance(k, torch.Tensor) and k.dtype == torch.float64
    )
    # the planned paths call kernels on raw pointers: never traced, not for dual tensors or under torch.func
    # (apply_rope_tables then rotates those with differentiable PyTorch ops)
    eager_fast = not torch.compiler.is_compiling() and not transforms_active()
    planned_ok = (
        eager_fast
        and not need64
        and isinstance(spec, RopeSpec)
        and spec.axes is not None
        and isinstance(positions, torch.Tensor)
    )
    if planned_ok and isinstance(q, torch.Tensor) and q.device.type == "cuda":
        on_device = _on_device(q, k, positions, spec, format, inplace, backend)
        if on_device is not None:
            return on_device
    if planned_ok:
        # a geometry validated before (CPU): one C call reads or blends every token's rows from the cache
        planned = axis_plan.run_planned(q, k, positions, spec, format, inplace, backend)
        if planned is not None:
            return planned
    # the memo keeps a NumPy copy of the positions, which torch.func's wrappers cannot give: not under transforms
    memo = _last_call(positions, spec, q, need64) if eager_fast else None
    if memo is not None:  # the same unchanged positions tensor as the last call: its tables and validated row
        if format not in FORMATS:
            raise ValueError(f"format must be one of {FORMATS}, got {format!r}")
        _check_q_dim(q, format)
        check_axes_shape(positions, q, format)
        cos, sin = memo[5], memo[6]
    else:
        cos, sin = _tables_for_call(q, positions, spec, format, need64, remember=eager_fast)
    if cos is None:
        # every axis at the same position (text tokens, every decoding step): exactly plain RoPE at ``sin`` (the
        # positions row), through apply_rope's own 1-D path (its cached rows read in the kernel, its decode plans)
        out = apply_rope(q, k, sin, _one_axis(spec), format=format, inplace=inplace, backend=backend)
    else:
        out = apply_rope_tables(q, k, cos, sin, spec, format=format, inplace=inplace, backend=backend)
    if memo is None and planned_ok:
        # the call passed every check (positions above, q and k in the rotation): the next call with this geometry
        # takes the planned path, which checks nothing. Only now: a plan stored before a refused call would let the
        # same bad call through unchecked the next time (a wrong head_dim then read past q's memory).
        axis_plan.remember(
            q, k, positions, _token_row(positions, format), spec, _one_axis(spec), format, inplace, backend
        )
    return out


def _on_device(
    q: torch.Tensor,
    k: torch.Tensor | None,
    positions: torch.Tensor,
    spec: RopeSpec,
    fmt: str,
    inplace: bool,
    backend: str,
) -> tuple[torch.Tensor, torch.Tensor | None] | None:
    """CUDA: one Triton launch in which every band reads its own axis's integer position (no tables, no host
    sync, so a CUDA graph can capture it; repeated geometries skip the checks); None where it does not apply
    (float positions, dynamic scaling, autograd, no Triton), after the checks, and the caller goes on."""
    akey = fastpath.apply_key(q, k, positions, spec, fmt, inplace, backend)
    hit = fastpath.apply_lookup(akey, spec)
    if hit is not None and getattr(hit[0], "from_pos", False):
        planned: tuple[torch.Tensor, torch.Tensor | None] = hit[0](q, k, positions, positions)
        return planned
    pos = check_axis_positions(positions, spec)
    if fmt not in FORMATS:
        raise ValueError(f"format must be one of {FORMATS}, got {fmt!r}")
    _check_q_dim(q, fmt)
    _check_meta_positions(pos, q)
    check_axes_shape(pos, q, fmt)
    validate(q, k, None, _one_axis(spec), fmt, inplace, backend)  # q, k, inplace and backend, as apply_rope
    return fused_positions(q, k, pos, spec, fmt, inplace, backend, akey)


def _token_row(positions: torch.Tensor, fmt: str) -> torch.Tensor:
    """Axis 0 of validated positions in the token shape the rotation reads ([A, 1, s] read as [A, s])."""
    pos = positions[:, 0] if fmt != "thd" and positions.dim() == 3 and positions.shape[1] == 1 else positions
    return pos[0]


def _check_meta_positions(positions: torch.Tensor, q: torch.Tensor) -> None:
    """Meta positions have no values to rotate q by: only a meta q (shape inference) may take them, as
    :func:`ropekit.apply_rope`."""
    if positions.device.type == "meta" and q.device.type != "meta":
        raise ValueError(f"positions are on the meta device (no values) but q is on {q.device}")


def _check_q_dim(q: object, fmt: str) -> None:
    if not isinstance(q, torch.Tensor) or q.dim() != (3 if fmt == "thd" else 4):
        shape = tuple(q.shape) if isinstance(q, torch.Tensor) else type(q).__name__
        raise ValueError(f"q must be a {3 if fmt == 'thd' else 4}-D tensor for format={fmt!r}, got {shape}")


def check_axes_shape(positions: torch.Tensor, q: torch.Tensor, fmt: str) -> None:
    """Positions [A, ...] (leading dimension validated) must be [A, s] or [A, b, s] ([A, t] for "thd") for q of the
    given format; the message names the multi-axis shapes, as the caller passed them."""
    a = positions.shape[0]
    b, s = _batch_seq(q, fmt)
    # dim by dim under torch.compile (symbolic sizes: see shape_in)
    if not shape_in(positions.shape, ((a, s), (a, 1, s), (a, b, s)) if fmt != "thd" else ((a, s),)):
        want = f"({a}, {s})" if fmt == "thd" else f"({a}, {s}) or ({a}, {b}, {s})"
        raise ValueError(
            f"positions must have shape {want} for q of shape {tuple(q.shape)}, got {tuple(positions.shape)}"
            + shape_hint(tuple(positions.shape), q, None, fmt, n_lead=1)
        )


def _tables_for_call(
    q: torch.Tensor, positions: torch.Tensor, spec: RopeSpec, fmt: str, need64: bool, remember: bool = True
) -> tuple[torch.Tensor | None, torch.Tensor]:
    """Validate an :func:`apply_rope_axes` call's positions and build its tables (remembered in the memo when
    ``remember``); (None, the positions row) when every axis holds the same positions (the caller then rotates by
    plain RoPE)."""
    pos = check_axis_positions(positions, spec)
    if fmt not in FORMATS:
        raise ValueError(f"format must be one of {FORMATS}, got {fmt!r}")
    _check_q_dim(q, fmt)
    _check_meta_positions(pos, q)
    check_axes_shape(pos, q, fmt)
    row0 = pos[0]
    if fmt != "thd" and pos.dim() == 3 and pos.shape[1] == 1:
        pos = pos[:, 0]
    same = equal_axes_row(pos, spec)
    cos: torch.Tensor | None
    if same is not None:  # every axis at the same position: plain RoPE at ``same`` (bit-identical)
        cos, sin = None, same
    else:  # integer positions: one gather from the cache apply_rope's 1-D path reads too (inside axis_tables)
        cos, sin = axis_tables(pos, spec, dtype=torch.float64 if need64 else torch.float32, device=q.device)
    stamp = _stamp(positions) if remember else None
    if stamp is not None:
        _LAST_CALL[0] = (positions, stamp, spec, (q.device, need64), row0, cos, sin)
    return cos, sin


#: the last call of apply_rope_axes: (positions, version, spec, (device, float64), row 0 of the validated positions,
#: cos, sin); a model's layers pass the same positions tensor, so only the first layer builds tables
_LAST_CALL: list[tuple[Any, ...] | None] = [None]


def _last_call(positions: object, spec: RopeSpec, q: object, need64: bool) -> tuple[Any, ...] | None:
    """The tables of the last :func:`apply_rope_axes` call if it had this very, unchanged positions tensor, the
    same spec and q's device and precision (:func:`_fresh`)."""
    memo = _LAST_CALL[0]
    if not isinstance(q, torch.Tensor) or not _fresh(memo, positions):
        return None
    assert memo is not None
    return memo if memo[3] == (q.device, need64) and (memo[2] is spec or memo[2] == spec) else None


def equal_axes_row(positions: torch.Tensor, spec: RopeSpec) -> torch.Tensor | None:
    """Row 0 of validated positions [A, *P] when every axis holds the same positions, else None.

    Then every band turns at that one position: the rotation is exactly the 1-D one (same frequencies, same
    rows of the exact tables), so callers take the 1-D path and its decode fast path. One comparison and one
    host sync; never under ``torch.compile`` or a vmap over the positions (returns None there: no data-dependent
    branch).
    """
    pos = check_axis_positions(positions, spec)
    if pos.shape[0] == 1:
        return pos[0]
    if pos.numel() == 0 or pos.device.type == "meta" or torch.compiler.is_compiling():
        return None
    if transforms_active() and torch._C._functorch.is_batchedtensor(pos):  # vmap over positions: no branch
        return None  # on its values; the tables path serves every batch entry
    if pos.device.type == "cpu" and not transforms_active():  # in numpy: ~3 us against ~9 for three torch ops
        a = pos.numpy()
        return pos[0] if bool((a[1:] == a[:1]).all()) else None
    return pos[0] if bool((pos[1:] == pos[:1]).all()) else None

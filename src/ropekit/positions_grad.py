# SPDX-License-Identifier: MIT
"""Gradients with respect to float positions: learned or continuous coordinates (timestamps, learned offsets).

The phase of band i is ``phi_i(p) = p * theta_i`` (every phase map of :mod:`ropekit.scaling` is written on the
frequencies: ``theta_i`` is the spec's scaled float64 frequency, so ``g(p) = p`` and ``g'(p) = 1``; a dynamic map's
frequencies are a step function of the largest position, constant between steps, so they carry no gradient). The
exact reduction of :mod:`ropekit.reduction` subtracts whole turns, a piecewise-constant function of p, so

    d phi_i / d p = theta_i        d cos_i / d p = -theta_i sin_i       d sin_i / d p = theta_i cos_i

(times ``spec.attention_factor``, which multiplies cos and sin). The tables here have the exact reduced phases of
:func:`ropekit.rope_tables` / :func:`ropekit.axis_tables` (computed with PyTorch ops, as :mod:`ropekit.phases`) and
that derivative:
``angle = reduced(p) + (p - p.detach()) * theta``, whose second term is exactly 0.0 in value and ``theta`` in
gradient (reverse mode, forward mode and ``torch.func`` alike). The rotation is then :func:`ropekit.apply_rope_tables`,
which differentiates tables that require grad on every backend.

Entry points: :func:`position_grad_tables` (tables) and :func:`apply_rope_position_grad` (rotation); the public
functions route float positions that require grad here: :func:`ropekit.axis_tables` and
:func:`ropekit.apply_rope_axes` (so :func:`ropekit.apply_rope` with a multi-axis spec).

Shapes: P any position shape, A axes, n = rotary_dim // 2 bands. positions [*P] (1-D spec) or [A, *P] (multi-axis
spec) -> cos, sin [*P, n].
"""

from __future__ import annotations

import math

import torch

from ropekit.axis_tables import _check_q_dim, _one_axis, check_axes_shape, check_axis_positions, select_axes
from ropekit.phases import _check_meta_device, band_constant_tensor, check_positions
from ropekit.reduction import reduced_turns
from ropekit.rotation.apply import apply_rope_tables
from ropekit.rotation.apply_checks import FORMATS, Format, _validate
from ropekit.spec import RopeSpec, check_seq_len, require_spec

__all__ = ["apply_rope_position_grad", "position_grad_tables", "wants_position_grad"]

_TWO_PI = 2.0 * math.pi


def wants_position_grad(positions: object) -> bool:
    """Whether ``positions`` is a tensor that requires grad (only float tensors can): the callers then route to
    this module (under ``torch.no_grad`` too, where it computes the same values and records nothing)."""
    return isinstance(positions, torch.Tensor) and positions.requires_grad


def _tables_1d(
    pos: torch.Tensor, spec: RopeSpec, seq_len: int | None, dtype: torch.dtype, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos/sin [*P, n] of a 1-D spec at checked positions [*P]: exact values, derivative theta (module docstring)."""
    work = torch.device("cpu") if device.type == "mps" else device  # float64 math, as ropekit.phases
    p64 = pos.to(work, torch.float64)
    fixed = p64.detach()
    consts = band_constant_tensor(spec, seq_len, work)
    theta = spec.frequencies(
        seq_len, device=work
    )  # [n] float64: the frequencies the constants were made from
    with torch.autocast(device_type=work.type, enabled=False):
        exact = reduced_turns(fixed, consts) * _TWO_PI  # [*P, n], within ~3e-15 rad of p * theta mod 2 pi
        angle = exact + (p64 - fixed).unsqueeze(-1) * theta  # value: exact (+ 0.0); gradient: theta
        cos, sin = torch.cos(angle), torch.sin(angle)
    factor = spec.attention_factor
    if factor != 1.0:
        cos, sin = cos * factor, sin * factor
    return cos.to(device=device, dtype=dtype), sin.to(device=device, dtype=dtype)


def position_grad_tables(
    positions: torch.Tensor,
    spec: RopeSpec,
    *,
    seq_len: int | None = None,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact cos/sin tables that are differentiable with respect to float positions.

    Args:
        positions: float32/float64 positions (they may require grad): [*P] for a 1-D spec, [A, *P] for a
            multi-axis spec (row a = axis ``spec.axes.names[a]``). Integer positions are accepted too (no gradient).
        spec, seq_len, dtype, device: as :func:`ropekit.rope_tables` / :func:`ropekit.axis_tables`.

    Returns:
        (cos, sin), each [*P, n] of ``dtype``: the exact phases of :func:`ropekit.rope_tables` (multi-axis:
        :func:`ropekit.axis_tables`) at the detached positions (cos / sin by PyTorch), with ``d cos / dp = -theta sin`` and
        ``d sin / dp = theta cos`` per band (band j of a multi-axis spec: with respect to its axis's row).

    Raises:
        TypeError, ValueError: as those functions, naming the argument (the value rules of
            :func:`ropekit.phases.check_positions` are checked on the detached positions).
    """
    spec = require_spec(spec)
    seq_len = check_seq_len(seq_len)
    if dtype not in (torch.float32, torch.float64):
        raise ValueError(f"dtype must be torch.float32 or torch.float64, got {dtype}")
    if not isinstance(positions, torch.Tensor):
        check_positions(positions)  # the TypeError naming positions
    fixed = positions.detach()
    if spec.axes is not None:
        check_axis_positions(fixed, spec)
    else:
        check_positions(fixed)
    _check_meta_device(positions, device)
    if fixed.device.type == "meta":
        raise ValueError("positions are on the meta device (no values): there is nothing to differentiate")
    if spec.dynamic and seq_len is None and fixed.numel():
        seq_len = int(fixed.max().item()) + 1  # as rope_tables / axis_tables: over every axis
    out = torch.device(device) if device is not None else positions.device
    if spec.axes is None:
        return _tables_1d(positions, spec, seq_len, dtype, out)
    flat = _one_axis(spec)  # same frequencies, phase map and factor, no axis map
    per_axis = [_tables_1d(positions[a], flat, seq_len, dtype, out) for a in range(positions.shape[0])]
    cos = select_axes(torch.stack([c for c, _ in per_axis]), spec)
    sin = select_axes(torch.stack([s for _, s in per_axis]), spec)
    return cos, sin


def apply_rope_position_grad(
    q: torch.Tensor,
    k: torch.Tensor | None,
    positions: torch.Tensor,
    spec: RopeSpec,
    *,
    format: Format = "bshd",
    inplace: bool = False,
    backend: str = "auto",
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """:func:`ropekit.apply_rope` (multi-axis: :func:`ropekit.apply_rope_axes`) differentiable with respect to
    float positions: every argument as there, checked before anything is computed or written; the rotation is
    :func:`ropekit.apply_rope_tables` with the tables of :func:`position_grad_tables` (float64 for a float64 q or
    k, else float32).

    Shapes: positions [s] or [b, s] ([t] for "thd"); multi-axis [A, s] or [A, b, s] ([A, t]).
    """
    spec = require_spec(spec)
    if not isinstance(positions, torch.Tensor):
        check_positions(positions)  # the TypeError naming positions
    fixed = positions.detach()
    if spec.axes is not None:
        check_axis_positions(fixed, spec)
        if format not in FORMATS:
            raise ValueError(f"format must be one of {FORMATS}, got {format!r}")
        _check_q_dim(q, format)
        check_axes_shape(fixed, q, format)
        _validate(q, k, None, _one_axis(spec), format, inplace, backend)
    else:
        _validate(q, k, fixed, spec, format, inplace, backend)
    need64 = q.dtype == torch.float64 or (k is not None and k.dtype == torch.float64)
    cos, sin = position_grad_tables(
        positions, spec, dtype=torch.float64 if need64 else torch.float32, device=q.device
    )
    if format != "thd" and cos.dim() == 3 and cos.shape[0] == 1:  # positions [1, s] / [A, 1, s]: shared rows
        cos, sin = cos[0], sin[0]
    return apply_rope_tables(q, k, cos, sin, spec, format=format, inplace=inplace, backend=backend)

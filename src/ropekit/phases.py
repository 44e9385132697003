# SPDX-License-Identifier: MIT
"""Exact phases: cos and sin of phi_i(p) = p * theta_i at any position.

The common recipe (HF transformers, Megatron, TransformerEngine, torchtune) forms ``p * theta_i`` in float32.
Both the float32 rounding of theta_i and of the product cost about half an ulp of the angle, so the phase error
grows linearly with the position: ~7e-3 rad at 1e5, ~6e-2 at 1e6, ~0.8 at 1e7
(``docs/precision.md`` has the measured table). ropekit instead

1. converts positions to float64 (exact for integers below 2^53; float32 timestamps convert exactly),
2. multiplies by float64 frequencies elementwise (never a matmul, so TF32 and autocast cannot touch it),
3. reduces the angle modulo 2*pi in float64,
4. takes cos and sin in float64, multiplies by the attention factor, and rounds once to float32.

The float32 tables are then within ~3e-8 of the true values at every position up to 2^24 and beyond, at a one-off
cost of O(positions x bands) float64 operations. Devices without float64 (Apple MPS) compute on the CPU.

Shapes: P any position shape, n = rotary_dim // 2 bands.
"""

from __future__ import annotations

import math

import torch

from ropekit.spec import RopeSpec

__all__ = ["INT_DTYPES", "check_positions", "rope_tables"]

_TWO_PI = 2.0 * math.pi
INT_DTYPES = (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8)
_INT_DTYPES = INT_DTYPES
_EXACT_FLOAT_DTYPES = (torch.float32, torch.float64)
_UNIQUE_THRESHOLD = 4096  # above this many integer positions, tables are built once per distinct position


def check_positions(positions: object, name: str = "positions") -> torch.Tensor:
    """Validate a positions argument and return it; raises before anything is computed.

    Accepted: integer tensors, and float32/float64 tensors of finite values (continuous positions such as
    time-series timestamps). Refused: bool, float16/bfloat16 (they cannot represent positions above 256 or 2048
    exactly -- rotary-embedding-torch's bug, pitfalls item 50), complex, non-finite values, and positions that
    require grad (ropekit does not differentiate with respect to positions).
    """
    if not isinstance(positions, torch.Tensor):
        raise TypeError(
            f"{name} must be a torch.Tensor of integer or float32/float64 positions, got {type(positions).__name__}"
        )
    dt = positions.dtype
    if dt not in _INT_DTYPES and dt not in _EXACT_FLOAT_DTYPES:
        hint = (
            " (low-precision floats cannot represent most positions exactly: pass integers or float32/float64)"
            if dt in (torch.float16, torch.bfloat16)
            else ""
        )
        raise ValueError(f"{name} must have an integer or float32/float64 dtype, got {dt}{hint}")
    if positions.requires_grad:
        raise ValueError(
            f"{name} requires grad, but ropekit does not differentiate with respect to positions"
        )
    if (
        dt in _EXACT_FLOAT_DTYPES
        and positions.device.type != "meta"
        and positions.numel()
        and not torch.compiler.is_compiling()
    ) and not bool(torch.isfinite(positions).all()):
        bad = positions[~torch.isfinite(positions)].flatten()[0].item()
        raise ValueError(f"{name} must be finite, found {bad!r}")
    return positions


def _compute_device(device: torch.device) -> torch.device:
    return torch.device("cpu") if device.type == "mps" else device


def _tables_from_angles(
    pos64: torch.Tensor, freqs64: torch.Tensor, factor: float, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    angle = pos64.unsqueeze(-1) * freqs64  # [*P, n] float64, elementwise (no matmul: no TF32/autocast)
    angle = torch.remainder(angle, _TWO_PI)
    cos, sin = torch.cos(angle), torch.sin(angle)
    if factor != 1.0:
        cos, sin = cos * factor, sin * factor
    return cos.to(dtype), sin.to(dtype)


def rope_tables(
    positions: torch.Tensor,
    spec: RopeSpec,
    *,
    seq_len: int | None = None,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact cos/sin tables for the given positions.

    Args:
        positions: [*P] integer or float32/float64 positions (see :func:`check_positions`).
        spec: the RoPE spec (frequencies, phase map, attention factor).
        seq_len: current sequence length for dynamic phase maps (default: max position + 1).
        dtype: float32 (default) or float64 tables.
        device: where the tables go (default: the positions' device).

    Returns:
        (cos, sin), each [*P, n] of ``dtype``, already multiplied by ``spec.attention_factor``.
    """
    check_positions(positions)
    return _rope_tables(positions, spec, seq_len=seq_len, dtype=dtype, device=device)


def _rope_tables(
    positions: torch.Tensor,
    spec: RopeSpec,
    *,
    seq_len: int | None = None,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`rope_tables` for positions the caller has already checked (no second scan, no extra sync)."""
    if dtype not in _EXACT_FLOAT_DTYPES:
        raise ValueError(f"rope_tables dtype must be torch.float32 or torch.float64, got {dtype}")
    out_device = torch.device(device) if device is not None else positions.device
    n = spec.n_bands
    if out_device.type == "meta" or positions.device.type == "meta":
        shape = (*positions.shape, n)
        return (
            torch.empty(shape, dtype=dtype, device="meta"),
            torch.empty(shape, dtype=dtype, device="meta"),
        )
    if spec.dynamic and seq_len is None and positions.numel():
        seq_len = int(positions.max().item()) + 1
    work = _compute_device(out_device)
    freqs = spec.frequencies(seq_len, device=work)
    factor = spec.attention_factor
    with torch.autocast(device_type=work.type, enabled=False):
        pos = positions.to(work)
        if pos.dtype in _INT_DTYPES and pos.numel() > _UNIQUE_THRESHOLD and not torch.compiler.is_compiling():
            uniq, inverse = torch.unique(pos, return_inverse=True)
            cos, sin = _tables_from_angles(uniq.to(torch.float64), freqs, factor, dtype)
            cos, sin = cos[inverse], sin[inverse]
        else:
            cos, sin = _tables_from_angles(pos.to(torch.float64), freqs, factor, dtype)
    return cos.to(out_device), sin.to(out_device)

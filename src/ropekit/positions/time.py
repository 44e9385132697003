# SPDX-License-Identifier: MIT
"""Continuous positions: float timestamps (irregular time series) and V2PE fractional steps.

ropekit takes float32/float64 positions on any axis and forms the angle ``p * theta`` in float64, reduced mod 2*pi
(:mod:`ropekit.phases`), so a real-valued position needs no integer cast. The phase of band i is then accurate to
about ``|p| * theta_i * 2^-53`` rad plus the float64 rounding of p itself: below 1e-9 rad for ``|p| <= 1e6`` and
below 1e-8 rad for ``|p| <= 1e7`` at the highest frequency (theta_0 = 1). Absolute times (Unix seconds ~1.7e9)
must be re-referenced first (``reference=``): the subtraction happens here in float64 (multiaxis.md 9.3).

- :func:`time_positions`: ``(t - t_ref) / scale`` in float64, e.g. ``scale`` = seconds per position unit
  (Qwen2.5-VL's ``tokens_per_second`` is ``scale = 1 / tps``).
- :func:`v2pe_positions`: text advances by 1, visual tokens by ``delta`` (Ge et al. 2024, "V2PE", arXiv
  2412.09616): token i of a visual run sits at ``cur + i * delta`` and the token after the run at
  ``ceil(cur + n * delta)`` (with ``delta = 1`` this is plain 1-D positions).

Shapes: N tokens.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

__all__ = ["time_positions", "v2pe_positions"]

_F32_EXACT = float(1 << 24)  # float32 spacing exceeds 1 beyond this


def time_positions(
    timestamps: torch.Tensor | Sequence[float],
    *,
    reference: float | None = None,
    scale: float = 1.0,
) -> torch.Tensor:
    """Float64 positions ``(t - reference) / scale`` from timestamps.

    Args:
        timestamps: [*P] float64 or integer timestamps (a list is read as float64). float32 is accepted only
            below 2^24 in magnitude: beyond, float32 cannot even hold whole seconds and the input is already
            rounded (pass float64 or int64).
        reference: subtracted first (in float64); default the first timestamp (so the result starts at 0).
        scale: time per position unit (> 0).

    Returns:
        float64 [*P].

    Raises:
        ValueError: naming the argument (non-finite values, bad scale, lossy float32 input).
    """
    t = timestamps if isinstance(timestamps, torch.Tensor) else torch.tensor(timestamps, dtype=torch.float64)
    if t.dtype in (torch.float16, torch.bfloat16) or t.dtype == torch.bool or t.is_complex():
        raise ValueError(f"timestamps must be float64, float32 or integer, got {t.dtype}")
    if t.dtype == torch.float32 and t.numel() and float(t.abs().max()) >= _F32_EXACT:
        raise ValueError(
            f"timestamps are float32 with magnitude up to {float(t.abs().max()):.6g} >= 2^24, where float32 "
            "spacing exceeds 1: pass float64 or int64 timestamps"
        )
    t = t.to(torch.float64)
    if t.numel() and not bool(torch.isfinite(t).all()):
        raise ValueError("timestamps must be finite")
    if (
        isinstance(scale, bool)
        or not isinstance(scale, (int, float))
        or not (math.isfinite(scale) and scale > 0)
    ):
        raise ValueError(f"scale must be a finite number > 0, got {scale!r}")
    if reference is None:
        ref = float(t.reshape(-1)[0]) if t.numel() else 0.0
    elif (
        isinstance(reference, bool) or not isinstance(reference, (int, float)) or not math.isfinite(reference)
    ):
        raise ValueError(f"reference must be a finite number or None, got {reference!r}")
    else:
        ref = float(reference)
    return (t - ref) / float(scale)


def v2pe_positions(segments: Sequence[tuple[str, int]], delta: float, *, start: float = 0.0) -> torch.Tensor:
    """V2PE positions for a sequence of ("text", n) and ("visual", n) runs.

    Args:
        segments: runs in order; kind "text" or "visual", n >= 0 tokens.
        delta: the visual step, in (0, 1] (V2PE: ``rope_pos_id_stride / num_image_token``).
        start: position of the first token.

    Returns:
        float64 [N].

    Example:
        >>> v2pe_positions([("text", 2), ("visual", 4), ("text", 1)], 0.25).tolist()
        [0.0, 1.0, 2.0, 2.25, 2.5, 2.75, 3.0]
    """
    if isinstance(delta, bool) or not isinstance(delta, (int, float)) or not 0.0 < delta <= 1.0:
        raise ValueError(f"delta must be a number in (0, 1], got {delta!r}")
    cur = float(start)
    out: list[float] = []
    for seg in segments:
        if not (isinstance(seg, tuple) and len(seg) == 2 and seg[0] in ("text", "visual")):
            raise ValueError(f"segments must be ('text' | 'visual', n) pairs, got {seg!r}")
        kind, n = seg
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ValueError(f"segment length must be a non-negative int, got {n!r} in {seg!r}")
        if kind == "text":
            out.extend(cur + i for i in range(n))
            cur += n
        else:
            out.extend(cur + i * delta for i in range(n))
            cur = float(math.ceil(cur + n * delta))
    return torch.tensor(out, dtype=torch.float64)

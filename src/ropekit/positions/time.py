# SPDX-License-Identifier: MIT
"""Continuous positions: float timestamps (irregular time series) and V2PE fractional steps.

ropekit takes float32/float64 positions on any axis and reduces the angle ``p * theta`` modulo 2*pi exactly
(:mod:`ropekit.reduction`: the integer part of p through the exact int64 split, the fraction with one float64
rounding), so a real-valued position needs no integer cast: the phase is within ~1e-15 rad of ``p * theta`` for the
float64 value p holds, at any magnitude below 2^63. What limits a timestamp is how exactly p itself holds it (float64
spacing is 2.4e-7 s at Unix seconds ~1.7e9), so absolute times are best re-referenced first (``reference=``): the subtraction happens here, in float64 for float timestamps and
exactly in int64 for integer ones (int64 nanoseconds ~1.7e18 are past float64's 2^53).

- :func:`time_positions`: ``(t - t_ref) / scale`` as float64, e.g. ``scale`` = seconds per position unit
  (Qwen2.5-VL's ``tokens_per_second`` is ``scale = 1 / tps``); by default each row starts at its own first (valid,
  ``mask=``) timestamp; NumPy datetime64 / timedelta64 are read as int64 nanoseconds.
- :func:`v2pe_positions`: text advances by 1, visual tokens by ``delta`` (Ge et al. 2024, "V2PE", arXiv
  2412.09616): the k-th token of a visual run (k = 1 .. n) sits at ``last + k * delta``, ``last`` being the
  position of the token before the run, and the token after the run at ``ceil(last + n * delta) + 1`` (with
  ``delta = 1`` this is plain 1-D positions).

Shapes: N tokens.
"""

from __future__ import annotations

import math
import numbers
import warnings
from collections.abc import Sequence

import numpy as np
import torch

from ropekit.integers import whole

__all__ = ["time_positions", "v2pe_positions"]

_F32_EXACT = float(1 << 24)  # float32 spacing exceeds 1 beyond this
_F64_STEP = 1 << 53  # float64 spacing exceeds 1 from here
_I64_MIN, _I64_MAX = -(1 << 63), (1 << 63) - 1


def _check_real_start(start: object) -> float:
    """``start`` of float64 positions as a float: a finite real number (not bool) below 2^53 in magnitude."""
    if isinstance(start, bool) or not isinstance(start, numbers.Real):
        raise TypeError(f"start must be a finite real number, got {start!r} ({type(start).__name__})")
    v = int(start) if isinstance(start, numbers.Integral) else float(start)
    if isinstance(v, float) and not math.isfinite(v):
        raise ValueError(f"start must be a finite real number, got {start!r}")
    if abs(v) >= _F64_STEP:
        raise ValueError(
            f"start must be below 2^53 in magnitude (float64 positions past it cannot step by 1), got {start!r}"
        )
    return float(v)


def _check_steps(out: torch.Tensor, name: str) -> torch.Tensor:
    """Refuse float64 positions that reached 2^53, where consecutive integers (and finer steps) merge."""
    if out.numel() and float(out.abs().max()) >= _F64_STEP:
        raise ValueError(
            f"{name} positions reach {float(out.abs().max()):.17g} >= 2^53, where float64 cannot step by 1: "
            "use a smaller start or fewer tokens"
        )
    return out


def _read_timestamps(timestamps: object) -> torch.Tensor:
    """A tensor as given; a NumPy array in its own dtype (a float32 array keeps float32, so its rounding is seen);
    a (nested) sequence as NumPy reads it: int64 when it holds only ints (exact), float64 for Python floats, and
    the narrowest type that holds NumPy scalars (float32 scalars stay float32)."""
    if isinstance(timestamps, torch.Tensor):
        return timestamps
    try:
        arr = np.asarray(timestamps)
        if arr.dtype.kind in "mM":  # datetime64 / timedelta64 (pandas, polars): int64 nanoseconds
            ns = arr.astype("datetime64[ns]" if arr.dtype.kind == "M" else "timedelta64[ns]")
            if np.isnat(ns).any():
                raise ValueError(
                    "timestamps hold NaT (not a time): pass a mask= of the valid entries instead"
                )
            return torch.from_numpy(np.ascontiguousarray(ns.view(np.int64)))
        if arr.dtype.kind not in "biuf":  # object (ints past int64, ragged lists), strings, complex, ...
            raise TypeError(f"NumPy reads it as dtype {arr.dtype}")
        return torch.from_numpy(np.ascontiguousarray(arr))
    except (TypeError, ValueError, RuntimeError, OverflowError) as e:
        raise ValueError(
            f"timestamps must be a tensor or a sequence of numbers that fit int64 / float64, got a "
            f"{type(timestamps).__name__} that torch cannot read ({e})"
        ) from None


def time_positions(
    timestamps: torch.Tensor | Sequence[float],
    *,
    reference: float | None = None,
    scale: float = 1.0,
    mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """Float64 positions ``(t - reference) / scale`` from timestamps.

    Args:
        timestamps: [*P] float64 or integer timestamps (a list of ints is read as int64, any other list as
            float64). float32 is accepted only below 2^24 in magnitude: beyond, float32 cannot even hold whole
            seconds and the input is already rounded (pass float64 or int64).
        reference: subtracted first: from integer timestamps exactly, in int64, before the conversion to
            float64 (a fractional part of the reference after it); from float timestamps in float64. Default:
            the first (valid) timestamp of each sequence, i.e. along the last dimension, so every row of a
            [b, s] batch starts at 0 (rows far apart on the clock keep their own resolution: RoPE only reads
            differences within a sequence).
        mask: optional bool [*P], True for real timestamps: padded entries (any value, NaN or NaT included) are
            left out of the checks and of the default reference, and come out as 0.0.
        scale: time per position unit (> 0).

    A NumPy ``datetime64`` / ``timedelta64`` array is read as int64 nanoseconds (``scale=1e9`` gives seconds).

    Returns:
        float64 [*P]. For integer timestamps the difference is exact and rounded once to float64 (exact when
        below 2^53 in magnitude), so int64 nanoseconds keep every nanosecond after re-referencing; a difference
        past 2^53 is rounded with a warning naming it (eagerly).

    Raises:
        ValueError: naming the argument (non-finite values, bad scale, lossy float32 input, an integer difference
            ``timestamps - reference`` outside int64).

    Traceable by ``torch.compile(fullgraph=True)`` for tensor timestamps (a list or NumPy array is read on the
    host): the value checks then run on the device when the graph runs (``torch._assert_async``: a RuntimeError
    stating the same rule, without the data-dependent values the eager message names; no host sync), and the
    values are those of the eager call. Checks of the Python arguments (``scale``, ``reference``) still raise
    while tracing.

    Example:
        >>> ns = torch.tensor([1_700_000_000_000_000_000, 1_700_000_000_123_456_789])
        >>> time_positions(ns, scale=1e9).tolist()  # int64 ns -> seconds since the first timestamp
        [0.0, 0.123456789]
    """
    t = _read_timestamps(timestamps)
    if t.dtype in (torch.float16, torch.bfloat16) or t.dtype == torch.bool or t.is_complex():
        raise ValueError(f"timestamps must be float64, float32 or integer, got {t.dtype}")
    traced = torch.compiler.is_compiling()  # value checks as device asserts: no host sync, no graph break
    if mask is not None:
        if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool or mask.shape != t.shape:
            got = (
                f"{mask.dtype} {tuple(mask.shape)}" if isinstance(mask, torch.Tensor) else type(mask).__name__
            )
            raise ValueError(
                f"mask must be a bool tensor of the timestamps' shape {tuple(t.shape)}, got {got}"
            )
        t = torch.where(mask.to(t.device), t, torch.zeros((), dtype=t.dtype, device=t.device))  # padding: 0
    if t.dtype == torch.float32 and t.numel():
        if traced:
            torch._assert_async(
                (~(t.abs() >= _F32_EXACT)).all(),  # nan passes here, as eagerly: the finite check names it
                "timestamps are float32 with magnitude >= 2^24, where float32 spacing exceeds 1: pass float64 or "
                "int64 timestamps (checked on the device)",
            )
        elif float(t.abs().max()) >= _F32_EXACT:
            raise ValueError(
                f"timestamps are float32 with magnitude up to {float(t.abs().max()):.6g} >= 2^24, where float32 "
                "spacing exceeds 1: pass float64 or int64 timestamps"
            )
    if t.is_floating_point():
        t = t.to(torch.float64)
        if t.numel():
            if traced:
                torch._assert_async(
                    torch.isfinite(t).all(), "timestamps must be finite (checked on the device)"
                )
            elif not bool(torch.isfinite(t).all()):
                raise ValueError("timestamps must be finite")
    if (
        isinstance(scale, bool)
        or not isinstance(scale, numbers.Real)
        or not 0 < scale < math.inf  # False for nan; comparisons trace (math.isfinite does not)
    ):
        raise ValueError(f"scale must be a finite number > 0, got {scale!r}")
    if reference is not None and (
        isinstance(reference, bool)
        or not isinstance(reference, numbers.Real)
        or (not isinstance(reference, numbers.Integral) and not -math.inf < reference < math.inf)
    ):
        raise ValueError(f"reference must be a finite number or None, got {reference!r}")
    if not t.is_floating_point():
        out = _int_positions(_as_int64(t), reference, float(scale), mask)
    else:
        ref: float | torch.Tensor
        if reference is None:  # the first valid timestamp of each row, a tensor (traceable, no host sync)
            ref = _first_per_row(t, mask) if t.numel() else 0.0
        else:
            try:
                ref = float(reference)
            except OverflowError:
                raise ValueError(
                    "reference must fit float64 for float timestamps, got an int of "
                    f"{int(reference).bit_length()} bits"
                ) from None
        out = (t - ref) / float(scale)
    if mask is not None:
        out = torch.where(mask.to(out.device), out, torch.zeros((), dtype=out.dtype, device=out.device))
    return _check_finite(out, scale)


def _first_per_row(t: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """[..., 1]: each row's first timestamp (the first valid one under ``mask``; 0 for a row without any; a 0-d
    input is its own row). Padded entries were set to 0 before, and are set to this reference below."""
    if t.dim() == 0:
        return t
    if mask is None:
        return t[..., :1]
    first = mask.to(t.device).to(torch.uint8).argmax(-1, keepdim=True)  # 0 for a row without a valid entry
    return t.gather(-1, first)


def _as_int64(t: torch.Tensor) -> torch.Tensor:
    """Integer timestamps as int64; uint64 refused past 2^63 (a device assert when traced)."""
    if t.dtype == torch.uint64:
        t = t.view(torch.int64)  # the same values below 2^63 (torch has no uint64 max / compare kernels)
        if t.numel() and torch.compiler.is_compiling():
            torch._assert_async(
                (t >= 0).all(),
                "timestamps are uint64 with values >= 2^63, past int64: pass int64 timestamps (checked on the device)",
            )
        elif t.numel() and bool((t < 0).any()):
            raise ValueError("timestamps are uint64 with values >= 2^63, past int64: pass int64 timestamps")
    return t.to(torch.int64)


def _check_finite(out: torch.Tensor, scale: float) -> torch.Tensor:
    """Refuse a result past float64 (a tiny ``scale``): inf positions would only fail later, not naming scale."""
    if out.numel() and torch.compiler.is_compiling():
        torch._assert_async(
            torch.isfinite(out).all(),
            "scale is too small for these timestamps: (timestamps - reference) / scale overflows float64; pass a "
            "larger scale (checked on the device)",
        )
    elif out.numel() and not bool(torch.isfinite(out).all()):
        raise ValueError(
            f"scale={scale!r} is too small for these timestamps: (timestamps - reference) / scale overflows "
            "float64; pass a larger scale"
        )
    return out


def _int_positions(
    t: torch.Tensor, reference: float | None, scale: float, mask: torch.Tensor | None
) -> torch.Tensor:
    """``(t - reference) / scale`` for int64 timestamps: the difference exact in int64 (refused, not wrapped, when
    it leaves int64), then one rounding to float64 (a warning when that rounds: past 2^53); a fractional
    reference's fraction is subtracted after. Traced by torch.compile, the checks are device asserts (constant
    messages; the eager ones name the span, a data-dependent value) and there is no warning."""
    traced = torch.compiler.is_compiling()
    frac = 0.0
    ref: int | torch.Tensor
    if reference is None:
        ref = _first_per_row(t, mask) if t.numel() else 0
        if mask is not None and t.numel():
            t = torch.where(mask.to(t.device), t, ref)  # padding: the row's reference (a difference of 0)
    else:
        ref = math.floor(reference)  # a Python int: exact for every finite float and int
        frac = float(reference - ref)  # exact: a float minus its floor
        if not _I64_MIN <= ref <= _I64_MAX:
            raise ValueError(
                f"timestamps - reference overflows int64: reference={reference!r}"
                + (f" (integer part {ref})" if isinstance(reference, float) else "")
                + " is outside [-2^63, 2^63 - 1]; pass a reference nearer the timestamps"
            )
        if mask is not None:
            t = torch.where(mask.to(t.device), t, torch.full((), ref, dtype=t.dtype, device=t.device))
    if t.numel():
        # t - ref stays in int64 iff t >= MIN + ref (ref >= 0) and t <= MAX + ref (ref < 0): bounds computed
        # without overflow (the clamps zero the side that does not apply)
        if isinstance(ref, torch.Tensor):
            ok = (t >= _I64_MIN + ref.clamp_min(0)) & (t <= _I64_MAX + ref.clamp_max(0))
        else:
            ok = (t >= _I64_MIN + max(ref, 0)) & (t <= _I64_MAX + min(ref, 0))
        if traced:
            torch._assert_async(
                ok.all(),
                "timestamps - reference overflows int64: pass a reference nearer the timestamps (checked on the "
                "device)",
            )
        elif not bool(ok.all()):
            raise ValueError(_overflow_message(t, ref, reference))
    diff = t - ref
    if diff.numel() and not traced:
        big = int(diff.abs().max())
        if big > _F64_STEP:
            warnings.warn(
                f"time_positions: timestamps - reference reaches {big} > 2^53 timestamp units, so its conversion "
                "to float64 rounds it (spacing up to "
                f"{2 ** (big.bit_length() - 53)} units); pass a reference nearer the timestamps (a mask= skips "
                "padding) or coarser timestamps",
                UserWarning,
                stacklevel=3,
            )
    out = diff.to(torch.float64)
    if frac:
        out = out - frac
    return out / scale


def v2pe_positions(segments: Sequence[tuple[str, int]], delta: float, *, start: float = 0.0) -> torch.Tensor:
    """V2PE positions for a sequence of ("text", n) and ("visual", n) runs (Ge et al. 2024, V2PE).

    Text tokens step by 1; the k-th token of a visual run (k = 1 .. n) sits at ``last + k * delta``, ``last`` being
    the position of the token before the run (``start - 1`` for a leading run), and the token after the run at
    ``ceil(last + n * delta) + 1`` -- V2PE's ``get_rope_pos_id`` (``v2pe_fix``: ``torch.linspace(last,
    last + n * delta, n + 1)[1:]``, then the ceiling), computed exactly in float64.

    Args:
        segments: runs in order; kind "text" or "visual", n >= 0 tokens.
        delta: the visual step, in (0, 1] (V2PE: ``rope_pos_id_stride / num_image_token``).
        start: position of the first token, a finite real number below 2^53 in magnitude.

    Returns:
        float64 [N].

    Raises:
        ValueError: naming the argument (delta outside (0, 1], start not finite, bad segments, positions reaching
            2^53, where float64 cannot step by 1).
        TypeError: start not a real number.

    Example:
        >>> v2pe_positions([("text", 2), ("visual", 4), ("text", 1)], 0.25).tolist()
        [0.0, 1.0, 1.25, 1.5, 1.75, 2.0, 3.0]
    """
    if isinstance(delta, bool) or not isinstance(delta, numbers.Real) or not 0.0 < delta <= 1.0:
        raise ValueError(f"delta must be a number in (0, 1], got {delta!r}")
    cur = _check_real_start(start)
    out: list[float] = []
    for seg in segments:
        if not (isinstance(seg, tuple) and len(seg) == 2 and seg[0] in ("text", "visual")):
            raise ValueError(f"segments must be ('text' | 'visual', n) pairs, got {seg!r}")
        kind, n = seg
        n = whole(n, 0, f"segment length must be a non-negative int, got {n!r} in {seg!r}")
        if kind == "text":
            out.extend(cur + i for i in range(n))
            cur += n
        elif n:  # V2PE's own code: visual token k (1-based) at last + k * delta, last = the previous token's position
            last = cur - 1
            out.extend(last + k * delta for k in range(1, n + 1))
            cur = (
                float(math.ceil(last + n * delta)) + 1
            )  # the next token: the ceiling of the last visual one, plus 1
    pos = _check_steps(torch.tensor(out, dtype=torch.float64), "v2pe")
    if pos.numel() > 1 and not bool((pos[1:] > pos[:-1]).all()):  # float64 spacing at |p| exceeds delta
        i = int((pos[1:] <= pos[:-1]).nonzero()[0, 0])
        raise ValueError(
            f"v2pe positions merge: token {i + 1} sits at {float(pos[i + 1])!r}, not after token {i} "
            f"({float(pos[i])!r}): float64 cannot step by delta={delta!r} at that magnitude (start={start!r}); "
            "use a smaller start"
        )
    return pos


def _overflow_message(t: torch.Tensor, ref: int | torch.Tensor, reference: float | None) -> str:
    """The eager refusal of an int64 overflow, with the exact span of the difference (Python ints)."""
    refs = ref.expand_as(t).flatten().tolist() if isinstance(ref, torch.Tensor) else [ref] * t.numel()
    diffs = [a - b for a, b in zip(t.flatten().tolist(), refs, strict=True)]
    if reference is None:
        what = f"reference=None (each row's first timestamp: {sorted(set(refs))[:3]})"
    else:
        what = f"reference={reference!r}" + (f" (integer part {ref})" if isinstance(reference, float) else "")
    return (
        f"timestamps - reference overflows int64: timestamps span [{int(t.min())}, {int(t.max())}] and {what}, so "
        f"the difference spans [{min(diffs)}, {max(diffs)}], outside [-2^63, 2^63 - 1]; pass a reference nearer "
        "the timestamps"
    )

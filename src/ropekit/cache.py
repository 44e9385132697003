# SPDX-License-Identifier: MIT
"""Dynamic schemes and the KV cache: stale keys and their re-rotation.

With dynamic NTK or LongRoPE the frequencies depend on the current length l, but a KV cache holds keys rotated
with the frequencies of the length at which they were computed (transformers #25104 and PR #33129: subtle
degradation past the original length, garbled text once a Phi-3 generation crosses 4096). Rotations of one band
commute, so keys rotated at phases p theta_old are brought to p theta_new by one more rotation:

    R(p theta_new) R(p theta_old)^-1 = R(p (theta_new - theta_old))

applied in place to the cached keys, with exact phases: ``p theta_new`` and ``p theta_old`` are each reduced
modulo one turn exactly (:mod:`ropekit.reduction`, every int64 position) before they are subtracted.
:meth:`ropekit.RopeSpec.keys_stale` tells when this is needed.

Lengths are sequence lengths, integers in [1, 2**63] (numpy integers too): the frequencies of length l are those a
forward over positions 0..l-1 uses, so keys rotated for length l sit at positions in [0, l) (0 would be an empty
cache: nothing to re-rotate).
Every argument is validated before anything is computed or written: a refused call leaves k untouched.

Shapes: as :func:`ropekit.apply_rope` (format "bshd", "bhsd" or "thd"); positions [s] or [b, s] ([t] for "thd").
"""

from __future__ import annotations

import math

import torch

from ropekit.phases import band_constant_tensor, check_positions
from ropekit.reduction import reduced_turns
from ropekit.rotation.apply import apply_rope_tables
from ropekit.rotation.apply_checks import FORMATS, Format, _batch_seq, _check_inplace_target, _check_qk
from ropekit.spec import RopeSpec, check_seq_len, require_spec

__all__ = ["keys_stale", "rerotate_keys"]


def _check_len(name: str, value: object) -> int:
    """A sequence length: an integer in [1, 2**63] (bool refused; numpy ints and other integer-likes accepted, as
    everywhere in ropekit: :func:`ropekit.spec.check_seq_len`), as a Python int."""
    n = check_seq_len(value, name, optional=False)
    assert n is not None
    return n


def keys_stale(spec: RopeSpec, cached_len: int, new_len: int) -> bool:
    """True when keys rotated for length ``cached_len`` differ from what length ``new_len`` needs.

    Raises:
        TypeError: ``spec`` is not a RopeSpec, or a length is not an integer (bool and float included; numpy
            integers are lengths).
        ValueError: a length is < 1 or > 2**63.
    """
    require_spec(spec)
    cached_len = _check_len("cached_len", cached_len)
    new_len = _check_len("new_len", new_len)
    if not spec.dynamic:
        return False
    return not torch.equal(spec.frequencies(cached_len), spec.frequencies(new_len))


def rerotate_keys(
    k: torch.Tensor,
    positions: torch.Tensor,
    spec: RopeSpec,
    *,
    from_len: int,
    to_len: int,
    format: Format = "bshd",
    inplace: bool = True,
) -> torch.Tensor:
    """Re-rotate cached keys from the frequencies of ``from_len`` to those of ``to_len``.

    Precision: each call rounds k back to its own dtype, so re-rotating the same cache again and again adds one
    rounding per call. Dynamic NTK past its length changes the frequencies at every token, and re-rotating the
    cache once per decode step accumulates those roundings (head_dim 64, DynamicNTK(4, 64), unit-variance keys,
    256 steps past the length; max abs error of the first 64 keys against the exact keys at the final length):
    bfloat16 0.94 against 0.015 for one fresh rotation; float32 1.7e-5 against 3.5e-7 (5e-5 after 1000 steps);
    float64 stays exact (4e-14 after 1000 steps). For dynamic NTK keep the pre-RoPE keys and rotate them fresh
    at the current length, or keep a float32 / float64 shadow of the cache, re-rotate that and cast the result
    to the cache's dtype; a single catch-up call (``from_len`` to the final ``to_len``) rounds once.

    Args:
        k: cached keys, already rotated at ``positions`` with ``spec.frequencies(from_len)``.
        positions: their positions ([s] or [b, s]; [t] for "thd").
        spec: a dynamic spec (for a static one the keys are unchanged: k itself in place, a copy otherwise).
        from_len, to_len: the lengths the keys were rotated for, and are needed for: integers in [1, 2**63]
            (numpy integers too).
        format: tensor format of k.
        inplace: rotate k's storage (default), else return a new tensor (always one, also when nothing moves).

    Returns:
        The re-rotated keys (k itself when ``inplace``).

    Raises:
        TypeError: a non-tensor k or positions, a spec that is not a RopeSpec, a length that is not an integer
            (bool and float included), a non-bool ``inplace``.
        ValueError: k of the wrong rank, head_dim or dtype; positions of the wrong dtype or shape for k, on the
            meta device while k is not, or outside [0, from_len); a length < 1 or > 2**63; an unknown format; an
            in-place k with overlapping memory. Raised before k is modified.
    """
    require_spec(spec)
    if format not in FORMATS:
        raise ValueError(f"format must be one of {FORMATS}, got {format!r}")
    if not isinstance(inplace, bool):
        raise TypeError(f"inplace must be a bool, got {inplace!r}")
    _check_qk("k", k, spec, format)
    check_positions(positions)
    b, s = _batch_seq(k, format)
    if positions.shape not in (((s,),) if format == "thd" else ((s,), (1, s), (b, s))):
        want = f"({s},)" if format == "thd" else f"({s},) or ({b}, {s})"
        raise ValueError(
            f"positions must have shape {want} for k of shape {tuple(k.shape)} (format={format!r}), "
            f"got {tuple(positions.shape)}"
        )
    from_len = _check_len("from_len", from_len)
    to_len = _check_len("to_len", to_len)
    if positions.device.type == "meta" and k.device.type != "meta":  # no values to re-rotate k by
        raise ValueError(
            f"positions are on the meta device (no values) but k is on {k.device}; pass the keys' real positions"
        )
    if positions.numel() and positions.device.type != "meta" and not torch.compiler.is_compiling():
        # one reduction and one host sync: keys rotated for length from_len sit at positions 0..from_len-1
        lo, hi = torch.stack(torch.aminmax(positions)).tolist()
        if lo < 0 or hi >= from_len:
            raise ValueError(
                f"positions must lie in [0, from_len) = [0, {from_len}) (keys rotated for a sequence of length "
                f"from_len sit at positions 0..from_len-1), got values in [{lo}, {hi}]"
            )
    if inplace:
        _check_inplace_target("k", k)
    if not keys_stale(spec, from_len, to_len):
        return k if inplace else k.clone()  # nothing to rotate; out of place is still a tensor of its own
    if (
        k.device.type == "meta"
    ):  # shapes only (a model built on meta): nothing to compute, as rope_tables on meta
        return k if inplace else torch.empty_like(k)
    tdt = torch.float64 if k.dtype == torch.float64 else torch.float32
    work = torch.device("cpu") if k.device.type == "mps" else k.device
    with torch.autocast(device_type=work.type, enabled=False):
        # p * theta_new - p * theta_old: each phase reduced mod one turn exactly (ropekit.reduction: integer
        # positions as int64 at any value, float positions split into integer and fraction), then the difference
        # reduced again. Neither a float64 copy of the positions (which rounds past 2**53) nor a float64
        # difference theta_new - theta_old (whose rounding, times a large p, is a large angle) enters. No
        # attention-factor ratio: each scheme's factor is fixed by its parameters, not by the length, so the
        # cached keys already carry it and only their phases move.
        pos = positions.to(work)
        turns = reduced_turns(pos, band_constant_tensor(spec, to_len, work)) - reduced_turns(
            pos, band_constant_tensor(spec, from_len, work)
        )
        angle = (turns - torch.round(turns)) * (2.0 * math.pi)
        cos, sin = torch.cos(angle).to(tdt), torch.sin(angle).to(tdt)
    cos, sin = cos.to(k.device), sin.to(k.device)
    out, _ = apply_rope_tables(k, None, cos, sin, spec, format=format, inplace=inplace)
    return out

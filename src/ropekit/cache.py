# SPDX-License-Identifier: MIT
"""Dynamic schemes and the KV cache: stale keys and their re-rotation.

With dynamic NTK or LongRoPE the frequencies depend on the current length l, but a KV cache holds keys rotated
with the frequencies of the length at which they were computed (transformers #25104 and PR #33129: subtle
degradation past the original length, garbled text once a Phi-3 generation crosses 4096). Rotations of one band
commute, so keys rotated at phases p theta_old are brought to p theta_new by one more rotation:

    R(p theta_new) R(p theta_old)^-1 = R(p (theta_new - theta_old))

applied in place to the cached keys (exact phases: the angle difference is formed in float64). :meth:`ropekit.RopeSpec.keys_stale` tells when this is needed.

Shapes: as :func:`ropekit.apply_rope` (format "bshd", "bhsd" or "thd"); positions [s] or [b, s].
"""

from __future__ import annotations

import torch

from ropekit.phases import _tables_from_angles, check_positions
from ropekit.rotation.apply import Format, apply_rope_tables
from ropekit.spec import RopeSpec

__all__ = ["keys_stale", "rerotate_keys"]


def keys_stale(spec: RopeSpec, cached_len: int, new_len: int) -> bool:
    """True when keys rotated for length ``cached_len`` differ from what length ``new_len`` needs."""
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

    Args:
        k: cached keys, already rotated at ``positions`` with ``spec.frequencies(from_len)``.
        positions: their positions ([s] or [b, s]; [t] for "thd").
        spec: a dynamic spec (for a static one this returns k unchanged).
        from_len, to_len: the lengths the keys were rotated for, and are needed for.
        format: tensor format of k.
        inplace: rotate k's storage (default), else return a new tensor.

    Returns:
        The re-rotated keys (k itself when ``inplace``).
    """
    check_positions(positions)
    if not keys_stale(spec, from_len, to_len):
        return k
    old, new = spec.frequencies(from_len), spec.frequencies(to_len)
    tdt = torch.float64 if k.dtype == torch.float64 else torch.float32
    work = torch.device("cpu") if k.device.type == "mps" else k.device
    with torch.autocast(device_type=work.type, enabled=False):
        # p * (theta_new - theta_old), formed in float64 and reduced mod 2*pi like every ropekit phase. No
        # attention-factor ratio: each scheme's factor is fixed by its parameters, not by the length, so the
        # cached keys already carry it and only their phases move.
        cos, sin = _tables_from_angles(positions.to(work, torch.float64), (new - old).to(work), 1.0, tdt)
    cos, sin = cos.to(k.device), sin.to(k.device)
    out, _ = apply_rope_tables(k, None, cos, sin, spec, format=format, inplace=inplace)
    return out

# SPDX-License-Identifier: MIT
"""The common float32 recipe of every scheme, as HF transformers computes it (for comparison; do not use).

transformers (and Megatron, TransformerEngine, torchtune by default) builds RoPE in three float32 steps:

1. ``inv_freq``: the scheme's own init in float32 -- ``1 / base ** (arange(0, r, 2).float() / r)`` for the plain
   table (``ROPE_INIT_FUNCTIONS`` in ``transformers.modeling_rope_utils`` for the scaled ones: linear, dynamic,
   yarn, longrope, llama3, proportional), each with its own order of float32 operations;
2. ``angle = position.float() * inv_freq`` in float32 (an outer product: transformers 5 multiplies elementwise,
   older versions wrote a matmul with k = 1 -- the same single float32 multiplication per entry);
3. ``cos(angle) * attention_factor``, ``sin(angle) * attention_factor`` in float32.

This module reproduces those steps with ropekit's scheme parameters, written from the formulas of each scheme
(Chen et al. 2023 PI; bloc97's NTK and dynamic NTK; Peng et al. 2023 YaRN; Ding et al. 2024 LongRoPE; Meta 2024
Llama 3.1; Barbero et al. 2025 p-RoPE / HF ``proportional``) in transformers' float32 operation order, so that
``ropekit precision`` can show what the float32 recipe costs. A test checks the tables against transformers'
own functions bit for bit.

Schemes transformers does not ship (static ``NTK`` / ``ntk_alpha``, HunYuan's model-local code) use the plain
recipe with the scheme's effective base, computed in Python floats as HunYuan does. An explicit ``freqs`` table
has no transformers recipe: it is rounded once to float32.

Shapes: P any position shape, n = rotary_dim // 2 bands.
"""

from __future__ import annotations

import math

import torch

from ropekit.scaling import Linear, Llama3, LongRope, Yarn
from ropekit.spec import RopeSpec, check_seq_len, require_spec

__all__ = ["common_fp32_inv_freq", "common_fp32_tables"]


def _plain(base: float, r: int) -> torch.Tensor:
    """HF's default init: float32 exponents from an int64 arange, ``base ** e`` and the reciprocal in float32."""
    return 1.0 / (base ** (torch.arange(0, r, 2, dtype=torch.int64).to(torch.float32) / r))


def _yarn(sc: Yarn, base: float, r: int) -> torch.Tensor:
    pos_freqs = base ** (torch.arange(0, r, 2).to(torch.float32) / r)
    extrapolation = 1.0 / pos_freqs
    interpolation = 1.0 / (sc.factor * pos_freqs)
    lo, hi = sc.ramp_bounds(base, r)  # Python floats, the same formula and truncation as transformers
    ramp = ((torch.arange(r // 2, dtype=torch.float32) - lo) / (hi - lo)).clamp(0, 1)
    keep = 1 - ramp  # transformers' inv_freq_extrapolation_factor
    return interpolation * (1 - keep) + extrapolation * keep


def _llama3(sc: Llama3, base: float, r: int) -> torch.Tensor:
    inv = _plain(base, r)
    L0, lo, hi, s = sc.original_max_position_embeddings, sc.low_freq_factor, sc.high_freq_factor, sc.factor
    low_wavelen, high_wavelen = L0 / lo, L0 / hi
    wavelen = 2 * math.pi / inv
    out = torch.where(wavelen > low_wavelen, inv / s, inv)
    smooth = (L0 / wavelen - lo) / (hi - lo)
    smoothed = (1 - smooth) * out / s + smooth * out
    medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
    return torch.where(medium, smoothed, out)


def common_fp32_inv_freq(spec: RopeSpec, seq_len: int | None = None) -> torch.Tensor:
    """The float32 ``inv_freq`` [n] of ``spec``'s scheme at sequence length ``seq_len``, as transformers builds it.

    Args:
        spec: the RoPE configuration (its scheme decides the recipe).
        seq_len: current sequence length (dynamic NTK and LongRoPE switch on it; transformers passes
            ``max(position_ids) + 1``). None means "at init" (no switch).

    Returns:
        [n] float32 tensor on the CPU (zero for p-RoPE's dropped bands).

    Raises:
        ValueError, TypeError: ``seq_len`` is neither None nor an int >= 1 (as ``RopeSpec.frequencies``).
    """
    seq_len = check_seq_len(seq_len)
    r = int(spec.rotary_dim)  # type: ignore[arg-type]
    sc = spec.scaling
    if spec.freqs is not None:
        return spec.inv_freq(seq_len, dtype=torch.float32)
    base = spec.base if sc is None else sc.effective_base(spec.base, rotary_dim=r, seq_len=seq_len)
    if isinstance(sc, Yarn):
        inv = _yarn(sc, base, r)
    elif isinstance(sc, LongRope):
        ext = sc.long_factor if sc.uses_long(seq_len) else sc.short_factor
        exps = torch.arange(0, r, 2, dtype=torch.int64).float() / r
        inv = 1.0 / (torch.tensor(ext, dtype=torch.float32) * base**exps)
    elif isinstance(sc, Llama3):
        inv = _llama3(sc, base, r)
    else:  # plain, NTK / ntk_alpha / dynamic (effective base above), linear (below)
        inv = _plain(base, r)
    keep = spec.n_positional_bands
    if keep < spec.n_bands:  # p-RoPE / HF proportional: the lowest frequencies become exact zeros
        inv = torch.cat([inv[:keep], torch.zeros(spec.n_bands - keep, dtype=torch.float32)])
    if isinstance(sc, Linear):
        inv = inv / sc.factor
    return inv


def common_fp32_tables(
    positions: torch.Tensor, spec: RopeSpec, *, seq_len: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos/sin [*P, n] as the common float32 recipe computes them, times the attention factor.

    Args:
        positions: [*P] integer or float positions.
        spec: the RoPE configuration.
        seq_len: sequence length for dynamic schemes (default ``max(positions) + 1``, as transformers does).

    Returns:
        (cos, sin), each [*P, n] float32.
    """
    require_spec(spec)
    if spec.dynamic and seq_len is None and positions.numel():
        seq_len = int(positions.max().item()) + 1
    inv = common_fp32_inv_freq(spec, seq_len)
    angle = positions.to(torch.float32).unsqueeze(-1) * inv  # the float32 product: the error source
    a = spec.attention_factor
    return torch.cos(angle) * a, torch.sin(angle) * a

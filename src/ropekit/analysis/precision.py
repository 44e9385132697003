# SPDX-License-Identifier: MIT
"""How exact are the phases? ropekit's tables against the common float32 recipe, measured against float64.

The *common recipe* is what HF transformers, Megatron, TransformerEngine and torchtune do by default:
``inv_freq = 1 / base ** (arange(0, r, 2).float() / r)`` in float32, ``angle = pos.float() * inv_freq`` in
float32, then float32 cos/sin. The oracle is float64 ``cos(p * theta_i)`` with theta_i from Python floats
(:func:`ropekit.rotation.reference.reference_frequencies`), i.e. independent of ropekit's table code.

Shapes: w window positions, n bands.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch

from ropekit.phases import rope_tables
from ropekit.rotation.reference import reference_frequencies
from ropekit.spec import RopeSpec

__all__ = [
    "DEFAULT_POSITIONS",
    "PhaseError",
    "common_fp32_tables",
    "oracle_tables",
    "phase_error",
    "phase_error_table",
]

DEFAULT_POSITIONS: tuple[int, ...] = (1_000, 10_000, 100_000, 1_000_000, 10_000_000, 1 << 24)


def common_fp32_tables(positions: torch.Tensor, spec: RopeSpec) -> tuple[torch.Tensor, torch.Tensor]:
    """cos/sin [*P, n] as the common float32 recipe computes them (for comparison; do not use)."""
    r = int(spec.rotary_dim)  # type: ignore[arg-type]
    if spec.freqs is None and spec.p == 1.0 and spec.scaling is None:
        inv = 1.0 / (spec.base ** (torch.arange(0, r, 2, dtype=torch.int64).to(torch.float32) / r))
    else:
        inv = spec.inv_freq(dtype=torch.float32)
    angle = positions.to(torch.float32).unsqueeze(-1) * inv  # float32 product: the error source
    return torch.cos(angle), torch.sin(angle)


def oracle_tables(positions: torch.Tensor, spec: RopeSpec) -> tuple[torch.Tensor, torch.Tensor]:
    """float64 cos/sin [*P, n] of the unreduced float64 angle, frequencies from Python floats."""
    theta = torch.tensor(reference_frequencies(spec), dtype=torch.float64)
    angle = positions.to(torch.float64).unsqueeze(-1) * theta
    return torch.cos(angle) * spec.attention_factor, torch.sin(angle) * spec.attention_factor


@dataclass(frozen=True)
class PhaseError:
    """Max |cos - cos_ref| and |sin - sin_ref| over the window ending at ``position``."""

    position: int
    window: int
    ropekit: float
    common_fp32: float

    def as_dict(self) -> dict[str, float | int]:
        return asdict(self)


def phase_error(spec: RopeSpec, position: int, *, window: int = 2048) -> PhaseError:
    """Measure both recipes on the ``window`` positions ending at ``position`` (inclusive, clipped at 0)."""
    lo = max(0, int(position) - window + 1)
    pos = torch.arange(lo, int(position) + 1, dtype=torch.int64)
    ref_c, ref_s = oracle_tables(pos, spec)

    def err(c: torch.Tensor, s: torch.Tensor) -> float:
        return float(torch.maximum((c.double() - ref_c).abs().max(), (s.double() - ref_s).abs().max()))

    return PhaseError(
        int(position), int(pos.numel()), err(*rope_tables(pos, spec)), err(*common_fp32_tables(pos, spec))
    )


def phase_error_table(
    spec: RopeSpec, positions: tuple[int, ...] = DEFAULT_POSITIONS, *, window: int = 2048
) -> list[PhaseError]:
    """:func:`phase_error` at each position."""
    return [phase_error(spec, p, window=window) for p in positions]

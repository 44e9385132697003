# SPDX-License-Identifier: MIT
"""Phase precision against position: ropekit's exact tables vs the common float32 recipe, up to 10^7 and beyond.

Built on :func:`ropekit.analysis.precision.phase_error` (float64 oracle from Python-float frequencies). The common
recipe forms ``position * inv_freq`` in float32, whose rounding error grows like position * 2^-24 rad, so by
10^7 its cos/sin are off by O(1); ropekit reduces the phase exactly and stays at float32 rounding.

Each point keeps the oracle's own error bound there (:attr:`~ropekit.analysis.precision.PhaseError.oracle_bound`)
and whether it resolves ropekit's error (``resolved``: bound <= :data:`~ropekit.analysis.precision.RESOLVED`). Near
10^8 it does not: ropekit's value there is mostly the float64 reference's own error (``ropekit precision`` marks such
values ``*``), so it is an upper bound on ropekit's error, not a measurement of it.

Shapes: P positions.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ropekit.analysis.precision import phase_error
from ropekit.integers import whole
from ropekit.spec import RopeSpec

__all__ = ["DEFAULT_CURVE_POSITIONS", "PrecisionCurve", "precision_curve"]

DEFAULT_CURVE_POSITIONS: tuple[int, ...] = tuple(int(10 ** (e / 2)) for e in range(4, 17))


@dataclass(frozen=True)
class PrecisionCurve:
    """Max |cos - cos_ref|, |sin - sin_ref| over a window ending at each position, for both recipes, with the
    oracle's own error bound at each position and whether it resolves ropekit's error there."""

    position: torch.Tensor  # [P] int64
    ropekit: torch.Tensor  # [P] float64
    common_fp32: torch.Tensor  # [P] float64
    window: int
    oracle_bound: torch.Tensor  # [P] float64, the float64 reference's own error bound (|angle| * 2^-53)
    resolved: torch.Tensor  # [P] bool, oracle_bound <= RESOLVED: ropekit's value there is a measurement

    @property
    def ropekit_resolved_max(self) -> float | None:
        """The largest of ropekit's errors at resolved positions (None when no position is resolved)."""
        vals = self.ropekit[self.resolved]
        return float(vals.max()) if vals.numel() else None

    def as_dict(self) -> dict[str, object]:
        return {
            "position": self.position.tolist(),
            "ropekit": self.ropekit.tolist(),
            "common_fp32": self.common_fp32.tolist(),
            "window": self.window,
            "oracle_bound": self.oracle_bound.tolist(),
            "resolved": self.resolved.tolist(),
        }


def precision_curve(
    spec: RopeSpec, positions: tuple[int, ...] = DEFAULT_CURVE_POSITIONS, *, window: int = 256
) -> PrecisionCurve:
    """:func:`~ropekit.analysis.precision.phase_error` at each position (default 10^2 .. 10^8 in half decades).

    Beyond ~10^8 the float64 oracle's own rounding (p * 2^-53 rad) reaches float32's, so the curve stops there.
    """
    if not positions or any(isinstance(p, bool) or not isinstance(p, int) or p < 0 for p in positions):
        raise ValueError(f"positions must be non-negative ints, got {positions!r}")
    window = whole(window, 1, f"window must be a positive int, got {window!r}")
    errs = [phase_error(spec, p, window=window) for p in positions]
    return PrecisionCurve(
        position=torch.tensor(positions, dtype=torch.int64),
        ropekit=torch.tensor([e.ropekit for e in errs], dtype=torch.float64),
        common_fp32=torch.tensor([e.common_fp32 for e in errs], dtype=torch.float64),
        window=window,
        oracle_bound=torch.tensor([e.oracle_bound for e in errs], dtype=torch.float64),
        resolved=torch.tensor([e.resolved for e in errs], dtype=torch.bool),
    )

# SPDX-License-Identifier: MIT
"""Tools that show what a RoPE configuration does: bands, critical dimension, base bound, phase precision."""

from ropekit.analysis.bands import (
    Band,
    band_table,
    base_bound_margin,
    base_lower_bound,
    critical_dim,
    extrapolation_bound,
)
from ropekit.analysis.precision import (
    PhaseError,
    common_fp32_tables,
    oracle_tables,
    phase_error,
    phase_error_table,
)

__all__ = [
    "Band",
    "PhaseError",
    "band_table",
    "base_bound_margin",
    "base_lower_bound",
    "common_fp32_tables",
    "critical_dim",
    "extrapolation_bound",
    "oracle_tables",
    "phase_error",
    "phase_error_table",
]

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

# ropekit report (issue 14): the analyses behind each figure, as functions returning arrays.
from ropekit.analysis.decay import (
    gaussian_dot_moments,
    gaussian_dot_samples,
    ones_dot,
    rotated_dot,
    su_bound,
)
from ropekit.analysis.precision_curve import PrecisionCurve, precision_curve
from ropekit.analysis.rotations import Rotations, rotations, turns
from ropekit.analysis.schemes import SCHEME_NAMES, SchemeTable, scheme_table
from ropekit.analysis.spectrum import Spectrum, spectrum, wavelengths
from ropekit.analysis.weights import WeightAnalysis, band_norms, positional_scores

__all__ += [
    "SCHEME_NAMES",
    "PrecisionCurve",
    "Rotations",
    "SchemeTable",
    "Spectrum",
    "WeightAnalysis",
    "band_norms",
    "gaussian_dot_moments",
    "gaussian_dot_samples",
    "ones_dot",
    "positional_scores",
    "precision_curve",
    "rotated_dot",
    "rotations",
    "scheme_table",
    "spectrum",
    "su_bound",
    "turns",
    "wavelengths",
]

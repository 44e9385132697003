# SPDX-License-Identifier: MIT
"""Tools that show what a RoPE configuration does: bands, critical dimension, base bound, phase precision,
scaling schemes side by side, layer types."""

from ropekit.analysis.bands import (
    Band,
    band_table,
    base_bound_margin,
    base_lower_bound,
    critical_dim,
    extrapolation_bound,
)
from ropekit.analysis.compare import SCHEMES, build_scheme, compare_schemes, default_target, original_length
from ropekit.analysis.layers import LayerView, config_layer_types, layer_views
from ropekit.analysis.precision import (
    PhaseError,
    common_fp32_tables,
    oracle_frequencies,
    oracle_tables,
    phase_error,
    phase_error_table,
)
from ropekit.analysis.recipe import common_fp32_inv_freq

__all__ = [
    "SCHEMES",
    "Band",
    "LayerView",
    "PhaseError",
    "band_table",
    "base_bound_margin",
    "base_lower_bound",
    "build_scheme",
    "common_fp32_inv_freq",
    "common_fp32_tables",
    "compare_schemes",
    "config_layer_types",
    "critical_dim",
    "default_target",
    "extrapolation_bound",
    "layer_views",
    "oracle_frequencies",
    "oracle_tables",
    "original_length",
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

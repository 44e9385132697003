# SPDX-License-Identifier: MIT
"""The 2-D block rotation of q and k: a float64 reference and fast backends behind one dispatch."""

from ropekit.rotation.apply import BACKENDS, FORMATS, Format, apply_rope, apply_rope_tables
from ropekit.rotation.reference import reference_rope, rotation_matrix

__all__ = [
    "BACKENDS",
    "FORMATS",
    "Format",
    "apply_rope",
    "apply_rope_tables",
    "reference_rope",
    "rotation_matrix",
]

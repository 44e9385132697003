# SPDX-License-Identifier: MIT
"""Interoperability with Hugging Face transformers.

- :func:`spec_from_hf` / :func:`spec_to_hf` (also ``RopeSpec.from_hf`` / ``spec.to_hf``): configs, both schemas;
- :func:`permute_for_half` / :func:`permute_for_interleaved`: q/k projection weights between Meta's interleaved
  pairing and HF's half split;
- :func:`patch` / :func:`unpatch` / :func:`patched`: make a transformers model compute its rotary tables and its
  rotation with ropekit, and undo it (needs transformers); :data:`FAMILIES`: the table of supported families.
"""

from ropekit.hf.config import INTERLEAVED_MODEL_TYPES, spec_from_hf, spec_to_hf
from ropekit.hf.convert import permute_for_half, permute_for_interleaved
from ropekit.hf.families import FAMILIES, Family
from ropekit.hf.patch import SUPPORTED_CLASSES, patch, patched, unpatch

__all__ = [
    "FAMILIES",
    "INTERLEAVED_MODEL_TYPES",
    "SUPPORTED_CLASSES",
    "Family",
    "patch",
    "patched",
    "permute_for_half",
    "permute_for_interleaved",
    "spec_from_hf",
    "spec_to_hf",
    "unpatch",
]

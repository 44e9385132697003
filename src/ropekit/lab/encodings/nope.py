# SPDX-License-Identifier: MIT
"""NoPE: no positional encoding; a causal decoder still infers order from the mask (Haviv et al. 2022,
"Transformer Language Models without Positional Encodings Still Learn Positional Information", arXiv 2203.16634;
Kazemnejad et al. 2023, arXiv 2305.19466)."""

from __future__ import annotations

from ropekit.lab.encodings.base import PositionalEncoding

__all__ = ["NoPE"]


class NoPE(PositionalEncoding):
    name = "nope"
    paper = "Haviv et al. 2022; Kazemnejad et al. 2023"

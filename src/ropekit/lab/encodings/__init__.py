# SPDX-License-Identifier: MIT
"""Positional encodings as pluggable pieces of attention (one file each, with its paper)."""

from __future__ import annotations

from typing import Any

from ropekit.lab.encodings.alibi import ALiBi
from ropekit.lab.encodings.base import PositionalEncoding
from ropekit.lab.encodings.learned import Learned
from ropekit.lab.encodings.nope import NoPE
from ropekit.lab.encodings.rope import RoPE
from ropekit.lab.encodings.sinusoidal import Sinusoidal
from ropekit.lab.encodings.t5 import T5Bias

__all__ = [
    "ENCODINGS",
    "ALiBi",
    "Learned",
    "NoPE",
    "PositionalEncoding",
    "RoPE",
    "Sinusoidal",
    "T5Bias",
    "build_encoding",
]

ENCODINGS: dict[str, type[PositionalEncoding]] = {
    c.name: c for c in (NoPE, Sinusoidal, Learned, ALiBi, T5Bias, RoPE)
}


def build_encoding(name: str, d_model: int, n_heads: int, head_dim: int, **kw: Any) -> PositionalEncoding:
    if name not in ENCODINGS:
        raise ValueError(f"unknown encoding {name!r}; known: {sorted(ENCODINGS)}")
    return ENCODINGS[name](d_model, n_heads, head_dim, **kw)

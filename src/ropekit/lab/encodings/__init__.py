# SPDX-License-Identifier: MIT
"""Positional encodings as pluggable pieces of attention (one file each, with its paper)."""

from __future__ import annotations

from typing import Any

from ropekit.lab.encodings.alibi import ALiBi
from ropekit.lab.encodings.base import PositionalEncoding
from ropekit.lab.encodings.dense_rotation import DenseRotation
from ropekit.lab.encodings.fire import FIRE
from ropekit.lab.encodings.kerple import KerpleLog, KerplePower
from ropekit.lab.encodings.learned import Learned
from ropekit.lab.encodings.nope import NoPE
from ropekit.lab.encodings.prope import PRoPE
from ropekit.lab.encodings.rope import RoPE
from ropekit.lab.encodings.single_frequency import SingleFrequency
from ropekit.lab.encodings.sinusoidal import Sinusoidal
from ropekit.lab.encodings.t5 import T5Bias
from ropekit.lab.encodings.xpos import XPos

__all__ = [
    "ENCODINGS",
    "FIRE",
    "TAKES_TRAIN_LEN",
    "ALiBi",
    "DenseRotation",
    "KerpleLog",
    "KerplePower",
    "Learned",
    "NoPE",
    "PRoPE",
    "PositionalEncoding",
    "RoPE",
    "SingleFrequency",
    "Sinusoidal",
    "T5Bias",
    "XPos",
    "build_encoding",
]

ENCODINGS: dict[str, type[PositionalEncoding]] = {
    c.name: c
    for c in (NoPE, Sinusoidal, Learned, ALiBi, T5Bias, RoPE)
    + (XPos, FIRE, KerpleLog, KerplePower, PRoPE)  # issue 15: more encodings
    + (SingleFrequency, DenseRotation)  # seed 004's counter-examples (sections 8.2, 8.3)
}
# encodings whose constructor takes the training length (``max_positions``)
TAKES_TRAIN_LEN = ("learned", "fire")


def build_encoding(name: str, d_model: int, n_heads: int, head_dim: int, **kw: Any) -> PositionalEncoding:
    if name not in ENCODINGS:
        raise ValueError(f"unknown encoding {name!r}; known: {sorted(ENCODINGS)}")
    return ENCODINGS[name](d_model, n_heads, head_dim, **kw)

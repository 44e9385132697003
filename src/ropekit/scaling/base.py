# SPDX-License-Identifier: MIT
"""Phase maps: how a position becomes a phase, phi_i(p) = g_i(p) * theta_i (seed 004, sections 4.3, 11.2, 11.5).

A phase map is the "surface" part of RoPE that long-context schemes change. Every map is a frozen, hashable
dataclass whose hooks are pure functions of the spec's numbers and the current sequence length:

- ``effective_base(base, rotary_dim, seq_len)``: NTK-style schemes change the base (default: unchanged);
- ``scale(theta, base, rotary_dim, seq_len)``: per-band schemes multiply each frequency (default: unchanged);
- ``attention_factor``: multiplies both cos and sin, so attention logits scale by its **square** (the HF
  transformers convention; a kernel that folds it into the softmax scale must use the square);
- ``dynamic``: whether the frequencies depend on the sequence length (then keys cached at one length are stale
  at another; see :mod:`ropekit.cache`);
- ``to_hf()``: the scheme's keys in a transformers ``rope_parameters`` dict.

Dividing every frequency by s is the same as dividing every position by s (position interpolation), so all
schemes are expressed on the frequencies and positions stay the caller's global ids.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
import torch

__all__ = ["Linear", "Scaling", "check_number", "check_positive_int", "unchecked"]

T = TypeVar("T")


def check_number(
    owner: str, name: str, value: object, *, lo: float | None = None, lo_open: bool = False
) -> float:
    """Return ``value`` as a float if it is a finite real number (numpy scalars too; not a bool) and above ``lo``,
    else raise ValueError."""
    ok = isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_)) and math.isfinite(value)
    x = float(value) if ok else math.nan  # type: ignore[arg-type]  # ok implies a real number
    if ok and lo is not None:
        ok = x > lo if lo_open else x >= lo
    if not ok:
        bound = "" if lo is None else f" {'>' if lo_open else '>='} {lo:g}"
        raise ValueError(f"{owner}.{name} must be a finite number{bound}, got {value!r}")
    return x


def check_positive_int(owner: str, name: str, value: object) -> int:
    """Return ``value`` as an int if it is a positive integer (numpy integers too; not a bool), else raise ValueError
    naming ``owner.name``."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{owner}.{name} must be a positive int, got {value!r}")
    return int(value)


def unchecked(cls: type[T], **fields: Any) -> T:
    """Build a scaling object without value checks (``from_hf(..., strict=False)`` accepts what HF accepts)."""
    obj = object.__new__(cls)
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        object.__setattr__(obj, f.name, fields.get(f.name, f.default))
    return obj


class Scaling:
    """Base class of phase maps. Subclasses are frozen dataclasses."""

    #: HF ``rope_type`` name.
    rope_type: str = ""
    #: True when the frequencies depend on the current sequence length.
    dynamic: bool = False
    #: True when the scheme is defined from ``base`` (and so cannot apply to an explicit ``freqs`` table).
    needs_base: bool = False

    def effective_base(self, base: float, *, rotary_dim: int, seq_len: int | None) -> float:
        return base

    def scale(
        self, theta: torch.Tensor, *, base: float, rotary_dim: int, seq_len: int | None
    ) -> torch.Tensor:
        return theta

    @property
    def attention_factor(self) -> float:
        """Factor multiplying cos and sin; logits scale by its square."""
        return 1.0

    def check(self, n_bands: int, rotary_dim: int) -> None:
        """Structural checks against the spec (list lengths, dimensions); raise ValueError."""

    def to_hf(self) -> dict[str, Any]:  # pragma: no cover - interface
        raise NotImplementedError


@dataclass(frozen=True)
class Linear(Scaling):
    """Position interpolation (Chen et al. 2023, arXiv 2306.15595): g(p) = p / factor, every theta_i / factor.

    Args:
        factor: the context extension ratio s >= 1 (e.g. 8 maps 32k positions into a 4k trained range).
    """

    factor: float
    rope_type = "linear"

    def __post_init__(self) -> None:
        object.__setattr__(self, "factor", check_number("Linear", "factor", self.factor, lo=1.0))

    def scale(
        self, theta: torch.Tensor, *, base: float, rotary_dim: int, seq_len: int | None
    ) -> torch.Tensor:
        return theta / self.factor

    def to_hf(self) -> dict[str, Any]:
        return {"rope_type": "linear", "factor": self.factor}

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
from dataclasses import dataclass
from typing import Any, TypeVar

import torch

from ropekit.integers import INT64_SPAN, as_int, as_real, past_float64, shown

__all__ = ["Linear", "Scaling", "check_length", "check_number", "check_positive_int", "unchecked"]

T = TypeVar("T")

#: largest head (and rotary) dim ropekit accepts: ``RopeSpec.head_dim`` and the scaling helpers' dims
MAX_DIM = (1 << 31) - 2


def check_number(
    owner: str, name: str, value: object, *, lo: float | None = None, lo_open: bool = False
) -> float:
    """Return ``value`` as a Python float if it is a finite real number (numpy scalars too; not a bool) and above
    ``lo``, else raise ValueError naming ``owner.name``, the range and the value (a huge int shortened, with the
    float64 range it is beyond)."""
    x = as_real(value)
    ok = x is not None
    if x is not None and lo is not None:
        ok = x > lo if lo_open else x >= lo
    if not ok:
        bound = "" if lo is None else f" {'>' if lo_open else '>='} {lo:g}"
        raise ValueError(
            f"{owner}.{name} must be a finite number{bound}{past_float64(value)}, got {shown(value)}"
        )
    return x  # type: ignore[return-value]  # ok implies a float


def check_positive_int(owner: str, name: str, value: object, *, high: int | None = None) -> int:
    """Return ``value`` as a Python int if it is a positive integer (numpy integers and other integer-likes too; not
    a bool) and at most ``high`` (None: no bound), else raise ValueError naming ``owner.name``."""
    n = as_int(value)
    if n is None or n < 1 or (high is not None and n > high):
        bound = f" (at most {high})" if high is not None and n is not None and n > high else ""
        raise ValueError(f"{owner}.{name} must be a positive int{bound}, got {shown(value)}")
    return n


def check_length(owner: str, name: str, value: object, *, low: int = 1) -> int:
    """A context length of a scheme (``max_position_embeddings``, ``original_max_position_embeddings``): an integer
    in [low, 2**63] (positions are int64, so no length is longer), as a Python int; else ValueError naming
    ``owner.name``, the range and the value."""
    n = as_int(value)
    if n is None or not low <= n <= INT64_SPAN:
        kind = "a positive int" if low == 1 else f"an int >= {low}"
        bound = " (at most 2**63: positions are int64)" if n is not None and n > INT64_SPAN else ""
        raise ValueError(f"{owner}.{name} must be {kind}{bound}, got {shown(value)}")
    return n


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

# SPDX-License-Identifier: MIT
"""NTK-aware base scaling, static and dynamic (bloc97 / emozilla, 2023; HF ``dynamic``; HunYuan ``alpha``).

Static NTK: b' = b * x^(d / (d - 2)) with x = ``factor`` (bloc97's fixed NTK-aware scaling) or x = ``alpha``
(HunYuan's NTK-alpha: HF checkpoints say ``rope_type: dynamic`` plus ``alpha``, but it is static).

The ``rope_type`` names :meth:`NTK.to_hf` writes are read back by ``RopeSpec.from_hf`` (the round trip is lossless)
but not by every other library:

- ``ntk`` (factor) is ropekit's own name. transformers 5.23 has no such type (``ROPE_INIT_FUNCTIONS`` has none:
  loading raises ``KeyError: 'ntk'``), and vLLM's ``ntk`` is a different scheme (kexue.fm 9706's fixed NTK,
  theta_i = (b s)^(-2i/d) / s^(2/d), which also divides the fastest band by s^(2/d)); for transformers write the
  plain equivalent instead: ``rope_type: default`` with ``rope_theta`` = :meth:`NTK.effective_base`.
- ``ntk_alpha`` is transformers' model-local name in HunYuan's rotary module (HunYuan configs load it; other
  models' do not); HunYuan's own checkpoints spell it ``dynamic`` + ``alpha``, which ``from_hf`` also reads.
Dynamic NTK: l = max(seq_len, L); b' = b * (s * l / L - (s - 1))^(d / (d - 2)), L = max_position_embeddings;
no change until the sequence exceeds L. d is the rotary dim. Static and dynamic are different classes on
purpose (pitfalls items 17-18).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ropekit.scaling.base import Scaling, check_length, check_number

__all__ = ["NTK", "DynamicNTK"]


def _check_dim(owner: str, rotary_dim: int) -> None:
    if rotary_dim <= 2:
        raise ValueError(
            f"{owner} needs rotary_dim > 2 (the exponent is d / (d - 2)), got rotary_dim={rotary_dim}"
        )


@dataclass(frozen=True)
class NTK(Scaling):
    """Static NTK-aware base scaling: b' = b * x^(d / (d - 2)), x = ``factor`` or ``alpha`` (exactly one).

    Its config fragments (``ntk`` / ``ntk_alpha``) round-trip through ``RopeSpec.from_hf`` but transformers does
    not load them (see the module docstring).
    """

    factor: float | None = None
    alpha: float | None = None
    needs_base = True

    def __post_init__(self) -> None:
        if (self.factor is None) == (self.alpha is None):
            raise ValueError(
                f"NTK needs exactly one of factor or alpha, got factor={self.factor!r}, alpha={self.alpha!r}"
            )
        name = "factor" if self.factor is not None else "alpha"
        object.__setattr__(self, name, check_number("NTK", name, getattr(self, name), lo=1.0))

    @property
    def rope_type(self) -> str:  # type: ignore[override]
        """``"ntk_alpha"`` with ``alpha``, else ``"ntk"`` (names transformers does not load: see the module)."""
        return "ntk_alpha" if self.alpha is not None else "ntk"

    def check(self, n_bands: int, rotary_dim: int) -> None:
        _check_dim("NTK", rotary_dim)

    def effective_base(self, base: float, *, rotary_dim: int, seq_len: int | None) -> float:
        x = self.alpha if self.alpha is not None else self.factor
        assert x is not None  # __post_init__ guarantees exactly one of them
        return float(base * x ** (rotary_dim / (rotary_dim - 2)))

    def to_hf(self) -> dict[str, Any]:
        """``{"rope_type": "ntk", "factor"}`` or ``{"rope_type": "ntk_alpha", "alpha"}``: read back by
        ``RopeSpec.from_hf``; transformers loads neither into a Llama-style model (``KeyError``), and only
        HunYuan's rotary module knows ``ntk_alpha`` (see the module docstring for what to write instead)."""
        if self.alpha is not None:  # HF's model-local name; HunYuan checkpoints spell it dynamic + alpha
            return {"rope_type": "ntk_alpha", "alpha": self.alpha}
        return {"rope_type": "ntk", "factor": self.factor}


@dataclass(frozen=True)
class DynamicNTK(Scaling):
    """Dynamic NTK: the base grows with the current length once it exceeds ``max_position_embeddings``."""

    factor: float
    max_position_embeddings: int
    rope_type = "dynamic"
    dynamic = True
    needs_base = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "factor", check_number("DynamicNTK", "factor", self.factor, lo=1.0))
        L = check_length("DynamicNTK", "max_position_embeddings", self.max_position_embeddings)
        object.__setattr__(self, "max_position_embeddings", L)

    def check(self, n_bands: int, rotary_dim: int) -> None:
        _check_dim("DynamicNTK", rotary_dim)

    def effective_base(self, base: float, *, rotary_dim: int, seq_len: int | None) -> float:
        L = self.max_position_embeddings
        ln = max(seq_len if seq_len is not None else L, L)
        return float(base * (self.factor * ln / L - (self.factor - 1)) ** (rotary_dim / (rotary_dim - 2)))

    def to_hf(self) -> dict[str, Any]:
        return {"rope_type": "dynamic", "factor": self.factor}

# SPDX-License-Identifier: MIT
"""LongRoPE (Ding et al. 2024, arXiv 2402.13753; Phi-3 / Phi-3.5 / Phi-4-mini).

Per-band rescale factors, switched by length: theta'_i = theta_i / ext_i with ext = ``long_factor`` when the
current length exceeds L0 = original_max_position_embeddings, else ``short_factor``. The attention factor is
computed once from s = ``factor`` (or max_position_embeddings / L0): a = sqrt(1 + ln s / ln L0) (1 if s <= 1),
or the explicit ``attention_factor``; it is not switched with the factors.

Keys cached under the short factors are stale once the length crosses L0 (transformers PR #33129):
:mod:`ropekit.cache` re-rotates them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ropekit.integers import as_real, past_float64, shown
from ropekit.scaling.base import Scaling, check_length, check_number

__all__ = ["LongRope"]


@dataclass(frozen=True)
class LongRope(Scaling):
    """LongRoPE scaling; ``factor`` or ``max_position_embeddings`` gives s.

    Args:
        short_factor: per-band rescale factors (n = rotary_dim / 2 numbers > 0) used up to L0.
        long_factor: the same, used once the sequence is longer than L0.
        original_max_position_embeddings: L0 (an int >= 2: the attention factor divides by ln L0).
        factor: s >= 1; when None, s = ``max_position_embeddings`` / L0, which must then be >= L0.
        max_position_embeddings: the extended context (a positive int).
        attention_factor_: an explicit attention factor (> 0), used instead of sqrt(1 + ln s / ln L0).
    """

    short_factor: tuple[float, ...]
    long_factor: tuple[float, ...]
    original_max_position_embeddings: int
    factor: float | None = None
    max_position_embeddings: int | None = None
    attention_factor_: float | None = None
    rope_type = "longrope"
    dynamic = True

    def __post_init__(self) -> None:
        for name in ("short_factor", "long_factor"):
            vals = getattr(self, name)
            if not isinstance(vals, Sequence) or isinstance(vals, (str, bytes)):
                msg = f"LongRope.{name} must be a list of finite numbers > 0, got {shown(vals, 200)}"
                raise ValueError(msg)  # noqa: TRY004 - field errors are ValueErrors, as everywhere in scaling
            out = []
            for i, v in enumerate(vals):
                x = as_real(v)
                if x is None or x <= 0:
                    raise ValueError(
                        f"LongRope.{name} must be a list of finite numbers > 0{past_float64(v)}, got {shown(v)} at "
                        f"index {i} of {len(vals)}"
                    )
                out.append(x)
            object.__setattr__(self, name, tuple(out))
        L0 = check_length(
            "LongRope", "original_max_position_embeddings", self.original_max_position_embeddings, low=2
        )
        object.__setattr__(self, "original_max_position_embeddings", L0)
        if self.max_position_embeddings is not None:
            mpe = check_length("LongRope", "max_position_embeddings", self.max_position_embeddings)
            object.__setattr__(self, "max_position_embeddings", mpe)
        if self.factor is not None:
            object.__setattr__(self, "factor", check_number("LongRope", "factor", self.factor, lo=1.0))
        elif self.max_position_embeddings is None:
            raise ValueError(
                "LongRope needs factor or max_position_embeddings (s = max_position_embeddings / L0)"
            )
        elif self.max_position_embeddings < L0:
            raise ValueError(
                f"LongRope.max_position_embeddings must be >= original_max_position_embeddings (s = max / L0 >= 1) "
                f"when factor is not given, got {self.max_position_embeddings} < {L0}"
            )
        if self.attention_factor_ is not None:
            af = check_number("LongRope", "attention_factor", self.attention_factor_, lo=0.0, lo_open=True)
            object.__setattr__(self, "attention_factor_", af)

    @property
    def scale_factor(self) -> float:
        if self.factor is not None:
            return float(self.factor)
        return float(self.max_position_embeddings) / self.original_max_position_embeddings  # type: ignore[arg-type]

    @property
    def attention_factor(self) -> float:
        if self.attention_factor_ is not None:
            return float(self.attention_factor_)
        s = self.scale_factor
        return (
            1.0 if s <= 1.0 else math.sqrt(1 + math.log(s) / math.log(self.original_max_position_embeddings))
        )

    def uses_long(self, seq_len: int | None) -> bool:
        return seq_len is not None and seq_len > self.original_max_position_embeddings

    def check(self, n_bands: int, rotary_dim: int) -> None:
        for name in ("short_factor", "long_factor"):
            if len(getattr(self, name)) != n_bands:
                raise ValueError(
                    f"LongRope.{name} must have rotary_dim/2 = {n_bands} entries, got {len(getattr(self, name))}"
                )

    def scale(
        self, theta: torch.Tensor, *, base: float, rotary_dim: int, seq_len: int | None
    ) -> torch.Tensor:
        ext = self.long_factor if self.uses_long(seq_len) else self.short_factor
        return theta / torch.tensor(ext, dtype=torch.float64, device=theta.device)

    def to_hf(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "rope_type": "longrope",
            "short_factor": list(self.short_factor),
            "long_factor": list(self.long_factor),
            "original_max_position_embeddings": self.original_max_position_embeddings,
        }
        if self.factor is not None:
            d["factor"] = self.factor
        if self.attention_factor_ is not None:
            d["attention_factor"] = self.attention_factor_
        return d

# SPDX-License-Identifier: MIT
"""YaRN: NTK-by-parts interpolation plus attention temperature (Peng et al. 2023, arXiv 2309.00071).

The ramp is the one of the official YaRN code and transformers' ``_compute_yarn_parameters`` (so that
``inv_freq`` matches transformers, tests/ropekit/scaling/test_hf_parity.py), not the paper's formula: the paper
ramps linearly in r = L0 / lambda_i (rotations of band i inside L0) between alpha = beta_slow and beta = beta_fast;
the code ramps linearly in the band index i between the correction dims of those two rotation counts, rounded
outwards. Both keep bands with more than beta_fast rotations and interpolate bands with fewer than beta_slow; in
between they differ (r_i is exponential in i). With s = factor, L0 = original_max_position_embeddings,
d = rotary dim, b = base:

- correction dim for N rotations inside L0: c(N) = d * ln(L0 / (2 pi N)) / (2 ln b);
  lo = c(beta_fast), hi = c(beta_slow); with ``truncate`` (default) lo = floor(lo), hi = ceil(hi);
  then lo = max(lo, 0), hi = min(hi, d - 1); if lo == hi, hi += 0.001;
- ramp r_i = clamp((i - lo) / (hi - lo), 0, 1); theta'_i = theta_i * (r_i / s + (1 - r_i)):
  fast bands (i < lo) keep theta_i, slow bands (i > hi) are interpolated by s;
- attention factor a: explicit ``attention_factor`` if given (1.0 included: pitfalls item 21); else, when both
  ``mscale`` and ``mscale_all_dim`` are set (DeepSeek), m(s, mscale) / m(s, mscale_all_dim); else m(s, 1) =
  0.1 ln s + 1, where m(s, k) = 1 if s <= 1 else 0.1 k ln s + 1. Logits scale by a^2.

DeepSeek's MLA attention additionally multiplies its softmax scale by m(s, mscale_all_dim)^2:
:func:`mla_softmax_scale`.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Any

import torch

from ropekit.integers import as_int, shown
from ropekit.scaling.base import MAX_DIM, Scaling, check_length, check_number, check_positive_int

__all__ = ["Yarn", "mla_softmax_scale", "yarn_correction_range", "yarn_mscale"]


def yarn_mscale(scale: float, mscale: float = 1.0) -> float:
    """m(s, k) = 1 if s <= 1 else 0.1 * k * ln(s) + 1.

    Raises:
        ValueError: ``scale`` not a finite number > 0, ``mscale`` not a finite number >= 0.
    """
    scale = check_number("yarn_mscale", "scale", scale, lo=0.0, lo_open=True)
    mscale = check_number("yarn_mscale", "mscale", mscale, lo=0.0)
    return _mscale(scale, mscale)


def _mscale(scale: float, mscale: float) -> float:
    # unchecked: Yarn built by from_hf(strict=False) keeps what transformers accepts
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def yarn_correction_range(
    beta_fast: float, beta_slow: float, rotary_dim: int, base: float, original_max: int, truncate: bool = True
) -> tuple[float, float]:
    """(lo, hi) band indices of the ramp (see the module docstring).

    Raises:
        ValueError: a beta not a finite number > 0 or ``beta_fast`` < ``beta_slow``, ``rotary_dim`` not a positive
            even int, ``base`` not a finite number > 1, ``original_max`` not a positive int.
        TypeError: ``truncate`` not a bool.
    """
    owner = "yarn_correction_range"
    bf = check_number(owner, "beta_fast", beta_fast, lo=0.0, lo_open=True)
    bs = check_number(owner, "beta_slow", beta_slow, lo=0.0, lo_open=True)
    if bf < bs:
        raise ValueError(f"{owner}: beta_fast must be >= beta_slow, got beta_fast={bf!r} < beta_slow={bs!r}")
    rd = as_int(rotary_dim)
    if rd is None or not 2 <= rd <= MAX_DIM or rd % 2:
        big = f" (at most {MAX_DIM})" if rd is not None and rd > MAX_DIM else ""
        raise ValueError(f"{owner}.rotary_dim must be a positive even int{big}, got {shown(rotary_dim)}")
    base = check_number(owner, "base", base, lo=1.0, lo_open=True)
    original_max = check_length(owner, "original_max", original_max)
    if not isinstance(truncate, bool):
        raise TypeError(f"{owner}.truncate must be True or False, got {truncate!r}")
    return _correction_range(bf, bs, rd, base, original_max, truncate)


def _correction_range(
    beta_fast: float, beta_slow: float, rotary_dim: int, base: float, original_max: int, truncate: bool
) -> tuple[float, float]:
    # unchecked, as transformers computes it (Yarn.ramp_bounds; from_hf(strict=False) objects included)
    def dim(n_rot: float) -> float:
        return rotary_dim * math.log(original_max / (n_rot * 2 * math.pi)) / (2 * math.log(base))

    lo, hi = dim(beta_fast), dim(beta_slow)
    if truncate:
        lo, hi = math.floor(lo), math.ceil(hi)
    return max(lo, 0), min(hi, rotary_dim - 1)


def mla_softmax_scale(qk_head_dim: int, factor: float, mscale_all_dim: float | None) -> float:
    """DeepSeek MLA softmax scale: qk_head_dim^-0.5 * m(s, mscale_all_dim)^2 (plain qk_head_dim^-0.5 without it).

    Raises:
        ValueError: ``qk_head_dim`` not a positive int, ``factor`` not a finite number >= 1, ``mscale_all_dim``
            neither None nor a finite number >= 0.
    """
    qk_head_dim = check_positive_int("mla_softmax_scale", "qk_head_dim", qk_head_dim, high=MAX_DIM)
    factor = check_number("mla_softmax_scale", "factor", factor, lo=1.0)
    if mscale_all_dim is not None:
        mscale_all_dim = check_number("mla_softmax_scale", "mscale_all_dim", mscale_all_dim, lo=0.0)
    scale: float = qk_head_dim**-0.5
    if mscale_all_dim:
        m = _mscale(factor, mscale_all_dim)
        scale *= m * m
    return scale


@dataclass(frozen=True)
class Yarn(Scaling):
    """YaRN scaling; see the module docstring for the formulas (transformers' index ramp, not the paper's).

    Args:
        factor: the extension ratio s >= 1.
        original_max_position_embeddings: the pretraining length L0.
        beta_fast: rotations inside L0 above which a band is kept (32).
        beta_slow: rotations inside L0 below which a band is interpolated by s (1).
        mscale: DeepSeek's numerator of the attention factor ratio.
        mscale_all_dim: DeepSeek's denominator (and MLA's softmax scale, :func:`mla_softmax_scale`).
        attention_factor_: an explicit attention factor (> 0); wins over the rest.
        truncate: round the correction dims outwards (transformers' default; gpt-oss sets False).
    """

    factor: float
    original_max_position_embeddings: int
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    mscale: float | None = None
    mscale_all_dim: float | None = None
    attention_factor_: float | None = None
    truncate: bool = True
    rope_type = "yarn"
    needs_base = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "factor", check_number("Yarn", "factor", self.factor, lo=1.0))
        L0 = check_length("Yarn", "original_max_position_embeddings", self.original_max_position_embeddings)
        object.__setattr__(self, "original_max_position_embeddings", L0)
        bf = check_number("Yarn", "beta_fast", self.beta_fast, lo=0.0, lo_open=True)
        bs = check_number("Yarn", "beta_slow", self.beta_slow, lo=0.0, lo_open=True)
        if bf < bs:
            raise ValueError(f"Yarn.beta_fast must be >= beta_slow, got beta_fast={bf!r} < beta_slow={bs!r}")
        object.__setattr__(self, "beta_fast", bf)
        object.__setattr__(self, "beta_slow", bs)
        for name in ("mscale", "mscale_all_dim"):
            v = getattr(self, name)
            if v is not None:
                object.__setattr__(self, name, check_number("Yarn", name, v, lo=0.0))
        if self.attention_factor_ is not None:
            af = check_number("Yarn", "attention_factor", self.attention_factor_, lo=0.0, lo_open=True)
            object.__setattr__(self, "attention_factor_", af)
        if not isinstance(self.truncate, bool):
            raise TypeError(f"Yarn.truncate must be a bool, got {self.truncate!r}")
        if (
            self.mscale
            and self.mscale_all_dim
            and self.mscale == self.mscale_all_dim
            and self.attention_factor_ is None
        ):
            warnings.warn(
                f"Yarn: mscale == mscale_all_dim == {self.mscale} gives attention_factor 1.0 on cos/sin; that is right "
                "only for DeepSeek-style MLA attention, which applies mla_softmax_scale() instead",
                stacklevel=3,
            )

    @property
    def attention_factor(self) -> float:
        if self.attention_factor_ is not None:
            return float(self.attention_factor_)
        if self.mscale and self.mscale_all_dim:
            return _mscale(self.factor, self.mscale) / _mscale(self.factor, self.mscale_all_dim)
        return _mscale(self.factor, 1.0)

    def ramp_bounds(self, base: float, rotary_dim: int) -> tuple[float, float]:
        lo, hi = _correction_range(
            self.beta_fast,
            self.beta_slow,
            rotary_dim,
            base,
            self.original_max_position_embeddings,
            self.truncate,
        )
        return (lo, hi + 0.001) if lo == hi else (lo, hi)

    def scale(
        self, theta: torch.Tensor, *, base: float, rotary_dim: int, seq_len: int | None
    ) -> torch.Tensor:
        lo, hi = self.ramp_bounds(base, rotary_dim)
        i = torch.arange(theta.numel(), dtype=torch.float64, device=theta.device)
        ramp = ((i - lo) / (hi - lo)).clamp(0.0, 1.0)
        return theta * (ramp / self.factor + (1.0 - ramp))

    def to_hf(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "rope_type": "yarn",
            "factor": self.factor,
            "original_max_position_embeddings": self.original_max_position_embeddings,
            "beta_fast": self.beta_fast,
            "beta_slow": self.beta_slow,
            "truncate": self.truncate,
        }
        for key, val in (
            ("mscale", self.mscale),
            ("mscale_all_dim", self.mscale_all_dim),
            ("attention_factor", self.attention_factor_),
        ):
            if val is not None:
                d[key] = val
        return d

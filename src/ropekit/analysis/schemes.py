# SPDX-License-Identifier: MIT
"""The scaling schemes side by side at a target length: per-band frequency ratio and attention factor.

For a model pretrained at L0 and extended to a target T (s = T / L0), each scheme is built from the unscaled spec
with HF's default parameters, and band i's ratio theta_i / theta'_i is reported: 1 leaves the band alone
(extrapolation), s interpolates it fully.

- PI / linear (Chen et al. 2023, arXiv 2306.15595): theta / s for every band;
- NTK-aware (bloc97 2023): base * s^(r / (r - 2));
- dynamic NTK (HF): NTK with the factor recomputed from the current length; configured with factor s and evaluated
  at T = s * L0 it is NTK with factor s^2 - s + 1 (HF's s * T / L0 - (s - 1)), so it stretches more than NTK;
- YaRN (Peng et al. 2023, arXiv 2309.00071): NTK-by-parts ramp between beta_fast 32 and beta_slow 1, attention
  factor 0.1 ln s + 1;
- Llama 3 (Meta 2024): wavelength bands with low_freq_factor 1, high_freq_factor 4;
- LongRoPE (Ding et al. 2024, arXiv 2402.13753) needs searched per-band factors: only the model's own.

Shapes: n bands, k schemes.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

import torch

from ropekit.analysis.compare import SCHEMES, build_scheme, original_length
from ropekit.spec import RopeSpec

__all__ = ["SCHEME_NAMES", "SchemeTable", "original_length", "scheme", "scheme_table"]

SCHEME_NAMES: tuple[str, ...] = SCHEMES  # the schemes `ropekit inspect --compare` knows, in the same order
scheme = build_scheme  # a scheme by name with HF's default parameters


@dataclass(frozen=True)
class SchemeTable:
    """Per-band ratios theta / theta' of each scheme at ``target`` (and the model's own, named ``model:<type>``)."""

    band: torch.Tensor  # [n] int64
    wavelength: torch.Tensor  # [n] float64 unscaled wavelengths (tokens per turn)
    ratio: dict[str, torch.Tensor]  # scheme -> [n] float64
    attention_factor: dict[str, float]  # scheme -> factor on cos/sin (logits scale by its square)
    original_length: int
    target: int
    # scheme -> why it was left out (base-defined schemes on an explicit frequency table, e.g. a vision tower's)
    not_applicable: dict[str, str] = field(default_factory=dict)

    @property
    def factor(self) -> float:
        return self.target / self.original_length

    def as_dict(self) -> dict[str, object]:
        return {
            "original_length": self.original_length,
            "target": self.target,
            "factor": self.factor,
            "band": self.band.tolist(),
            "wavelength": [v if math.isfinite(v) else None for v in self.wavelength.tolist()],
            "ratio": {k: v.tolist() for k, v in self.ratio.items()},
            "attention_factor": dict(self.attention_factor),
            "not_applicable": dict(self.not_applicable),
        }


def scheme_table(
    spec: RopeSpec, *, context: int, target: int, schemes: tuple[str, ...] = SCHEME_NAMES
) -> SchemeTable:
    """Every scheme in ``schemes`` (plus the spec's own scaling, if any) extending L0 to ``target``."""
    L0 = original_length(spec, context)
    if isinstance(target, bool) or not isinstance(target, int) or target < L0:
        raise ValueError(f"target must be an int >= the original length {L0}, got {target!r}")
    s = target / L0
    plain = dataclasses.replace(spec, scaling=None)
    theta = plain.frequencies()
    columns: dict[str, RopeSpec] = {}
    if spec.scaling is not None:
        columns[f"model:{type(spec.scaling).__name__}"] = spec
    refused: dict[str, str] = {}
    for name in schemes:
        sc = scheme(name, s, L0)
        if spec.freqs is not None and sc.needs_base:
            refused[name] = (
                f"{type(sc).__name__} is defined from the base; this spec has an explicit freqs table"
            )
            continue
        columns[name] = dataclasses.replace(spec, scaling=sc)
    ratio = {}
    for name, sp in columns.items():
        th = sp.frequencies(target)
        ratio[name] = torch.where(th > 0, theta / th.clamp_min(1e-300), torch.ones_like(theta))
    return SchemeTable(
        band=torch.arange(spec.n_bands),
        wavelength=torch.where(theta > 0, 2 * math.pi / theta.clamp_min(1e-300), math.inf),
        ratio=ratio,
        attention_factor={name: sp.attention_factor for name, sp in columns.items()},
        original_length=L0,
        target=int(target),
        not_applicable=refused,
    )

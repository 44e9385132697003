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

The columns (and the errors) are :func:`ropekit.analysis.compare.scheme_columns`, shared with ``inspect
--compare``'s :func:`~ropekit.analysis.compare.compare_schemes`: a scheme an explicit ``freqs`` table cannot take
(base-defined: NTK, dynamic, YaRN) is listed in ``not_applicable``; ``longrope`` is accepted only for a LongRoPE
spec, whose column is the model's own.

Shapes: n bands, k schemes.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

import torch

from ropekit.analysis.compare import SCHEMES, build_scheme, original_length, scheme_columns
from ropekit.spec import RopeSpec

__all__ = ["SCHEME_NAMES", "SchemeTable", "original_length", "scheme", "scheme_table"]

#: The default columns, in order (:data:`ropekit.analysis.compare.SCHEMES`: the schemes built from a factor and L0
#: alone; ``"longrope"`` may be named too, for a LongRoPE spec only).
SCHEME_NAMES: tuple[str, ...] = SCHEMES
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
    """Every scheme in ``schemes`` (plus the spec's own scaling, if any) extending L0 to ``target``.

    Raises:
        ValueError: ``context`` or ``target`` not a positive int, ``target`` below L0, unknown or repeated names
            in ``schemes``, ``longrope`` for a spec without LongRoPE (see
            :func:`~ropekit.analysis.compare.scheme_columns`).
    """
    L0, columns, refused = scheme_columns(spec, context=context, target=target, schemes=schemes)
    plain = dataclasses.replace(spec, scaling=None)
    theta = plain.frequencies()
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

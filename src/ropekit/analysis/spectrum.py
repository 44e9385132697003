# SPDX-License-Identifier: MIT
"""Band spectrum: each band's wavelength against the context and training lengths, with the critical dimension.

- wavelength of band i: lambda_i = 2*pi / theta_i tokens per full turn (seed 004 section 3.3; inf for a band that
  p-RoPE zeroes);
- critical dimension (Liu et al. 2024, "Scaling Laws of RoPE-based Extrapolation", arXiv 2310.05209; seed 002):
  the leading channels whose period fits inside the training length L0. Bands past it never complete a turn
  during training, so longer contexts show them angles they have never seen.

Shapes: n bands.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import torch

from ropekit.analysis.bands import critical_dim
from ropekit.analysis.schemes import original_length
from ropekit.integers import whole
from ropekit.spec import RopeSpec, require_spec

__all__ = ["Spectrum", "spectrum", "wavelengths"]

_TWO_PI = 2.0 * math.pi


def wavelengths(theta: torch.Tensor) -> torch.Tensor:
    """[n] float64 tokens per full turn, 2*pi / theta (inf where theta is 0)."""
    theta = theta.to(torch.float64)
    return torch.where(theta > 0, _TWO_PI / theta, torch.full_like(theta, math.inf))


@dataclass(frozen=True)
class Spectrum:
    """Wavelengths of every band, unscaled (as pretrained) and as the spec scales them at ``context``."""

    band: torch.Tensor  # [n] int64
    wavelength: torch.Tensor  # [n] float64, the spec's own frequencies at `context`
    wavelength_unscaled: torch.Tensor  # [n] float64, the same spec without its scaling
    context: int  # length the model is used at
    train_len: int  # L0, the pretraining length (== context for an unscaled spec)
    critical_dim: int  # leading channels whose period fits inside L0 (even, in [0, rotary_dim])

    @property
    def critical_band(self) -> int:
        """Index of the first band that does not complete a turn within L0 (n if all do)."""
        return self.critical_dim // 2

    def as_dict(self) -> dict[str, object]:
        return {
            "band": self.band.tolist(),
            "wavelength": _finite_list(self.wavelength),
            "wavelength_unscaled": _finite_list(self.wavelength_unscaled),
            "context": self.context,
            "train_len": self.train_len,
            "critical_dim": self.critical_dim,
        }


def spectrum(spec: RopeSpec, context: int) -> Spectrum:
    """The :class:`Spectrum` of ``spec`` used at ``context`` tokens.

    The critical dimension uses Liu et al.'s closed form when the spec has a base formula and no p-RoPE, and
    otherwise counts the bands whose unscaled wavelength is at most L0 (the same definition, any table).
    """
    require_spec(spec)
    context = whole(context, 1, f"context must be a positive int, got {context!r}")
    L0 = original_length(spec, context)
    plain = dataclasses.replace(spec, scaling=None)
    wl_plain = wavelengths(plain.frequencies())
    rd = int(spec.rotary_dim)  # type: ignore[arg-type]
    if spec.freqs is None and spec.p == 1.0:
        cd = critical_dim(rd, spec.base, L0)
    else:
        cd = 2 * int((wl_plain <= L0).sum())
    return Spectrum(
        band=torch.arange(spec.n_bands),
        wavelength=wavelengths(spec.frequencies(context)),
        wavelength_unscaled=wl_plain,
        context=int(context),
        train_len=L0,
        critical_dim=cd,
    )


def _finite_list(x: torch.Tensor) -> list[float | None]:
    return [float(v) if math.isfinite(v) else None for v in x.tolist()]

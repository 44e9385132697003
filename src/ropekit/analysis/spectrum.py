# SPDX-License-Identifier: MIT
"""Band spectrum: each band's wavelength against the context and training lengths, with the critical dimension.

- wavelength of band i: lambda_i = 2*pi / theta_i tokens per full turn (seed 004 section 3.3; inf for a band that
  p-RoPE zeroes);
- critical dimension (Liu et al. 2024, "Scaling Laws of RoPE-based Extrapolation", arXiv 2310.05209; seed 002):
  the leading channels whose period fits inside the training length L0. Bands past it never complete a turn
  during training, so longer contexts show them angles they have never seen. It is a *leading* count, so it needs
  a table ordered by frequency: an explicit ``freqs`` table (a vision tower's two or three descending per-axis
  sections) has none (``None``, as ``ropekit inspect``'s ``critical_dim: null``); :attr:`Spectrum.turns_in_train`
  marks each band instead.

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
from ropekit.scaling import NTK, Linear
from ropekit.spec import RopeSpec, require_spec

__all__ = ["Spectrum", "spectrum", "wavelengths"]

_TWO_PI = 2.0 * math.pi


def wavelengths(theta: torch.Tensor) -> torch.Tensor:
    """[n] float64 tokens per full turn, 2*pi / theta (inf where theta is 0)."""
    theta = theta.to(torch.float64)
    return torch.where(theta > 0, _TWO_PI / theta, torch.full_like(theta, math.inf))


@dataclass(frozen=True)
class Spectrum:
    """Wavelengths of every band, unscaled (as pretrained) and as the spec scales them at ``context``.

    ``train_len_assumed`` is True when L0 is not in the configuration but derived as ``context / factor`` (a
    linear or NTK scheme: :func:`~ropekit.analysis.compare.original_length`), so a figure can say so.
    """

    band: torch.Tensor  # [n] int64
    wavelength: torch.Tensor  # [n] float64, the spec's own frequencies at `context`
    wavelength_unscaled: torch.Tensor  # [n] float64, the same spec without its scaling
    context: int  # length the model is used at
    train_len: int  # L0, the pretraining length (== context for an unscaled spec)
    # leading channels whose period fits inside L0 (even, in [0, rotary_dim]); None for an explicit table
    critical_dim: int | None
    train_len_assumed: bool = False

    @property
    def critical_band(self) -> int | None:
        """Index of the first band that does not complete a turn within L0 (n if all do; None without a
        critical dimension)."""
        return None if self.critical_dim is None else self.critical_dim // 2

    @property
    def turns_in_train(self) -> torch.Tensor:
        """[n] bool: band i completes a full turn within L0 (unscaled wavelength <= L0), for any table."""
        return self.wavelength_unscaled <= self.train_len

    def as_dict(self) -> dict[str, object]:
        return {
            "band": self.band.tolist(),
            "wavelength": _finite_list(self.wavelength),
            "wavelength_unscaled": _finite_list(self.wavelength_unscaled),
            "context": self.context,
            "train_len": self.train_len,
            "train_len_assumed": self.train_len_assumed,
            "critical_dim": self.critical_dim,
            "turns_in_train": self.turns_in_train.tolist(),
        }


def spectrum(spec: RopeSpec, context: int, *, train_len: int | None = None) -> Spectrum:
    """The :class:`Spectrum` of ``spec`` used at ``context`` tokens.

    ``train_len`` overrides L0 (default :func:`~ropekit.analysis.compare.original_length`); the report passes a
    sliding-window layer's window as both ``context`` and ``train_len``: those layers never see two tokens further
    apart, in training or after. The critical dimension uses Liu et al.'s closed form when the spec has a base
    formula and no p-RoPE, counts the bands whose unscaled wavelength is at most L0 for p-RoPE (the same
    definition), and is None for an explicit ``freqs`` table, whose bands are not ordered by frequency.
    """
    require_spec(spec)
    context = whole(context, 1, f"context must be a positive int, got {context!r}")
    derived = original_length(spec, context)
    if train_len is None:
        L0 = derived
        assumed = _assumed(spec)
    else:
        L0 = whole(train_len, 1, f"train_len must be a positive int, got {train_len!r}")
        assumed = False
    plain = dataclasses.replace(spec, scaling=None)
    theta_plain = plain.frequencies()
    wl_plain = wavelengths(theta_plain)
    rd = int(spec.rotary_dim)  # type: ignore[arg-type]
    cd: int | None
    if spec.freqs is not None or bool((theta_plain[1:] > theta_plain[:-1]).any()):
        cd = None  # not ordered by frequency: no leading count (inspect: critical_dim null)
    elif spec.p == 1.0:
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
        train_len_assumed=assumed,
    )


def _assumed(spec: RopeSpec) -> bool:
    """Whether :func:`original_length` derives L0 as context / factor (no length in the configuration)."""
    sc = spec.scaling
    if sc is None:
        return False
    if any(
        getattr(sc, a, None) is not None
        for a in ("original_max_position_embeddings", "max_position_embeddings")
    ):
        return False
    return isinstance(sc, (Linear, NTK)) and getattr(sc, "factor", None) is not None


def _finite_list(x: torch.Tensor) -> list[float | None]:
    return [float(v) if math.isfinite(v) else None for v in x.tolist()]

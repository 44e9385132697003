# SPDX-License-Identifier: MIT
"""Rotations per band over a context: how many full turns band i completes within L tokens.

Band i turns by theta_i per token (seed 004 section 3.3), so over a context of L tokens it completes
L * theta_i / (2*pi) turns. A band with fewer than one turn inside the training length never sees every angle;
scaling (PI, NTK, YaRN, ...) lowers theta_i so that the extended context stays within the angles seen.

Shapes: n bands.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import torch

from ropekit.analysis.compare import check_length
from ropekit.analysis.schemes import original_length
from ropekit.integers import whole
from ropekit.spec import RopeSpec, require_spec

__all__ = ["Rotations", "rotations", "turns"]


def turns(theta: torch.Tensor, length: int) -> torch.Tensor:
    """[n] float64 full turns completed within ``length`` tokens: length * theta / (2*pi).

    Raises:
        ValueError: ``length`` is not a positive int.
    """
    check_length("length", length)
    return theta.to(torch.float64) * float(length) / (2.0 * math.pi)


@dataclass(frozen=True)
class Rotations:
    """Turns per band: unscaled over L0 (what training saw), unscaled over L, and as scaled over L."""

    band: torch.Tensor  # [n] int64
    at_train: torch.Tensor  # [n] unscaled spec over L0
    before: torch.Tensor  # [n] unscaled spec over the context L
    after: torch.Tensor  # [n] the spec (with its scaling) over L
    context: int
    train_len: int

    def as_dict(self) -> dict[str, object]:
        return {
            "band": self.band.tolist(),
            "at_train": self.at_train.tolist(),
            "before": self.before.tolist(),
            "after": self.after.tolist(),
            "context": self.context,
            "train_len": self.train_len,
        }


def rotations(spec: RopeSpec, context: int) -> Rotations:
    """The :class:`Rotations` of ``spec`` at ``context`` (dynamic schemes evaluated at ``context``)."""
    require_spec(spec)
    context = whole(context, 1, f"context must be a positive int, got {context!r}")
    L0 = original_length(spec, context)
    theta_plain = dataclasses.replace(spec, scaling=None).frequencies()
    return Rotations(
        band=torch.arange(spec.n_bands),
        at_train=turns(theta_plain, L0),
        before=turns(theta_plain, context),
        after=turns(spec.frequencies(context), context),
        context=int(context),
        train_len=L0,
    )

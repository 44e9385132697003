"""Seed 004's counter-examples measured: the dense rotation's shift error and the single frequency's aliasing."""

from __future__ import annotations

import math

import torch

from ropekit.lab.encodings import DenseRotation, RoPE, SingleFrequency
from ropekit.lab.experiments.invariance import confusability, shift_error


def test_shift_error_separates_relative_from_absolute_rotations() -> None:
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(32, 16, generator=g), torch.randn(32, 16, generator=g)
    assert shift_error(RoPE(64, 4, 16), q, k) < 1e-5
    assert shift_error(DenseRotation(64, 4, 16, generators=1), q, k) < 1e-5
    assert shift_error(DenseRotation(64, 4, 16), q, k) > 1e-1


def test_single_frequency_confuses_distances_one_period_apart() -> None:
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(32, 16, generator=g), torch.randn(32, 16, generator=g)
    gap, d1, d2 = confusability(SingleFrequency(64, 4, 16, theta=2 * math.pi / 50), q, k, 200)
    assert gap < 1e-4 and abs(d1 - d2) % 50 == 0  # the period: D and D + 50 give the same logits
    rope_gap, _, _ = confusability(RoPE(64, 4, 16), q, k, 200)
    assert rope_gap > 0.1

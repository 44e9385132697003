"""KERPLE's two kernels against Chi et al. 2022's formulas, in float64 by hand."""

from __future__ import annotations

import math

import pytest
import torch

from ropekit.lab.encodings import KerpleLog, KerplePower


def test_kerple_log_is_minus_r1_log_1_plus_r2_distance() -> None:
    enc = KerpleLog(32, 2, 16)
    with torch.no_grad():
        enc.r1.copy_(torch.tensor([0.5, 2.0]))
        enc.r2.copy_(torch.tensor([0.3, 1.5]))
    pos = torch.arange(0, 40, 3).view(1, -1)
    bias = enc.bias(pos, pos)
    for h, (r1, r2) in enumerate(((0.5, 0.3), (2.0, 1.5))):
        for i in range(pos.shape[1]):
            for j in range(i + 1):
                dist = int(pos[0, i] - pos[0, j])
                want = -r1 * math.log(1 + r2 * dist)
                assert float(bias[0, h, i, j]) == pytest.approx(want, rel=1e-5, abs=1e-6)


def test_kerple_power_is_minus_r1_distance_to_r2_and_keeps_r2_in_range() -> None:
    enc = KerplePower(32, 2, 16)
    with torch.no_grad():
        enc.r1.copy_(torch.tensor([0.7, 1.2]))
        enc.r2.copy_(torch.tensor([0.5, 3.0]))  # 3.0 is outside (0, 2]: used as 2
    pos = torch.tensor([[0, 1, 7, 50]])
    bias = enc.bias(pos, pos)
    for h, (r1, r2) in enumerate(((0.7, 0.5), (1.2, 2.0))):
        for i in range(4):
            for j in range(i + 1):
                dist = int(pos[0, i] - pos[0, j])
                assert float(bias[0, h, i, j]) == pytest.approx(-r1 * dist**r2, rel=1e-5, abs=1e-6)
    assert float(bias[0, 0, 0, 3]) == 0.0  # a key ahead of the query: distance 0 (masked anyway)

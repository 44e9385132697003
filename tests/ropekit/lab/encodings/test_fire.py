"""FIRE against Li et al. 2023's b(i, j) = f(psi(i - j) / psi(max(L, i))), psi(x) = log(c x + 1), in float64."""

from __future__ import annotations

import math

import pytest
import torch

from ropekit.lab.encodings import FIRE


def test_fire_bias_follows_the_formula() -> None:
    torch.manual_seed(0)
    enc = FIRE(32, 2, 16, max_positions=64, hidden=8)
    with torch.no_grad():
        enc.c.fill_(0.7)
        enc.threshold.fill_(64.0)
    w1, b1 = enc.mlp[0].weight.double(), enc.mlp[0].bias.double()
    w2, b2 = enc.mlp[2].weight.double(), enc.mlp[2].bias.double()

    def f(x: float) -> torch.Tensor:  # the MLP, by hand
        return torch.relu(w1[:, 0] * x + b1) @ w2.T + b2

    def psi(x: float) -> float:
        return math.log(0.7 * x + 1)

    pos = torch.tensor([[0, 5, 63, 64, 200, 1000]])
    bias = enc.bias(pos, pos)
    for a in range(6):
        for b in range(a + 1):
            i, j = int(pos[0, a]), int(pos[0, b])
            want = f(psi(i - j) / psi(max(64, i)))
            torch.testing.assert_close(bias[0, :, a, b].double(), want, rtol=1e-5, atol=1e-6)


def test_fire_interpolates_distances_into_the_unit_interval() -> None:
    enc = FIRE(32, 2, 16, max_positions=128)
    pos = torch.arange(0, 4096, 37).view(1, -1)
    x = enc.normalized_distance(pos, pos)
    assert float(x.detach().min()) >= 0.0 and float(x.detach().max()) <= 1.0 + 1e-6
    assert float(x[0, -1, 0].detach()) == pytest.approx(
        1.0, abs=1e-6
    )  # the farthest key of a query past L maps to 1

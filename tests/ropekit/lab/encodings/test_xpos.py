"""xPos against the paper's logit, written from Sun et al. 2022 eq. (and torchscale's constants) in float64."""

from __future__ import annotations

import cmath
import math

import pytest
import torch

from ropekit.lab.encodings import XPos


def paper_logit(
    q: list[float], k: list[float], n: int, m: int, gamma: float = 0.4, big_b: float = 512.0
) -> float:
    """sum_i Re[q~_i conj(k~_i) e^{i (n - m) theta_i}] * zeta_i^((n - m)/B), q~_i = q_i + j q_{i+d/2} (half pairs)."""
    d = len(q)
    h = d // 2
    total = 0.0
    for i in range(h):
        theta = 10_000.0 ** (-2 * i / d)
        zeta = (i / h + gamma) / (1 + gamma)
        zq, zk = complex(q[i], q[i + h]), complex(k[i], k[i + h])
        total += (zq * zk.conjugate() * cmath.exp(1j * (n - m) * theta)).real * zeta ** ((n - m) / big_b)
    return total


def test_xpos_logits_follow_the_paper() -> None:
    torch.manual_seed(0)
    enc = XPos(64, 4, 16)
    q, k = torch.randn(1, 6, 1, 16), torch.randn(1, 6, 1, 16)
    pos = torch.tensor([[0, 3, 100, 511, 900, 2000]])
    qr, kr = enc.rotate(q, k, pos)
    for a in range(6):
        for b in range(a + 1):
            n, m = int(pos[0, a]), int(pos[0, b])
            want = paper_logit(q[0, a, 0].double().tolist(), k[0, b, 0].double().tolist(), n, m)
            got = float(qr[0, a, 0].double() @ kr[0, b, 0].double())
            assert got == pytest.approx(want, rel=1e-4, abs=1e-4), (n, m)


def test_xpos_decays_with_distance_and_is_relative() -> None:
    enc = XPos(64, 4, 16)
    q = torch.ones(1, 1, 1, 16)
    far = enc.rotate(q, q, torch.tensor([[0]]))[0].square().sum()  # zeta^0: the unrotated norm
    assert float(far) == pytest.approx(16.0)
    # the same distance at different absolute positions gives the same logit (decay depends on n - m only)
    for shift in (0, 1000, 5000):
        pos = torch.tensor([[shift, shift + 700]])
        qr, kr = enc.rotate(q.expand(1, 2, 1, 16), q.expand(1, 2, 1, 16), pos)
        assert float(qr[0, 1, 0] @ kr[0, 0, 0]) == pytest.approx(
            paper_logit([1.0] * 16, [1.0] * 16, 700, 0), rel=1e-4
        )


def test_xpos_refuses_positions_that_overflow() -> None:
    enc = XPos(64, 4, 16)
    assert enc.max_position == int(80 * 512 / -math.log(0.4 / 1.4))
    q = torch.randn(1, 1, 1, 16)
    with pytest.raises(ValueError, match="max_position"):
        enc.rotate(q, q, torch.tensor([[enc.max_position + 1]]))
    with pytest.raises(ValueError, match="gamma"):
        XPos(64, 4, 16, gamma=0.0)

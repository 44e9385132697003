"""Su's bound and the rotated dot product against direct float64 sums and explicit rotation matrices."""

from __future__ import annotations

import cmath
import math

import pytest
import torch

from ropekit import RopeSpec
from ropekit.analysis.decay import (
    gaussian_dot_moments,
    gaussian_dot_samples,
    ones_dot,
    rotated_dot,
    su_bound,
)

DIST = [0, 1, 2, 7, 100, 1234, 98765]


def _theta(base: float, d: int) -> list[float]:
    return [base ** (-2 * i / d) for i in range(d // 2)]


def test_su_bound_matches_a_direct_sum() -> None:
    """(1/n) sum_{j=1}^{n} |sum_{k<j} exp(i m theta_k)|, with Python complex numbers."""
    theta = _theta(1e4, 32)
    n = len(theta)
    got = su_bound(RopeSpec(32), torch.tensor(DIST)).tolist()
    for m, g in zip(DIST, got):
        want = sum(abs(sum(cmath.exp(1j * m * theta[k]) for k in range(j))) for j in range(1, n + 1)) / n
        assert g == pytest.approx(want, rel=1e-12, abs=1e-12)
    assert got[0] == (n + 1) / 2


def _rot(v: tuple[float, float], a: float) -> tuple[float, float]:
    return (v[0] * math.cos(a) - v[1] * math.sin(a), v[0] * math.sin(a) + v[1] * math.cos(a))


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_rotated_dot_equals_explicit_rotations(layout: str) -> None:
    """<R(p theta) q, R((p - m) theta) k> band by band with 2x2 rotations, query at p = 1000."""
    spec = RopeSpec(16, layout=layout)  # type: ignore[arg-type]
    g = torch.Generator().manual_seed(1)
    q, k = (
        torch.randn(3, 16, generator=g, dtype=torch.float64),
        torch.randn(3, 16, generator=g, dtype=torch.float64),
    )
    got = rotated_dot(spec, q, k, torch.tensor(DIST))
    xs, ys = spec.pairs()
    p = 1000.0
    for s in range(3):
        for j, m in enumerate(DIST):
            want = 0.0
            for i, th in enumerate(_theta(1e4, 16)):
                qa = _rot((q[s, xs[i]].item(), q[s, ys[i]].item()), p * th)
                ka = _rot((k[s, xs[i]].item(), k[s, ys[i]].item()), (p - m) * th)
                want += qa[0] * ka[0] + qa[1] * ka[1]
            assert got[s, j].item() == pytest.approx(want, rel=1e-9, abs=1e-9)


def test_ones_dot_is_two_cos_sum() -> None:
    spec = RopeSpec(32)
    got = ones_dot(spec, torch.tensor(DIST)).tolist()
    for m, g in zip(DIST, got):
        assert g == pytest.approx(sum(2 * math.cos(m * t) for t in _theta(1e4, 32)), rel=1e-12, abs=1e-12)
    same = rotated_dot(spec, torch.ones(1, 32), torch.ones(1, 32), torch.tensor(DIST))[0].tolist()
    assert same == pytest.approx(got, rel=1e-12, abs=1e-12)


def test_gaussian_monte_carlo_agrees_with_the_closed_form() -> None:
    """q, k i.i.d. N(0, I_r): mean 0 and std sqrt(r) at every distance (Barbero et al. 2025, seed 001)."""
    spec = RopeSpec(64)
    m = torch.tensor([0, 1, 10, 1000, 100000])
    mean, std = gaussian_dot_moments(spec, m)
    assert mean.tolist() == [0.0] * 5 and std.tolist() == pytest.approx([8.0] * 5)
    n = 4000
    x = gaussian_dot_samples(spec, m, samples=n, seed=3)
    assert x.shape == (n, 5)
    assert (x.mean(0).abs() < 5 * 8.0 / n**0.5).all()  # 5 standard errors
    assert x.std(0).tolist() == pytest.approx([8.0] * 5, rel=0.06)


def test_bad_inputs_are_refused() -> None:
    spec = RopeSpec(8)
    with pytest.raises(ValueError, match=r"q and k must both be \[N, rotary_dim=8\]"):
        rotated_dot(spec, torch.ones(2, 6), torch.ones(2, 6), torch.tensor([0]))
    with pytest.raises(ValueError, match="distances must be a finite 1-D tensor"):
        su_bound(spec, torch.zeros(2, 2))
    with pytest.raises(ValueError, match="samples must be a positive int, got 0"):
        gaussian_dot_samples(spec, torch.tensor([0]), samples=0)

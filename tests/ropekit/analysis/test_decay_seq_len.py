"""The decay curves at a sequence length (trial finding 4): LongRoPE's long factors beyond its original length and
dynamic NTK's grown base, as the spectrum and rotations take them, against Python-float sums from the published
factors and transformers' dynamic-NTK formula."""

from __future__ import annotations

import cmath
import math

import pytest
import torch

from ropekit import RopeSpec
from ropekit.analysis.decay import gaussian_dot_samples, ones_dot, rotated_dot, su_bound
from ropekit.presets import PRESETS
from ropekit.scaling import DynamicNTK

DIST = [0, 5, 4095, 4097, 30000, 131072]


def _su(theta: list[float], m: float) -> float:
    n = len(theta)
    return sum(abs(sum(cmath.exp(1j * m * theta[k]) for k in range(j))) for j in range(1, n + 1)) / n


def _phi3(which: str) -> list[float]:
    rp = PRESETS["phi-3-mini-128k"].config["rope_scaling"]
    return [1e4 ** (-2 * i / 96) / f for i, f in enumerate(rp[f"{which}_factor"])]


def test_longrope_uses_its_long_factors_beyond_its_original_length() -> None:
    """The trial: su_bound at 131,072 was 5.249 (short factors), 2.321 with the long ones HF uses there."""
    spec = PRESETS["phi-3-mini-128k"].spec()
    m = torch.tensor(DIST, dtype=torch.float64)
    for seq_len, which in ((131072, "long"), (4096, "short"), (None, "short")):
        theta = _phi3(which)
        su = su_bound(spec, m, seq_len=seq_len).tolist()
        ones = ones_dot(spec, m, seq_len=seq_len).tolist()
        for d, s, o in zip(DIST, su, ones):
            assert s == pytest.approx(_su(theta, d), rel=1e-9, abs=1e-12), (seq_len, d)
            assert o == pytest.approx(sum(2 * math.cos(d * t) for t in theta), rel=1e-9, abs=1e-9)
    at_ctx = su_bound(spec, torch.tensor([131072.0]), seq_len=131072).item()
    assert at_ctx == pytest.approx(2.321, abs=1e-3) and su_bound(spec, torch.tensor([131072.0])).item() > 5


def test_dynamic_ntk_uses_the_base_grown_for_the_sequence() -> None:
    """transformers' dynamic NTK at length L > L0: base * ((s L / L0) - (s - 1))^(d / (d - 2))."""
    d, base, s, L0, L = 16, 1e4, 4.0, 2048, 16384
    spec = RopeSpec(d, base=base, scaling=DynamicNTK(s, L0))
    grown = base * ((s * L / L0) - (s - 1)) ** (d / (d - 2))
    theta = [grown ** (-2 * i / d) for i in range(d // 2)]
    m = torch.tensor(DIST, dtype=torch.float64)
    got = ones_dot(spec, m, seq_len=L).tolist()
    for dist, g in zip(DIST, got):
        assert g == pytest.approx(sum(2 * math.cos(dist * t) for t in theta), rel=1e-9, abs=1e-9)
    q = torch.ones(1, d, dtype=torch.float64)
    assert rotated_dot(spec, q, q, m, seq_len=L)[0].tolist() == pytest.approx(got, rel=1e-12, abs=1e-12)
    mc = gaussian_dot_samples(spec, m, samples=3, seq_len=L)
    assert not torch.equal(mc, gaussian_dot_samples(spec, m, samples=3))  # the init-time base differs


def test_a_bad_seq_len_is_refused() -> None:
    with pytest.raises(ValueError, match="seq_len must be a positive int or None, got 0"):
        su_bound(RopeSpec(8), torch.tensor([1.0]), seq_len=0)

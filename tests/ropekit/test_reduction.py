"""Exact phases over the whole int64 range, against a 60-digit mpmath oracle (issue 9 point 3).

The oracle reduces ``p * theta mod 2 pi`` in mpmath for the spec's float64 frequency theta (for scaling schemes
the scaled float64 frequency: that number is what "exact" refers to) and shares no code with ropekit.
"""

from __future__ import annotations

import math
import random

import mpmath
import pytest
import torch

from ropekit import RopeSpec, rope_tables
from ropekit.phases import band_constant_tensor, check_positions
from ropekit.presets import preset_spec
from ropekit.reduction import reduced_turns
from ropekit.scaling import Linear

mpmath.mp.dps = 60

SPECS = {
    "llama3-base": RopeSpec(head_dim=128, base=500_000.0),
    "linear-x8": RopeSpec(head_dim=64, base=10_000.0, scaling=Linear(8.0)),
    "partial-interleaved-p": RopeSpec(head_dim=64, rotary_dim=48, layout="interleaved", p=0.75),
    "llama-3.1 (llama3 scaling)": preset_spec("llama-3.1-8b"),
    "qwen2.5 (yarn)": preset_spec("qwen2.5-7b-yarn"),
    "explicit freqs incl. theta > 2 pi": RopeSpec(head_dim=8, freqs=(1000.5, 7.0, 1.0, 1e-9)),
}
SPECIAL = [2**31, 2**40, 2**53 - 1, 2**62, -(2**62), 2**63 - 1, -(2**63), -1, 0, 1]


def _oracle_angle(p: float, th: float) -> mpmath.mpf:
    """p * theta reduced to [-pi, pi] in 60-digit arithmetic (p, theta taken exactly)."""
    a = mpmath.mpf(p) * mpmath.mpf(th)
    two_pi = 2 * mpmath.pi
    return a - two_pi * mpmath.nint(a / two_pi)


def _angle_error(got: float, want: mpmath.mpf) -> float:
    d = abs(mpmath.mpf(got) - want)
    return float(min(d, 2 * mpmath.pi - d))  # -pi and pi are the same angle


def _thetas(spec: RopeSpec) -> list[float]:
    return spec.frequencies().tolist()


def _random_positions(n: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(-(2**63), 2**63) for _ in range(n)] + [
        rng.randrange(2**k, 2 ** (k + 1)) for k in range(20, 63, 6)
    ]


@pytest.mark.parametrize("name", list(SPECS))
def test_reduced_angle_exact_for_every_band_across_int64(name: str) -> None:
    spec = SPECS[name]
    ths = _thetas(spec)
    positions = SPECIAL + _random_positions(12, seed=len(name))
    consts = band_constant_tensor(spec, None, torch.device("cpu"))
    turns = reduced_turns(torch.tensor(positions, dtype=torch.int64), consts)
    assert turns.abs().max().item() <= 0.5
    worst = 0.0
    for row, p in enumerate(positions):
        for band, th in enumerate(ths):
            worst = max(worst, _angle_error(float(turns[row, band]) * 2 * math.pi, _oracle_angle(p, th)))
    assert worst < 5e-15, f"{name}: largest phase error {worst:.3g} rad"


@pytest.mark.parametrize("name", ["llama3-base", "linear-x8", "qwen2.5 (yarn)"])
def test_tables_exact_at_2_62_and_beyond_float64_product(name: str) -> None:
    """float64 tables to ~1e-15 and float32 tables to half an ulp at every special position, every band."""
    spec = SPECS[name]
    ths = _thetas(spec)
    pos = torch.tensor(SPECIAL, dtype=torch.int64)
    c64, s64 = rope_tables(pos, spec, dtype=torch.float64)
    c32, s32 = rope_tables(pos, spec)
    f = spec.attention_factor
    worst64 = worst32 = 0.0
    for row, p in enumerate(SPECIAL):
        for band, th in enumerate(ths):
            a = _oracle_angle(p, th)
            rc, rs = f * mpmath.cos(a), f * mpmath.sin(a)
            worst64 = max(
                worst64, float(abs(float(c64[row, band]) - rc)), float(abs(float(s64[row, band]) - rs))
            )
            worst32 = max(
                worst32, float(abs(float(c32[row, band]) - rc)), float(abs(float(s32[row, band]) - rs))
            )
    assert worst64 < 5e-15
    assert worst32 < 6.5e-8 * max(f, 1.0)  # one float32 rounding


def test_single_float64_product_fails_negative_control() -> None:
    """The previous recipe (one float64 product) is measurably wrong at 2^40 and useless at 2^53 - 1."""
    th = _thetas(SPECS["llama3-base"])[0]  # theta_0 = 1: the angle is the position itself
    for p, lo in ((2**40, 1e-6), (2**53 - 1, 0.1)):
        naive = math.remainder(float(p) * th, 2 * math.pi)
        assert _angle_error(naive, _oracle_angle(p, th)) > lo


def test_linear_scaling_means_exact_for_float64_theta_over_s() -> None:
    """For Linear(s) the frequency is fl(theta / s) in float64; the phase is exact for that number."""
    spec = SPECS["linear-x8"]
    want = [fl / 8.0 for fl in (10_000.0 ** (-2 * i / 64) for i in range(32))]
    got = _thetas(spec)
    assert all(abs(g - w) <= 2 * math.ulp(w) for g, w in zip(got, want))


def test_float_positions_exact_up_to_the_bound() -> None:
    spec = SPECS["llama3-base"]
    ths = _thetas(spec)
    xs = [0.5, -3.75, 1e15 + 0.5, 2.0**62, -(2.0**62) - 2048.0, 2.0**63 - 1024.0, 1234.5678]
    consts = band_constant_tensor(spec, None, torch.device("cpu"))
    for dtype in (torch.float64, torch.float32):
        pos = torch.tensor(xs, dtype=dtype)
        pos = pos[pos.abs() < 2.0**63]  # float32 rounds 2^63 - 1024 up to 2^63 (refused, tested below)
        turns = reduced_turns(pos, consts)
        worst = 0.0
        for row, x in enumerate(pos.tolist()):  # the value the dtype represents, taken exactly
            for band, th in enumerate(ths):
                worst = max(worst, _angle_error(float(turns[row, band]) * 2 * math.pi, _oracle_angle(x, th)))
        assert worst < 5e-15, (dtype, worst)


@pytest.mark.parametrize("bad", [2.0**63, -(2.0**63), 1e30, float("inf"), float("-inf"), float("nan")])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_float_positions_beyond_the_bound_refused_naming_the_value(bad: float, dtype: torch.dtype) -> None:
    from ropekit import apply_rope

    pos = torch.tensor([1.0, bad], dtype=dtype)
    q = torch.randn(1, 2, 1, 64)
    before = q.clone()
    with pytest.raises(ValueError, match=r"positions must be finite with magnitude below 2\*\*63") as e:
        apply_rope(q, None, pos, SPECS["linear-x8"], inplace=True)
    shown = pos[1].item()
    assert repr(shown) in str(e.value)
    assert torch.equal(q, before)  # refused before anything was written
    with pytest.raises(ValueError, match="found"):
        check_positions(pos)


def test_negative_positions_are_the_conjugate_rotation() -> None:
    """cos is even and sin odd in p: checks the sign handling of the split (hi chunk negative)."""
    spec = SPECS["llama3-base"]
    p = torch.tensor(_random_positions(8, seed=7), dtype=torch.int64).abs()
    c1, s1 = rope_tables(p, spec, dtype=torch.float64)
    c2, s2 = rope_tables(-p, spec, dtype=torch.float64)
    torch.testing.assert_close(c1, c2, rtol=0, atol=5e-15)
    torch.testing.assert_close(s1, -s2, rtol=0, atol=5e-15)

"""Exact phases at any position (issue: float32 outputs within 1e-6 of float64 up to 2^24; shift invariance at 1e7)."""

from __future__ import annotations

import math

import mpmath
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from ropekit import RopeSpec, apply_rope, rope_tables
from ropekit.analysis.precision import common_fp32_tables
from tests.oracles import reference_rope, theta

BASES = [10_000.0, 500_000.0, 1_000_000.0]
WINDOW_ENDS = [1_000, 10_000, 100_000, 1_000_000, 10_000_000, 2**24]


def _formula_rope(x: torch.Tensor, pos: torch.Tensor, spec: RopeSpec) -> torch.Tensor:
    """float64 half-layout RoPE written from section 3.4, with Python-float thetas; x [s, h, d], pos [s]."""
    th = torch.tensor(theta(spec), dtype=torch.float64)
    ang = pos.double()[:, None] * th  # unreduced float64 angle
    c, s = torch.cos(ang)[:, None, :], torch.sin(ang)[:, None, :]
    n = spec.n_bands
    a, b = x[..., :n].double(), x[..., n : 2 * n].double()
    return torch.cat([a * c - b * s, b * c + a * s, x[..., 2 * n :].double()], -1)


@pytest.mark.parametrize("base", BASES)
@pytest.mark.parametrize("end", WINDOW_ENDS)
def test_float32_rotation_within_1e6_of_float64(base: float, end: int) -> None:
    spec = RopeSpec(head_dim=128, base=base)
    pos = torch.arange(end - 2047, end + 1)  # 2048 positions ending at `end`
    x = torch.rand(2048, 2, 128, dtype=torch.float64) * 2 - 1  # unit scale
    out, _ = apply_rope(x.float(), None, pos, spec, format="thd")
    err = (out.double() - _formula_rope(x.float(), pos, spec)).abs().max().item()
    assert err < 1e-6, f"max error {err:.3g} at positions ending {end}"


@given(
    pos=st.lists(st.integers(0, 2**24), min_size=1, max_size=8),
    base=st.sampled_from(BASES),
    layout=st.sampled_from(["half", "interleaved"]),
)
def test_float32_rotation_vs_block_diagonal_anywhere_below_2_24(
    pos: list[int], base: float, layout: str
) -> None:
    spec = RopeSpec(head_dim=64, base=base, layout=layout)
    p = torch.tensor(pos)
    x = (torch.rand(len(pos), 2, 64, dtype=torch.float64) * 2 - 1).float()
    out, _ = apply_rope(x, None, p, spec, format="thd")
    assert (out.double() - reference_rope(x, p, spec, format="thd")).abs().max().item() < 1e-6


def test_tables_against_mpmath() -> None:
    """cos/sin tables vs 50-digit arithmetic (an oracle that shares no code with torch)."""
    mpmath.mp.dps = 50
    spec = RopeSpec(head_dim=128, base=500_000.0)
    positions = [0, 1, 7, 4095, 131_071, 999_999, 10_000_000, 2**24 - 1, 2**24, 123_456_789]
    cos, sin = rope_tables(torch.tensor(positions), spec)
    worst = 0.0
    for row, p in enumerate(positions):
        for i in range(0, 64, 7):
            t = mpmath.power(mpmath.mpf(500_000), -mpmath.mpf(2 * i) / 128)
            worst = max(
                worst,
                abs(float(cos[row, i]) - float(mpmath.cos(p * t))),
                abs(float(sin[row, i]) - float(mpmath.sin(p * t))),
            )
    assert worst < 6e-8  # half a float32 ulp near 1 is 6e-8


def test_common_recipe_is_measurably_wrong_negative_control() -> None:
    """The float32 recipe fails the same 1e-6 bound by orders of magnitude (so the tests above can fail)."""
    spec = RopeSpec(head_dim=128, base=500_000.0)
    pos = torch.arange(10**7 - 2047, 10**7 + 1)
    c_ref = torch.cos(pos.double()[:, None] * torch.tensor(theta(spec), dtype=torch.float64))
    c_common, _ = common_fp32_tables(pos, spec)
    assert (c_common.double() - c_ref).abs().max().item() > 0.1


def _logits(q: torch.Tensor, k: torch.Tensor, pos: torch.Tensor, spec: RopeSpec, tables=None) -> torch.Tensor:
    if tables is None:
        qr, kr = apply_rope(q, k, pos, spec)
    else:
        cos, sin = tables(pos, spec)
        n = spec.n_bands
        c, s = cos[None, :, None, :], sin[None, :, None, :]
        rot = lambda x: torch.cat([x[..., :n] * c - x[..., n:] * s, x[..., n:] * c + x[..., :n] * s], -1)
        qr, kr = rot(q), rot(k)
    return torch.einsum("bshd,bthd->bhst", qr, kr) / math.sqrt(spec.head_dim)  # float32 dot products


@pytest.mark.parametrize("shift", [10**7, 2**24 - 64])
def test_logits_invariant_under_position_shift(shift: int) -> None:
    spec = RopeSpec(head_dim=128, base=500_000.0)
    q, k = torch.randn(1, 64, 4, 128), torch.randn(1, 64, 4, 128)  # unit variance, float32
    pos = torch.arange(64)
    near, far = _logits(q, k, pos, spec), _logits(q, k, pos + shift, spec)
    # float32 rounding of 128-term dot products of rotated values: a few 1e-6 at |logit| ~ 3.
    assert (near - far).abs().max().item() < 2e-5
    common_far = _logits(q, k, pos + shift, spec, tables=common_fp32_tables)
    assert (near - common_far).abs().max().item() > 1e-2  # negative control: the common recipe shifts logits


def test_tables_ignore_autocast() -> None:
    spec = RopeSpec(head_dim=64, base=500_000.0)
    pos = torch.arange(100_000, 100_256)
    ref = rope_tables(pos, spec)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = rope_tables(pos, spec)
    assert got[0].dtype == torch.float32
    torch.testing.assert_close(got, ref, rtol=0, atol=0)


def test_float32_timestamps_are_exact() -> None:
    """Continuous positions (seed 004 section 16.4): float32 timestamps convert to float64 exactly."""
    spec = RopeSpec(head_dim=16, base=10_000.0)
    ts = torch.tensor([0.5, 1234.25, 8_000_000.5], dtype=torch.float32)
    cos, sin = rope_tables(ts, spec, dtype=torch.float64)
    th = torch.tensor(theta(spec), dtype=torch.float64)
    torch.testing.assert_close(cos, torch.cos(ts.double()[:, None] * th), rtol=0, atol=1e-9)
    torch.testing.assert_close(sin, torch.sin(ts.double()[:, None] * th), rtol=0, atol=1e-9)


@pytest.mark.slow
def test_every_position_below_2_24_exhaustive() -> None:
    """Every integer position 0 .. 2^24 (all 64 bands, base 5e5): tables within 6e-8 of float64. ~1-2 min."""
    spec = RopeSpec(head_dim=128, base=500_000.0)
    th = torch.tensor(theta(spec), dtype=torch.float64)
    worst = 0.0
    for start in range(0, 2**24 + 1, 1 << 18):
        pos = torch.arange(start, min(start + (1 << 18), 2**24 + 1))
        cos, sin = rope_tables(pos, spec)
        ang = pos.double()[:, None] * th
        worst = max(
            worst,
            (cos.double() - ang.cos()).abs().max().item(),
            (sin.double() - ang.sin()).abs().max().item(),
        )
    assert worst < 6e-8, worst

"""Band table, critical dimension (Liu et al.) and base lower bound (Men et al.) against published numbers."""

from __future__ import annotations

import math

import pytest

from ropekit import RopeSpec
from ropekit.analysis import (
    band_table,
    base_bound_margin,
    base_lower_bound,
    critical_dim,
    extrapolation_bound,
)


def test_band_table_worked_example() -> None:
    """Seed 004 section 7: d 8, base 1e4 -> theta 1, 0.1, 0.01, 0.001; at L = 4096 the slowest band does not wrap."""
    bands = band_table(RopeSpec(8), 4096)
    assert [round(b.theta, 12) for b in bands] == [1.0, 0.1, 0.01, 0.001]
    assert [round(b.wavelength, 2) for b in bands] == [6.28, 62.83, 628.32, 6283.19]
    assert [round(b.rotations, 3) for b in bands] == [651.899, 65.19, 6.519, 0.652]  # 4096 theta_i / 2 pi
    assert [b.wraps for b in bands] == [True, True, True, False]


def test_p_rope_bands_have_infinite_wavelength() -> None:
    bands = band_table(RopeSpec(8, p=0.5), 100)
    assert (
        math.isinf(bands[-1].wavelength)
        and bands[-1].rotations == 0
        and bands[-1].as_dict()["wavelength"] is None
    )


# papers.md section 11 (Liu et al. 2024): d_extra and T_extra.
@pytest.mark.parametrize(
    "d,base,ctx,d_extra,t_extra",
    [
        (128, 1e4, 4096, 92, 4.7e3),
        (128, 1e4, 1024, 72, 1.1e3),
        (32, 1e4, 128, 12, 199),
        (32, 1e4, 256, 14, 353),
        (64, 1e4, 128, 22, 149),
    ],
)
def test_critical_dimension(d: int, base: float, ctx: int, d_extra: int, t_extra: float) -> None:
    assert critical_dim(d, base, ctx) == d_extra
    assert extrapolation_bound(d, base, ctx) == pytest.approx(t_extra, rel=0.05)


def test_critical_dimension_clips() -> None:
    assert critical_dim(32, 20.0, 128) == 32 and math.isinf(
        extrapolation_bound(32, 20.0, 128)
    )  # base < L/2pi
    assert critical_dim(32, 1e4, 3) == 0  # context shorter than one turn of the fastest band


# papers.md section 10 (Men et al. 2024; 4.3e3 for d 128, L 1k is the paper's own number, the rest computed).
@pytest.mark.parametrize(
    "d,ctx,bound",
    [
        (128, 1024, 4.3e3),
        (128, 2048, 1.16e4),
        (128, 4096, 2.87e4),
        (64, 64, 169),
        (64, 1024, 7.76e3),
        (32, 128, 1.23e3),
        (16, 512, 5.65e4),
    ],
)
def test_base_lower_bound(d: int, ctx: int, bound: float) -> None:
    assert base_lower_bound(d, ctx) == pytest.approx(bound, rel=0.03)


def test_base_condition_is_not_monotone() -> None:
    """Why base_lower_bound scans a grid: for d 128, L 1024 the condition holds at 4300, fails at 4400, holds at 6100."""
    assert base_bound_margin(128, 4300.0, 1024)[1] is None
    assert base_bound_margin(128, 4400.0, 1024)[1] is not None
    assert base_bound_margin(128, 6100.0, 1024)[1] is None


def test_context_validation() -> None:
    with pytest.raises(ValueError, match="context"):
        band_table(RopeSpec(8), 0)

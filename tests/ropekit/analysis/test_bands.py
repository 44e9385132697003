"""Band table, critical dimension (Liu et al.) and base lower bound (Men et al.) against published numbers."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from ropekit import RopeSpec
from ropekit.analysis import (
    band_table,
    base_bound_margin,
    base_lower_bound,
    critical_dim,
    extrapolation_bound,
)
from ropekit.analysis.bands import COARSE_RESOLUTION, EXACT_CONTEXT


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


# papers.md section 10 (Men et al. 2024): the smallest base for d and L, 4.3e3 for d 128, L 1k being the paper's
# own number and the rest computed on a log grid (ratio ~1.023, 3 significant digits). Every value passes, so the
# smallest base is at most it; where the grid landed in the first pass window the bound is within a grid step
# below it. For two d 128 entries the grid stepped over a first window narrower than 1%: the bound is lower.
PAPERS_SECTION_10 = {
    (128, 1024): 4.3e3,
    (128, 2048): 1.16e4,
    (128, 4096): 2.87e4,
    (128, 8192): 8.43e4,
    (128, 16384): 2.35e5,
    (128, 32768): 7.99e5,
    (64, 64): 169,
    (64, 128): 477,
    (64, 256): 1.42e3,
    (64, 512): 3.44e3,
    (64, 1024): 7.76e3,
    (32, 64): 316,
    (32, 128): 1.23e3,
    (32, 256): 2.19e3,
    (32, 512): 1.26e4,
    (32, 1024): 5.83e4,
    (16, 64): 1.71e3,
    (16, 128): 2.77e3,
    (16, 256): 8.6e3,
    (16, 512): 5.65e4,
}
GRID_MISSED = {(128, 4096): 2.6952e4, (128, 32768): 6.2998e5}  # first windows < 1% wide


@pytest.mark.parametrize("d,ctx", list(PAPERS_SECTION_10))
def test_base_lower_bound_against_papers_table(d: int, ctx: int) -> None:
    paper = PAPERS_SECTION_10[(d, ctx)]
    bound = base_lower_bound(d, ctx)
    assert bound is not None
    assert base_bound_margin(d, bound, ctx)[1] is None  # the bound itself passes
    assert base_bound_margin(d, paper, ctx)[1] is None and bound <= paper
    if (d, ctx) in GRID_MISSED:
        assert bound == pytest.approx(GRID_MISSED[(d, ctx)], rel=1e-4)
        assert base_bound_margin(d, bound * 1.01, ctx)[1] is not None  # the window ends within 1%
    else:
        assert paper / bound < 1.03  # one grid step (2.3%) plus rounding to 3 digits


def _passes_on_grid(d: int, ctx: int, lo: float, hi: float, step: float) -> tuple[float, float] | None:
    """Independent oracle: the first base on a log grid (ratio e^step) in [lo, hi) whose direct float64 sum
    B(m) = sum_i cos(m b^(-2i/d)) is >= 0 for every m <= ctx, with its min B; None if none."""
    m = np.arange(ctx + 1, dtype=np.float64)
    i = np.arange(d // 2, dtype=np.float64)
    us = np.arange(math.log(lo), math.log(hi), step)
    for j in range(0, len(us), 256):
        theta = np.exp(-np.outer(us[j : j + 256], 2 * i / d))  # [U, n]
        worst = np.cos(m[None, :, None] * theta[:, None, :]).sum(-1).min(-1)
        ok = np.flatnonzero(worst >= 0)
        if ok.size:
            return math.exp(us[j + ok[0]]), float(worst[ok[0]])
    return None


@pytest.mark.parametrize("d,ctx", [(4, 33), (8, 20), (16, 128), (32, 128), (64, 128)])
def test_base_lower_bound_against_brute_force(d: int, ctx: int) -> None:
    """No base below the bound passes on a fine log grid (2e-4 apart; at these lengths the windows are wider),
    except by less than float64 rounding (the documented slack); the bound passes and starts a window."""
    bound = base_lower_bound(d, ctx)
    assert bound is not None and base_bound_margin(d, bound, ctx)[1] is None
    below = _passes_on_grid(d, ctx, 1.0 + 1e-12, bound * (1 - 1e-9), 2e-4)
    assert below is None or below[1] < 1e-8, (bound, below)
    first = _passes_on_grid(d, ctx, bound * (1 - 1e-9), bound * 1.01, 1e-6)
    assert first is not None and first[0] == pytest.approx(bound, rel=2e-6)


def test_base_lower_bound_finds_the_narrow_windows_a_grid_misses() -> None:
    """The user trial: d 64, L 512 passes in 3438.9..3451.1 (0.35% wide), fails up to 5397.8; d 16, L 128 passes
    from 2768.2 (a scan that only looked above half its doubling bracket, 4096, returned 8357)."""
    assert base_lower_bound(64, 512) == pytest.approx(3438.91, rel=1e-5)
    assert base_bound_margin(64, 3440.0, 512)[1] is None and base_bound_margin(64, 3460.0, 512)[1] is not None
    assert base_lower_bound(16, 128) == pytest.approx(2768.18, rel=1e-5)
    assert base_bound_margin(16, 2780.0, 128)[1] is None


def test_base_lower_bound_resolution() -> None:
    """A resolution may step over pass windows narrower than it (d 128, L 16384: the first window, 0.034% wide,
    at 0.1%), never returns a failing base nor one below the exact bound; the default is exact up to
    EXACT_CONTEXT and COARSE_RESOLUTION above it."""
    exact = base_lower_bound(128, 16384, resolution=0.0)
    coarse = base_lower_bound(128, 16384, resolution=1e-3)
    assert exact == base_lower_bound(128, 16384) and exact is not None and coarse is not None
    assert coarse > exact * 1.0005  # the 0.034% window was stepped over
    assert base_bound_margin(128, coarse, 16384)[1] is None
    assert EXACT_CONTEXT == 131072 and COARSE_RESOLUTION == 1e-3
    big = base_lower_bound(8, 2 * EXACT_CONTEXT)
    assert big == base_lower_bound(8, 2 * EXACT_CONTEXT, resolution=COARSE_RESOLUTION)
    assert big is not None and big >= base_lower_bound(8, EXACT_CONTEXT)  # type: ignore[operator]
    assert base_bound_margin(8, big, 2 * EXACT_CONTEXT)[1] is None


def test_base_lower_bound_edge_cases() -> None:
    assert base_lower_bound(64, 1) == 1.0  # B(0) = n, B(1) = sum cos(theta_i) > 0 at every base
    assert base_lower_bound(2, 8) is None  # one band, theta_0 = 1 at every base: B(2) = cos 2 < 0
    assert base_lower_bound(8, 4096, max_base=1e6) is None
    assert base_lower_bound(8, 4096) == pytest.approx(1.21e9, rel=5e-3)  # README's `ropekit inspect` example


def test_base_condition_is_not_monotone() -> None:
    """Why base_lower_bound cannot bisect: for d 128, L 1024 the condition holds at 4300, fails at 4400, holds at
    6100."""
    assert base_bound_margin(128, 4300.0, 1024)[1] is None
    assert base_bound_margin(128, 4400.0, 1024)[1] is not None
    assert base_bound_margin(128, 6100.0, 1024)[1] is None


@pytest.mark.parametrize(
    ("d", "ctx", "base", "passes"),
    [(128, 1024, 4293.44, True), (128, 1024, 4293.4, False), (128, 1024, 4330.08, True),
     (128, 1024, 4330.52, False), (128, 1024, 5602.2, True), (64, 512, 3438.91, True), (64, 512, 3438.9, False),
     (64, 512, 3450.96, True), (64, 512, 3451.31, False)],
)  # fmt: skip
def test_the_window_edges_base_lower_bound_documents(d: int, ctx: int, base: float, passes: bool) -> None:
    """The docstring's examples, each as stated (the user trial found them rounded the wrong way: "4293.4 passes"
    fails at m = 1009)."""
    assert (base_bound_margin(d, base, ctx)[1] is None) is passes
    # the documented bound lies between the stated failing base just below it and the passing one at it
    below, at = (4293.4, 4293.44) if d == 128 else (3438.9, 3438.91)
    assert below < base_lower_bound(d, ctx) <= at


def test_context_validation() -> None:
    with pytest.raises(ValueError, match="context"):
        band_table(RopeSpec(8), 0)


BAD_ROTARY_DIMS = [0, -2, 3, 2.0, True, "64"]
BAD_BASES = [-2.0, 0.5, 1.0, math.nan, math.inf, "1e4", True]
BAD_CONTEXTS = [0, -5, 1.5, True, [1], "1024"]


@pytest.mark.parametrize("bad", BAD_ROTARY_DIMS)
def test_rotary_dim_is_validated(bad: object) -> None:
    for fn, args in [
        (base_bound_margin, (bad, 1e4, 64)),
        (critical_dim, (bad, 1e4, 4096)),
        (extrapolation_bound, (bad, 1e4, 4096)),
        (base_lower_bound, (bad, 64)),
    ]:
        with pytest.raises(ValueError, match=f"rotary_dim must be a positive even int, got {bad!r}"):
            fn(*args)  # type: ignore[operator]


@pytest.mark.parametrize("bad", BAD_BASES)
def test_base_is_validated(bad: object) -> None:
    """base -2 used to give NaN frequencies that 'passed'; 1 a division by zero; 0.5 a silent number."""
    for fn in (base_bound_margin, critical_dim, extrapolation_bound):
        with pytest.raises(
            ValueError, match=r"base must be a finite number > 1, got " + re.escape(repr(bad))
        ):
            fn(128, bad, 1024)  # type: ignore[operator]


@pytest.mark.parametrize("bad", BAD_CONTEXTS)
def test_context_is_validated(bad: object) -> None:
    for fn, args in [
        (base_bound_margin, (64, 1e4, bad)),
        (critical_dim, (64, 1e4, bad)),
        (base_lower_bound, (64, bad)),  # a list used to reach lru_cache: "unhashable type"
        (band_table, (RopeSpec(8), bad)),
    ]:
        with pytest.raises(ValueError, match=r"context must be a positive int, got " + re.escape(repr(bad))):
            fn(*args)  # type: ignore[operator]


def test_other_arguments_are_validated() -> None:
    for chunk in (0, -1, 1.5):
        with pytest.raises(ValueError, match=f"chunk must be a positive int, got {chunk!r}"):
            base_bound_margin(64, 1e4, 64, chunk=chunk)  # type: ignore[arg-type]
    for res in (-1e-3, math.nan, math.inf):
        with pytest.raises(ValueError, match="resolution must be a finite number >= 0"):
            base_lower_bound(64, 64, resolution=res)
    for mb in (1.0, math.inf):
        with pytest.raises(ValueError, match="max_base must be a finite number > 1"):
            base_lower_bound(64, 64, max_base=mb)


def test_critical_dim_clips_to_the_rotary_dim() -> None:
    """Liu et al.: 2 ceil((d/2) log_base(L / 2 pi)) clipped to [0, d], against the formula in Python floats."""
    for d, base, ctx in [
        (128, 1e4, 4096),
        (128, 5e5, 8192),
        (64, 500.0, 4096),
        (32, 1e4, 3),
        (8, 2.0, 10**6),
    ]:
        raw = 2 * math.ceil((d / 2) * math.log(ctx / (2 * math.pi)) / math.log(base))
        assert critical_dim(d, base, ctx) == min(d, max(0, raw))


def test_functions_taking_a_spec_name_it_when_given_something_else() -> None:
    """The user trial: a list or a dict as spec raised AttributeError from inside each of these."""
    import torch

    from ropekit.analysis import compare_schemes, phase_error, rotations, spectrum, su_bound
    from ropekit.analysis.precision import oracle_tables
    from ropekit.analysis.recipe import common_fp32_tables

    calls = [
        lambda s: band_table(s, 100), lambda s: compare_schemes(s, context=100, target=400),
        lambda s: phase_error(s, 100), lambda s: su_bound(s, torch.arange(4)), lambda s: rotations(s, 100),
        lambda s: spectrum(s, 100), lambda s: oracle_tables(torch.arange(4), s),
        lambda s: common_fp32_tables(torch.arange(4), s),
    ]  # fmt: skip
    for call in calls:
        for bad in ([64], {"head_dim": 64}):
            with pytest.raises(TypeError, match=r"spec must be a ropekit.RopeSpec, got (list|dict)"):
                call(bad)

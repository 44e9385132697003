"""float32 positions at or past 2^24 are refused (ropekit.phases.check_positions): float32 cannot hold every
integer there (16777217 reads as 16777216), so such positions were already rounded before they arrived.

Eagerly on the CPU a ValueError naming ``positions``, the largest magnitude and what to pass instead; traced by
torch.compile a device assert (a RuntimeError stating the rule). Accepted positions are checked against float64
/ mpmath oracles written from the frequency formula (never ropekit's tables).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import mpmath
import pytest
import torch

from ropekit import AxisMap, RopeSpec, Rotary, apply_rope, apply_rope_axes, rope_tables
from ropekit.axis_tables import axis_tables
from ropekit.phases import check_positions

SPEC = RopeSpec(head_dim=8)  # base 1e4, layout "half": theta_j = 1e4^(-2j/8), j < 4
FREQS = [1e4 ** (-2 * j / 8) for j in range(4)]
AXES = RopeSpec(head_dim=8, axes=AxisMap.contiguous((2, 1, 1)))
F32_RULE = (
    r"positions are float32 with magnitude up to {} >= 2\*\*24 = 16777216.*pass int64 positions, or float64"
)
TRACED_RULE = r"positions are float32 with magnitude >= 2\*\*24"


def _calls() -> tuple[dict[str, Callable[[torch.Tensor], object]], torch.Tensor]:
    q = torch.randn(1, 3, 2, 8)
    rot, rot_axes = Rotary(SPEC), Rotary(AXES)
    return {
        "check_positions": lambda p: check_positions(p),
        "rope_tables": lambda p: rope_tables(p, SPEC),
        "apply_rope": lambda p: apply_rope(q, None, p, SPEC, inplace=True),
        "Rotary": lambda p: rot(q, positions=p, inplace=True),
        "Rotary.tables": lambda p: rot.tables(p),
        "axis_tables": lambda p: axis_tables(p.expand(3, -1), AXES),
        "apply_rope_axes": lambda p: apply_rope_axes(q, None, p.expand(3, -1), AXES, inplace=True),
        "Rotary axes": lambda p: rot_axes(q, positions=p.expand(3, -1), inplace=True),
    }, q


@pytest.mark.parametrize(
    ("values", "shown"),
    [
        ([0.0, 1.0, 2.0**24], "16777216"),
        ([-(2.0**24), 1.0, 2.0], "16777216"),
        ([16777217, 1.0, 2.0], "16777216"),  # 16777217 is not a float32: it reads as 16777216
        ([3.0, -(2.0**25), 2.0**24 + 2], "33554432"),  # the largest magnitude is named
        ([0.5, 1e9, 7.0], "1e\\+09"),
    ],
)
def test_float32_positions_from_2_24_refused_eagerly(values: list[float], shown: str) -> None:
    calls, q = _calls()
    q0 = q.clone()
    pos = torch.tensor(values, dtype=torch.float32)
    for name, call in calls.items():
        with pytest.raises(ValueError, match=F32_RULE.format(shown)):
            call(pos)
        assert torch.equal(q, q0), name  # refused before anything was written


def test_float32_positions_below_2_24_accepted_and_exact() -> None:
    """2^24 - 1 (and fractional positions below it) still work; the tables agree with the float64 formula."""
    pos = torch.tensor([0.0, 0.5, 1e6 + 0.25, 2.0**24 - 1, -(2.0**24 - 1)], dtype=torch.float32)
    assert check_positions(pos) is pos
    cos, sin = rope_tables(pos, SPEC)
    for i, p in enumerate(pos.tolist()):
        # p * th in float64: error ~|p| * th * 2^-53 < 2e-9 rad, far below float32's rounding
        for j, th in enumerate(FREQS):
            assert abs(float(cos[i, j]) - math.cos(p * th)) < 1e-6
            assert abs(float(sin[i, j]) - math.sin(p * th)) < 1e-6
    calls, _ = _calls()
    for call in calls.values():
        call(pos[:3])


@pytest.mark.parametrize("p", [2.0**40, -(2.0**40) - 0.5, 2.0**52 + 1])
def test_float64_positions_far_past_2_24_accepted_and_exact(p: float) -> None:
    """float64 holds these exactly: accepted, and the phase is exact (mpmath; base 16, head_dim 4: frequencies
    1 and 16^(-1/2) = 0.25, both exact in float64, so the oracle's angle is the exact p * theta)."""
    spec = RopeSpec(head_dim=4, base=16.0)
    pos = torch.tensor([p], dtype=torch.float64)
    cos, sin = rope_tables(pos, spec, dtype=torch.float64)
    mpmath.mp.dps = 60
    for j, th in enumerate((1, mpmath.mpf(1) / 4)):
        ang = mpmath.mpf(p) * th
        assert abs(float(cos[0, j]) - float(mpmath.cos(ang))) < 1e-13
        assert abs(float(sin[0, j]) - float(mpmath.sin(ang))) < 1e-13
    check_positions(pos)
    axis_tables(pos.expand(3, 1), AXES)


def test_other_dtypes_are_not_bounded_at_2_24() -> None:
    """The bound is float32's: integer positions and float64 at 2^24 and past it are accepted."""
    for pos in (torch.tensor([2**24, 2**40]), torch.tensor([2.0**24, 2.0**40], dtype=torch.float64)):
        check_positions(pos)
        rope_tables(pos, SPEC)
    check_positions(torch.tensor([2**24 + 1], dtype=torch.int32))


def test_non_finite_float32_keeps_the_2_63_message() -> None:
    """inf / nan float32 positions are named by the 2^63 rule (the first one checked), as before."""
    for bad in (math.inf, math.nan):
        with pytest.raises(ValueError, match=r"positions must be finite with magnitude below 2\*\*63"):
            check_positions(torch.tensor([1.0, bad]))


@pytest.mark.parametrize("entry", ["rope_tables", "apply_rope", "Rotary", "apply_rope_axes"])
def test_compiled_float32_positions_refused_on_the_device(entry: str) -> None:
    """Traced by torch.compile(fullgraph=True): no host sync, a device assert; good positions give the values of
    the float64 formula."""
    q = torch.randn(1, 3, 1, 8, generator=torch.Generator().manual_seed(0))
    rot = Rotary(SPEC)
    calls = {
        "rope_tables": lambda p: rope_tables(p, SPEC)[0],
        "apply_rope": lambda p: apply_rope(q, None, p, SPEC)[0],
        "Rotary": lambda p: rot(q, positions=p)[0],
        "apply_rope_axes": lambda p: apply_rope_axes(q, None, p.expand(3, -1), AXES)[0],
    }
    f = torch.compile(calls[entry], fullgraph=True, backend="aot_eager")
    good = torch.tensor([0.0, 2.5, 2.0**24 - 1], dtype=torch.float32)
    got = f(good).double()
    ang = torch.tensor([[p * th for th in FREQS] for p in good.tolist()], dtype=torch.float64)  # [3, 4]
    if entry == "rope_tables":
        torch.testing.assert_close(got, ang.cos(), rtol=0, atol=1e-6)
    else:  # "half" layout: x_j, x_{j+4} turned by the band's angle (every axis at the same position)
        x = q.double()[0, :, 0]
        a, b = x[:, :4], x[:, 4:]
        want = torch.cat((a * ang.cos() - b * ang.sin(), b * ang.cos() + a * ang.sin()), dim=-1)
        torch.testing.assert_close(got[0, :, 0], want, rtol=0, atol=1e-5)
    with pytest.raises(RuntimeError, match=TRACED_RULE):
        f(torch.tensor([0.0, 1.0, 2.0**24], dtype=torch.float32))
    with pytest.raises(RuntimeError, match=TRACED_RULE):
        f(torch.tensor([-(2.0**30), 1.0, 2.0], dtype=torch.float32))
    f(torch.tensor([1.0, 2.0, 3.0], dtype=torch.float32))  # the graph still runs for good positions


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_float32_positions_are_refused_eagerly_naming_positions() -> None:
    """On CUDA, eagerly, the same ValueError as on the CPU (float positions are checked on the host: one aminmax
    read back; integer positions have no value check and never synchronise)."""
    check_positions(torch.tensor([0.0, 2.5, 2.0**24 - 1], device="cuda"))
    check_positions(torch.tensor([0.0, 2.5, 2.0**24 - 1], device="cuda").double() * 2.0**30)
    with pytest.raises(ValueError, match=r"positions are float32 with magnitude up to 16777216 >= 2\*\*24"):
        check_positions(torch.tensor([1.0, 2.0**24], device="cuda"))

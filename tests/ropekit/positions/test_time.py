"""Continuous positions: float64 re-referencing, V2PE steps, and exact phases for large real-valued times
(mpmath oracle)."""

from __future__ import annotations

import dataclasses

import mpmath
import pytest
import torch

from ropekit import RopeSpec, rope_tables
from ropekit.axes import AxisMap
from ropekit.axis_tables import axis_tables
from ropekit.positions.time import time_positions, v2pe_positions


def test_time_positions_rereference_in_float64() -> None:
    t = torch.tensor([1.7e9 + 0.25, 1.7e9 + 1.75, 1.7e9 + 3.0], dtype=torch.float64)
    assert time_positions(t, reference=1.7e9, scale=0.5).tolist() == [0.5, 3.5, 6.0]
    assert time_positions([10.0, 12.5]).tolist() == [0.0, 2.5]  # default reference: first timestamp
    with pytest.raises(ValueError, match="float32 with magnitude"):
        time_positions(torch.tensor([1.7e9], dtype=torch.float32))
    with pytest.raises(ValueError, match="scale must be"):
        time_positions([1.0], scale=0.0)
    with pytest.raises(ValueError, match="must be finite"):
        time_positions([1.0, float("nan")])


def test_v2pe_steps() -> None:
    assert v2pe_positions([("text", 2), ("visual", 4), ("text", 1)], 0.25).tolist() == [
        0,
        1,
        2,
        2.25,
        2.5,
        2.75,
        3,
    ]
    plain = v2pe_positions([("text", 3), ("visual", 5), ("text", 2)], 1.0)
    assert plain.tolist() == list(range(10))  # delta 1 is plain 1-D RoPE
    with pytest.raises(ValueError, match=r"delta must be a number in \(0, 1\]"):
        v2pe_positions([("text", 1)], 2.0)


@pytest.mark.parametrize("p", [0.5, 123.456789, 1e6 + 0.375, 9.999e6 + 0.1])
def test_real_valued_phases_exact_against_mpmath(p: float) -> None:
    spec = RopeSpec(head_dim=32, base=10_000.0, axes=AxisMap.contiguous((6, 5, 5)))
    pos = torch.tensor([[p], [p / 3], [-p]], dtype=torch.float64)
    cos, sin = axis_tables(pos, spec, dtype=torch.float64)
    mpmath.mp.dps = 50
    for j, a in enumerate(spec.axes.slots):  # type: ignore[union-attr]
        theta = mpmath.mpf(10_000) ** (-mpmath.mpf(2 * j) / 32)
        ang = mpmath.mpf(float(pos[a, 0])) * theta
        assert abs(float(cos[0, j]) - float(mpmath.cos(ang))) < 1e-8
        assert abs(float(sin[0, j]) - float(mpmath.sin(ang))) < 1e-8
    # and the 1-D float path agrees bit for bit with the axis-0 bands
    c1, _ = rope_tables(pos[0], dataclasses.replace(spec, axes=None), dtype=torch.float64)
    t_bands = list(spec.axes.bands_of("t"))  # type: ignore[union-attr]
    assert torch.equal(cos[0, t_bands], c1[0, t_bands])

"""torch.func.vmap over the positions (not only over q): float positions, multi-axis positions and Rotary.

Trial finding (T1): the README says torch.func transforms work through these functions, but a vmap over float
positions failed in the value check (``.item()`` on a batched tensor) and over multi-axis positions in the
equal-axes shortcut (a data-dependent branch); over integer positions with a negative entry it read the shared
table cache with a data-dependent bounds check ("index -3 is out of bounds"). Oracle: the float64 rotation written from the formula for the 1-D
case, and for every case the same calls made one batch entry at a time (themselves tested against float64 references
elsewhere).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

import ropekit
from ropekit import AxisMap, RopeSpec

S = RopeSpec(16)
M = RopeSpec(16, axes=AxisMap.contiguous((4, 2, 2)))
Q = torch.randn(1, 5, 2, 16, generator=torch.Generator().manual_seed(0))
P1 = torch.tensor([[0.0, 1.5, 3.0, 4.5, 6.0], [100.25, 7.0, -3.5, 2.0, 9.75]])
A = torch.stack([torch.arange(5), torch.arange(5) * 2, torch.arange(5) % 3])
P3 = torch.stack(
    [A, A + 3, torch.stack([A[0], A[0], A[0]])]
)  # the last: equal axes (the 1-D shortcut eagerly)


def _rotate64(x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
    """x [1, s, h, 16] rotated in float64, half layout, base 1e4: pair (j, j + 8) by pos * 1e4^(-j/8)."""
    theta = torch.tensor([1e4 ** (-j / 8) for j in range(8)], dtype=torch.float64)
    ang = pos.double()[:, None] * theta  # [s, 8]
    c, s = ang.cos()[None, :, None], ang.sin()[None, :, None]
    a, b = x.double()[..., :8], x.double()[..., 8:]
    return torch.cat([a * c - b * s, b * c + a * s], -1)


CASES: dict[str, tuple[Callable[[torch.Tensor], torch.Tensor], torch.Tensor]] = {
    "apply_rope float": (lambda p: ropekit.apply_rope(Q, None, p, S)[0], P1),
    "apply_rope int": (lambda p: ropekit.apply_rope(Q, None, p, S)[0], P1.long()),
    "rope_tables float": (lambda p: ropekit.rope_tables(p, S)[0], P1),
    "Rotary float": (lambda p: ropekit.Rotary(S)(Q, positions=p)[0], P1),
    "apply_rope_axes": (lambda p: ropekit.apply_rope_axes(Q, None, p, M)[0], P3),
    "axis_tables": (lambda p: ropekit.axis_tables(p, M)[0], P3),
    "Rotary multi-axis": (lambda p: ropekit.Rotary(M)(Q, positions=p)[0], P3),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_vmap_over_positions_equals_one_call_per_entry(name: str) -> None:
    fn, batch = CASES[name]
    got = torch.func.vmap(fn)(batch)
    want = torch.stack([fn(p) for p in batch])
    torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_vmap_over_float_positions_is_the_rotation() -> None:
    got = torch.func.vmap(lambda p: ropekit.apply_rope(Q, None, p, S)[0])(P1)
    for i in range(len(P1)):
        torch.testing.assert_close(got[i].double(), _rotate64(Q, P1[i]), rtol=0, atol=2e-6)


def test_a_bad_float_position_is_still_refused_under_vmap() -> None:
    bad = P1.clone()
    bad[1, 2] = float("nan")
    with pytest.raises(ValueError, match="positions must be finite"):
        torch.func.vmap(lambda p: ropekit.apply_rope(Q, None, p, S)[0])(bad)
    with pytest.raises(ValueError, match=r"float32 with magnitude up to 1677\d+ >= 2\*\*24"):
        torch.func.vmap(lambda p: ropekit.apply_rope(Q, None, p, S)[0])(P1 + torch.tensor([[0.0], [2.0**24]]))

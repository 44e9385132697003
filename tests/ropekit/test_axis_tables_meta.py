"""Meta positions in the multi-axis entry points, as the 1-D ones treat them (tests/ropekit/test_module.py).

Meta positions have no values: ``axis_tables`` / ``rope_tables`` make shape-only meta tables from them
(``device`` None or meta) and refuse any other ``device``; ``apply_rope_axes`` takes them only with a meta q
(shape inference) and otherwise refuses them naming ``positions`` and q's device, before anything is written.
Oracle for the rotation after a refused call: float64 math written from the contiguous letter map "TTTTHHWW"
and the frequency formula (never ropekit's AxisMap or tables).
"""

from __future__ import annotations

import math

import pytest
import torch

from ropekit import AxisMap, RopeSpec, Rotary, apply_rope_axes, rope_tables
from ropekit.axis_tables import axis_tables

SPEC = RopeSpec(head_dim=16, axes=AxisMap.contiguous((4, 2, 2)))  # base 1e4, layout "half", 8 bands
LETTERS, NAMES = "TTTTHHWW", "THW"
FREQS = [1e4 ** (-2 * j / 16) for j in range(8)]
META_POS = r"positions are on the meta device \(no values\)"


def _positions(equal_axes: bool) -> torch.Tensor:
    """[3, 5] int64: every axis the same (the 1-D path) or three different rows (the tables path)."""
    if equal_axes:
        return torch.arange(5).expand(3, 5).clone()
    return torch.stack([torch.arange(5), torch.arange(5) * 2 + 1, torch.tensor([4, 0, 3, 1, 2])])


def _oracle(x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
    """x [b, s, h, 16] rotated in float64: band j (pair j, j + 8) turns by pos[axis of letter j][i] * FREQS[j]."""
    p = pos.tolist()
    ang = torch.tensor(
        [[p[NAMES.index(LETTERS[j])][i] * FREQS[j] for j in range(8)] for i in range(len(p[0]))],
        dtype=torch.float64,
    )  # [s, 8]
    cos, sin = ang.cos()[None, :, None, :], ang.sin()[None, :, None, :]
    x = x.double()
    a, b = x[..., :8], x[..., 8:]
    return torch.cat((a * cos - b * sin, b * cos + a * sin), dim=-1)


@pytest.mark.parametrize("device", ["cpu", torch.device("cpu")])
def test_axis_tables_refuses_meta_positions_for_tables_with_values(device: str | torch.device) -> None:
    """The multi-axis tables used to come back on meta though ``device`` asked for the CPU."""
    meta = _positions(False).to("meta")
    for call in (axis_tables, rope_tables):
        with pytest.raises(ValueError, match=META_POS + r" but device=.* asks for tables on cpu"):
            call(meta, SPEC, device=device)


@pytest.mark.parametrize("device", [None, "meta"])
def test_axis_tables_of_meta_positions_are_shape_only_meta_tables(device: str | None) -> None:
    for dtype in (torch.float32, torch.float64):
        for call in (axis_tables, rope_tables):
            cos, sin = call(_positions(False).to("meta")[:, None, :], SPEC, dtype=dtype, device=device)
            assert cos.is_meta and sin.is_meta
            assert cos.shape == sin.shape == (1, 5, 8) and cos.dtype == sin.dtype == dtype
    # positions with values, meta tables asked for
    cos, _ = axis_tables(_positions(False), SPEC, device="meta")
    assert cos.is_meta and cos.shape == (5, 8)


@pytest.mark.parametrize("equal_axes", [False, True])
@pytest.mark.parametrize("inplace", [False, True])
def test_apply_rope_axes_refuses_meta_positions_naming_them(equal_axes: bool, inplace: bool) -> None:
    """q on the CPU, positions on meta: "positions ... meta ... q is on cpu" (it was "cos is on meta"), before
    anything is written, also after a good call left a plan for this geometry; the next good call is right."""
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(2, 5, 2, 16, generator=g), torch.randn(2, 5, 1, 16, generator=g)
    q0, k0 = q.clone(), k.clone()
    good = _positions(equal_axes)
    with torch.no_grad():
        apply_rope_axes(q.clone(), k.clone(), good, SPEC, inplace=inplace)  # leaves a plan / memo
        for _ in range(2):
            with pytest.raises(ValueError, match=META_POS + " but q is on cpu"):
                apply_rope_axes(q, k, good.to("meta"), SPEC, inplace=inplace)
    assert torch.equal(q, q0) and torch.equal(k, k0)
    qo, ko = apply_rope_axes(q, k, good, SPEC)
    assert ko is not None
    torch.testing.assert_close(qo.double(), _oracle(q0, good), rtol=0, atol=1e-5)
    torch.testing.assert_close(ko.double(), _oracle(k0, good), rtol=0, atol=1e-5)


@pytest.mark.parametrize("equal_axes", [False, True])
def test_apply_rope_axes_with_meta_q_infers_shapes(equal_axes: bool) -> None:
    q, k = torch.empty(2, 5, 2, 16, device="meta"), torch.empty(2, 5, 1, 16, device="meta")
    for pos in (_positions(equal_axes).to("meta"), _positions(equal_axes)):
        qo, ko = apply_rope_axes(q, k, pos, SPEC)
        assert qo.is_meta and qo.shape == q.shape
        assert ko is not None and ko.is_meta and ko.shape == k.shape


def test_oracle_is_the_formula() -> None:
    """The oracle itself: band 0 of token 1 of axis t turns by 1 * 1 rad; band 7 (axis w) by pos_w * 1e4^(-14/16)."""
    x = torch.zeros(1, 5, 1, 16, dtype=torch.float64)
    x[..., :8] = 1.0
    pos = _positions(False)
    out = _oracle(x, pos)
    assert math.isclose(float(out[0, 1, 0, 0]), math.cos(1.0))
    assert math.isclose(float(out[0, 1, 0, 8]), math.sin(1.0))
    w = 1e4 ** (-14 / 16) * 3  # token 2: w = 3
    assert math.isclose(float(out[0, 2, 0, 7]), math.cos(w))
    assert math.isclose(float(out[0, 2, 0, 15]), math.sin(w))


@pytest.mark.parametrize("equal_axes", [False, True])
def test_multi_axis_rotary_on_the_cpu_infers_shapes_from_meta_q_and_positions(equal_axes: bool) -> None:
    """A multi-axis Rotary living on the CPU, called with meta q / k and meta positions (shape inference, e.g. a
    meta-device dry run of a model built on the CPU): meta outputs of q's and k's shapes, as the 1-D Rotary gives
    (it used to ask axis_tables for CPU tables of meta positions, which now refuses them)."""
    rope = Rotary(SPEC)
    q, k = torch.empty(2, 5, 2, 16, device="meta"), torch.empty(2, 5, 1, 16, device="meta")
    qo, ko = rope(q, k, positions=_positions(equal_axes).to("meta"))
    assert qo.is_meta and qo.shape == q.shape
    assert ko is not None and ko.is_meta and ko.shape == k.shape
    with pytest.raises(ValueError, match="meta"):  # values to rotate by are missing: refused, not garbage
        rope(torch.randn(2, 5, 2, 16), positions=_positions(equal_axes).to("meta"))

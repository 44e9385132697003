"""Autograd: the backward of a rotation is the rotation by the negative angle; gradcheck in float64."""

from __future__ import annotations

import pytest
import torch

from ropekit import RopeSpec, apply_rope
from tests.oracles import reference_rope

CASES = [
    (RopeSpec(8, layout="half"), "bshd"),
    (RopeSpec(8, layout="interleaved"), "bhsd"),
    (RopeSpec(12, rotary_dim=8, layout="half"), "thd"),
    (RopeSpec(12, rotary_dim=4, layout="interleaved", base=500.0), "bshd"),
]


def _shape(fmt: str, h: int, d: int) -> tuple[int, ...]:
    return {"bshd": (2, 3, h, d), "bhsd": (2, h, 3, d), "thd": (3, h, d)}[fmt]


@pytest.mark.parametrize("spec,fmt", CASES)
def test_gradcheck_float64(spec: RopeSpec, fmt: str) -> None:
    pos = torch.tensor([0, 5, 100_000])
    q = torch.randn(_shape(fmt, 4, spec.head_dim), dtype=torch.float64, requires_grad=True)
    k = torch.randn(_shape(fmt, 2, spec.head_dim), dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, b: apply_rope(a, b, pos, spec, format=fmt), (q, k))
    assert torch.autograd.gradgradcheck(lambda a, b: apply_rope(a, b, pos, spec, format=fmt), (q, k))


@pytest.mark.parametrize("spec,fmt", CASES)
def test_gradcheck_inplace_on_non_leaf(spec: RopeSpec, fmt: str) -> None:
    pos = torch.tensor([3, 1, 4])
    x = torch.randn(_shape(fmt, 3, spec.head_dim), dtype=torch.float64, requires_grad=True)

    def f(a: torch.Tensor) -> torch.Tensor:
        b = a * 1.0  # a non-leaf the rotation may overwrite
        out, _ = apply_rope(b, None, pos, spec, format=fmt, inplace=True)
        assert out is b
        return out

    assert torch.autograd.gradcheck(f, (x,))


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
def test_backward_is_rotation_by_negative_angle(dtype: torch.dtype) -> None:
    spec = RopeSpec(16, rotary_dim=12)
    pos = torch.tensor([[2, 40, 7_000_000], [1, 1, 1]])
    x = torch.randn(2, 3, 2, 16, dtype=dtype, requires_grad=True)
    g = torch.randn(2, 3, 2, 16, dtype=dtype)
    out, _ = apply_rope(x, None, pos, spec)
    (gx,) = torch.autograd.grad(out, x, g)
    assert gx.dtype == dtype
    expect = reference_rope(g, -pos, spec)  # R(-phi) g = R(phi)^T g, built literally
    tol = {torch.float64: 1e-8, torch.float32: 1e-5, torch.bfloat16: 5e-2}[dtype]
    torch.testing.assert_close(gx.double(), expect, rtol=0, atol=tol)

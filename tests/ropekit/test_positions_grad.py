"""Gradients with respect to float positions (learned / continuous coordinates). Oracles: RoPE written from the
formula in float64 (band i turns by p * theta_i, theta_i = base^(-2i/d) / s for linear scaling, cos and sin times
the attention factor) and its derivative d angle / dp = theta_i; torch.autograd.gradcheck (finite differences)."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
import torch

from ropekit import RopeSpec, apply_rope, apply_rope_axes, axis_tables, rope_tables, scaling
from ropekit.positions_grad import apply_rope_position_grad, position_grad_tables
from ropekit.presets_vl import rope_vit_axial_spec

_PI = Fraction("3.14159265358979323846264338327950288419716939937510582097494459")


def _rotate(x: torch.Tensor, ang: torch.Tensor, layout: str, factor: float = 1.0) -> torch.Tensor:
    """x [b, s, h, d] (bshd) rotated by angles [b or 1, s, n] in float64, from the formula."""
    c, s = (torch.cos(ang) * factor).unsqueeze(2), (torch.sin(ang) * factor).unsqueeze(2)
    x = x.double()
    if layout == "half":
        n = ang.shape[-1]
        x1, x2 = x[..., :n], x[..., n:]
        return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], -1)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x1 * c - x2 * s, x2 * c + x1 * s], -1).flatten(-2)


def _thetas(d: int, base: float, s: float = 1.0) -> torch.Tensor:
    return torch.tensor([base ** (-2.0 * i / d) / s for i in range(d // 2)], dtype=torch.float64)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("factor", [1.0, 4.0])
def test_gradient_matches_the_formula(layout: str, factor: float) -> None:
    """Positions that require grad were refused ("ropekit does not differentiate with respect to positions")."""
    spec = RopeSpec(
        head_dim=8, base=100.0, layout=layout, scaling=scaling.Linear(factor) if factor != 1 else None
    )  # type: ignore[arg-type]
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 5, 3, 8, dtype=torch.float64, generator=g)
    w = torch.randn(2, 5, 3, 8, dtype=torch.float64, generator=g)
    p = (torch.rand(2, 5, dtype=torch.float64, generator=g) * 50).requires_grad_(True)
    out, _ = apply_rope_position_grad(q, None, p, spec)
    th = _thetas(8, 100.0, factor)
    oracle_p = p.detach().clone().requires_grad_(True)  # the formula, differentiated by torch
    want = _rotate(q, oracle_p[..., None] * th, layout)
    torch.testing.assert_close(out, want, atol=1e-12, rtol=0)
    (out * w).sum().backward()
    (want * w).sum().backward()
    torch.testing.assert_close(p.grad, oracle_p.grad, atol=1e-10, rtol=1e-10)


def test_gradcheck_attention_factor_and_a_large_position() -> None:
    spec = RopeSpec(head_dim=8, scaling=scaling.Yarn(factor=4.0, original_max_position_embeddings=16))
    q = torch.randn(1, 4, 2, 8, dtype=torch.float64)
    k = torch.randn(1, 4, 1, 8, dtype=torch.float64)
    p = torch.tensor([0.0, 2.5, 1e3 + 0.25, 7.75], dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda p: apply_rope_position_grad(q, k, p, spec), (p,))
    # past finite differences' reach (float64 spacing 5e-4 at 3e12): d out / dp = factor * theta * (rotated by
    # 90 degrees) at the exactly reduced angle
    big = torch.tensor([3e12 + 0.5], dtype=torch.float64, requires_grad=True)
    q1 = q[:, :1]
    gq = torch.zeros_like(q1)
    gq[0, 0, 0, 0] = 1.0  # out[..., 0] = factor (x0 cos a - x4 sin a) (half layout, band 0)
    (grad,) = torch.autograd.grad(apply_rope_position_grad(q1, None, big, spec)[0], big, gq)
    th = float(spec.frequencies()[0])
    turns = Fraction(3e12 + 0.5) * Fraction(th) / (2 * _PI)  # exact product, then mod 1 turn
    a = float(turns - (turns.numerator // turns.denominator)) * 2 * math.pi
    x0, x4 = float(q1[0, 0, 0, 0]), float(q1[0, 0, 0, 4])
    want = spec.attention_factor * th * (-x0 * math.sin(a) - x4 * math.cos(a))
    assert abs(float(grad[0]) - want) < 1e-6 * max(1.0, abs(want))


def test_tables_are_the_exact_tables_and_differentiate() -> None:
    spec = RopeSpec(head_dim=16, base=500_000.0)
    p = torch.tensor([[0.0, 0.5, 7.25, 123456.75]], dtype=torch.float64, requires_grad=True)
    ang = p.detach()[..., None] * _thetas(16, 500_000.0)  # exact enough in float64 at these magnitudes
    for dtype in (torch.float32, torch.float64):
        c, s = position_grad_tables(p, spec, dtype=dtype)
        assert c.dtype == dtype and c.requires_grad and s.requires_grad
        torch.testing.assert_close(c, torch.cos(ang).to(dtype))
        torch.testing.assert_close(s, torch.sin(ang).to(dtype))
        c0, s0 = rope_tables(p.detach(), spec, dtype=dtype)  # the same phases as the path without grad
        torch.testing.assert_close(
            c, c0, atol=2.0**-52, rtol=2.0**-51 if dtype == torch.float64 else 2.0**-23
        )
        torch.testing.assert_close(
            s, s0, atol=2.0**-52, rtol=2.0**-51 if dtype == torch.float64 else 2.0**-23
        )
    assert torch.autograd.gradcheck(lambda p: position_grad_tables(p, spec, dtype=torch.float64), (p,))


def test_multi_axis_routes_and_matches_the_formula() -> None:
    """apply_rope_axes / apply_rope (multi-axis spec) / axis_tables refused positions that require grad."""
    spec = rope_vit_axial_spec(8)  # axes (x, y): bands 0-1 on x, 2-3 on y, theta (1, 0.1), interleaved
    g = torch.Generator().manual_seed(2)
    q = torch.randn(2, 5, 2, 8, dtype=torch.float64, generator=g)
    p = (torch.rand(2, 2, 5, dtype=torch.float64, generator=g) * 10).requires_grad_(True)
    th = torch.tensor([1.0, 0.1], dtype=torch.float64)
    oracle_p = p.detach().clone().requires_grad_(True)
    ang = torch.cat([oracle_p[0][..., None] * th, oracle_p[1][..., None] * th], -1)  # [b, s, 4]
    want = _rotate(q, ang, "interleaved")
    w = torch.randn_like(want)
    (want * w).sum().backward()
    for fn in (apply_rope_axes, apply_rope):
        pp = p.detach().clone().requires_grad_(True)
        out, _ = fn(q, None, pp, spec)
        torch.testing.assert_close(out, want, atol=1e-12, rtol=0)
        (out * w).sum().backward()
        torch.testing.assert_close(pp.grad, oracle_p.grad, atol=1e-10, rtol=1e-10)
    assert torch.autograd.gradcheck(lambda p: axis_tables(p, spec, dtype=torch.float64), (p,))
    # float32 q, a shared [A, 1, s] row, in place on a non-leaf: gradients reach the positions
    p1 = p.detach()[:, :1].clone().requires_grad_(True)
    qf = torch.randn(2, 5, 2, 8, generator=g, requires_grad=True) * 1.0
    out, _ = apply_rope_axes(qf, None, p1, spec, inplace=True)
    out.sum().backward()
    assert p1.grad is not None and bool(p1.grad.abs().sum() > 0)


def test_func_transforms_and_no_grad() -> None:
    spec = rope_vit_axial_spec(8)
    q = torch.randn(1, 3, 2, 8, dtype=torch.float64)
    p = torch.rand(2, 3, dtype=torch.float64)
    f = lambda p: apply_rope_axes(q, None, p, spec)[0].sum()
    pr = p.clone().requires_grad_(True)
    f(pr).backward()
    torch.testing.assert_close(torch.func.grad(f)(p), pr.grad)
    torch.testing.assert_close(torch.func.jacrev(f)(p), pr.grad)
    with torch.no_grad():  # positions that require grad, evaluated: the same rotation, nothing recorded
        out, _ = apply_rope_axes(q, None, pr, spec)
    assert not out.requires_grad
    torch.testing.assert_close(out, apply_rope_axes(q, None, p, spec)[0], atol=1e-15, rtol=0)


def test_bad_positions_that_require_grad_are_refused_naming_them() -> None:
    spec, spec2 = RopeSpec(head_dim=8), rope_vit_axial_spec(8)
    q = torch.randn(1, 3, 2, 8)
    bad = torch.tensor([0.0, float("nan"), 2.0], requires_grad=True)
    with pytest.raises(ValueError, match="positions must be finite"):
        apply_rope_position_grad(q, None, bad, spec)
    with pytest.raises(ValueError, match="positions must be finite"):
        apply_rope_axes(q, None, torch.stack([bad, bad]).detach().requires_grad_(True), spec2)
    with pytest.raises(ValueError, match=r"positions must have shape \(3,\) or \(1, 3\)"):
        apply_rope_position_grad(q, None, torch.zeros(4, requires_grad=True), spec)
    with pytest.raises(ValueError, match=r"positions must have shape \(2, 3\) or \(2, 1, 3\)"):
        apply_rope_axes(q, None, torch.zeros(2, 4, requires_grad=True), spec2)
    with pytest.raises(ValueError, match="positions are on the meta device"):
        position_grad_tables(torch.zeros(3, device="meta", requires_grad=True), spec)

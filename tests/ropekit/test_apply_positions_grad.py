"""apply_rope / Rotary / rope_tables with float positions that require grad (learned or continuous timestamps):
refused before ("ropekit does not differentiate with respect to positions"). Oracle: RoPE from the formula in
float64 (band i turns by p * theta_i), differentiated by torch, and gradcheck (finite differences)."""

from __future__ import annotations

import pytest
import torch

from ropekit import RopeSpec, Rotary, apply_rope, rope_tables


def _formula(x: torch.Tensor, p: torch.Tensor, d: int, base: float) -> torch.Tensor:
    """half layout, x [b, s, h, d] float64, p [s] or [b, s]."""
    th = torch.tensor([base ** (-2.0 * i / d) for i in range(d // 2)], dtype=torch.float64)
    ang = p[..., None] * th
    ang = ang if ang.dim() == 3 else ang[None]
    c, s = torch.cos(ang)[:, :, None], torch.sin(ang)[:, :, None]
    x1, x2 = x[..., : d // 2], x[..., d // 2 :]
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], -1)


@pytest.mark.parametrize("entry", ["apply_rope", "Rotary", "apply_rope_float32", "inplace"])
def test_gradient_reaches_float_positions(entry: str) -> None:
    spec = RopeSpec(head_dim=8, base=100.0)
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 5, 3, 8, dtype=torch.float64, generator=g)
    w = torch.randn(2, 5, 3, 8, dtype=torch.float64, generator=g)
    p = (torch.rand(2, 5, dtype=torch.float64, generator=g) * 40).requires_grad_(True)
    ref_p = p.detach().clone().requires_grad_(True)
    (_formula(q, ref_p, 8, 100.0) * w).sum().backward()
    if entry == "apply_rope":
        out = apply_rope(q, None, p, spec)[0]
    elif entry == "Rotary":
        out = Rotary(spec)(q, None, positions=p)[0]
    elif entry == "apply_rope_float32":
        out = apply_rope(q.float(), None, p.float(), spec)[0].double()
    else:
        out = apply_rope(q.float() * 1.0, None, p, spec, inplace=True)[0].double()
    (out * w).sum().backward()
    assert p.grad is not None
    tol = 1e-10 if entry in ("apply_rope", "Rotary") else 2e-3
    torch.testing.assert_close(p.grad, ref_p.grad, atol=tol, rtol=tol)


def test_gradcheck_and_tables() -> None:
    spec = RopeSpec(head_dim=8, base=100.0)
    q = torch.randn(1, 4, 2, 8, dtype=torch.float64)
    p = torch.tensor([0.5, 1.25, 7.0, 30.75], dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda p: apply_rope(q, None, p, spec)[0], (p,))
    assert torch.autograd.gradcheck(lambda p: rope_tables(p, spec, dtype=torch.float64), (p,))
    _, sin = Rotary(spec).tables(p)  # float32 tables; d sum(sin) / dp = sum_i theta_i cos(p theta_i)
    sin.sum().backward()
    th = torch.tensor([100.0 ** (-2.0 * i / 8) for i in range(4)], dtype=torch.float64)
    want = (th * torch.cos(p.detach()[:, None] * th)).sum(-1)
    assert p.grad is not None
    torch.testing.assert_close(p.grad, want, atol=1e-6, rtol=1e-6)
    assert torch.func.grad(lambda p: apply_rope(q, None, p, spec)[0].sum())(p.detach()).shape == (4,)


def test_position_gradient_under_torch_compile() -> None:
    """fullgraph compile (aot_eager: dynamo and AOTAutograd's joint graph) gives the float64 formula's gradient."""
    spec = RopeSpec(head_dim=8, base=100.0)
    g = torch.Generator().manual_seed(3)
    q = torch.randn(2, 5, 3, 8, dtype=torch.float64, generator=g)
    p = (torch.rand(2, 5, dtype=torch.float64, generator=g) * 40).requires_grad_(True)
    ref_p = p.detach().clone().requires_grad_(True)

    def loss(q: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
        return apply_rope(q, None, p, spec)[0].square().mul(torch.arange(8.0, dtype=torch.float64)).sum()

    torch._dynamo.reset()
    (got,) = torch.autograd.grad(torch.compile(loss, fullgraph=True, backend="aot_eager")(q, p), p)
    ref = _formula(q, ref_p, 8, 100.0).square().mul(torch.arange(8.0, dtype=torch.float64)).sum()
    (want,) = torch.autograd.grad(ref, ref_p)
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)

"""torch.compile(fullgraph=True) of code calling apply_rope: no graph break, same values and gradients."""

from __future__ import annotations

import torch

import ropekit

SPEC = ropekit.RopeSpec(64, base=500_000.0, rotary_dim=48)


def _scores(q: torch.Tensor, k: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
    q, k = ropekit.apply_rope(q, k, pos, SPEC)
    return torch.einsum("bshd,bthd->bhst", q, k.repeat_interleave(2, 2))


def _inplace(q: torch.Tensor, k: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
    q = q * 1.0
    k = k * 1.0
    ropekit.apply_rope(q, k, pos, SPEC, inplace=True)
    return q.sum() + k.sum()


def test_no_graph_breaks() -> None:
    q, k, pos = torch.randn(2, 8, 4, 64), torch.randn(2, 8, 2, 64), torch.arange(8) + 1000
    for fn in (_scores, _inplace):
        torch._dynamo.reset()
        assert torch._dynamo.explain(fn)(q, k, pos).graph_break_count == 0


def test_fullgraph_compile_values_and_gradients() -> None:
    torch._dynamo.reset()
    q = torch.randn(2, 8, 4, 64, requires_grad=True)
    k = torch.randn(2, 8, 2, 64, requires_grad=True)
    pos = torch.arange(8) + 123_456
    compiled = torch.compile(_scores, fullgraph=True)
    out = compiled(q, k, pos)
    gq, gk = torch.autograd.grad(out.square().sum(), (q, k))
    ref = _scores(q, k, pos)
    rq, rk = torch.autograd.grad(ref.square().sum(), (q, k))
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(gq, rq, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(gk, rk, rtol=1e-4, atol=1e-4)


def test_custom_ops_are_registered_with_fake_kernels() -> None:
    from torch._subclasses.fake_tensor import FakeTensorMode

    x = torch.randn(1, 3, 2, 64)
    cos, sin = ropekit.rope_tables(torch.arange(3), SPEC)
    c, s = cos[None, :, None], sin[None, :, None]
    with FakeTensorMode() as mode:
        fx, fc, fs = mode.from_tensor(x), mode.from_tensor(c), mode.from_tensor(s)
        out = torch.ops.ropekit.rotate(fx, fc, fs, 48, False, 1)
    assert out.shape == x.shape
    eager = torch.ops.ropekit.rotate(x, c, s, 48, False, 1)
    assert torch.equal(eager, ropekit.apply_rope(x, None, torch.arange(3), SPEC)[0])

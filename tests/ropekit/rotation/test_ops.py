"""The registered ops ``torch.ops.ropekit.rotate`` / ``rotate_`` called directly, against the float64 formula.

They are what a compiled graph calls on every step (ropekit.rotation.ops): values for every storage dtype, layout,
sign and geometry (a prepared kernel call is kept per geometry, so the same shape with other strides must not reuse
it), gradients and double backward, the in-place op's refusal of tensors that need grad, and dispatch below
autograd (meta tensors, fake tensors, a TorchDispatchMode sees the op: the CPU shortcut never bypasses a mode).
"""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import ropekit  # noqa: F401  (registers the ops)

ROTATE = torch.ops.ropekit.rotate.default
ROTATE_ = torch.ops.ropekit.rotate_.default


def _formula(
    x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, r: int, il: bool, sign: int
) -> torch.Tensor:
    """x' = x cos - y sin, y' = y cos + x sin per band (seed 004 section 3.4), in float64; sign -1 negates sin."""
    x64, c, s = x.double(), cos.double(), sign * sin.double()
    n = r // 2
    out = x64.clone()
    if il:
        a, b = x64[..., 0:r:2], x64[..., 1:r:2]
        out[..., 0:r:2], out[..., 1:r:2] = a * c - b * s, b * c + a * s
    else:
        a, b = x64[..., :n], x64[..., n:r]
        out[..., :n], out[..., n:r] = a * c - b * s, b * c + a * s
    return out


def _tables(b: int, s: int, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    phi = torch.rand(b, s, 1, n, dtype=torch.float64) * 6.3
    return phi.cos().float(), phi.sin().float()


def _tol(dtype: torch.dtype) -> dict[str, float]:
    return {torch.float32: {"rtol": 1e-6, "atol": 1e-6}}.get(dtype, {"rtol": 1e-2, "atol": 1e-2})


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("il", [False, True])
@pytest.mark.parametrize("sign", [1, -1])
@pytest.mark.parametrize("inplace", [False, True])
def test_ops_match_the_formula_for_every_geometry(
    dtype: torch.dtype, il: bool, sign: int, inplace: bool
) -> None:
    r, d = 48, 64  # partial rotary: channels past r pass through
    cos, sin = _tables(2, 3, r // 2)
    base = torch.randn(2, 4, 3, d).to(dtype)
    geometries = [
        torch.randn(2, 3, 4, d).to(dtype),  # contiguous bshd
        torch.randn(2, 3, 4, d).to(dtype),  # the same geometry again: the prepared call, new data
        base.transpose(1, 2),  # the same shape, other strides: its own prepared call
        torch.randn(2, 3, 4, 2 * d).to(dtype)[..., :d],  # a view into a wider buffer (row stride 2d)
    ]
    for x in geometries:
        want = _formula(x, cos, sin, r, il, sign)
        before = x.clone()
        if inplace:
            out = x
            assert ROTATE_(x, cos, sin, r, il, sign, "auto") is None
        else:
            out = ROTATE(x, cos, sin, r, il, sign, "auto")
            assert torch.equal(x, before)  # out of place never writes x
        assert out.dtype == dtype and out.shape == x.shape
        torch.testing.assert_close(out.double(), want, **_tol(dtype))
        assert torch.equal(out[..., r:], before[..., r:])


@pytest.mark.parametrize("backend", ["torch", "cpu"])
def test_explicit_backends_agree_with_the_formula(backend: str) -> None:
    x = torch.randn(2, 3, 4, 64)
    cos, sin = _tables(2, 3, 32)
    torch.testing.assert_close(
        ROTATE(x, cos, sin, 64, False, 1, backend).double(), _formula(x, cos, sin, 64, False, 1)
    )


def test_ops_are_registered_by_import_ropekit() -> None:
    code = "import torch, ropekit; torch.ops.ropekit.rotate.default; torch.ops.ropekit.rotate_.default; print('ok')"
    run = subprocess.run(
        [sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stderr


def test_gradients_double_backward_and_table_gradients() -> None:
    # float64: the PyTorch backend under the same op and autograd rule; gradcheck is the finite-difference oracle
    x = torch.randn(2, 3, 2, 16, dtype=torch.float64, requires_grad=True)
    phi = torch.rand(2, 3, 1, 6, dtype=torch.float64)
    cos, sin = phi.cos().requires_grad_(), phi.sin().requires_grad_()
    for il in (False, True):
        fn = lambda x, c, s, il=il: ROTATE(x, c, s, 12, il, 1, "auto")
        assert torch.autograd.gradcheck(fn, (x, cos, sin))
        assert torch.autograd.gradgradcheck(fn, (x, cos, sin))


def test_float32_gradient_is_the_inverse_rotation() -> None:
    x = torch.randn(2, 3, 4, 64, requires_grad=True)
    cos, sin = _tables(2, 3, 32)
    g = torch.randn(2, 3, 4, 64)
    (gx,) = torch.autograd.grad((ROTATE(x, cos, sin, 64, False, 1, "auto") * g).sum(), (x,))
    torch.testing.assert_close(gx.double(), _formula(g, cos, sin, 64, False, -1), rtol=1e-6, atol=1e-6)
    with torch.no_grad():
        assert ROTATE(x, cos, sin, 64, False, 1, "auto").grad_fn is None
    with torch.inference_mode():
        y = torch.randn(2, 3, 4, 64)
        torch.testing.assert_close(
            ROTATE(y, cos, sin, 64, False, 1, "auto").double(), _formula(y, cos, sin, 64, False, 1)
        )


@pytest.mark.parametrize("which", ["x", "cos"])
def test_inplace_op_refuses_tensors_that_need_grad_before_writing(which: str) -> None:
    x = torch.randn(2, 3, 4, 64)
    cos, sin = _tables(2, 3, 32)
    if which == "x":
        x.requires_grad_()
    else:
        cos.requires_grad_()
    before = x.detach().clone()
    with pytest.raises(RuntimeError, match=r"rotate_ \(in place\) is not differentiable.*requires_grad=True"):
        ROTATE_(x, cos, sin, 64, False, 1, "auto")
    assert torch.equal(x.detach(), before)


def test_meta_and_fake_tensors_get_shapes_only() -> None:
    from torch._subclasses.fake_tensor import FakeTensorMode

    x, c, s = (
        torch.randn(2, 3, 4, 64, device="meta"),
        torch.randn(2, 3, 1, 32, device="meta"),
        torch.randn(2, 3, 1, 32, device="meta"),
    )
    out = ROTATE(x, c, s, 64, False, 1, "auto")
    assert out.device.type == "meta" and out.shape == x.shape
    assert ROTATE_(x, c, s, 64, False, 1, "auto") is None
    with FakeTensorMode() as mode:
        fx = mode.from_tensor(torch.randn(2, 3, 4, 64))
        fc, fs = mode.from_tensor(torch.randn(2, 3, 1, 32)), mode.from_tensor(torch.randn(2, 3, 1, 32))
        assert ROTATE(fx, fc, fs, 64, False, 1, "auto").shape == (2, 3, 4, 64)


class _Seen(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


def test_a_dispatch_mode_sees_the_ops() -> None:
    """The Autograd kernel runs the CPU kernel itself only when nothing but the CPU key is left below autograd:
    under a mode the call reaches the mode (which then runs it)."""
    x = torch.randn(2, 3, 4, 64)
    cos, sin = _tables(2, 3, 32)
    want = _formula(x, cos, sin, 64, False, 1)
    with _Seen() as seen:
        out = ROTATE(x, cos, sin, 64, False, 1, "auto")
        ROTATE_(x, cos, sin, 64, False, 1, "auto")
    assert seen.ops == ["ropekit.rotate.default", "ropekit.rotate_.default"]
    torch.testing.assert_close(out.double(), want, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(x.double(), want, rtol=1e-6, atol=1e-6)

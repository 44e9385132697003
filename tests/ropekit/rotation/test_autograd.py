"""Autograd: the backward of a rotation is the rotation by the negative angle; gradcheck in float64."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch.autograd.forward_ad as fwAD

from ropekit import (
    AxisMap,
    RopeSpec,
    apply_rope,
    apply_rope_axes,
    apply_rope_tables,
    apply_rope_varlen,
    rope_tables,
)
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


# ---------------------------------------------------------------- forward-mode AD and torch.func (training trial F5)
# The fused CPU kernel (what backend="auto" picks for float32 CPU tensors) writes through raw pointers: a dual
# tensor's tangent was dropped without an error, torch.func.jvp / vmap reached the kernel with wrappers that have no
# storage, and torch.func.grad failed on the autograd.Function. Such tensors are now rotated by differentiable
# PyTorch ops; an explicit backend="cpu" refuses them. Oracles: eager calls outside any transform (backend="torch",
# whose autograd rule is gradchecked above) and the float64 reference.

_SPEC_F5 = RopeSpec(16, rotary_dim=12, layout="interleaved")
_AX_SPEC = RopeSpec(16, axes=AxisMap.contiguous((2, 3, 3)))
_POS = torch.tensor([3, 1, 4, 100_000])
_POS3 = torch.stack([_POS, _POS // 2, _POS % 3])
_CU = torch.tensor([0, 1, 4])
_TABLES = rope_tables(_POS, _SPEC_F5)


def _entries(backend: str) -> dict[str, Callable[[torch.Tensor], torch.Tensor]]:
    """Each public entry point as a function of q [1, 4, 2, 16] (packed [4, 2, 16] for varlen)."""
    return {
        "apply_rope": lambda x: apply_rope(x, None, _POS, _SPEC_F5, backend=backend)[0],
        "apply_rope_tables": lambda x: apply_rope_tables(x, None, *_TABLES, _SPEC_F5, backend=backend)[0],
        "apply_rope_axes": lambda x: apply_rope_axes(x, None, _POS3, _AX_SPEC, backend=backend)[0],
        "apply_rope_varlen": lambda x: apply_rope_varlen(x[0], None, _CU, _SPEC_F5, backend=backend)[0][None],
        "apply_rope_inplace": lambda x: apply_rope(
            x * 1.0, None, _POS, _SPEC_F5, inplace=True, backend=backend
        )[0],
    }


ENTRIES = sorted(_entries("auto"))


def _eager(entry: str, x: torch.Tensor) -> torch.Tensor:
    """The oracle: the PyTorch backend outside any transform."""
    return _entries("torch")[entry](x.detach().clone())


@pytest.mark.parametrize("requires_grad", [False, True])
@pytest.mark.parametrize("entry", ENTRIES)
def test_forward_ad_tangent_is_the_rotated_tangent(entry: str, requires_grad: bool) -> None:
    """The JVP of a rotation is the same rotation of the tangent. A plain call of the same geometry comes first and
    stores the decode plan, which must not take the dual call; with requires_grad the backward still works."""
    torch.manual_seed(0)
    f = _entries("auto")[entry]
    q, t, w = torch.randn(1, 4, 2, 16), torch.randn(1, 4, 2, 16), torch.randn(1, 4, 2, 16)
    f(q), f(q)  # the geometry's stored plan
    for _ in range(2):
        qq = q.clone().requires_grad_(requires_grad)
        with fwAD.dual_level():
            out = f(fwAD.make_dual(qq, t))
            primal, tangent = fwAD.unpack_dual(out)
            assert tangent is not None, "the tangent was dropped"
            torch.testing.assert_close(primal, _eager(entry, q), rtol=1e-6, atol=1e-6)
            torch.testing.assert_close(tangent, _eager(entry, t), rtol=1e-6, atol=1e-6)
        if requires_grad:
            (g,) = torch.autograd.grad((primal * w).sum(), qq)
            ref = q.clone().requires_grad_()
            (want,) = torch.autograd.grad((_entries("torch")[entry](ref) * w).sum(), ref)
            torch.testing.assert_close(g, want, rtol=1e-6, atol=1e-6)
    if entry == "apply_rope":  # and the float64 reference, built from the rotation matrices
        torch.testing.assert_close(tangent.double(), reference_rope(t, _POS, _SPEC_F5), rtol=0, atol=1e-5)


@pytest.mark.parametrize("entry", ENTRIES)
def test_torch_func_jvp_vmap_grad_equal_the_eager_torch_backend(entry: str) -> None:
    torch.manual_seed(1)
    f = _entries("auto")[entry]
    q, t, w = torch.randn(1, 4, 2, 16), torch.randn(1, 4, 2, 16), torch.randn(1, 4, 2, 16)
    f(q), f(q)  # a stored plan for this geometry
    out, tangent = torch.func.jvp(f, (q,), (t,))
    torch.testing.assert_close(out, _eager(entry, q), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(tangent, _eager(entry, t), rtol=1e-6, atol=1e-6)
    batch = torch.randn(3, 1, 4, 2, 16)
    got = torch.func.vmap(f)(batch)
    want = torch.stack([_eager(entry, b) for b in batch])
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
    g = torch.func.grad(lambda x: (f(x) * w).sum())(q)
    ref = q.clone().requires_grad_()
    (want_g,) = torch.autograd.grad((_entries("torch")[entry](ref) * w).sum(), ref)
    torch.testing.assert_close(g, want_g, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("entry", ["apply_rope", "apply_rope_tables", "apply_rope_axes"])
def test_explicit_cpu_backend_refuses_tangents_and_torch_func(entry: str) -> None:
    """backend="cpu" names a kernel that cannot follow a tangent: a ValueError naming the argument and the way out,
    before anything is computed (not a silently dropped tangent, not "Cannot access data pointer")."""
    f = _entries("cpu")[entry]
    q, t = torch.randn(1, 4, 2, 16), torch.randn(1, 4, 2, 16)
    msg = r"backend='cpu' cannot rotate q: it carries a forward-mode AD tangent .* use backend='torch'"
    with fwAD.dual_level(), pytest.raises(ValueError, match=msg):
        f(fwAD.make_dual(q, t))
    with pytest.raises(ValueError, match=msg):
        torch.func.vmap(f)(q[None].expand(2, -1, -1, -1, -1).contiguous())
    with pytest.raises(ValueError, match=msg):
        torch.func.grad(lambda x: f(x).sum())(q)
    if entry == "apply_rope_tables":  # a dual table, q plain
        cos, sin = _TABLES
        with fwAD.dual_level(), pytest.raises(ValueError, match=r"backend='cpu' cannot rotate cos"):
            apply_rope_tables(
                q, None, fwAD.make_dual(cos, torch.ones_like(cos)), sin, _SPEC_F5, backend="cpu"
            )


def test_forward_ad_through_learnable_tables() -> None:
    """Dual tables (forward-mode AD with respect to frequencies), float32 q (the fused CPU kernel's dtype, which
    dropped the tangent): the tangent is the derivative of the rotation written from its definition in float64 torch
    ops (tests/ropekit/rotation/test_apply_autograd.py), taken by torch.func.jvp."""
    from tests.ropekit.rotation.test_apply_autograd import _rotate_by_tables_ref

    torch.manual_seed(2)
    q = torch.randn(1, 4, 2, 16)
    cos, sin = _TABLES
    dc, ds = torch.randn_like(cos), torch.randn_like(sin)
    _, want = torch.func.jvp(
        lambda c, s: _rotate_by_tables_ref(q, c, s, _SPEC_F5, "bshd"),
        (cos.double(), sin.double()),
        (dc.double(), ds.double()),
    )
    for backend in ("auto", "torch", "auto"):  # the second "auto" call: its geometry's plan is stored
        apply_rope_tables(q, None, cos, sin, _SPEC_F5, backend=backend)
        with fwAD.dual_level():
            out = apply_rope_tables(
                q, None, fwAD.make_dual(cos, dc), fwAD.make_dual(sin, ds), _SPEC_F5, backend=backend
            )[0]
            tangent = fwAD.unpack_dual(out).tangent
        assert tangent is not None, f"backend={backend!r} dropped the tangent"
        torch.testing.assert_close(tangent.double(), want, rtol=0, atol=1e-5)

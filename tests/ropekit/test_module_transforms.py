"""``Rotary`` (1-D and multi-axis) under forward-mode AD and torch.func, against the float64 formula.

A plain decode call first stores the module's plan for the call geometry (:mod:`ropekit.rotation.fastpath`); the
module's fast path then skipped the check that routes dual tensors and torch.func wrappers to differentiable
PyTorch ops: a dual q came back without its tangent, and jvp / vmap failed on "Cannot access data pointer". The
multi-axis side also read the positions' memory (axis memos) under torch.func.grad and failed there.

Oracle: RoFormer's rotation written from its definition in float64 (theta_i = base^(-2i/r), band i at the
position of its axis: contiguous sections (2, 3, 3) give bands 0-1 axis 0, 2-4 axis 1, 5-7 axis 2). The rotation
is linear in q, so the tangent of q + eps t is the rotated t, and the gradient of <R q, w> is R^T w = R(-phi) w.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch.autograd.forward_ad as fwAD

from ropekit import AxisMap, RopeSpec, Rotary

BASE = 10_000.0
#: contiguous sections (2, 3, 3) of 8 bands: the axis of every band, written out
_BAND_AXIS = [0, 0, 1, 1, 1, 2, 2, 2]


def _rotate64(x: torch.Tensor, pos: list[list[int]], layout: str, sign: int = 1) -> torch.Tensor:
    """x [b, s, h, 16] rotated in float64; pos[band][s]: the position band i turns at for token s."""
    x = x.double().clone()
    n = 8
    theta = torch.tensor([BASE ** (-2.0 * i / 16) for i in range(n)], dtype=torch.float64)
    ang = sign * torch.tensor(pos, dtype=torch.float64).T * theta  # [s, n]
    c, s = torch.cos(ang)[:, None], torch.sin(ang)[:, None]  # [s, 1, n]
    ia = torch.arange(n) if layout == "half" else 2 * torch.arange(n)
    ib = ia + n if layout == "half" else ia + 1
    a, b = x[..., ia], x[..., ib]
    x[..., ia], x[..., ib] = a * c - b * s, b * c + a * s
    return x


def _cases() -> dict[str, tuple[RopeSpec, torch.Tensor, list[list[int]]]]:
    """name -> (spec, positions as Rotary takes them, the position of every band per token for the oracle)."""
    p1 = [5, 9]
    rows = [[5, 9], [2, 0], [7, 3]]  # t, h, w of the two tokens
    return {
        "1-D": (RopeSpec(16, base=BASE), torch.tensor(p1), [p1] * 8),
        "axes, equal rows": (
            RopeSpec(16, base=BASE, axes=AxisMap.contiguous((2, 3, 3))),
            torch.tensor([p1, p1, p1])[:, None, :],
            [p1] * 8,
        ),
        "axes": (
            RopeSpec(16, base=BASE, axes=AxisMap.contiguous((2, 3, 3))),
            torch.tensor(rows)[:, None, :],
            [rows[a] for a in _BAND_AXIS],
        ),
    }


CASES = sorted(_cases())


def _setup(case: str, layout: str, with_k: bool) -> tuple[Callable[..., torch.Tensor], list[list[int]]]:
    spec, pos, oracle_pos = _cases()[case]
    spec = RopeSpec(16, base=BASE, layout=layout, axes=spec.axes)  # type: ignore[arg-type]
    rope = Rotary(spec)
    torch.manual_seed(0)
    k = torch.randn(1, 2, 2, 16) if with_k else None

    def f(x: torch.Tensor, kk: torch.Tensor | None = k) -> torch.Tensor:
        return rope(x, kk, positions=pos)[0]

    q = torch.randn(1, 2, 4, 16)
    f(q), f(q)  # plain calls: the geometry's plan (and the multi-axis memo) are stored
    return f, oracle_pos


@pytest.mark.parametrize("with_k", [False, True])
@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("case", CASES)
def test_forward_ad_tangent_is_the_rotated_tangent(case: str, layout: str, with_k: bool) -> None:
    f, pos = _setup(case, layout, with_k)
    q, t = torch.randn(1, 2, 4, 16), torch.randn(1, 2, 4, 16)
    with fwAD.dual_level():
        primal, tangent = fwAD.unpack_dual(f(fwAD.make_dual(q, t)))
    assert tangent is not None, "the tangent was dropped"
    torch.testing.assert_close(primal.double(), _rotate64(q, pos, layout), rtol=0, atol=1e-5)
    torch.testing.assert_close(tangent.double(), _rotate64(t, pos, layout), rtol=0, atol=1e-5)


@pytest.mark.parametrize("case", CASES)
def test_forward_ad_tangent_of_k(case: str) -> None:
    """A dual k (q plain): k's tangent comes out rotated, q's output has none."""
    spec, pos_in, pos = _cases()[case]
    rope = Rotary(spec)
    q, k, t = torch.randn(1, 2, 4, 16), torch.randn(1, 2, 2, 16), torch.randn(1, 2, 2, 16)
    rope(q, k, positions=pos_in), rope(q, k, positions=pos_in)
    with fwAD.dual_level():
        qo, ko = rope(q, fwAD.make_dual(k, t), positions=pos_in)
        assert ko is not None
        tangent = fwAD.unpack_dual(ko).tangent
        assert fwAD.unpack_dual(qo).tangent is None
    assert tangent is not None, "k's tangent was dropped"
    torch.testing.assert_close(tangent.double(), _rotate64(t, pos, "half"), rtol=0, atol=1e-5)


@pytest.mark.parametrize("with_k", [False, True])
@pytest.mark.parametrize("case", CASES)
def test_torch_func_jvp_vmap_grad(case: str, with_k: bool) -> None:
    f, pos = _setup(case, "half", with_k)
    q, t, w = torch.randn(1, 2, 4, 16), torch.randn(1, 2, 4, 16), torch.randn(1, 2, 4, 16)
    out, tangent = torch.func.jvp(f, (q,), (t,))
    torch.testing.assert_close(out.double(), _rotate64(q, pos, "half"), rtol=0, atol=1e-5)
    torch.testing.assert_close(tangent.double(), _rotate64(t, pos, "half"), rtol=0, atol=1e-5)
    batch = torch.randn(3, 1, 2, 4, 16)
    got = torch.func.vmap(f)(batch)  # q batched, k (when given) shared
    torch.testing.assert_close(got.double(), _rotate64(batch, pos, "half"), rtol=0, atol=1e-5)
    g = torch.func.grad(lambda x: (f(x) * w).sum())(q)
    torch.testing.assert_close(g.double(), _rotate64(w, pos, "half", sign=-1), rtol=0, atol=1e-5)
    # and the plain call after the transforms: still the stored plan's exact result
    torch.testing.assert_close(f(q).double(), _rotate64(q, pos, "half"), rtol=0, atol=1e-5)

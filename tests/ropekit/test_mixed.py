"""RoPE-Mixed (Heo et al. 2024): paper init, gradcheck in float64, frozen axial equals the axial spec, and the
2-D relative invariance that learnable mixed frequencies keep."""

from __future__ import annotations

import math

import pytest
import torch

from ropekit.axis_tables import apply_rope_axes
from ropekit.mixed import MixedRotary
from ropekit.positions.grid import grid_positions, with_prefix
from ropekit.presets_vl import rope_vit_axial_spec


def test_paper_initialisation() -> None:
    d, h = 32, 3
    m = MixedRotary(d, h, generator=torch.Generator().manual_seed(1))
    f = m.freqs.detach().double()
    mag = torch.tensor([10.0 ** (-4 * k / d) for k in range(d // 4)], dtype=torch.float64)
    for head in range(h):
        fx, fy = f[0, head], f[1, head]
        # magnitudes 10^(-4k/D) on both halves
        torch.testing.assert_close(torch.hypot(fx[: d // 4], fy[: d // 4]), mag, atol=1e-6, rtol=1e-6)
        torch.testing.assert_close(torch.hypot(fx[d // 4 :], fy[d // 4 :]), mag, atol=1e-6, rtol=1e-6)
        # one angle per head, second half rotated by pi/2
        phi = torch.atan2(fy[: d // 4], fx[: d // 4])
        assert float(phi.max() - phi.min()) < 1e-5
        phi2 = torch.atan2(fy[d // 4 :], fx[d // 4 :])
        diff = torch.remainder(phi2 - phi, 2 * math.pi)
        torch.testing.assert_close(diff, torch.full_like(diff, math.pi / 2), atol=1e-5, rtol=0)
    assert m.freqs.requires_grad and m.no_weight_decay() == {"freqs"}
    assert not torch.allclose(f[0, 0], f[0, 1])  # heads differ


def test_gradcheck_float64() -> None:
    m = MixedRotary(8, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    pos = torch.tensor([[0.0, 1.0, 2.0, 0.5], [0.0, 0.0, 1.0, 3.0]], dtype=torch.float64)
    q = torch.randn(1, 4, 2, 8, dtype=torch.float64, requires_grad=True)
    freqs = m.freqs.detach().clone().requires_grad_(True)

    def g(freqs: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return torch.func.functional_call(m, {"freqs": freqs}, (x,), {"positions": pos})[0]

    assert torch.autograd.gradcheck(g, (freqs, q))
    assert torch.autograd.gradgradcheck(g, (freqs, q))


def test_gradient_matches_analytic_derivative() -> None:
    # d/df_x of <R q, k> for one band: derivative of the angle is x, so d logit = x * <dR/dangle q, k>
    m = MixedRotary(4, 1, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    pos = torch.tensor([[2.0], [5.0]], dtype=torch.float64)
    q = torch.randn(1, 1, 1, 4, dtype=torch.float64)
    k = torch.randn(1, 1, 1, 4, dtype=torch.float64)
    out, _ = m(q, positions=pos)
    (out * k).sum().backward()
    f = m.freqs.detach()
    for band in range(2):
        ang = 2.0 * f[0, 0, band] + 5.0 * f[1, 0, band]
        x1, x2 = q[0, 0, 0, 2 * band], q[0, 0, 0, 2 * band + 1]
        k1, k2 = k[0, 0, 0, 2 * band], k[0, 0, 0, 2 * band + 1]
        dlogit = (-x1 * torch.sin(ang) - x2 * torch.cos(ang)) * k1 + (
            -x2 * torch.sin(ang) + x1 * torch.cos(ang)
        ) * k2
        torch.testing.assert_close(m.freqs.grad[0, 0, band], 2.0 * dlogit)  # type: ignore[index]
        torch.testing.assert_close(m.freqs.grad[1, 0, band], 5.0 * dlogit)  # type: ignore[index]


@pytest.mark.parametrize("fmt", ["bshd", "bhsd"])
def test_frozen_axial_is_axial_rope(fmt: str) -> None:
    d = 16
    m = MixedRotary(d, 3, init="axial", learnable=False, format=fmt)
    assert not m.freqs.requires_grad and m.base == 100.0
    xy = with_prefix(grid_positions((4, 5))[[1, 0]], 1)  # CLS first, not rotated
    shape = (2, 21, 3, d) if fmt == "bshd" else (2, 3, 21, d)
    q, k = torch.randn(shape), torch.randn(shape)
    got = m(q, k, positions=xy)
    want = apply_rope_axes(q, k, xy, rope_vit_axial_spec(d), format=fmt)
    torch.testing.assert_close(got[0], want[0], atol=2e-6, rtol=0)
    torch.testing.assert_close(got[1], want[1], atol=2e-6, rtol=0)  # type: ignore[arg-type]
    cls = got[0][:, 0] if fmt == "bshd" else got[0][:, :, 0]
    assert torch.equal(cls, q[:, 0] if fmt == "bshd" else q[:, :, 0])


def test_mixed_logits_depend_only_on_2d_differences() -> None:
    m = MixedRotary(16, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(5))
    pos = grid_positions((3, 4))[[1, 0]].double()
    q, k = torch.randn(1, 12, 2, 16, dtype=torch.float64), torch.randn(1, 12, 2, 16, dtype=torch.float64)

    def logits(p: torch.Tensor) -> torch.Tensor:
        qr, kr = m(q, k, positions=p)
        return torch.einsum("bihd,bjhd->hij", qr, kr)  # type: ignore[arg-type]

    base = logits(pos)
    for shift in ((7.0, -3.0), (1e5, 0.25)):
        torch.testing.assert_close(logits(pos + torch.tensor(shift).unsqueeze(1)), base, atol=1e-9, rtol=1e-9)


def test_errors() -> None:
    with pytest.raises(ValueError, match="head_dim must be a positive multiple of 4"):
        MixedRotary(6, 2)
    with pytest.raises(ValueError, match="init must be"):
        MixedRotary(8, 2, init="spiral")  # type: ignore[arg-type]
    m = MixedRotary(8, 2)
    with pytest.raises(ValueError, match=r"positions must have shape \[2, tokens\]"):
        m(torch.randn(1, 3, 2, 8), positions=torch.zeros(3, 3))
    with pytest.raises(ValueError, match="q has 3 heads but the module has num_heads=2"):
        m(torch.randn(1, 3, 3, 8), positions=torch.zeros(2, 3))
    with pytest.raises(ValueError, match="positions cover 4 tokens but q has 3"):
        m(torch.randn(1, 3, 2, 8), positions=torch.zeros(2, 4))


def test_forward_validates_like_apply_rope_axes_before_computing() -> None:
    """Positions as a list raised AttributeError, an integer q was rotated with truncation (int64 out) and a k of
    another batch size was accepted. Oracle: apply_rope_axes refuses the same calls with the same exception type."""
    m = MixedRotary(8, 2, init="axial", learnable=False)
    spec = rope_vit_axial_spec(8)
    pos = grid_positions((2, 3))[[1, 0]]
    q, k = torch.randn(2, 6, 2, 8), torch.randn(2, 6, 2, 8)
    cases = [
        ("positions must be a torch.Tensor", TypeError, q, k, pos.tolist()),
        ("q must be float32, float64, bfloat16 or float16, got torch.int64", ValueError, q.long(), None, pos),
        ("k must be float32, float64, bfloat16 or float16, got torch.int32", ValueError, q, k.int(), pos),
        ("k must match q in batch", ValueError, q, k[:1], pos),
        ("q must be a 4-D bshd torch.Tensor", ValueError, q.tolist(), None, pos),
        ("k must be a 4-D bshd torch.Tensor", TypeError, q, "k", pos),
        (
            "positions must have one of the dtypes int8, int16, int32, int64, uint8, float32, float64",
            ValueError,
            q,
            k,
            pos.bool(),
        ),
    ]
    for match, exc, qq, kk, pp in cases:
        saved = [t.clone() for t in (qq, kk) if isinstance(t, torch.Tensor)]
        with pytest.raises(exc, match=match):
            m(qq, kk, positions=pp)
        with pytest.raises(Exception) as oracle:
            apply_rope_axes(qq, kk, pp, spec)
        assert type(oracle.value) is exc
        assert all(
            torch.equal(a, b) for a, b in zip(saved, [t for t in (qq, kk) if isinstance(t, torch.Tensor)])
        )
    # the accepted call is unchanged: frozen axial equals the axial spec (float32 rounding)
    torch.testing.assert_close(
        m(q, k, positions=pos)[1], apply_rope_axes(q, k, pos, spec)[1], atol=1e-5, rtol=1e-5
    )

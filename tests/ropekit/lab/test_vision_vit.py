"""The vision lab's ViT (ropekit.lab.vit): position tables against independent formulas."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from ropekit.lab.vit import ENCODINGS, TinyViT, ViTConfig, interpolate_pos_table


def _keys(t: float, a: float = -0.75) -> float:
    """Keys' cubic convolution kernel (the bicubic of PyTorch / OpenCV, a = -0.75)."""
    t = abs(t)
    if t <= 1:
        return (a + 2) * t**3 - (a + 3) * t**2 + 1
    if t < 2:
        return a * t**3 - 5 * a * t**2 + 8 * a * t - 4 * a
    return 0.0


def _resize_1d(n_in: int, n_out: int) -> np.ndarray:
    """[n_out, n_in] bicubic resampling matrix: half-pixel centres, edge samples replicated."""
    m = np.zeros((n_out, n_in))
    for i in range(n_out):
        src = (i + 0.5) * n_in / n_out - 0.5
        f = math.floor(src)
        for k in range(f - 1, f + 3):
            m[i, min(max(k, 0), n_in - 1)] += _keys(src - k)
    return m


@pytest.mark.parametrize("grid", [12, 16, 5])
def test_interpolated_table_matches_separable_bicubic(grid: int) -> None:
    g0, c = 8, 3
    table = torch.randn(g0 * g0, c, generator=torch.Generator().manual_seed(grid), dtype=torch.float64)
    got = interpolate_pos_table(table, grid).numpy().reshape(grid, grid, c)
    r = _resize_1d(g0, grid)
    ref = np.einsum("ij,kl,jlc->ikc", r, r, table.numpy().reshape(g0, g0, c))
    np.testing.assert_allclose(got, ref, rtol=1e-10, atol=1e-10)


def test_interpolation_keeps_constants_and_is_identity_at_the_training_grid() -> None:
    table = torch.randn(64, 4, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    assert torch.equal(interpolate_pos_table(table, 8), table)
    const = torch.full((64, 2), 3.25, dtype=torch.float64)  # the kernel's weights sum to 1
    assert torch.allclose(interpolate_pos_table(const, 16), torch.full((256, 2), 3.25, dtype=torch.float64))
    with pytest.raises(ValueError, match="square grid"):
        interpolate_pos_table(torch.zeros(10, 2), 4)
    with pytest.raises(ValueError, match="grid must be a positive int"):
        interpolate_pos_table(table, 0)


def test_axial_tables_match_rope_vit_formula() -> None:
    """x block then y block, theta_k = 100^(-4k/D), x = column, y = row; the class token is the identity."""
    m = TinyViT(ViTConfig(encoding="rope-axial", dim=32, heads=2))  # head dim 16: 4 x-bands, 4 y-bands
    g, d = 5, 16
    cos, sin, _ = m._rope(g)
    theta = [100.0 ** (-4.0 * k / d) for k in range(d // 4)]
    ref = np.zeros((1 + g * g, d // 2))
    for t in range(g * g):
        row, col = divmod(t, g)
        ref[1 + t] = [col * th for th in theta] + [row * th for th in theta]
    np.testing.assert_allclose(cos.numpy(), np.cos(ref), atol=2e-7)
    np.testing.assert_allclose(sin.numpy(), np.sin(ref), atol=2e-7)


def test_raster_positions() -> None:
    m = TinyViT(ViTConfig(encoding="rope-1d", dim=32, heads=2))
    assert m.positions(3).tolist() == [0, 0, 1, 2, 3, 4, 5, 6, 7, 8]


def test_no_position_is_permutation_invariant_and_the_others_are_not() -> None:
    x = torch.randn(2, 6, 6, 3, generator=torch.Generator().manual_seed(0))
    perm = torch.randperm(36, generator=torch.Generator().manual_seed(1))
    xp = x.reshape(2, 36, 3)[:, perm].reshape(2, 6, 6, 3)
    for enc in ENCODINGS:
        torch.manual_seed(0)
        m = TinyViT(ViTConfig(encoding=enc, dim=32, heads=2, depth=2, train_grid=4)).double()
        with torch.no_grad():
            a, b = m(x.double()), m(xp.double())
        assert a.shape == (2, 4)
        assert torch.allclose(a, b, atol=1e-10) == (enc == "none"), enc


def test_mixed_frequencies_get_gradients_and_skip_weight_decay() -> None:
    m = TinyViT(ViTConfig(encoding="rope-mixed", dim=32, heads=2, depth=2))
    m(torch.randn(3, 8, 8, 3)).sum().backward()
    freqs = [p for n, p in m.named_parameters() if n.endswith("freqs")]
    assert len(freqs) == 2 and all(p.grad is not None and float(p.grad.abs().sum()) > 0 for p in freqs)
    assert m.no_weight_decay() == {"cls", "blocks.0.mixed.freqs", "blocks.1.mixed.freqs"}
    assert TinyViT(ViTConfig(encoding="learned")).no_weight_decay() == {"cls", "pos"}


def test_bad_config_and_input() -> None:
    with pytest.raises(ValueError, match="encoding must be one of"):
        ViTConfig(encoding="sinusoidal")
    with pytest.raises(ValueError, match="head dim divisible by 4"):
        ViTConfig(dim=24, heads=4)
    with pytest.raises(ValueError, match=r"images must be \[batch, g, g, 3\]"):
        TinyViT(ViTConfig(dim=32, heads=2))(torch.zeros(1, 4, 5, 3))

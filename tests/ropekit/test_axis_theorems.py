"""Multi-axis RoPE proved as properties (issue 10 point 6, issue 11 point 6), for every axis assignment.

- Relative invariance: the logit <R(P_q) q, R(P_k) k> depends only on the per-axis differences P_k - P_q: shifting
  every axis of both tokens (offsets up to 1e7, a non-integer temporal offset) leaves it unchanged to float64
  precision.
- All axes equal reduces exactly (bit for bit) to the 1-D spec.
- Norm preservation.
- Seed 004, lemma 12.5 / theorem 13.3 (2-D minimality): a real, length-preserving map that depends continuously
  on the position needs 2-D blocks -- O(1) = {+1, -1} is discrete, SO(2) carries one continuous angle. Checked on
  ropekit's operator: every band is an SO(2) element R(angle) with no real invariant line (irreducible: no 1-D
  block can express it), continuous in the position, while single channels (pass-through) never change.
"""

from __future__ import annotations

import math

import pytest
import torch

from ropekit import RopeSpec, apply_rope
from ropekit.axes import AxisMap
from ropekit.axis_tables import apply_rope_axes
from ropekit.presets_vl import (
    axial_spec,
    dinov3_spec,
    ernie_vl_spec,
    glm4v_spec,
    llama4_vision_spec,
    pixtral_spec,
    qwen2_vl_spec,
    qwen3_vl_spec,
    qwen_vit_spec,
    rope_vit_axial_spec,
    videorope_spec,
)

SPECS = {
    "qwen2_vl": qwen2_vl_spec(),
    "qwen3_vl": qwen3_vl_spec(),
    "glm4v": glm4v_spec(),
    "ernie_vl": ernie_vl_spec(),
    "videorope": videorope_spec(),
    "qwen_vit": qwen_vit_spec(64),
    "pixtral": pixtral_spec(64),
    "llama4_vision": llama4_vision_spec(64),
    "rope_vit_axial": rope_vit_axial_spec(64),
    "dinov3": dinov3_spec(64),
    "axial_3d_video": axial_spec(24, (4, 4, 4)),
    "explicit_3d": RopeSpec(head_dim=16, axes=AxisMap("explicit", (2, 0, 1, 1, 0, 2, 2, 0))),
}


def _logits(
    spec: RopeSpec, q: torch.Tensor, k: torch.Tensor, pq: torch.Tensor, pk: torch.Tensor
) -> torch.Tensor:
    """q, k [T, h, d] float64 at per-token positions pq, pk [A, T]; returns the T x T logits per head."""
    qr, _ = apply_rope_axes(q.unsqueeze(0), None, pq, spec)
    kr, _ = apply_rope_axes(k.unsqueeze(0), None, pk, spec)
    return torch.einsum("bihd,bjhd->hij", qr, kr)


@pytest.mark.parametrize("name", sorted(SPECS))
def test_logits_depend_only_on_per_axis_differences(name: str) -> None:
    spec = SPECS[name]
    a, t, d = spec.n_axes, 6, spec.head_dim
    q, k = torch.randn(t, 2, d, dtype=torch.float64), torch.randn(t, 2, d, dtype=torch.float64)
    small = name == "dinov3"  # normalised coordinates live in [-1, 1]
    pos = torch.rand(a, t, dtype=torch.float64) * 2 - 1 if small else torch.randint(0, 50, (a, t)).double()
    base = _logits(spec, q, k, pos, pos)
    scale = float(q.norm(dim=-1).max() * k.norm(dim=-1).max())
    offsets = [[1e7] * a, [0.5 + 1e3 * i for i in range(a)], [-(i + 1) * 3.25 for i in range(a)]]
    offsets[1][0] = 12345.678  # a non-integer temporal offset
    for off in offsets:
        shift = torch.tensor(off, dtype=torch.float64).unsqueeze(1)
        moved = _logits(spec, q, k, pos + shift, pos + shift)
        # float64 angle at |p| ~ 1e7: ~1e7 * 2^-53 rad per band
        torch.testing.assert_close(moved, base, atol=2e-8 * scale, rtol=0)


@pytest.mark.parametrize("name", sorted(SPECS))
def test_all_axes_equal_reduces_exactly_to_one_d(name: str) -> None:
    spec = SPECS[name]
    one_d = RopeSpec(
        head_dim=spec.head_dim,
        base=spec.base,
        rotary_dim=spec.rotary_dim,
        layout=spec.layout,
        freqs=spec.freqs,
    )
    x = torch.randn(2, 9, 3, spec.head_dim)
    p = torch.randint(0, 1 << 20, (9,))
    multi, _ = apply_rope_axes(x, None, p.expand(spec.n_axes, 9), spec)
    plain, _ = apply_rope(x, None, p, one_d)
    assert torch.equal(multi, plain)


@pytest.mark.parametrize("name", sorted(SPECS))
def test_norm_preserved(name: str) -> None:
    spec = SPECS[name]
    x = torch.randn(1, 7, 2, spec.head_dim, dtype=torch.float64)
    pos = torch.randint(-1000, 1 << 24, (spec.n_axes, 7))
    out, _ = apply_rope_axes(x, None, pos, spec)
    torch.testing.assert_close(out.norm(dim=-1), x.norm(dim=-1), atol=1e-12, rtol=1e-13)


@pytest.mark.parametrize("name", ["qwen_vit", "pixtral", "llama4_vision", "rope_vit_axial", "dinov3"])
def test_two_d_relative_invariance_on_a_grid(name: str) -> None:
    spec = SPECS[name]
    rows, cols = torch.meshgrid(torch.arange(4.0), torch.arange(5.0), indexing="ij")
    pos = torch.stack([rows.reshape(-1), cols.reshape(-1)]).double()
    if name in ("llama4_vision", "rope_vit_axial"):
        pos = pos.flip(0)  # axes (x, y)
    q, k = (
        torch.randn(20, 1, spec.head_dim, dtype=torch.float64),
        torch.randn(20, 1, spec.head_dim, dtype=torch.float64),
    )
    base = _logits(spec, q, k, pos, pos)
    for dr, dc in ((3.0, -7.0), (1e5, 2.5), (-0.25, 1e6)):
        moved = _logits(spec, q, k, pos + torch.tensor([[dr], [dc]]), pos + torch.tensor([[dr], [dc]]))
        torch.testing.assert_close(moved, base, atol=1e-8, rtol=1e-10)
    # and it is genuinely 2-D: shifting only one token's row changes its logits
    moved_q = pos.clone()
    moved_q[0, 0] += 1
    assert not torch.allclose(_logits(spec, q, k, moved_q, pos)[0, 0], base[0, 0])


def _band_matrix(spec: RopeSpec, positions: torch.Tensor, band: int) -> torch.Tensor:
    """The 2 x 2 matrix ropekit applies to band `band`'s channel pair, read off by rotating the unit vectors."""
    xs, ys = spec.pairs()
    cols = []
    for ch in (xs[band], ys[band]):
        e = torch.zeros(1, 1, 1, spec.head_dim, dtype=torch.float64)
        e[..., ch] = 1.0
        out, _ = apply_rope_axes(e, None, positions, spec)
        cols.append(torch.stack([out[0, 0, 0, xs[band]], out[0, 0, 0, ys[band]]]))
    return torch.stack(cols, dim=1)


@pytest.mark.parametrize("name", ["qwen2_vl", "glm4v", "pixtral", "llama4_vision"])
def test_seed_2d_minimality_every_band_is_an_irreducible_so2_block(name: str) -> None:
    spec = SPECS[name]
    a = spec.n_axes
    theta = spec.frequencies().tolist()
    slots = spec.axes.slots  # type: ignore[union-attr]
    pos = torch.tensor([[3.0 + i] for i in range(a)], dtype=torch.float64)
    for band in range(0, spec.n_bands, 5):
        m = _band_matrix(spec, pos, band)
        ang = float(pos[slots[band], 0]) * theta[band]
        want = torch.tensor(
            [[math.cos(ang), -math.sin(ang)], [math.sin(ang), math.cos(ang)]], dtype=torch.float64
        )
        torch.testing.assert_close(m, want, atol=1e-12, rtol=0)  # R(angle) in SO(2)
        assert abs(float(torch.linalg.det(m)) - 1.0) < 1e-12
        torch.testing.assert_close(m.T @ m, torch.eye(2, dtype=torch.float64), atol=1e-12, rtol=0)
        # no real eigenvector: the band cannot be split into two 1-D orthogonal (+-1) blocks
        tr = float(torch.trace(m))
        assert tr * tr - 4.0 < 0 or abs(math.sin(ang)) < 1e-12
        # continuous in the position: a small step moves it by at most step * theta
        eps = 1e-3
        m2 = _band_matrix(spec, pos + eps, band)
        assert float((m2 - m).norm()) <= eps * theta[band] * math.sqrt(2) + 1e-12
    if (
        spec.rotary_dim < spec.head_dim
    ):  # 1-D channels (pass-through) are the only continuous O(1) path: constant
        x = torch.randn(1, 1, 1, spec.head_dim, dtype=torch.float64)
        for p in (1.0, 77.5, 1e6):
            out, _ = apply_rope_axes(x, None, torch.full((a, 1), p, dtype=torch.float64), spec)
            assert torch.equal(out[..., spec.rotary_dim :], x[..., spec.rotary_dim :])

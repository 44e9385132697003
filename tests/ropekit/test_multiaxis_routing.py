"""A multi-axis spec given to the 1-D entry points is rotated per axis, never read as per-row 1-D positions."""

from __future__ import annotations

import math

import torch

import ropekit
from ropekit.presets_vl import qwen2_vl_spec


def _oracle(x: torch.Tensor, pos: torch.Tensor, spec: ropekit.RopeSpec) -> torch.Tensor:
    """float64 half-split rotation written from the slot map: band j turns by pos[axis(j)] * theta_j."""
    assert spec.axes is not None
    theta = spec.frequencies().tolist()
    out = x.to(torch.float64).clone()
    r = int(spec.rotary_dim)  # type: ignore[arg-type]
    half = r // 2
    for j, a in enumerate(spec.axes.slots):
        for s_ in range(x.shape[1]):
            phi = float(pos[a, s_]) * theta[j]
            c, s = math.cos(phi), math.sin(phi)
            x1, x2 = x[:, s_, :, j].double(), x[:, s_, :, j + half].double()
            out[:, s_, :, j] = x1 * c - x2 * s
            out[:, s_, :, j + half] = x2 * c + x1 * s
    return out


def test_apply_rope_with_multi_axis_spec_uses_axes_even_when_batch_equals_n_axes() -> None:
    spec = qwen2_vl_spec()
    torch.manual_seed(0)
    b = spec.axes.n_axes  # batch 3 == 3 axes: [3, s] must still mean (t, h, w) rows
    q = torch.randn(b, 6, 2, spec.head_dim, dtype=torch.float64)
    pos = torch.tensor([[0, 1, 2, 2, 2, 5], [0, 1, 2, 2, 3, 5], [0, 1, 2, 3, 2, 5]])
    got, _ = ropekit.apply_rope(q, None, pos, spec)
    want, _ = ropekit.apply_rope_axes(q, None, pos, spec)
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    torch.testing.assert_close(got, _oracle(q, pos, spec), rtol=0, atol=1e-12)
    # the per-row reading would be different: guard that the test can fail
    flat = ropekit.RopeSpec(spec.head_dim, base=spec.base)
    wrong, _ = ropekit.apply_rope(q, None, pos, flat)
    assert (wrong - want).abs().max() > 1e-3


def test_rope_tables_with_multi_axis_spec_equals_axis_tables() -> None:
    spec = qwen2_vl_spec()
    pos = torch.tensor([[0, 7, 2**40], [3, 1, 5], [9, 2, 2**40 + 1]])
    c1, s1 = ropekit.rope_tables(pos, spec)
    c2, s2 = ropekit.axis_tables(pos, spec)
    assert c1.shape == (3, spec.n_bands)
    assert torch.equal(c1, c2) and torch.equal(s1, s2)

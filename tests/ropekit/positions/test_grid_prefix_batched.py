"""with_prefix on per-sequence multi-axis positions [A, b, N] (the shape apply_rope_axes takes for padded batches).
Oracle: literal expected ids, and RoPE from the float64 formula (prefix tokens unrotated)."""

from __future__ import annotations

import pytest
import torch

from ropekit.axis_tables import apply_rope_axes
from ropekit.positions.grid import with_prefix
from ropekit.presets_vl import rope_vit_axial_spec


@pytest.mark.parametrize("where", ["first", "last"])
def test_batched_prefix_literal(where: str) -> None:
    """[A, b, N] was refused ("positions must be an [axes, tokens] tensor")."""
    pos = torch.tensor([[[1, 2], [3, 4]], [[5, 6], [7, 8]]])  # [2 axes, 2 batch, 2 tokens]
    out = with_prefix(pos, 1, where=where)  # type: ignore[arg-type]
    if where == "first":
        want = [[[0, 1, 2], [0, 3, 4]], [[0, 5, 6], [0, 7, 8]]]
    else:
        want = [[[1, 2, 0], [3, 4, 0]], [[5, 6, 0], [7, 8, 0]]]
    assert out.tolist() == want and out.dtype == pos.dtype


def test_batched_prefix_rotates_as_the_formula() -> None:
    spec = rope_vit_axial_spec(8)  # 2 axes, 2 bands each (contiguous), base 100, interleaved pairs
    g = torch.Generator().manual_seed(0)
    patches = torch.randint(1, 6, (2, 2, 3), generator=g)  # [A, b, N]
    pos = with_prefix(patches, 2)
    q = torch.randn(2, 5, 1, 8, dtype=torch.float64, generator=g)
    out, _ = apply_rope_axes(q, None, pos, spec)
    theta = [100.0 ** (-2.0 * j / 4) for j in range(2)]
    want = q.clone()
    for b in range(2):
        for t in range(3):
            for band in range(4):
                axis, j = divmod(band, 2)
                a = torch.tensor(float(patches[axis, b, t]) * theta[j], dtype=torch.float64)
                x1, x2 = q[b, t + 2, 0, 2 * band], q[b, t + 2, 0, 2 * band + 1]
                want[b, t + 2, 0, 2 * band] = x1 * torch.cos(a) - x2 * torch.sin(a)
                want[b, t + 2, 0, 2 * band + 1] = x2 * torch.cos(a) + x1 * torch.sin(a)
    torch.testing.assert_close(out, want, atol=1e-12, rtol=0)
    assert torch.equal(out[:, :2], q[:, :2])  # prefix tokens: the identity


def test_prefix_refuses_other_ranks_naming_the_shapes() -> None:
    with pytest.raises(ValueError, match=r"\[axes, tokens\] or \[axes, batch, tokens\]"):
        with_prefix(torch.zeros(5, dtype=torch.int64), 1)
    with pytest.raises(ValueError, match=r"\[axes, tokens\] or \[axes, batch, tokens\]"):
        with_prefix(torch.zeros(2, 1, 1, 5, dtype=torch.int64), 1)

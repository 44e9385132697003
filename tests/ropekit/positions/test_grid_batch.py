"""Padded batches of vision grids and grids rescaled onto the training resolution. Oracle: the coordinates written
cell by cell from their definition (raster order, ``(i + offset) * ref / size``, ``linspace(-1, 1, size)``), and
RoPE from the float64 formula for the padded batch (timm's own code is the oracle of the timm step:
``tests/ropekit/timm``)."""

from __future__ import annotations

import itertools

import pytest
import torch

from ropekit.axis_tables import apply_rope_axes
from ropekit.positions import padded_grid_positions, resized_grid_positions
from ropekit.positions.grid import with_prefix
from ropekit.presets_vl import rope_vit_axial_spec


def _cells(shape: tuple[int, ...]) -> list[tuple[int, ...]]:
    return list(itertools.product(*[range(d) for d in shape]))  # raster order, last axis fastest


@pytest.mark.parametrize(("shape", "ref", "offset"), [((3, 5), (4, 4), 0.0), ((2, 3, 4), (1, 6, 2), 0.5)])
def test_resized_grid_definition(shape: tuple[int, ...], ref: tuple[int, ...], offset: float) -> None:
    got = resized_grid_positions(shape, ref, offset=offset)
    want = [[(c[a] + offset) * ref[a] / shape[a] for c in _cells(shape)] for a in range(len(shape))]
    assert got.dtype == torch.float64
    torch.testing.assert_close(got, torch.tensor(want, dtype=torch.float64), atol=1e-15, rtol=0)
    pix = resized_grid_positions(shape, ref, mode="pixel")
    lin = [
        [(-1 + 2 * c[a] / (shape[a] - 1)) * ref[a] / shape[a] for c in _cells(shape)]
        for a in range(len(shape))
    ]
    torch.testing.assert_close(pix, torch.tensor(lin, dtype=torch.float64), atol=1e-15, rtol=0)
    assert resized_grid_positions(shape, None, offset=offset).tolist() == [
        [c[a] + offset for c in _cells(shape)] for a in range(len(shape))
    ]


@pytest.mark.parametrize("layout", ["sequence", "grid"])
def test_padded_batch_definition(layout: str) -> None:
    sizes = [(2, 3), (3, 1), (1, 4)]
    pos, mask = padded_grid_positions(sizes, layout=layout, pad_position=-7)  # type: ignore[arg-type]
    big = (3, 4)
    n = 12 if layout == "grid" else 6
    assert pos.shape == (2, 3, n) and mask.shape == (3, n) and pos.dtype == torch.int64
    for i, s in enumerate(sizes):
        if layout == "sequence":
            want = [list(c) for c in _cells(s)] + [[-7, -7]] * (n - s[0] * s[1])
            real = [True] * (s[0] * s[1]) + [False] * (n - s[0] * s[1])
        else:
            real = [r < s[0] and c < s[1] for r, c in _cells(big)]
            want = [[r, c] if ok else [-7, -7] for (r, c), ok in zip(_cells(big), real)]
        assert pos[:, i].t().tolist() == want
        assert mask[i].tolist() == real


def test_padded_batch_rescaled_per_image_and_longer_rows() -> None:
    sizes = torch.tensor([[2, 4], [4, 2]])
    pos, mask = padded_grid_positions(sizes, ref_shape=(8, 8), length=10, offset=0.5)
    assert pos.shape == (2, 2, 10) and pos.dtype == torch.float64
    for i, s in enumerate(sizes.tolist()):
        want = [[(c[a] + 0.5) * 8 / s[a] for a in range(2)] for c in _cells(tuple(s))]
        torch.testing.assert_close(
            pos[:, i, :8].t(), torch.tensor(want, dtype=torch.float64), atol=1e-15, rtol=0
        )
        assert mask[i].tolist() == [True] * 8 + [False] * 2
    # 3-D grids, start=1 (Llama 4 style)
    pos3, _ = padded_grid_positions([(2, 1, 2)], start=1)
    assert pos3[:, 0].t().tolist() == [[c[0] + 1, c[1] + 1, c[2] + 1] for c in _cells((2, 1, 2))]


def test_padded_batch_rotates_each_image_as_alone() -> None:
    """The padded batch with a class token, rotated at once, equals each image's real tokens rotated from the
    float64 formula at its own grid coordinates (padding masked out of attention anyway)."""
    spec = rope_vit_axial_spec(8)  # bands 0-1 on axis 0, 2-3 on axis 1, theta (1, 0.1), interleaved pairs
    sizes = [(2, 3), (3, 3)]
    pos, _mask = padded_grid_positions(sizes, ref_shape=(4, 4))
    pos = with_prefix(pos, 1)
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, pos.shape[-1], 1, 8, dtype=torch.float64, generator=g)
    out, _ = apply_rope_axes(q, None, pos, spec)
    th = [1.0, 0.1]
    for i, s in enumerate(sizes):
        for t, cell in enumerate(_cells(s)):
            coords = [cell[a] * 4 / s[a] for a in range(2)]
            for band in range(4):
                a = torch.tensor(coords[band // 2] * th[band % 2], dtype=torch.float64)
                x1, x2 = q[i, t + 1, 0, 2 * band], q[i, t + 1, 0, 2 * band + 1]
                torch.testing.assert_close(out[i, t + 1, 0, 2 * band], x1 * torch.cos(a) - x2 * torch.sin(a))
                torch.testing.assert_close(
                    out[i, t + 1, 0, 2 * band + 1], x2 * torch.cos(a) + x1 * torch.sin(a)
                )
    assert torch.equal(out[:, 0], q[:, 0])


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"sizes": []}, "sizes must be a non-empty sequence"),
        ({"sizes": [(2, 2), (2, 2, 2)]}, "same number of axes"),
        ({"sizes": [(2, 0)]}, r"sizes\[0\] must be 2 or 3 positive ints"),
        ({"sizes": [(2, 2.5)]}, r"sizes\[0\] must be 2 or 3 positive ints"),
        ({"sizes": torch.ones(2, 2)}, r"sizes must be an integer tensor \[batch, axes\]"),
        ({"sizes": [(2, 2)], "layout": "ragged"}, "layout must be 'sequence' or 'grid'"),
        ({"sizes": [(2, 2)], "length": 3}, r"length=3 cannot hold the largest image \(4 tokens"),
        ({"sizes": [(2, 2)], "offset": 0.5}, "offset must be a whole number"),
        (
            {"sizes": [(2, 2)], "offset": float("nan"), "ref_shape": (2, 2)},
            "offset must be a finite real number",
        ),
        ({"sizes": [(2, 2)], "start": 1, "ref_shape": (2, 2)}, "start applies to integer coordinates only"),
    ],
)
def test_padded_batch_refuses_bad_arguments_naming_them(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        padded_grid_positions(**kwargs)  # type: ignore[arg-type]


def test_resized_grid_refuses_bad_arguments_naming_them() -> None:
    with pytest.raises(ValueError, match="ref_shape must have as many axes"):
        resized_grid_positions((2, 2), (2, 2, 2))
    with pytest.raises(ValueError, match="shape must be 2 or 3 positive ints"):
        resized_grid_positions((2,), None)
    with pytest.raises(ValueError, match="mode must be 'index' or 'pixel'"):
        resized_grid_positions((2, 2), None, mode="cells")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="offset applies to mode='index' only"):
        resized_grid_positions((2, 2), None, offset=0.5, mode="pixel")

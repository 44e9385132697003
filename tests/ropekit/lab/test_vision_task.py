"""The vision lab's synthetic task (ropekit.lab.shapes): labels checked independently from the rendered image."""

from __future__ import annotations

import pytest
import torch

from ropekit.lab import shapes


def _centroid(channel: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Area-weighted centre (x, y) in [0, 1] of a noise-free coverage image [n, g, g] (rows, cols)."""
    g = channel.shape[-1]
    centres = (torch.arange(g, dtype=torch.float64) + 0.5) / g
    w = channel.double()
    total = w.sum(dim=(1, 2))
    x = (w.sum(dim=1) * centres).sum(-1) / total
    y = (w.sum(dim=2) * centres).sum(-1) / total
    return x, y


@pytest.mark.parametrize("grid", [8, 12, 16])
def test_labels_follow_from_the_rendered_image(grid: int) -> None:
    scenes = shapes.sample(400, torch.Generator().manual_seed(grid))
    img = shapes.render(scenes, grid)  # noise-free coverage fractions
    xa, ya = _centroid(img[..., 0])
    xb, _ = _centroid(img[..., 1])
    # the patch-centre centroid of a square's area coverage is its centre when the side is a whole number of
    # patches (8, 16: up to float32 rounding); at 12 (1.5 patches) within a fraction of a patch -- far inside
    # the label margins, so the label is still read off the image
    tol = 1e-5 if (grid * shapes.SIDE).is_integer() else 0.2 / grid
    assert tol < min(shapes.ABS_MARGIN, shapes.REL_MARGIN / 2)
    assert torch.allclose(xa, scenes.a[:, 0], atol=tol) and torch.allclose(ya, scenes.a[:, 1], atol=tol)
    expected = 2 * (ya < 0.5).long() + (xb > xa).long()
    assert torch.equal(shapes.labels(scenes), expected)
    # each square covers SIDE^2 of the image: SIDE^2 * g^2 patches' worth of area
    area = torch.full((400,), shapes.SIDE**2 * grid**2, dtype=torch.float64)
    assert torch.allclose(img[..., 0].double().sum(dim=(1, 2)), area, atol=1e-4)
    assert torch.allclose(img[..., 1].double().sum(dim=(1, 2)), area, atol=1e-4)
    assert float(img.min()) >= 0.0 and float(img.max()) <= 1.0 + 1e-6


def test_margins_hold_and_classes_are_balanced() -> None:
    s = shapes.sample(4000, torch.Generator().manual_seed(0))
    assert float((s.a[:, 1] - 0.5).abs().min()) >= shapes.ABS_MARGIN
    assert float((s.b[:, 0] - s.a[:, 0]).abs().min()) >= shapes.REL_MARGIN
    half = shapes.SIDE / 2
    for c in (s.a, s.b, s.c.reshape(-1, 2)):
        assert float(c.min()) >= half and float(c.max()) <= 1 - half  # squares inside the image
    counts = torch.bincount(shapes.labels(s), minlength=4).double() / 4000
    assert torch.allclose(counts, torch.full((4,), 0.25, dtype=torch.float64), atol=0.04)


def test_deterministic_and_noise() -> None:
    x1, y1 = shapes.batch(16, 8, torch.Generator().manual_seed(3))
    x2, y2 = shapes.batch(16, 8, torch.Generator().manual_seed(3))
    assert torch.equal(x1, x2) and torch.equal(y1, y2)
    clean = shapes.render(shapes.sample(64, torch.Generator().manual_seed(1)), 8)
    noisy = shapes.render(
        shapes.sample(64, torch.Generator().manual_seed(1)),
        8,
        noise=0.1,
        gen=torch.Generator().manual_seed(2),
    )
    assert float((noisy - clean).std()) == pytest.approx(0.1, rel=0.05)


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: shapes.sample(0, torch.Generator()), "n must be a positive int"),
        (lambda: shapes.render(shapes.sample(2, torch.Generator()), 0), "grid must be a positive int"),
        (lambda: shapes.render(shapes.sample(2, torch.Generator()), 8, noise=-1.0), "noise must be"),
    ],
)
def test_bad_input(call: object, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        call()  # type: ignore[operator]

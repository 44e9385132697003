# SPDX-License-Identifier: MIT
"""The vision lab's synthetic task: two marked squares whose label depends on where they are, in absolute AND
relative terms, rendered at any patch grid (the same scene at a higher resolution, as RoPE-ViT's evaluation at
a larger image size: Heo et al., ECCV 2024, arXiv 2403.13298).

A scene lives in the unit square [0, 1]^2 (x to the right, y down). It holds square A, square B (side
:data:`SIDE` = 1/8, one patch at the 8 x 8 training grid) and :data:`DISTRACTORS` squares C. Label (4 classes)::

    label = 2 * [centre of A is in the top half (y_A < 1/2)]      # absolute position (rows)
          + 1 * [B is to the right of A (x_B > x_A)]             # relative position (columns)

with margins so that no label sits on a boundary: ``|y_A - 1/2| >= ABS_MARGIN`` and ``|x_B - x_A| >= REL_MARGIN``
(> SIDE, so A and B never overlap). Without positions the task is at chance (0.25); with only the relative
bit solvable, 0.5.

Rendering at a g x g grid: channel c of patch (row i, col j) is the fraction of the patch's area covered by the
squares of kind c (A, B, C; C clipped at 1), plus Gaussian noise of std ``noise``. Area coverage keeps sub-patch
information, so the label is determined by the rendered image at every g >= 8 (the test checks it from the
coverage centroids).

Shapes: n scenes, g grid side, K = 3 channels (A, B, C). Images are [n, g, g, K] (row-major: [n, rows, cols, K]).
"""

from __future__ import annotations

import torch

__all__ = ["ABS_MARGIN", "DISTRACTORS", "REL_MARGIN", "SIDE", "Scenes", "batch", "labels", "render", "sample"]

SIDE = 1.0 / 8.0  # square side (fraction of the image side)
DISTRACTORS = 2
ABS_MARGIN = 0.06  # |y_A - 1/2| >= this
REL_MARGIN = 0.16  # |x_B - x_A| >= this (> SIDE: A and B never overlap)
CHANNELS = 3


class Scenes:
    """Centres of the squares: ``a`` [n, 2], ``b`` [n, 2], ``c`` [n, DISTRACTORS, 2]; columns (x, y) in [0, 1]."""

    def __init__(self, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> None:
        self.a, self.b, self.c = a, b, c

    def __len__(self) -> int:
        return int(self.a.shape[0])


def _centres(n: int, gen: torch.Generator) -> torch.Tensor:
    half = SIDE / 2
    return half + torch.rand(n, 2, dtype=torch.float64, generator=gen) * (
        1 - SIDE
    )  # squares inside the image


def sample(n: int, gen: torch.Generator) -> Scenes:
    """``n`` random scenes (rejection-sampled so that both margins hold); deterministic given ``gen``."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be a positive int, got {n!r}")
    a, b = _centres(n, gen), _centres(n, gen)
    while True:
        bad = ((a[:, 1] - 0.5).abs() < ABS_MARGIN) | ((b[:, 0] - a[:, 0]).abs() < REL_MARGIN)
        k = int(bad.sum())
        if k == 0:
            break
        a[bad], b[bad] = _centres(k, gen), _centres(k, gen)
    c = _centres(n * DISTRACTORS, gen).view(n, DISTRACTORS, 2)
    return Scenes(a, b, c)


def labels(scenes: Scenes) -> torch.Tensor:
    """int64 [n]: 2 * [y_A < 1/2] + [x_B > x_A]."""
    top = (scenes.a[:, 1] < 0.5).long()
    right = (scenes.b[:, 0] > scenes.a[:, 0]).long()
    return 2 * top + right


def _coverage(centres: torch.Tensor, g: int) -> torch.Tensor:
    """[n, g, g]: fraction of each patch covered by the square centred at ``centres`` [n, 2] (x, y)."""
    edges = torch.arange(g + 1, dtype=torch.float64) / g  # patch boundaries
    lo, hi = edges[:-1], edges[1:]

    def overlap(c: torch.Tensor) -> torch.Tensor:  # [n] centres on one axis -> [n, g] covered fraction
        s0, s1 = (c - SIDE / 2)[:, None], (c + SIDE / 2)[:, None]
        return (torch.minimum(s1, hi) - torch.maximum(s0, lo)).clamp(min=0) * g

    return overlap(centres[:, 1])[:, :, None] * overlap(centres[:, 0])[:, None, :]  # rows (y) x cols (x)


def render(
    scenes: Scenes, grid: int, *, noise: float = 0.0, gen: torch.Generator | None = None
) -> torch.Tensor:
    """float32 [n, grid, grid, 3] images (channels A, B, C), plus N(0, noise^2) per value."""
    if isinstance(grid, bool) or not isinstance(grid, int) or grid < 1:
        raise ValueError(f"grid must be a positive int, got {grid!r}")
    if not (isinstance(noise, (int, float)) and noise >= 0):
        raise ValueError(f"noise must be a number >= 0, got {noise!r}")
    cov_c = sum(_coverage(scenes.c[:, i], grid) for i in range(scenes.c.shape[1]))
    img = torch.stack(
        [_coverage(scenes.a, grid), _coverage(scenes.b, grid), torch.as_tensor(cov_c).clamp(max=1.0)], dim=-1
    )
    if noise > 0:
        img = img + noise * torch.randn(img.shape, dtype=torch.float64, generator=gen)
    return img.float()


def batch(
    n: int, grid: int, gen: torch.Generator, *, noise: float = 0.1
) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` fresh scenes rendered at ``grid``: (images [n, grid, grid, 3], labels [n])."""
    s = sample(n, gen)
    return render(s, grid, noise=noise, gen=gen), labels(s)

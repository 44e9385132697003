# SPDX-License-Identifier: MIT
"""``DinoV3Rotary``: DINOv3's 2-D RoPE as an ``nn.Module`` whose coordinate augmentations apply in training mode
only (Simeoni et al. 2025, "DINOv3", arXiv 2508.10104; ``facebookresearch/dinov3``
``dinov3/layers/rope_position_encoding.py``; ``shared/reference/multiaxis.md`` section 8.5).

Coordinates are pixel centres normalised to [-1, 1] (:func:`ropekit.positions.grid.normalized_grid`); in
``.train()`` mode, in this order: shift ``+ U(-shift, shift)`` per axis, jitter ``x logU[1/jitter, jitter]`` per
axis, rescale ``x logU[1/rescale, rescale]`` shared by both axes -- one draw per forward call, from the module's
seeded generator. In ``.eval()`` mode the coordinates are the plain grid.

The generator's state is a tensor (:attr:`DinoV3Rotary.rng_state`, a CPU ``torch.Generator``'s state) and the
draw is the custom op ``torch.ops.ropekit.dinov3_draw``, which restores a CPU generator from that state, draws, and
writes the advanced state back: dynamo cannot trace a ``torch.Generator`` object, but it traces the op, so
``torch.compile(fullgraph=True)`` of a training-mode module gives exactly the eager draws of the same seed.

Angles ``2*pi * coord / period``, period ``base^(4k/D)`` (:func:`ropekit.presets_vl.dinov3_spec`), rows then
columns, half-split pairs, exact float64 phases (:func:`ropekit.axis_tables.apply_rope_axes`). Prefix tokens
(class, registers) come first and are not rotated.

Shapes: b batch, s = n_prefix + H*W tokens, h heads, D head dim.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import nn

from ropekit.axis_tables import apply_rope_axes
from ropekit.positions.grid import (
    _augment,
    _augmentation_draws,
    _check_augmentations,
    normalized_grid,
    with_prefix,
)
from ropekit.presets_vl import dinov3_spec
from ropekit.rotation.apply_checks import _validate

__all__ = ["DinoV3Rotary"]


@torch.library.custom_op("ropekit::dinov3_draw", mutates_args=("state",))
def _draw(state: torch.Tensor, n_shift: int, n_jitter: int, n_rescale: int) -> torch.Tensor:
    """U[0, 1) float64 [n_shift + n_jitter + n_rescale] from a CPU generator restored from ``state`` (uint8, a
    ``torch.Generator().get_state()``), drawn as ``normalized_grid`` draws them (one ``torch.rand`` per
    augmentation, in its order); ``state`` is advanced in place."""
    g = torch.Generator()
    g.set_state(state.detach().cpu())
    parts = [torch.rand(n, dtype=torch.float64, generator=g) for n in (n_shift, n_jitter, n_rescale) if n]
    state.copy_(g.get_state())
    return torch.cat(parts) if parts else torch.empty(0, dtype=torch.float64)


@_draw.register_fake
def _draw_fake(state: torch.Tensor, n_shift: int, n_jitter: int, n_rescale: int) -> torch.Tensor:
    return torch.empty(n_shift + n_jitter + n_rescale, dtype=torch.float64, device="cpu")


class DinoV3Rotary(nn.Module):
    """DINOv3 RoPE for q and k of a ViT block, with training-only coordinate augmentations.

    Args:
        head_dim: D, a multiple of 4.
        base: period base (DINOv3: 100).
        normalize: "separate" (rows by H, columns by W), "max" or "min" (both by max/min(H, W)).
        shift, jitter, rescale: the augmentations (None = off; jitter and rescale > 1). DINOv3's shipped
            ViT-7B / ViT-L configs use ``rescale=2`` only.
        n_prefix: unrotated tokens before the patches (class + registers).
        format: "bshd" or "bhsd".
        seed: seed of the module's generator for the augmentations (reproducible training runs): the draws are
            those of ``torch.Generator().manual_seed(seed)``, eager and under ``torch.compile(fullgraph=True)``
            alike. Its state is :attr:`rng_state` (a CPU uint8 tensor, not in the state dict; :meth:`manual_seed`
            reseeds).

    Example:
        >>> rope = DinoV3Rotary(64, rescale=2.0, n_prefix=1, seed=0)
        >>> q = k = torch.randn(2, 1 + 14 * 14, 6, 64)
        >>> q_rot, k_rot = rope(q, k, grid=(14, 14))  # augmented in training mode; rope.eval() turns it off
    """

    def __init__(
        self,
        head_dim: int,
        *,
        base: float = 100.0,
        normalize: Literal["separate", "max", "min"] = "separate",
        shift: float | None = None,
        jitter: float | None = None,
        rescale: float | None = None,
        n_prefix: int = 1,
        format: Literal["bshd", "bhsd"] = "bshd",
        seed: int = 0,
    ) -> None:
        super().__init__()
        self.spec = dinov3_spec(head_dim, base)
        _check_augmentations(shift, jitter, rescale)
        normalized_grid(1, 1, normalize=normalize)  # validates normalize
        if isinstance(n_prefix, bool) or not isinstance(n_prefix, int) or n_prefix < 0:
            raise ValueError(f"n_prefix must be a non-negative int, got {n_prefix!r}")
        if format not in ("bshd", "bhsd"):
            raise ValueError(f"format must be 'bshd' or 'bhsd', got {format!r}")
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise TypeError(f"seed must be an int, got {seed!r}")
        self.normalize, self.shift, self.jitter, self.rescale = normalize, shift, jitter, rescale
        self.n_prefix, self.format = n_prefix, format
        # the augmentations' generator state (CPU uint8): a plain attribute, so ``.to(device)`` leaves it on the CPU
        # and ``state_dict`` leaves it out; advanced in place by every training-mode draw, hence made a normal
        # tensor even when the module is built under inference mode
        with torch.inference_mode(False):
            self.rng_state = torch.Generator().manual_seed(seed).get_state()

    def manual_seed(self, seed: int) -> DinoV3Rotary:
        """Restart the augmentations' draws at ``seed`` (as constructing with ``seed=seed``); returns self."""
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise TypeError(f"seed must be an int, got {seed!r}")
        self.rng_state.copy_(torch.Generator().manual_seed(seed).get_state())
        return self

    def positions(self, grid: tuple[int, int]) -> torch.Tensor:
        """float64 [2, n_prefix + H*W] (rows, cols): prefix at 0, then the (augmented, in training) grid."""
        return self._augmented(self._grid(grid))

    def _grid(self, grid: tuple[int, int]) -> torch.Tensor:
        """The plain grid [2, H*W] (validates ``grid``; draws nothing)."""
        if not isinstance(grid, (tuple, list)) or len(grid) != 2:
            raise ValueError(f"grid must be (H, W), got {grid!r}")
        return normalized_grid(grid[0], grid[1], normalize=self.normalize)

    def _augmented(self, coords: torch.Tensor) -> torch.Tensor:
        """The grid augmented in training mode (one draw, advancing :attr:`rng_state`), after the prefix."""
        if self.training and _augmentation_draws(self.shift, self.jitter, self.rescale):
            sh, ji, re = self.shift, self.jitter, self.rescale
            u = _draw(self.rng_state, 0 if sh is None else 2, 0 if ji is None else 2, 0 if re is None else 1)
            coords = _augment(coords, u, sh, ji, re)
        return with_prefix(coords, self.n_prefix)

    def forward(
        self, q: torch.Tensor, k: torch.Tensor | None = None, *, grid: tuple[int, int]
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Rotate q (and k) for an H x W patch grid after ``n_prefix`` unrotated tokens.

        Raises:
            TypeError, ValueError: naming the argument, as :func:`ropekit.apply_rope` does (q or k not a tensor,
            not a 4-D floating tensor of the module's format and head_dim, k unlike q in batch, tokens or
            device), ``grid`` not (H, W), or q's tokens not ``n_prefix + H*W`` -- before the augmentations draw.
        """
        _validate(q, k, None, self.spec, self.format, False, "auto")
        coords = self._grid(grid)
        seq = q.shape[1] if self.format == "bshd" else q.shape[2]
        if seq != self.n_prefix + coords.shape[1]:
            raise ValueError(
                f"q must be a 4-D {self.format} tensor with n_prefix + H*W = {self.n_prefix + coords.shape[1]} "
                f"tokens for grid={tuple(grid)}, got shape {tuple(q.shape)}"
            )
        return apply_rope_axes(q, k, self._augmented(coords), self.spec, format=self.format)

    def extra_repr(self) -> str:
        return (
            f"head_dim={self.spec.head_dim}, normalize={self.normalize!r}, shift={self.shift}, "
            f"jitter={self.jitter}, rescale={self.rescale}, n_prefix={self.n_prefix}, format={self.format!r}"
        )

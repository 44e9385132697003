# SPDX-License-Identifier: MIT
"""ropekit's tables for timm's rotary modules, in the format each module returns.

timm's vision rotaries (``timm.layers.pos_embed_sincos``) return one tensor ``[..., N, 2*D]`` holding sin then cos,
each repeated per channel pair (interleaved layout, ``repeat_interleave(2)``) or tiled (half layout). Here the same
tensor is made from ropekit's exact phases:

- axial (``RotaryEmbedding``, ``RotaryEmbeddingCat``; EVA-02, RoPE-ViT axial, SAM, NaFlexViT "axial"): a 2-axis
  :class:`ropekit.RopeSpec` (first grid axis on the first D/4 bands, second on the rest, interleaved pairs) at the
  grid's coordinates (:func:`ropekit.positions.grid.grid_positions`, shifted by ``grid_offset``, rescaled to
  ``ref_feat_shape``, or spread over [-1, 1] in pixel mode), tables from :func:`ropekit.axis_tables`;
- RoPE-Mixed (``RotaryEmbeddingMixed``; Heo et al., ECCV 2024, arXiv 2403.13298): the angles
  ``x * f_x + y * f_y`` of :class:`ropekit.MixedRotary`, per depth and head, in float64, reduced mod 2*pi and
  differentiable in the learned frequencies;
- DINOv3 (``RotaryEmbeddingDinoV3``; Simeoni et al. 2025, arXiv 2508.10104): :func:`ropekit.presets_vl.dinov3_spec`
  (or the min/max-period table) at :func:`ropekit.positions.grid.normalized_grid` coordinates;
- M-RoPE for images (``RotaryEmbeddingMRope``; Wang et al. 2024, arXiv 2409.12191): a 3-axis spec with the module's
  per-channel axis assignment (t, h, w), t at 0.

The frequencies are computed here from each module's constructor arguments (never read from its buffers), so the
probe in :mod:`ropekit.timm.patch` compares two independent computations.

Shapes: N = H * W grid tokens (raster order), D head dim, n = D / 2 bands; ``depth`` and ``heads`` lead for Mixed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

import torch

from ropekit.axes import AxisMap
from ropekit.axis_tables import axis_tables
from ropekit.positions.grid import grid_positions, normalized_grid
from ropekit.presets_vl import dinov3_spec
from ropekit.spec import RopeSpec

__all__ = ["TAG", "Tables", "embed_from_tables", "grid_coords", "module_spec", "module_tables"]

#: attribute that marks an embedding tensor made by ropekit (its value: :class:`Tables`)
TAG = "_ropekit_timm_tables"
_TWO_PI = 2.0 * math.pi


@dataclass
class Tables:
    """ropekit's compact tables behind one timm embedding: cos, sin [..., N, n] and the pair layout."""

    cos: torch.Tensor
    sin: torch.Tensor
    layout: str  # "interleaved" or "half"


def _require(cond: bool, what: str) -> None:
    if not cond:
        raise ValueError(what)


def module_spec(kind: str, m: Any) -> RopeSpec | None:
    """The spec of a recognised module from its constructor arguments (None for Mixed: its frequencies are
    learned). Raises ValueError naming the setting ropekit cannot express."""
    if kind in ("axial", "axial_tuple"):
        dim = m.dim
        _require(isinstance(dim, int) and dim > 0 and dim % 4 == 0, f"dim={dim!r} is not a multiple of 4")
        _require(m.grid_indexing in ("ij", "xy"), f"grid_indexing={m.grid_indexing!r} is not 'ij' or 'xy'")
        nb = dim // 4
        if m.in_pixels:
            top = float(m.max_res)
            if m.linear_bands:
                step = (top / 2 - 1.0) / (nb - 1) if nb > 1 else 0.0
                bands = [(1.0 + k * step) * math.pi for k in range(nb)]
            else:
                step = (math.log2(top) - 1.0) / (nb - 1) if nb > 1 else 0.0
                bands = [2.0 ** (k * step) * math.pi for k in range(nb)]
        else:
            bands = [float(m.temperature) ** (-k / nb) for k in range(nb)]
        names = ("x", "y") if m.grid_indexing == "xy" else ("row", "col")
        return RopeSpec(
            head_dim=dim, freqs=tuple(bands + bands), layout="interleaved", axes=AxisMap.halves(2 * nb, names)
        )
    if kind == "dinov3":
        dim = m.dim
        _require(isinstance(dim, int) and dim > 0 and dim % 4 == 0, f"dim={dim!r} is not a multiple of 4")
        _require(m.normalize_coords in ("separate", "max", "min"), f"normalize_coords={m.normalize_coords!r}")
        layout: Literal["half", "interleaved"] = "half" if m.rotate_half else "interleaved"
        nq = dim // 4
        if m.min_period is not None and m.max_period is not None:
            lo, hi = float(m.min_period), float(m.max_period)
            periods = [lo * (hi / lo) ** (k / (nq - 1) if nq > 1 else 0.0) for k in range(nq)]
            freqs = tuple(_TWO_PI / p for p in periods)
            return RopeSpec(
                head_dim=dim, freqs=freqs + freqs, layout=layout, axes=AxisMap.halves(2 * nq, ("row", "col"))
            )
        spec = dinov3_spec(dim, float(m.temperature))
        return (
            spec
            if layout == "half"
            else RopeSpec(head_dim=dim, freqs=spec.freqs, layout=layout, axes=spec.axes)
        )
    if kind == "mrope":
        dim = m.dim
        _require(isinstance(dim, int) and dim > 0 and dim % 2 == 0, f"dim={dim!r} is not even")
        _require(
            m.grid_indexing == "ij", f"grid_indexing={m.grid_indexing!r} (timm's M-RoPE takes 'ij' only)"
        )
        n = dim // 2
        _, sec_h, sec_w = (int(s) for s in m.mrope_section)
        slots = [0] * n
        for j in range(1, min(3 * sec_h, n), 3):
            slots[j] = 1
        for j in range(2, min(3 * sec_w, n), 3):
            slots[j] = 2
        theta = tuple(float(m.temperature) ** (-2.0 * k / dim) for k in range(n))
        return RopeSpec(
            head_dim=dim, freqs=theta, layout="half", axes=AxisMap("explicit", tuple(slots), ("t", "h", "w"))
        )
    if kind == "mixed":
        return None
    raise ValueError(f"unknown kind {kind!r}")


def grid_coords(kind: str, m: Any, shape: tuple[int, int]) -> torch.Tensor:
    """float64 positions [A, H*W] of a (H, W) grid as module ``m`` places its tokens (raster order)."""
    h, w = int(shape[0]), int(shape[1])
    rc = grid_positions((h, w)).to(torch.float64)  # [2, N]: row, col
    if kind in ("axial", "axial_tuple"):
        order = (1, 0) if m.grid_indexing == "xy" else (0, 1)  # 'xy': the first axis is the column (x)
        sizes, ref = (h, w), m.ref_feat_shape
        rows = []
        for a in order:
            t, s = rc[a], sizes[a]
            if m.in_pixels:  # torch.linspace(-1, 1, s)
                t = -1.0 + 2.0 * t / (s - 1) if s > 1 else torch.full_like(t, -1.0)
            else:
                t = t + float(m.grid_offset)
            if ref is not None:
                t = t / s * float(ref[a])
            rows.append(t)
        return torch.stack(rows)
    if kind == "mixed":  # timm's t_x is the first meshgrid axis: the column under 'xy', the row under 'ij'
        return rc[[1, 0]] if m.grid_indexing == "xy" else rc
    if kind == "dinov3":
        pos = normalized_grid(h, w, normalize=m.normalize_coords)
        off = float(m.grid_offset)
        if off:
            if m.normalize_coords == "separate":
                dh, dw = float(h), float(w)
            else:
                dh = dw = float(max(h, w) if m.normalize_coords == "max" else min(h, w))
            pos = pos + torch.tensor([[2.0 * off / dh], [2.0 * off / dw]], dtype=torch.float64)
        if (
            m.training and m.aug_active
        ):  # timm's own train-time augmentation (its RNG draws), on float32 coords
            pos = m._apply_coord_augs(pos.to(torch.float32).t().contiguous()).t().to(torch.float64)
        return pos
    if kind == "mrope":
        return torch.cat([torch.zeros(1, h * w, dtype=torch.float64), rc])
    raise ValueError(f"unknown kind {kind!r}")


def mixed_tables(freqs: torch.Tensor, pos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """RoPE-Mixed cos, sin [depth, heads, N, n] from frequencies [2, depth, heads, n] and positions [2, N].

    The angle ``x * f_x + y * f_y`` is formed in float64 (exact products of float32 values) and reduced mod 2*pi,
    as :meth:`ropekit.MixedRotary.angles`; differentiable in ``freqs``; tables in ``freqs``' dtype.
    """
    f = freqs.to(torch.float64)
    p = pos.to(device=freqs.device, dtype=torch.float64)
    ang = p[0][:, None] * f[0][..., None, :] + p[1][:, None] * f[1][..., None, :]  # [depth, heads, N, n]
    ang = torch.remainder(ang, _TWO_PI)
    return torch.cos(ang).to(freqs.dtype), torch.sin(ang).to(freqs.dtype)


def module_tables(
    kind: str, m: Any, spec: RopeSpec | None, shape: tuple[int, int], device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """ropekit's compact cos, sin for module ``m`` on a (H, W) grid: [N, n] (or [depth, heads, N, n])."""
    pos = grid_coords(kind, m, shape)
    if kind == "mixed":
        return mixed_tables(m.freqs, pos)
    assert spec is not None
    return axis_tables(pos, spec, dtype=torch.float32, device=device)


def embed_from_tables(cos: torch.Tensor, sin: torch.Tensor, layout: str, dtype: torch.dtype) -> torch.Tensor:
    """timm's ``cat([sin, cos], -1)`` embedding [..., N, 2*D] from compact tables [..., N, n], tagged with them."""
    if layout == "half":
        s, c = torch.cat([sin, sin], dim=-1), torch.cat([cos, cos], dim=-1)
    else:
        s, c = sin.repeat_interleave(2, dim=-1), cos.repeat_interleave(2, dim=-1)
    emb = torch.cat([s, c], dim=-1).to(dtype)
    setattr(emb, TAG, Tables(cos, sin, layout))
    return emb

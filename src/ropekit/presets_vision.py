# SPDX-License-Identifier: MIT
"""Vision-tower presets: 2-D / 3-D RoPE of released vision encoders, at the patch grid they see, for
``ropekit inspect`` / ``precision`` / ``report`` / ``presets`` (registered into :data:`ropekit.presets.PRESETS`).

A vision tower has no config.json RoPE keys that ``RopeSpec.from_hf`` parses, so each preset holds the spec built
by :mod:`ropekit.presets_vl` and the extent of every axis (patches per side at the stated image size; DINOv3's
normalised box is 2 wide). The preset's context is the largest extent (positions 0 .. side - 1 reach
``context - 1``; one more for Llama 4's 1-based coordinates), so the 1-D band table and the per-axis table are
judged over the same distances. Facts: the models' configs and their RoPE code (see
:mod:`ropekit.presets_vl`).

Shapes: none (registry only).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from ropekit.analysis.layers import LayerView
from ropekit.presets import PRESETS, Preset
from ropekit.presets_vl import (
    axial_spec,
    dinov3_spec,
    llama4_vision_spec,
    pixtral_spec,
    qwen_vit_spec,
    rope_vit_axial_spec,
)
from ropekit.spec import RopeSpec

__all__ = ["VISION_PRESETS", "VisionPreset", "VisionView"]


@dataclass(frozen=True)
class VisionView(LayerView):
    """A :class:`LayerView` that also knows each axis's extent (``ropekit inspect``'s per-axis table)."""

    extents: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class VisionPreset(Preset):
    """A vision tower's RoPE: the spec and the extent of each axis (patches per side, frames, or the box)."""

    built: RopeSpec | None = None
    extents: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        sp = self.built
        if sp is None or sp.axes is None:
            raise ValueError(f"VisionPreset {self.name!r}: built must be a multi-axis RopeSpec, got {sp!r}")
        if set(self.extents) != set(sp.axes.names):
            raise ValueError(
                f"VisionPreset {self.name!r}: extents must name every axis {sp.axes.names}, got {self.extents}"
            )

    def spec(self, layer_type: str | None = None) -> RopeSpec:
        if layer_type is not None:
            raise ValueError(f"layer_type={layer_type!r} given but {self.name} has a single kind of layer")
        assert self.built is not None
        return self.built

    def views(self, context: int | None = None, layer_type: str | None = None) -> list[LayerView]:
        ctx = self.context if context is None else context
        return [VisionView(None, self.spec(layer_type), ctx, extents=dict(self.extents))]

    @property
    def context(self) -> int:
        return int(self.config["max_position_embeddings"])


def _v(name: str, description: str, spec: RopeSpec, extents: dict[str, float], **facts: Any) -> VisionPreset:
    ctx = math.ceil(max(extents.values())) + (1 if facts.get("one_based") else 0)
    config = {"head_dim": spec.head_dim, "max_position_embeddings": ctx, "vision": {**facts, "grid": extents}}
    return VisionPreset(name, description, config, (), spec, extents)


#: name -> VisionPreset; the grids are the images' patch grids at the stated size
VISION_PRESETS: dict[str, VisionPreset] = {
    p.name: p
    for p in [
        _v(
            "rope-vit-b16",
            "RoPE-ViT-B/16 axial (Heo et al. 2024): x block then y block, base 100, 224 px = 14 x 14 patches",
            rope_vit_axial_spec(64, 100.0),
            {"x": 14.0, "y": 14.0},
            image_size=224,
            patch_size=16,
        ),
        _v(
            "pixtral-12b-vision",
            "Pixtral-12B vision encoder: even/odd theta_k to rows/cols (HF half layout), base 1e4, "
            "up to 1024 px = 64 x 64 patches of 16",
            pixtral_spec(64, 10_000.0),
            {"row": 64.0, "col": 64.0},
            image_size=1024,
            patch_size=16,
        ),
        _v(
            "dinov3-vitb16",
            "DINOv3 ViT-B/16: 2*pi*coord/period, period 100^(4k/D), coordinates in [-1, 1] (box of width 2)",
            dinov3_spec(64, 100.0),
            {"row": 2.0, "col": 2.0},
            patch_size=16,
            coordinates="normalised [-1, 1]",
        ),
        _v(
            "llama4-vision",
            "Llama 4 vision encoder: x then y, base 1e4, 1-based coordinates, 336 px = 24 x 24 patches of 14",
            llama4_vision_spec(88, 10_000.0),
            {"x": 24.0, "y": 24.0},
            image_size=336,
            patch_size=14,
            one_based=True,
        ),
        _v(
            "qwen2-vl-vision",
            "Qwen2-VL / 2.5-VL vision tower (head dim 80): rows then columns, base 1e4, "
            "a 1792 px side = 128 patches of 14",
            qwen_vit_spec(80, 10_000.0),
            {"row": 128.0, "col": 128.0},
            image_size=1792,
            patch_size=14,
        ),
        _v(
            "video-axial-3d",
            "3-D axial RoPE for video (frames x rows x cols; sections 8/12/12 of 32 bands, base 100): "
            "16 frames of 14 x 14 patches",
            axial_spec(64, (8, 12, 12), ("t", "row", "col"), base=100.0),
            {"t": 16.0, "row": 14.0, "col": 14.0},
            frames=16,
            patch_size=16,
        ),
    ]
}

PRESETS.update(VISION_PRESETS)

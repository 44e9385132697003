"""Small timm rotary models for the parity tests (random weights, ``pretrained=False``) and their helpers.

timm initialises ViT weights with std 0.02, which leaves attention almost uniform: the output would hardly depend
on the positions, and a parity test could not fail. :func:`scramble` redraws every weight so that attention is
sharp, and :func:`rope_effect` measures how much the output moves when the rotation is switched off.
"""

from __future__ import annotations

import contextlib
import math
import sys
from collections.abc import Iterator
from typing import Any

import timm
import torch
from torch import nn

SMALL: dict[str, Any] = {"embed_dim": 64, "num_heads": 2, "depth": 2, "num_classes": 8}

#: id -> (timm model name, constructor kwargs, training image size, second image size (dynamic_img_size))
MODELS: dict[str, tuple[str, dict[str, Any], int, int]] = {
    "eva02 (Cat, ij, ref_feat_shape)": ("eva02_tiny_patch14_224", dict(SMALL, ref_feat_shape=(4, 4)), 56, 84),
    "rope-vit axial (Cat, xy, base 100)": ("vit_small_patch16_rope_224", SMALL, 64, 96),
    "rope-vit reg gap (Cat, xy, offset 1)": ("vit_medium_patch16_rope_reg1_gap_256", SMALL, 64, 80),
    "rope-vit mixed (Mixed)": ("vit_small_patch16_rope_mixed_224", SMALL, 64, 96),
    "dinov3 (DinoV3, half, registers)": ("vit_small_patch16_dinov3", SMALL, 64, 96),
    "naflexvit axial (Cat)": ("naflexvit_base_patch16_gap", dict(SMALL, rope_type="axial"), 64, 96),
    "naflexvit mixed (Mixed)": ("naflexvit_base_patch16_gap", dict(SMALL, rope_type="mixed"), 64, 96),
    "naflexvit dinov3 (DinoV3)": (
        "naflexvit_base_patch16_gap",
        dict(SMALL, rope_type="dinov3", rope_rotate_half=True, rope_temperature=100.0),
        64,
        96,
    ),
    "naflexvit mrope (MRope)": (
        "naflexvit_base_patch16_gap",
        dict(SMALL, rope_type="mrope", rope_mrope_section=(4, 6, 6)),
        64,
        96,
    ),
}


def build(name: str, kwargs: dict[str, Any], img: int, *, dynamic: bool = False, seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    kw = dict(kwargs, img_size=img)
    if dynamic:
        kw["dynamic_img_size"] = True
    model = timm.create_model(name, pretrained=False, **kw)
    scramble(model, seed)
    return model.eval()


def scramble(model: nn.Module, seed: int) -> None:
    """Redraw weights: linear layers N(0, 1/fan_in), embeddings and tokens N(0, 1); learned rope frequencies kept."""
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("freqs"):
                continue
            if p.dim() >= 2:
                fan_in = math.prod(p.shape[1:])
                p.copy_(torch.randn(p.shape, generator=g) * (1.5 / math.sqrt(fan_in)))
            elif "norm" not in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.1)


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).abs().max() / b.double().abs().max())


@contextlib.contextmanager
def no_rotation() -> Iterator[None]:
    """timm's apply_rot_embed_cat replaced by the identity in every timm module (to measure the rope's effect)."""
    saved = []
    for mod_name, mod in list(sys.modules.items()):
        if mod_name.startswith("timm.") and hasattr(mod, "apply_rot_embed_cat"):
            saved.append((mod, mod.apply_rot_embed_cat))
            mod.apply_rot_embed_cat = lambda x, emb, half=False: x
    try:
        yield
    finally:
        for mod, fn in saved:
            mod.apply_rot_embed_cat = fn


def images(img: int, seed: int = 1, batch: int = 2) -> torch.Tensor:
    return torch.randn(batch, 3, img, img, generator=torch.Generator().manual_seed(seed))

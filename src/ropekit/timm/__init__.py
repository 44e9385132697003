# SPDX-License-Identifier: MIT
"""ropekit inside timm: ``ropekit.timm.patch(model)`` for timm's rotary vision transformers.

EVA / EVA-02, RoPE-ViT (``vit_*_rope_*`` axial and ``*_rope_mixed_*``), DINOv3, NaFlexViT with rope, SAM with rope
and any model built on timm's rotary layers (``timm.layers.pos_embed_sincos``) compute their rotary embeddings from
ropekit's exact tables and rotate q and k with ropekit's dispatch; see :mod:`ropekit.timm.patch`.

Never imported by ``import ropekit``; imports nothing from timm itself (it patches the modules a timm model holds).
Install: ``pip install 'ropekit[timm]'`` (timm needs a torchvision that matches torch; see docs/vision.md).
"""

from ropekit.timm.patch import REFUSED, SUPPORTED_CLASSES, patch, patched, unpatch

__all__ = ["REFUSED", "SUPPORTED_CLASSES", "patch", "patched", "unpatch"]

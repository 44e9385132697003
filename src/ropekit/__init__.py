# SPDX-License-Identifier: MIT
"""ropekit: rotary position embeddings (RoPE) that are correct, fast and understood.

Public API:
    RopeSpec            frozen description of a RoPE configuration (frequencies, partial rotation, layout, phase map)
    apply_rope          rotate q and k at explicit per-token positions
    apply_rope_tables   the same with precomputed cos/sin tables
    apply_rope_varlen   packed documents ("thd") from cu_seqlens
    rope_cache_write    RoPE fused with the KV-cache write (per-sequence caches); rope_paged_cache_write (paged)
    rope_tables         exact cos/sin tables for any positions
    Rotary              nn.Module for attention layers (float32 cache immune to dtype casts)
    positions_*         builders of explicit position ids (offsets, padding masks, packed documents)
    scaling             phase maps (Linear position interpolation; more schemes join here)
    AxisMap             band-to-axis assignment of multi-axis RoPE (M-RoPE, 2-D / 3-D vision RoPE)
    apply_rope_axes     rotate q and k at multi-axis positions [n_axes, ...]
    axis_tables         exact cos/sin tables for multi-axis positions
    MixedRotary         RoPE-Mixed: learnable per-head 2-D frequencies (nn.Module)
    DinoV3Rotary        DINOv3's 2-D RoPE (nn.Module): shift / jitter / rescale in training mode only

Subpackages imported on demand:
    ropekit.distributed context parallelism: global positions of sequence shards (contiguous, zigzag, stripe,
                        packed documents), ring attention and Ulysses all-to-all on torch.distributed
    ropekit.timm        timm's rotary ViTs (EVA-02, RoPE-ViT axial/mixed, DINOv3, NaFlexViT) on ropekit: patch(model)
"""

from ropekit import scaling
from ropekit.axes import AxisMap
from ropekit.axis_tables import apply_rope_axes, axis_tables
from ropekit.dinov3 import DinoV3Rotary
from ropekit.mixed import MixedRotary
from ropekit.module import Rotary
from ropekit.phases import rope_tables
from ropekit.positions import positions_from_cu_seqlens, positions_from_mask, positions_with_offset
from ropekit.rotation.apply import apply_rope, apply_rope_tables
from ropekit.rotation.kv_cache import rope_cache_write, rope_paged_cache_write
from ropekit.rotation.varlen import apply_rope_varlen
from ropekit.spec import RopeSpec

__version__ = "0.1.0"

__all__ = [
    "AxisMap",
    "DinoV3Rotary",
    "MixedRotary",
    "RopeSpec",
    "Rotary",
    "__version__",
    "apply_rope",
    "apply_rope_axes",
    "apply_rope_tables",
    "apply_rope_varlen",
    "axis_tables",
    "positions_from_cu_seqlens",
    "positions_from_mask",
    "positions_with_offset",
    "rope_cache_write",
    "rope_paged_cache_write",
    "rope_tables",
    "scaling",
]

# SPDX-License-Identifier: MIT
"""The wrapper of timm's ``apply_rot_embed_cat``: ropekit rotates when the embedding comes from ropekit.

timm's attention layers (EVA, RoPE-ViT, DINOv3, NaFlexViT, SAM, ...) call ``apply_rot_embed_cat(x, emb, half)``
with x [B, heads, N, D] and the embedding a rotary module returned. :func:`rotate_cat` looks for ropekit's compact
tables on ``emb`` (:data:`ropekit.timm.tables.TAG`), or on the tensor it is a view of (RoPE-Mixed passes
``emb[depth]``). Found, and shaped as x needs: it rotates with :func:`ropekit.apply_rope_tables` (``backend="auto"``:
the fused CPU kernel on CPU, Triton on CUDA); RoPE-Mixed tables that carry a gradient for the learned frequencies
are rotated by :class:`ropekit.MixedRotary`'s differentiable rotation instead (the fused kernels take fixed
tables). Otherwise -- an unpatched model, or an embedding the model rebuilt (patch dropout's gather, NaFlexViT's
per-sample batch), any other view of it (one token's row), float64 x -- the original function runs; the embedding
then still holds ropekit's values. Under ``torch.compile`` a depth slice's tables are not found (dynamo does not
carry the tag to ``emb._base``), so timm's function rotates RoPE-Mixed models there (docs/vision.md).

Shapes: x [B, h, N, D]; compact tables [N, n] (axial) or [h, N, n] (Mixed, one depth), n = D / 2.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Callable
from typing import Any

import torch

from ropekit.mixed import _rotate as _mixed_rotate
from ropekit.rotation.apply import apply_rope_tables
from ropekit.spec import RopeSpec
from ropekit.timm.tables import TAG, Tables

__all__ = ["CALLS", "find_tables", "make_rotate_cat"]

#: "axial" / "per_head" / "per_head_grad" -> rotations ropekit did (tests read it; never reset by ropekit)
CALLS: Counter[str] = Counter()


@functools.lru_cache(maxsize=64)
def _cached_geometry(head_dim: int, layout: str) -> RopeSpec:
    return RopeSpec(head_dim=head_dim, layout=layout)  # type: ignore[arg-type]


def _geometry(head_dim: int, layout: str) -> RopeSpec:
    """The rotation's spec; built anew while dynamo traces (a call into an ``lru_cache`` there draws its warning)."""
    if torch.compiler.is_compiling():
        return _cached_geometry.__wrapped__(head_dim, layout)
    return _cached_geometry(head_dim, layout)


def find_tables(emb: Any) -> tuple[torch.Tensor, torch.Tensor, str] | None:
    """ropekit's (cos, sin, layout) behind ``emb``, or None when ``emb`` is not (a depth slice of) ropekit's."""
    if not isinstance(emb, torch.Tensor):
        return None
    info: Tables | None = getattr(emb, TAG, None)
    if info is not None:
        return info.cos, info.sin, info.layout
    base = emb._base
    info = None if base is None else getattr(base, TAG, None)
    # a depth slice [heads, N, 2D] of Mixed's [depth, heads, N, 2D]; other views (a token's row) go to timm
    if info is None or base is None or info.cos.dim() != 4 or emb.dim() != 3 or base.stride(0) <= 0:
        return None
    if tuple(emb.shape) != tuple(base.shape[1:]) or emb.stride() != base.stride()[1:]:
        return None
    i, rest = divmod(int(emb.storage_offset() - base.storage_offset()), int(base.stride(0)))
    if rest or not 0 <= i < base.shape[0]:
        return None
    return info.cos[i], info.sin[i], info.layout


def make_rotate_cat(original: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    """The wrapper of timm's ``apply_rot_embed_cat`` (see the module docstring)."""

    @functools.wraps(original)
    def rotate_cat(x: torch.Tensor, emb: torch.Tensor, half: bool = False) -> torch.Tensor:
        found = find_tables(emb)
        if found is not None and isinstance(x, torch.Tensor) and x.dim() == 4:
            out = _rotate(x, *found, half)
            if out is not None:
                return out
        return original(x, emb, half=half)

    rotate_cat.__ropekit_original__ = original  # type: ignore[attr-defined]
    return rotate_cat


def _rotate(
    x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, layout: str, half: bool
) -> torch.Tensor | None:
    b, h, s, d = x.shape
    n = cos.shape[-1]
    if layout != ("half" if half else "interleaved") or d != 2 * n or cos.shape[-2] != s:
        return None
    if cos.dtype != torch.float32 or x.dtype == torch.float64 or cos.device != x.device:
        return None  # timm's own arithmetic for other precisions (the values are still ropekit's)
    if cos.dim() == 2:
        CALLS["axial"] += 1
        return apply_rope_tables(x, None, cos, sin, _geometry(d, layout), format="bhsd")[0]
    if cos.dim() != 3 or cos.shape[0] != h or layout != "interleaved":
        return None
    if torch.is_grad_enabled() and (cos.requires_grad or sin.requires_grad):
        CALLS["per_head_grad"] += 1  # MixedRotary's rotation: differentiable in the tables
        return _mixed_rotate(x, cos.transpose(0, 1), sin.transpose(0, 1), "bhsd")
    CALLS["per_head"] += 1  # heads folded into the batch: one [s, n] table per (sample, head)
    xs = x.reshape(b * h, s, 1, d)
    c = cos.expand(b, h, s, n).reshape(b * h, s, n)
    sn = sin.expand(b, h, s, n).reshape(b * h, s, n)
    out = apply_rope_tables(xs, None, c, sn, _geometry(d, layout), format="bshd")[0]
    return out.reshape(b, h, s, d)

# SPDX-License-Identifier: MIT
"""``Ropekit<Original>``: a timm rotary module whose embeddings come from ropekit (:mod:`ropekit.timm.tables`).

:func:`ropekit_class` builds, once per timm class, a subclass whose ``get_embed`` (and ``get_batch_embeds`` where
the original has one) return the same tensors as timm's -- same shape, dtype, layout, the same choice between the
requested grid and the cached ``feat_shape`` -- computed from ropekit's exact phases, each tagged with the compact
tables (:data:`ropekit.timm.tables.TAG`) that :mod:`ropekit.timm.apply` rotates with. Everything else (constructor,
buffers, ``update_feat_shape``, ``forward``, ``no_weight_decay``) is the original's, so swapping the class of a live
module is enough, and swapping it back restores the original exactly.

Shapes: N = H * W tokens, D head dim; Mixed embeddings have leading [depth, heads].
"""

from __future__ import annotations

from typing import Any, SupportsIndex

import torch

from ropekit.spec import RopeSpec
from ropekit.timm.tables import embed_from_tables, module_tables

__all__ = ["KINDS", "RopekitTimmRotary", "ropekit_class"]

#: timm class name (in ``timm.layers.pos_embed_sincos``) -> the kind of tables :mod:`ropekit.timm.tables` builds
KINDS: dict[str, str] = {
    "RotaryEmbedding": "axial_tuple",
    "RotaryEmbeddingCat": "axial",
    "RotaryEmbeddingMixed": "mixed",
    "RotaryEmbeddingDinoV3": "dinov3",
    "RotaryEmbeddingMRope": "mrope",
}
_CLASSES: dict[type, type] = {}


def _device(m: Any) -> torch.device:
    for t in (*m.parameters(recurse=False), *m.buffers(recurse=False)):
        return t.device  # type: ignore[no-any-return]
    return torch.device("cpu")


def _layout(kind: str, m: Any) -> str:
    if kind == "mrope" or (kind == "dinov3" and m.rotate_half):
        return "half"
    return "interleaved"


def _out_dtype(kind: str, m: Any) -> torch.dtype:
    """The dtype timm's module gives its embeddings."""
    if kind == "axial" and m.bands is None:
        return m.pos_embed.dtype  # type: ignore[no-any-return]
    if kind == "axial_tuple" and m.bands is None:
        return m.pos_embed_sin.dtype  # type: ignore[no-any-return]
    if kind == "mixed":
        return m.freqs.dtype  # type: ignore[no-any-return]
    if kind == "dinov3":
        return m.periods.dtype  # type: ignore[no-any-return]
    return torch.float32


class RopekitTimmRotary:
    """Mixin placed before the timm class: ``get_embed`` / ``get_batch_embeds`` from ropekit's tables."""

    _ropekit_kind: str
    _ropekit_original: type
    _ropekit_spec: RopeSpec | None

    def __reduce_ex__(self, protocol: SupportsIndex) -> tuple[Any, ...]:
        """As the original class pickles, but rebuilt through :func:`_rebuild` (the class is made at run time, so
        pickle cannot find it by name)."""
        rv = super().__reduce_ex__(protocol)
        assert isinstance(rv, tuple) and len(rv) >= 3  # (constructor, args, state, ...) for an nn.Module
        return (_rebuild, (type(self)._ropekit_original, self._ropekit_kind), *rv[2:])

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Unpickled or deep-copied: registered as a patched module (:func:`ropekit.timm.patch._adopt`)."""
        super().__setstate__(state)  # type: ignore[misc]
        from ropekit.timm.patch import _adopt  # patch imports this module

        _adopt([self])

    def _ropekit_compact(self, shape: Any) -> tuple[torch.Tensor, torch.Tensor]:
        h, w = (int(s) for s in shape)
        return module_tables(self._ropekit_kind, self, self._ropekit_spec, (h, w), _device(self))

    def _ropekit_grid(self, shape: Any) -> tuple[int, int]:
        """The grid timm's own get_embed would use for ``shape`` (the cached feat_shape where it ignores it)."""
        kind, m = self._ropekit_kind, self
        if kind in ("axial", "axial_tuple"):
            use = shape if shape is not None and getattr(m, "bands", None) is not None else None
            use = use if use is not None else getattr(m, "feat_shape", None)
        elif kind == "mrope":
            use = shape
        else:  # mixed, dinov3: the requested shape, else the cached feat_shape
            use = shape if shape is not None else getattr(m, "feat_shape", None)
        if use is None:
            raise ValueError(
                f"{type(self).__name__}.get_embed needs a shape: the module caches no feat_shape (timm raises too)"
            )
        if len(use) != 2:
            raise ValueError(
                f"{type(self).__name__}: ropekit's tables need a 2-D grid (H, W), got shape {use!r}"
            )
        return int(use[0]), int(use[1])

    def get_embed(self, shape: Any = None) -> Any:
        kind = self._ropekit_kind
        cos, sin = self._ropekit_compact(self._ropekit_grid(shape))
        dtype = _out_dtype(kind, self)
        if kind == "axial_tuple":  # RotaryEmbedding: (sin, cos), each [N, D], pairs interleaved
            return sin.repeat_interleave(2, dim=-1).to(dtype), cos.repeat_interleave(2, dim=-1).to(dtype)
        return embed_from_tables(cos, sin, _layout(kind, self), dtype)

    def get_batch_embeds(self, shapes: list[tuple[int, int]], seq_len: int | None = None) -> Any:
        """timm's batched embeddings: tables of the largest grid, cropped to each (H, W) (timm's semantics)."""
        kind = self._ropekit_kind
        if not shapes:
            return []
        if kind == "axial" and getattr(self, "bands", None) is None:
            raise RuntimeError(
                "Batch embedding generation requires cached bands, not pre-computed embeddings"
            )
        mh, mw = max(int(h) for h, _ in shapes), max(int(w) for _, w in shapes)
        cos, sin = self._ropekit_compact((mh, mw))
        lead, n = cos.shape[:-2], cos.shape[-1]
        cos2, sin2 = cos.reshape(*lead, mh, mw, n), sin.reshape(*lead, mh, mw, n)
        dtype, layout = _out_dtype(kind, self), _layout(kind, self)
        embeds = [
            embed_from_tables(
                cos2[..., :h, :w, :].reshape(*lead, h * w, n),
                sin2[..., :h, :w, :].reshape(*lead, h * w, n),
                layout,
                dtype,
            )
            for h, w in shapes
        ]
        if seq_len is None:
            return embeds
        if kind == "mixed":
            out = torch.zeros(len(shapes), *lead, seq_len, 4 * n, dtype=dtype, device=cos.device)
            for i, e in enumerate(embeds):
                out[i, ..., : e.shape[-2], :] = e
            return out
        out = torch.zeros(len(shapes), seq_len, 4 * n, dtype=dtype, device=cos.device)
        for i, e in enumerate(embeds):
            out[i, : e.shape[-2]] = e
        return out


def ropekit_class(original: type, kind: str) -> type:
    """The ``Ropekit<Original>`` subclass for one timm rotary class (built once, then cached)."""
    cls = _CLASSES.get(original)
    if cls is None:
        body: dict[str, Any] = {"_ropekit_kind": kind, "_ropekit_original": original, "__module__": __name__}
        if not hasattr(
            original, "get_batch_embeds"
        ):  # NaFlexViT checks hasattr: keep the original's interface
            body["get_batch_embeds"] = property(_no_batch_embeds)
        cls = type(f"Ropekit{original.__name__}", (RopekitTimmRotary, original), body)
        _CLASSES[original] = cls
    return cls


def _rebuild(original: type, kind: str) -> Any:
    """An empty ``Ropekit<original>`` object, whose state pickle then restores (``RopekitTimmRotary.__reduce_ex__``)."""
    return object.__new__(ropekit_class(original, kind))


def _no_batch_embeds(self: Any) -> Any:
    raise AttributeError(f"{type(self).__name__} has no get_batch_embeds (neither has timm's class)")

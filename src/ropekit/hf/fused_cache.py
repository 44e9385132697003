# SPDX-License-Identifier: MIT
"""A transformers ``StaticCache`` whose write rotates the keys: RoPE fused with the KV-cache write for patched models.

In a transformers attention layer, ``apply_rotary_pos_emb`` rotates q and k, then ``past_key_values.update``
copies k and v into the cache: k is read and written twice. With a patched model (:func:`ropekit.hf.patch`) and
this cache passed as ``past_key_values``, the patched apply function rotates q and hands k on unrotated; the
cache's ``update`` rotates k while writing it (:func:`ropekit.rope_cache_write`: one pass over k and v), and
returns the same keys and values a ``StaticCache`` returns. q is rotated at the apply call, not deferred to the
write: a model may make a new query tensor from q before the write (Ministral 3 scales it), and that one must be
rotated (deferring q too left Ministral 3's queries unrotated, found by a user trial). Usage::

    model = ropekit.hf.patch(model)
    cache = FusedStaticCache(model, max_cache_len=4096)
    model.generate(ids, past_key_values=cache, max_new_tokens=64)   # or model(ids, past_key_values=cache)

How k gets to the cache unrotated, and why that can never leave a key unrotated:

* ``FusedStaticCache(model, ...)`` registers, once per model, a forward pre-hook and hook on each module that owns
  a patched rotary module (``LlamaModel`` ...). Only when that module's forward receives a ``FusedStaticCache``
  as ``past_key_values`` does it tell its rotary module to mark the tables of this forward as deferring k.
* The patched apply function (``qk`` calling convention, [b, h, s, d], no autograd recording) then returns q
  rotated and k unrotated, k marked with the tables -- when k has at least ``FUSED_MIN_K_ELEMENTS`` elements
  (prefill, chunks); a decode-sized k is rotated with q in one call and written as ``StaticCache`` writes it,
  because there the fused write costs more than the pass over k it saves; anything else (another cache, no cache, other conventions,
  tensors that require grad) rotates q and k as usual.
* ``update`` rotates a marked k into the cache (:func:`ropekit.rope_cache_write`); an unmarked k is written as a
  ``StaticCache`` writes it.
* After the forward, the hook checks that every deferred k was written by ``update``; if one was not (a model
  whose attention uses k between the rotation and the cache write), it raises ``RuntimeError`` -- that model
  must use a plain ``StaticCache``.

Refused at construction (``ValueError``): a model that is not patched, or a config with layers other than full
attention (sliding-window, chunked, linear or shared layers keep transformers' own layer classes).
Shapes: cache keys/values [B, Hkv, S_max, D] (transformers' static layout); k, v [B, Hkv, S, D].
"""

from __future__ import annotations

from typing import Any

import torch
from transformers.cache_utils import StaticCache, StaticLayer

from ropekit.hf.cache_correct import cache_argument
from ropekit.hf.rotary import RopekitRotary, RopekitTables
from ropekit.rotation.kv_cache import rope_cache_write

__all__ = ["DEFERRED", "FUSED_MIN_K_ELEMENTS", "FusedStaticCache", "FusedStaticLayer"]

#: the smallest k (elements, all of a layer's keys of one forward) whose rotation is deferred to the cache write.
#: Below it (decode steps) the fused write's fixed per-call cost (a second kernel call per layer, its argument
#: checks) exceeds the pass over k it saves: q and k are rotated in one call and the cache copies k as a
#: ``StaticCache`` does. Measured on the project's 2-core machine (docs/hf.md, fifteenth session): fused/unfused
#: 1.46-2.1x at 1,024-4,096 elements, 0.42-0.92x at 16,384-32,768.
FUSED_MIN_K_ELEMENTS = 16384

#: attribute on an unrotated k handed to the cache: (the rotation spec, cos, sin)
DEFERRED = "_ropekit_deferred_k"
_HOOKED = "_ropekit_fused_cache_hooks"


class FusedStaticLayer(StaticLayer):  # type: ignore[no-untyped-call]  # transformers is untyped here
    """A ``StaticLayer`` that rotates a deferred k while writing it (see the module docstring)."""

    owner: FusedStaticCache | None = None

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        deferred = getattr(key_states, DEFERRED, None)
        if deferred is None:
            if self.owner is not None and self.owner.pending:
                # a deferred (unrotated) k is outstanding and an unmarked key arrives: the model made a new key
                # tensor from it (Phi, StableLM: the rotated part concatenated with the pass-through part), which
                # would be written unrotated. Refused before anything of this forward is written.
                self.owner.pending = 0
                raise RuntimeError(
                    "FusedStaticCache: a key tensor reached the cache's update while an unrotated key handed over "
                    "by the patched apply function is outstanding; this model makes new key tensors between "
                    "RoPE and the cache write (e.g. partial rotary concatenated outside the apply function) -- "
                    "use transformers' StaticCache with it"
                )
            return super().update(key_states, value_states, *args, **kwargs)
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        spec, cos, sin = deferred
        offset = int(self.cumulative_length)
        keys, values = self.keys, self.values
        assert keys is not None and values is not None  # allocated by lazy_initialization
        rope_cache_write(
            key_states,
            value_states,
            keys,
            values,
            torch.full((key_states.shape[0],), offset, dtype=torch.int64, device=key_states.device),
            spec,
            tables=(cos, sin),
            format="bhsd",
            cache_format="bhsd",
        )
        self.cumulative_length.add_(key_states.shape[-2])
        delattr(key_states, DEFERRED)
        if self.owner is not None:
            self.owner.pending -= 1
        return self.keys, self.values


def _owners(model: torch.nn.Module) -> list[tuple[torch.nn.Module, list[RopekitRotary]]]:
    """Modules with a patched rotary module as a direct child (the module whose forward gets the cache)."""
    out = []
    for m in model.modules():
        rot = [c for c in m.children() if isinstance(c, RopekitRotary)]
        if rot:
            out.append((m, rot))
    return out


def _install(model: torch.nn.Module) -> None:
    if model.__dict__.get(_HOOKED):
        return
    handles = []
    for owner, rotaries in _owners(model):

        def pre(mod: torch.nn.Module, args: Any, kwargs: dict[str, Any], rot: list[Any] = rotaries) -> None:
            cache = cache_argument(kwargs)  # `cache` (transformers >= 5.24) or `past_key_values`
            if isinstance(cache, FusedStaticCache):
                cache.pending = 0
                for r in rot:
                    r.__dict__["_ropekit_defer"] = cache

        def post(
            mod: torch.nn.Module, args: Any, kwargs: dict[str, Any], out: Any, rot: list[Any] = rotaries
        ) -> None:
            cache = None
            for r in rot:
                cache = r.__dict__.pop("_ropekit_defer", None) or cache
            if cache is not None and cache.pending:
                n, cache.pending = cache.pending, 0
                raise RuntimeError(
                    f"FusedStaticCache: {n} unrotated key tensor(s) handed over by the patched apply function "
                    f"never reached the cache's update in {type(mod).__name__}.forward; this model's attention "
                    "uses k outside the cache write -- use transformers' StaticCache with it"
                )

        handles.append(owner.register_forward_pre_hook(pre, with_kwargs=True))
        handles.append(owner.register_forward_hook(post, with_kwargs=True, always_call=True))
    model.__dict__[_HOOKED] = handles


class FusedStaticCache(StaticCache):
    """``StaticCache(config, max_cache_len)`` for a patched model, with RoPE fused into the key write."""

    def __init__(self, model: torch.nn.Module, max_cache_len: int, **kwargs: Any) -> None:
        if not _owners(model):
            from ropekit.hf.patch_vl import RopekitVLRotary

            if any(isinstance(m, RopekitVLRotary) for m in model.modules()):
                raise ValueError(
                    f"FusedStaticCache serves 1-D text rotaries; {type(model).__name__} is patched, but its text "
                    "rotary is multi-axis (M-RoPE), whose fused cache write is not supported: use transformers' "
                    "StaticCache with the patched model"
                )
            raise ValueError(
                f"FusedStaticCache needs a model patched by ropekit.hf.patch, got {type(model).__name__} "
                "without a patched rotary module"
            )
        config: Any = model.config
        super().__init__(config=config, max_cache_len=max_cache_len, **kwargs)
        kinds = sorted({type(layer).__name__ for layer in self.layers if type(layer) is not StaticLayer})
        if kinds:
            raise ValueError(
                f"FusedStaticCache supports full-attention layers only; this config also has {', '.join(kinds)} "
                "(use transformers' StaticCache)"
            )
        self.pending = 0
        for layer in self.layers:
            layer.__class__ = FusedStaticLayer
            layer.owner = self  # type: ignore[union-attr]  # a FusedStaticLayer now
        _install(model)


def defer_k(k: torch.Tensor, info: RopekitTables, spec: Any, cos: torch.Tensor, sin: torch.Tensor) -> bool:
    """Mark k for the fused cache write (called by the patched apply function, which has rotated q already);
    False when no fused cache is in use."""
    cache = info.extra.get("defer_to")
    if not isinstance(cache, FusedStaticCache):
        return False
    setattr(k, DEFERRED, (spec, cos, sin))
    cache.pending += 1
    return True

# SPDX-License-Identifier: MIT
"""``patch(model, cache_correct=True)``: cached keys follow the frequencies of dynamic NTK / LongRoPE.

transformers rotates each new key with the frequencies of the current length and leaves the cached keys at the
frequencies they were computed with (#25104), so token-by-token generation drifts from a full forward once the
frequencies switch. With this option the patched rotary module remembers the positions of the cached keys and,
when the frequencies switch, re-rotates every cached key in place (:func:`ropekit.cache.rerotate_keys`: one more
rotation by p (theta_new - theta_old), exact phases) before the new tokens attend to them.

The cache is found by a forward pre-hook on the module that owns the rotary module (its ``past_key_values``
argument). Supported: transformers' dynamic caches (full and sliding-window layers), keys stored rotated with the
rope channels leading (not MLA, whose cached key puts the rope channels last), one rope spec per module.

Shapes: cached keys [b, h_kv, s, d] ("bhsd"); positions [b, s].
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from torch import nn

from ropekit.cache import rerotate_keys
from ropekit.spec import RopeSpec

__all__ = ["CacheState", "cache_correct_refusal", "install_hooks", "track"]


class CacheState:
    """Positions of the keys in the current cache and the length their frequencies were computed for."""

    def __init__(self) -> None:
        self.cache: Any = None
        self.positions: torch.Tensor | None = None  # [b, T]
        self.rotated_len: int | None = None
        self.rerotations = 0  # how many times cached keys were re-rotated (tests read it)


def cache_correct_refusal(module: nn.Module, specs: dict[str | None, RopeSpec]) -> str | None:
    """Why this rotary module (with these specs) cannot keep its cache correct, or None."""
    if len(specs) != 1 or None not in specs:
        return "per-layer-type rotaries are not supported by cache_correct"
    if getattr(module.config, "qk_rope_head_dim", None) is not None:
        return "MLA caches keys with the rope channels last; cache_correct needs them first"
    return None


def install_hooks(parent: nn.Module, state: CacheState) -> list[Any]:
    """Pre/post hooks on the rotary module's owner that expose its ``past_key_values`` to the state."""

    def pre(_mod: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        state.cache = kwargs.get("past_key_values")

    def post(_mod: nn.Module, _args: Any, _kwargs: Any, _out: Any) -> None:
        state.cache = None

    return [
        parent.register_forward_pre_hook(pre, with_kwargs=True),
        parent.register_forward_hook(post, with_kwargs=True),
    ]


def _layer_keys(cache: Any) -> list[torch.Tensor]:
    layers = getattr(cache, "layers", None)
    if layers is None:
        raise ValueError(
            f"cache_correct needs a transformers dynamic cache with .layers, got {type(cache).__name__}"
        )
    out = []
    for layer in layers:
        name = type(layer).__name__
        if name not in ("DynamicLayer", "DynamicSlidingWindowLayer"):
            raise ValueError(f"cache_correct supports DynamicLayer / DynamicSlidingWindowLayer, got {name}")
        keys = getattr(layer, "keys", None)
        if isinstance(keys, torch.Tensor) and keys.numel():
            out.append(keys)
    return out


def track(state: CacheState, spec: RopeSpec, position_ids: torch.Tensor, new_len: int | None) -> None:
    """Before new tokens are rotated: re-rotate stale cached keys, then record the new positions."""
    if not spec.dynamic or new_len is None:
        return
    b = position_ids.shape[0]
    cache = state.cache
    seen = 0 if cache is None else int(cache.get_seq_length())
    if seen == 0 or state.positions is None or state.rotated_len is None:
        state.positions, state.rotated_len = position_ids.detach().clone(), new_len
        return
    hist = state.positions
    if hist.shape[0] != b:
        hist = hist.expand(b, -1) if hist.shape[0] == 1 else hist
    if hist.shape[0] != b:
        raise ValueError(f"cache_correct: batch changed from {hist.shape[0]} to {b} with a live cache")
    if state.rotated_len != new_len and spec.keys_stale(state.rotated_len, new_len):
        for keys in _layer_keys(cache):
            n_keys = keys.shape[-2]
            if n_keys > hist.shape[1]:
                raise ValueError(f"cache_correct: {n_keys} cached keys but {hist.shape[1]} positions tracked")
            kspec = (
                spec
                if keys.shape[-1] == spec.head_dim
                else dataclasses.replace(spec, head_dim=keys.shape[-1])
            )
            rerotate_keys(
                keys, hist[:, -n_keys:], kspec, from_len=state.rotated_len, to_len=new_len, format="bhsd"
            )
        state.rerotations += 1
    state.positions = torch.cat([hist, position_ids.to(hist.device)], dim=1)
    state.rotated_len = new_len

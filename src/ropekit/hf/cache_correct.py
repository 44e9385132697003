# SPDX-License-Identifier: MIT
"""``patch(model, cache_correct=True)``: cached decoding of dynamic NTK / LongRoPE equals a full forward.

transformers rotates each new key with the frequencies of the current length and keeps the cached keys and values
it computed under the old frequencies (#25104), so token-by-token generation drifts from a full forward once the
frequencies switch. Re-rotating the cached keys is not enough beyond the first layer: the keys and values of layer
``l > 0`` are projections of hidden states that attended with the old frequencies, so their content differs, not
only their phase. With this option, when the frequencies switch between two calls:

* the model has one layer: its cached keys are re-rotated in place (:func:`ropekit.cache.rerotate_keys`, one
  more rotation by ``p (theta_new - theta_old)``): exact, since its keys depend on the token embeddings and the
  frequencies only, and its values not on the frequencies at all;
* otherwise the cache is rebuilt: the tokens (or embeddings) fed so far are run again through the module that
  owns the rotary (one extra forward over the cached prefix, with the new frequencies), refilling the same cache
  object, before the new tokens are processed. Every layer's cache is then what a full forward computes.

Cost: dynamic NTK changes its frequencies at every length beyond ``original_max_position_embeddings``, so every
decoding step past it adds one forward over the whole prefix (generation becomes a full forward per token);
LongRoPE switches once (short to long factors), one extra prefix forward in all.

The cache and the inputs are found by forward hooks on the module that owns the rotary module (its
``cache`` -- ``past_key_values`` before transformers 5.24 --, ``input_ids`` / ``inputs_embeds``,
``attention_mask`` arguments). What a cache holds (its tokens' inputs and positions, and the length their
frequencies were made for) is recorded on the cache object itself, so each cache is rebuilt from its own tokens:
two conversations served alternately by one model, and beam search, whose ``reorder_cache`` (like
``batch_select_indices`` and ``batch_repeat_interleave``) is followed row by row. A cache the forward makes itself
(none passed, ``use_cache=True``) is recorded when it is returned. Supported: transformers'
dynamic caches (full and sliding-window layers; a static cache is refused at its first call), a 2-D (or absent)
attention mask, one rope spec per module, keys stored with the rope channels leading (the one-layer path; not
MLA).

Paper: bloc97, "Dynamically scaled RoPE" (2023); Ding et al., "LongRoPE" (arXiv:2402.13753).
Shapes: cached keys [b, h_kv, s, d] ("bhsd"); positions [b, s]; input ids [b, s]; embeddings [b, s, hidden].
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any

import torch
from torch import nn

from ropekit.cache import rerotate_keys
from ropekit.spec import RopeSpec

__all__ = [
    "CACHE_ARGUMENTS",
    "CacheState",
    "cache_argument",
    "cache_correct_refusal",
    "install_hooks",
    "track",
]

_LAYERS = ("DynamicLayer", "DynamicSlidingWindowLayer")
#: the names a transformers model's forward takes its KV cache under: ``cache`` from 5.24 on, ``past_key_values``
#: before (5.24 still accepts it, deprecated, until 5.40)
CACHE_ARGUMENTS = ("cache", "past_key_values")


def cache_argument(kwargs: dict[str, Any]) -> Any:
    """The KV cache a forward call was given, under either of :data:`CACHE_ARGUMENTS` (None if neither)."""
    for name in CACHE_ARGUMENTS:
        got = kwargs.get(name)
        if got is not None:
            return got
    return None


@dataclasses.dataclass
class _Record:
    """What one cache holds: the inputs and positions fed into it and the length their frequencies were made for."""

    chunks: list[
        tuple[str, torch.Tensor]
    ]  # inputs of the cached tokens, in order (each [b, s] or [b, s, hidden])
    positions: torch.Tensor  # [b, T] positions of the cached tokens
    rotated_len: int

    def select_rows(self, index: torch.Tensor) -> None:
        """Follow the cache's rows: ``reorder_cache`` (beam search), ``batch_select_indices``."""
        self.positions = self.positions.index_select(0, index.to(self.positions.device))
        self.chunks = [(k, t.index_select(0, index.to(t.device))) for k, t in self.chunks]

    def repeat_rows(self, repeats: int) -> None:
        """Follow ``batch_repeat_interleave`` (each row repeated ``repeats`` times)."""
        self.positions = self.positions.repeat_interleave(repeats, dim=0)
        self.chunks = [(k, t.repeat_interleave(repeats, dim=0)) for k, t in self.chunks]


#: attribute of a cache object: {id of the CacheState: its _Record} (each cache keeps its own record, so that two
#: live conversations of one model, or a reordered beam, are rebuilt from their own tokens)
_RECORDS = "_ropekit_cache_correct"


class CacheState:
    """The patched rotary's view of the call in progress; what each cache holds is recorded on the cache."""

    def __init__(self) -> None:
        self.owner: nn.Module | None = None  # the module whose forward owns the rotary module (hooks set it)
        self.cache_name = (
            "past_key_values"  # the owner's forward's name for its cache argument (hooks set it)
        )
        self.cache: Any = None  # past_key_values of the call in progress
        self.pending: tuple[str, torch.Tensor] | None = None  # ("ids" | "embeds", tensor) of that call
        self.mask: torch.Tensor | None = None  # its attention_mask
        self.force_len: int | None = None  # while rebuilding: the length the rotary must use
        self.uncached: _Record | None = None  # a call without a cache: recorded on the cache it returns
        self.rerotations = 0  # one-layer path: how many times cached keys were re-rotated (tests read it)
        self.rebuilds = 0  # deeper models: how many extra prefix forwards were run (tests read it)

    def record(self, cache: Any) -> _Record | None:
        """What ``cache`` holds, as fed through this model (None: nothing recorded)."""
        records = getattr(cache, "__dict__", {}).get(_RECORDS)
        return None if records is None else records.get(id(self))

    def set_record(self, cache: Any, record: _Record) -> None:
        if _RECORDS not in cache.__dict__:
            cache.__dict__[_RECORDS] = {}
            _follow_rows(cache)
        cache.__dict__[_RECORDS][id(self)] = record


def _follow_rows(cache: Any) -> None:
    """Make the cache's row operations (beam search's reorder, contrastive search's selection, repeats) apply to
    its records too: their instance methods are wrapped once."""
    records: dict[int, _Record] = cache.__dict__[_RECORDS]
    for name, update in (
        ("reorder_cache", _Record.select_rows),
        ("batch_select_indices", _Record.select_rows),
        ("batch_repeat_interleave", _Record.repeat_rows),
    ):
        method = getattr(cache, name, None)
        if method is None:
            continue

        def wrapped(arg: Any, *a: Any, _method: Any = method, _update: Any = update, **kw: Any) -> Any:
            out = _method(arg, *a, **kw)
            for rec in records.values():
                _update(rec, arg)
            return out

        cache.__dict__[name] = wrapped


def cache_correct_refusal(module: nn.Module, specs: dict[str | None, RopeSpec]) -> str | None:
    """Why this rotary module (with these specs) cannot keep its cache correct, or None."""
    if len(specs) != 1 or None not in specs:
        return "per-layer-type rotaries are not supported by cache_correct"
    if getattr(module.config, "qk_rope_head_dim", None) is not None:
        return "MLA caches keys with the rope channels last; cache_correct needs them first"
    return None


def install_hooks(parent: nn.Module, state: CacheState) -> list[Any]:
    """Pre/post hooks on the rotary module's owner that expose its cache and inputs to the state."""
    names = list(inspect.signature(parent.forward).parameters)
    state.owner = parent
    state.cache_name = next((n for n in CACHE_ARGUMENTS if n in names), "past_key_values")

    def pre(_mod: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if state.force_len is not None:  # our own rebuild forward
            return
        got = {**dict(zip(names, args)), **kwargs}
        state.cache = cache_argument(got)
        ids, embeds = got.get("input_ids"), got.get("inputs_embeds")
        state.pending = (
            ("embeds", embeds) if embeds is not None else ("ids", ids) if ids is not None else None
        )
        state.mask = got.get("attention_mask")

    def post(_mod: nn.Module, _args: Any, _kwargs: Any, out: Any) -> None:
        if state.force_len is not None:
            return
        made, state.uncached = state.uncached, None
        if made is not None:  # called without a cache: the one the forward made holds exactly these tokens
            cache = next((c for n in CACHE_ARGUMENTS if (c := getattr(out, n, None)) is not None), None)
            if cache is not None and int(cache.get_seq_length()) == made.positions.shape[1]:
                state.set_record(cache, made)
        state.cache, state.pending, state.mask = None, None, None

    return [
        parent.register_forward_pre_hook(pre, with_kwargs=True),
        parent.register_forward_hook(post, with_kwargs=True),
    ]


def _layers(cache: Any) -> list[Any]:
    layers = getattr(cache, "layers", None)
    if layers is None:
        raise ValueError(
            f"cache_correct needs a transformers dynamic cache with .layers, got {type(cache).__name__}"
        )
    for layer in layers:
        if type(layer).__name__ not in _LAYERS:
            raise ValueError(
                f"cache_correct supports transformers' dynamic caches ({' / '.join(_LAYERS)} layers), got "
                f"{type(cache).__name__} with {type(layer).__name__} layers (a static cache, e.g. "
                "cache_implementation='static', cannot be rebuilt: use a DynamicCache)"
            )
    return list(layers)


def _rerotate(state: CacheState, rec: _Record, spec: RopeSpec, hist: torch.Tensor, new_len: int) -> None:
    for layer in _layers(state.cache):
        keys = getattr(layer, "keys", None)
        if not isinstance(keys, torch.Tensor) or not keys.numel():
            continue
        n_keys = keys.shape[-2]
        if n_keys > hist.shape[1]:
            raise ValueError(f"cache_correct: {n_keys} cached keys but {hist.shape[1]} positions tracked")
        kspec = (
            spec if keys.shape[-1] == spec.head_dim else dataclasses.replace(spec, head_dim=keys.shape[-1])
        )
        rerotate_keys(keys, hist[:, -n_keys:], kspec, from_len=rec.rotated_len, to_len=new_len, format="bhsd")
    state.rerotations += 1


def _prefix_inputs(state: CacheState, rec: _Record, n_hist: int) -> dict[str, Any]:
    """Arguments that run the cached prefix again (checked before the cache is touched)."""
    if state.owner is None or not rec.chunks:
        raise ValueError("cache_correct: the inputs of the cached tokens were not recorded")
    kinds = {k for k, _ in rec.chunks}
    if kinds == {"ids"}:
        inputs: dict[str, Any] = {"input_ids": torch.cat([t for _, t in rec.chunks], dim=1)}
    else:
        embed = state.owner.get_input_embeddings()  # type: ignore[operator]
        parts = [embed(t) if k == "ids" else t for k, t in rec.chunks]
        inputs = {"inputs_embeds": torch.cat(parts, dim=1)}
    mask = state.mask
    if mask is not None:
        if mask.dim() != 2 or mask.shape[1] < n_hist:
            raise ValueError(
                f"cache_correct needs a 2-D attention_mask covering the {n_hist} cached tokens, got shape "
                f"{tuple(mask.shape)}"
            )
        mask = mask[:, :n_hist]
    return {**inputs, "attention_mask": mask}


def _rebuild(state: CacheState, rec: _Record, rotary: nn.Module, hist: torch.Tensor, new_len: int) -> None:
    """Run the cached prefix again under the frequencies of ``new_len``, refilling the same cache object."""
    inputs = _prefix_inputs(state, rec, hist.shape[1])
    layers = _layers(state.cache)
    saved = {k: rotary.__dict__[k] for k in ("max_seq_len_cached",) if k in rotary.__dict__}
    inv_freq = rotary._buffers.get("inv_freq")  # transformers' dynamic update may replace or overwrite it
    saved_inv = None if inv_freq is None else inv_freq.clone()
    for layer in layers:
        layer.reset()
    state.force_len = new_len
    try:
        assert state.owner is not None
        state.owner(**inputs, position_ids=hist, use_cache=True, **{state.cache_name: state.cache})
    finally:
        state.force_len = None
        rotary.__dict__.update(saved)  # transformers' own dynamic state, as before the extra forward
        if inv_freq is not None and saved_inv is not None:
            rotary._buffers["inv_freq"] = inv_freq.copy_(saved_inv)  # the same tensor, its values as before
    state.rebuilds += 1


def track(
    state: CacheState, spec: RopeSpec, position_ids: torch.Tensor, new_len: int | None, rotary: nn.Module
) -> int | None:
    """Called by the patched rotary before it makes its tables; returns the length to make them for.

    Before new tokens are rotated: bring the cache to the frequencies of ``new_len`` (re-rotate or rebuild, see
    the module docstring), then record the new tokens' inputs and positions.
    """
    if state.force_len is not None:  # inside our rebuild forward
        return state.force_len
    if not spec.dynamic or new_len is None:
        return new_len
    b = position_ids.shape[0]
    cache = state.cache
    pending = [] if state.pending is None else [state.pending]
    if cache is None:  # no cache given: the forward may make one (use_cache), recorded by the post hook
        state.uncached = _Record(pending, position_ids.detach().clone(), new_len)
        return new_len
    _layers(
        cache
    )  # a cache this cannot keep correct is refused at its first call, before anything is written
    seen = int(cache.get_seq_length())
    rec = state.record(cache)
    if seen == 0 or rec is None:
        state.set_record(cache, _Record(pending, position_ids.detach().clone(), new_len))
        return new_len
    hist = rec.positions
    if hist.shape[0] != b and hist.shape[0] == 1:
        hist = hist.expand(b, -1)
    if hist.shape[0] != b:
        raise ValueError(f"cache_correct: batch changed from {hist.shape[0]} to {b} with a live cache")
    if seen != hist.shape[1]:
        raise ValueError(
            f"cache_correct: the cache holds {seen} tokens but {hist.shape[1]} were fed through this model "
            "(a cache cropped or filled elsewhere cannot be kept correct)"
        )
    if rec.rotated_len != new_len and spec.keys_stale(rec.rotated_len, new_len):
        if getattr(getattr(rotary, "config", None), "num_hidden_layers", None) == 1:
            _rerotate(state, rec, spec, hist, new_len)
        else:
            _rebuild(state, rec, rotary, hist, new_len)
    rec.positions = torch.cat([hist, position_ids.to(hist.device)], dim=1)
    rec.chunks = rec.chunks + pending
    rec.rotated_len = new_len
    return new_len

# SPDX-License-Identifier: MIT
"""Layer types of a model: which RoPE each kind of attention layer uses, and over how many tokens it attends.

Per-layer-type models mix sliding-window and full-attention layers, sometimes with different RoPE:

- Gemma 2: alternating sliding (window 4096) and full layers, one RoPE for both;
- Gemma 3: five sliding layers (window 1024 or 512, base 1e4, never scaled) per full layer (base 1e6, with the
  model's scaling, e.g. linear x8 for the 4B+ checkpoints);
- gpt-oss: alternating sliding (window 128) and full layers, one YaRN RoPE for both;
- Mistral 7B v0.1 (sliding window on every layer), Qwen2 with ``use_sliding_window``; any v5 config that lists
  ``layer_types``. Other configs are read as full attention on every layer.

A sliding layer never sees two tokens further apart than its window, so its bands are judged at the window
(turns completed, critical dimension, base bound) -- while its positions, and so its phase error, still reach
the full context: the tables are indexed by absolute position.

Shapes: none (configuration only).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from ropekit.integers import whole
from ropekit.spec import RopeSpec

__all__ = ["LayerView", "config_layer_types", "layer_views", "not_compared", "rope_per_layer_type"]

_WINDOWED = {"sliding_attention": "sliding_window", "chunked_attention": "attention_chunk_size"}


@dataclass(frozen=True)
class LayerView:
    """One layer type of a model (or the whole model when it has a single type).

    Attributes:
        layer_type: e.g. "sliding_attention", or None for a model with one kind of layer.
        spec: the RoPE of these layers.
        context: the longest sequence (absolute positions reach ``context - 1``).
        window: sliding window / attention chunk in tokens, None for full attention.
        layers: how many layers have this type (None when the config does not say).
    """

    layer_type: str | None
    spec: RopeSpec
    context: int
    window: int | None = None
    layers: int | None = None

    @property
    def span(self) -> int:
        """Tokens these layers attend over: the window (at most the context) or the context."""
        return self.context if self.window is None else min(self.window, self.context)


def not_compared(window: int) -> str:
    """Why a sliding-window layer type gets no scaling comparison (``inspect --compare``'s and the report's words):
    it never sees two tokens further apart than ``window``, whatever the context."""
    return (
        f"sliding window of {window:,} tokens: these layers never see two tokens further apart, "
        "so extending the context changes nothing they see and no scaling applies"
    )


def rope_per_layer_type(config: dict[str, Any]) -> bool:
    """True when the config gives each layer type its own RoPE (v5 nested ``rope_parameters``, or the v4 form of a
    family in :data:`ropekit.hf.config_families.PER_LAYER_TYPE_FAMILIES`: Gemma 3, OLMo 3, ModernBERT, ...)."""
    from ropekit.hf.config_families import per_layer_family  # the families' data (no transformers import)

    rp = config.get("rope_parameters")
    if isinstance(rp, dict) and rp and all(isinstance(v, dict) or v is None for v in rp.values()):
        return True
    return per_layer_family(str(config.get("model_type") or "")) is not None and not isinstance(rp, dict)


def config_layer_types(config: dict[str, Any]) -> list[str] | None:
    """The layer type of every layer, in order (None when the config has a single kind of layer).

    When the number of layers is unknown, the distinct types are returned once each.
    """
    listed = config.get("layer_types")
    if isinstance(listed, (list, tuple)) and listed:
        return [str(t) for t in listed]
    mt = str(config.get("model_type") or "")
    n = config.get("num_hidden_layers")
    pattern: int | None = None
    if mt.startswith("gemma3"):
        pattern = int(config.get("sliding_window_pattern") or 6)
    elif mt == "gemma2":
        pattern = 2
    elif mt == "olmo3":
        pattern = 4  # transformers' Olmo3Config default
    elif mt in ("modernbert", "modernbert-decoder"):  # layer i is global when i % n == 0
        every = config.get("global_attn_every_n_layers") or 3
        if not isinstance(n, int) or n < 1:
            return ["full_attention", "sliding_attention"]
        return ["sliding_attention" if i % int(every) else "full_attention" for i in range(n)]
    if pattern is not None:  # transformers: layer i slides unless (i + 1) % pattern == 0
        if not isinstance(n, int) or n < 1:
            return ["sliding_attention", "full_attention"]
        return ["sliding_attention" if (i + 1) % pattern else "full_attention" for i in range(n)]
    sliding_everywhere = mt == "mistral" and config.get("sliding_window") is not None
    if sliding_everywhere:
        return ["sliding_attention"] * (n if isinstance(n, int) and n > 0 else 1)
    if mt in ("qwen2", "qwen3", "qwen2_moe", "qwen3_moe") and config.get("use_sliding_window"):
        if not isinstance(n, int) or n < 1:
            return None
        first = int(config.get("max_window_layers") or 0)
        return ["sliding_attention" if i >= first else "full_attention" for i in range(n)]
    return None


def layer_views(config: dict[str, Any], *, context: int, layer_type: str | None = None) -> list[LayerView]:
    """One :class:`LayerView` per distinct layer type of ``config`` (a config.json dict), in order of appearance.

    Args:
        config: the model's config.json as a dict.
        context: the context length to judge full-attention layers at (positions reach ``context - 1``).
        layer_type: keep only this layer type.

    Raises:
        ValueError: ``context`` not a positive int, unknown ``layer_type``, a sliding layer type without its
            window, or a RoPE the parser refuses.
    """
    context = whole(context, 1, f"context must be a positive int, got {context!r}")
    types = config_layer_types(config)
    if types is None:
        if layer_type is not None:
            raise ValueError(
                f"layer_type={layer_type!r} given but the model has a single kind of attention layer"
            )
        return [LayerView(None, RopeSpec.from_hf(config), context)]
    counts = Counter(types)
    known_count = isinstance(config.get("num_hidden_layers"), int) or "layer_types" in config
    distinct = list(dict.fromkeys(types))
    if layer_type is not None:
        if layer_type not in distinct:
            raise ValueError(
                f"layer_type={layer_type!r} is not a layer type of this model; known: {distinct}"
            )
        distinct = [layer_type]
    per_type = rope_per_layer_type(config)
    views = []
    for t in distinct:
        window = None
        if t in _WINDOWED:
            key = _WINDOWED[t]
            if not isinstance(config.get(key), int) or config[key] < 1:
                raise ValueError(
                    f"layer type {t!r} needs the config's {key} (a positive int), got {config.get(key)!r}"
                )
            window = int(config[key])
        spec = RopeSpec.from_hf(config, layer_type=t) if per_type else RopeSpec.from_hf(config)
        views.append(LayerView(t, spec, context, window, counts[t] if known_count else None))
    return views

# SPDX-License-Identifier: MIT
"""Checks of a config's top-level keys that come before its rope dict is read: near-misses of the RoPE keys
ropekit reads (``rope_scalling``: transformers ignores a misspelt key silently, so the model would load with a
different RoPE) and the ``layer_types`` / ``sliding_window_pattern`` that transformers' config classes refuse.
"""

from __future__ import annotations

import difflib
from typing import Any

from ropekit.hf.config_families import ALLOWED_LAYER_TYPES, EXTRA_LAYER_TYPES
from ropekit.hf.config_values import _FROM_OBJECT, _did_you_mean, _Reader
from ropekit.integers import as_real, shown

__all__ = ["TOP_LEVEL_ROPE_KEYS", "check_layer_types", "check_top_level_keys"]

#: the RoPE keys ropekit reads at the top level of a config (any family: v4/v5 RoPE keys, GPT-NeoX's and GPT-J's
#: names, the per-layer-type thetas of Gemma 3 / ModernBERT, L0, DeepSeek's rotary head dim, ERNIE-4.5-VL's split).
#: A top-level key close to one of them is a likely typo (``rope_scalling``), which transformers ignores silently:
#: a Llama 3.1 config would load unscaled. (``head_dim`` and ``max_position_embeddings`` are left out: many real
#: keys are close to them, ``v_head_dim``, ``max_2d_position_embeddings``.)
TOP_LEVEL_ROPE_KEYS = frozenset(
    {
        *("rope_parameters", "rope_scaling", "rope_theta", "partial_rotary_factor"),
        *("rotary_pct", "rotary_emb_base", "rotary_dim"),
        *("rope_local_base_freq", "local_rope_theta", "global_rope_theta"),
        *("original_max_position_embeddings", "qk_rope_head_dim", "freq_allocation"),
    }
)
#: every other top-level key ropekit reads, and real transformers config keys (5.23) close to a name above
_NOT_TYPOS = frozenset(
    {
        *("head_dim", "max_position_embeddings", "hidden_size", "num_attention_heads", "n_embd", "n_head"),
        *("model_type", "layer_types", "num_hidden_layers", "sliding_window_pattern", "text_config"),
        *("vision_config", _FROM_OBJECT),
        *("qk_nope_head_dim", "right_max_position_embeddings"),  # DeepSeek MLA; SeamlessM4T / wav2vec2-bert
    }
)
#: stricter than inside the rope dict (0.75): a config.json has many unrelated top-level keys
_TOP_CUTOFF = 0.85


def check_top_level_keys(cfg: dict[str, Any], r: _Reader, where: str = "config") -> None:
    """Report (strict: ValueError; ``strict=False``: a warning) top-level keys of ``cfg`` that are near-misses of
    :data:`TOP_LEVEL_ROPE_KEYS` (``rope_scalling``, ``rope_parameter``), with the did-you-mean hint. Other unknown
    keys are not reported: a config.json holds many keys that have nothing to do with RoPE."""
    names = sorted(TOP_LEVEL_ROPE_KEYS)
    close = {
        k: m[0]
        for k in cfg
        if isinstance(k, str)
        and k not in TOP_LEVEL_ROPE_KEYS
        and k not in _NOT_TYPOS
        and (m := difflib.get_close_matches(k, names, n=1, cutoff=_TOP_CUTOFF))
    }
    if close:
        keys = sorted(close)
        hint = ", ".join(f"{close[k]!r} for {k!r}" for k in keys)
        r.problem(
            f"{where} has unknown key{'s' if len(keys) > 1 else ''} {keys}, close to RoPE keys ropekit reads (did "
            f"you mean {hint}?); transformers ignores a misspelt key silently, so the model would load with a "
            "different RoPE: rename it"
        )


def check_layer_types(cfg: dict[str, Any], model_type: str) -> None:
    """Refuse what transformers' ``validate_layer_type`` refuses when it builds the config: ``layer_types`` not a
    list, an entry it does not know, a length other than ``num_hidden_layers``; and a Gemma 3 ``sliding_window_pattern``
    that is not a positive integer (0 divides by zero in transformers). A config object passed transformers' own
    check already (some families allow other names)."""
    if cfg.get(_FROM_OBJECT):
        return
    types = cfg.get("layer_types")
    if types is not None:
        if not isinstance(types, (list, tuple)):
            raise ValueError(
                f"config layer_types={types!r} must be a list of layer types, got a {type(types).__name__}"
            )
        allowed = ALLOWED_LAYER_TYPES + EXTRA_LAYER_TYPES.get(model_type, ())
        bad = [t for t in types if t not in allowed]
        if bad:
            raise ValueError(
                f"config layer_types has an unknown entry {bad[0]!r} (transformers refuses the config); "
                f"allowed: {list(allowed)}{_did_you_mean([str(b) for b in bad], set(allowed))}"
            )
        n = cfg.get("num_hidden_layers")
        if isinstance(n, int) and not isinstance(n, bool) and n != len(types):
            raise ValueError(
                f"config layer_types has {len(types)} entries but num_hidden_layers={n} (transformers refuses the "
                "config); give one layer type per layer"
            )
    pattern = cfg.get("sliding_window_pattern")
    if model_type.startswith("gemma3") and types is None and pattern is not None:
        x = as_real(pattern)
        if x is None or not x.is_integer() or x < 1:
            raise ValueError(
                f"config sliding_window_pattern={shown(pattern)} must be a positive integer (every pattern-th layer "
                "is full attention; transformers divides by it)"
            )

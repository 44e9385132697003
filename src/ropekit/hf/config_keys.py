# SPDX-License-Identifier: MIT
"""Reading the RoPE keys of a transformers config: the merged rope dict of one layer type, checked key by key.

:func:`ropekit.hf.config.spec_from_hf` turns the result into a RopeSpec; this module holds what comes before:

- the config as a dict (a config object's ``to_dict()`` plus the attributes it leaves out) and its head dim
  (``qk_rope_head_dim``, ``head_dim``, or hidden size over heads, also under GPT-J's ``n_embd`` / ``n_head``);
- the rope dict of one layer type, v5 over v4 over legacy spellings (``shared/reference/rope-types.md``
  sections 3-4), and :data:`KNOWN_KEYS`, the keys each ``rope_type`` requires and allows;
- the value checks (finite numbers, bounds, positive integers), strict or warning (:class:`_Reader`), and the
  did-you-mean suggestions for misspelt keys.
"""

from __future__ import annotations

import difflib
import math
import warnings
from typing import Any

__all__ = ["KNOWN_KEYS"]

_COMMON = {"rope_type", "rope_theta", "partial_rotary_factor"}
#: rope_type -> (required keys, optional keys) inside the rope dict (besides the common ones).
KNOWN_KEYS: dict[str, tuple[set[str], set[str]]] = {
    "default": (set(), set()),
    "linear": ({"factor"}, set()),
    "dynamic": ({"factor"}, set()),
    "ntk": ({"factor"}, set()),
    "ntk_alpha": ({"alpha"}, {"factor"}),  # HunYuan ships factor 1.0 beside alpha
    "yarn": (
        {"factor", "original_max_position_embeddings"},
        {"attention_factor", "beta_fast", "beta_slow", "mscale", "mscale_all_dim", "truncate"},
    ),
    "longrope": (
        {"short_factor", "long_factor", "original_max_position_embeddings"},
        {"attention_factor", "factor"},
    ),
    "llama3": (
        {"factor", "original_max_position_embeddings", "low_freq_factor", "high_freq_factor", "rope_theta"},
        set(),
    ),
    "proportional": ({"rope_theta", "partial_rotary_factor"}, {"factor"}),
}


class _Reader:
    def __init__(self, strict: bool) -> None:
        self.strict = strict

    def problem(self, msg: str) -> None:
        if self.strict:
            raise ValueError(msg)
        warnings.warn(f"{msg} (accepted because strict=False)", stacklevel=4)


#: set by _as_dict on a config *object*: transformers has standardized it already (no legacy aliases to apply)
_FROM_OBJECT = "__ropekit_from_config_object__"


def _as_dict(config: Any) -> dict[str, Any]:
    if isinstance(config, dict):
        return dict(config)
    if hasattr(config, "to_dict"):
        d = dict(config.to_dict())
        d[_FROM_OBJECT] = True
        for key in ("head_dim", "rope_parameters", "max_position_embeddings", "model_type"):
            if key not in d and getattr(config, key, None) is not None:
                d[key] = getattr(config, key)
        return d
    raise TypeError(
        f"config must be a transformers config or a config.json dict, got {type(config).__name__}"
    )


def _is_nested(rp: dict[str, Any]) -> bool:
    return bool(rp) and all(isinstance(v, dict) or v is None for v in rp.values())


#: GPT-2-style names of the config keys the head dim is read from (GPT-J and CodeGen configs, their config.json
#: and their config objects' ``to_dict()``, spell them this way; transformers maps them with ``attribute_map``)
_LEGACY_NAMES = {"hidden_size": "n_embd", "num_attention_heads": "n_head"}


def _config_int(cfg: dict[str, Any], key: str) -> tuple[str, int] | None:
    """(the name the config uses, its value) for ``key`` or its GPT-2-style name; None when neither is set."""
    for name in (key, _LEGACY_NAMES.get(key)):
        if name is not None and cfg.get(name) is not None:
            v = cfg[name]
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"config {name}={v!r} must be a positive integer")
            return name, v
    return None


def _head_dim(cfg: dict[str, Any]) -> int:
    for key in ("qk_rope_head_dim", "head_dim"):
        if cfg.get(key) is not None:
            return int(cfg[key])
    hidden, heads = _config_int(cfg, "hidden_size"), _config_int(cfg, "num_attention_heads")
    if hidden is None or heads is None:
        raise ValueError(
            "config needs head_dim (or hidden_size and num_attention_heads, n_embd and n_head in GPT-J-style "
            "configs) to know the head dimension"
        )
    if hidden[1] % heads[1]:
        raise ValueError(
            f"config {hidden[0]}={hidden[1]} is not divisible by {heads[0]}={heads[1]}, so the head dimension is "
            "not their quotient; set head_dim"
        )
    return hidden[1] // heads[1]


def _did_you_mean(unknown: list[str], known: set[str]) -> str:
    close = {u: m[0] for u in unknown if (m := difflib.get_close_matches(u, sorted(known), n=1, cutoff=0.75))}
    return f" (did you mean {', '.join(f'{m!r} for {u!r}' for u, m in close.items())}?)" if close else ""


def _unknown_note(unknown: list[str], known: set[str]) -> str:
    return f"; unknown keys {unknown}{_did_you_mean(unknown, known)}" if unknown else ""


def _rope_dict(cfg: dict[str, Any], layer_type: str | None, model_type: str) -> dict[str, Any]:
    """The rope parameters for one layer type, merged with top-level legacy keys (v5 wins over v4 over legacy)."""
    rp_all = cfg.get("rope_parameters")
    if isinstance(rp_all, dict) and _is_nested(rp_all):
        if layer_type is None:
            raise ValueError(f"config has per-layer-type RoPE parameters {sorted(rp_all)}; pass layer_type=")
        if layer_type not in rp_all:
            raise ValueError(
                f"layer_type={layer_type!r} not in the config's rope_parameters {sorted(rp_all)}"
            )
        if rp_all[layer_type] is None:
            raise ValueError(
                f"layer_type={layer_type!r} has no RoPE (rope_parameters entry is null: a NoPE layer)"
            )
        rp = dict(rp_all[layer_type])
    elif isinstance(rp_all, dict):
        rp = dict(rp_all)
    else:
        rp = dict(cfg.get("rope_scaling") or {})
        if model_type.startswith("gemma3"):  # v4 Gemma 3: two layer types from flat keys
            if layer_type not in ("sliding_attention", "full_attention"):
                raise ValueError(
                    f"Gemma 3 configs have sliding_attention and full_attention layers; pass layer_type=, got {layer_type!r}"
                )
            if layer_type == "sliding_attention":  # sliding layers are never scaled (vLLM PR #29111)
                rp = {"rope_type": "default", "rope_theta": cfg.get("rope_local_base_freq", 10_000.0)}
            else:
                rp.setdefault("rope_theta", cfg.get("rope_theta", 1_000_000.0))
        elif layer_type is not None:
            raise ValueError(
                f"layer_type={layer_type!r} given but the config has a single set of RoPE parameters"
            )
    if "type" in rp:
        legacy = rp.pop("type")
        if rp.setdefault("rope_type", legacy) != legacy:
            raise ValueError(f"rope parameters give type={legacy!r} and rope_type={rp['rope_type']!r}")
    rp.setdefault("rope_type", "default")
    for key in ("rope_theta", "partial_rotary_factor"):
        if key not in rp and cfg.get(key) is not None:
            rp[key] = cfg[key]
    if "rope_theta" not in rp and cfg.get("rotary_emb_base") is not None:  # GPT-NeoX
        rp["rope_theta"] = cfg["rotary_emb_base"]
    if "partial_rotary_factor" not in rp:
        if cfg.get("rotary_pct") is not None:  # GPT-NeoX
            rp["partial_rotary_factor"] = cfg["rotary_pct"]
        elif cfg.get("rotary_dim") is not None:  # GPT-J, CodeGen, MiniMax-M2
            rp["partial_rotary_factor"] = cfg["rotary_dim"] / _head_dim(cfg)
        elif model_type == "gpt_neox":
            rp["partial_rotary_factor"] = 0.25
    # Phi-3 config.json: "su" and "yarn" both mean longrope (transformers converts them when it builds the config
    # object; a yarn set on the object afterwards is yarn to its rotary module, as in its own rope-scaling test)
    legacy = ("su",) if cfg.get(_FROM_OBJECT) else ("su", "yarn")
    if model_type in ("phi3", "phimoe") and rp["rope_type"] in legacy:
        rp["rope_type"] = "longrope"
    if rp["rope_type"] == "dynamic" and "alpha" in rp:  # HunYuan: static NTK-alpha
        rp["rope_type"] = "ntk_alpha"
    if (
        rp["rope_type"] in ("yarn", "longrope", "llama3")
        and cfg.get("original_max_position_embeddings") is not None
    ):
        rp.setdefault("original_max_position_embeddings", cfg["original_max_position_embeddings"])
        if rp["rope_type"] == "longrope":  # top level wins (the Phi-3 case), as in HF's standardization
            rp["original_max_position_embeddings"] = cfg["original_max_position_embeddings"]
    return rp


def _num(
    r: _Reader, rp: dict[str, Any], key: str, *, lo: float | None = None, lo_open: bool = False
) -> float:
    v = rp[key]
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
    if ok and lo is not None and (v <= lo if lo_open else v < lo):
        r.problem(f"rope parameter {key}={v!r} must be {'>' if lo_open else '>='} {lo:g}")
    if not ok:
        raise ValueError(f"rope parameter {key} must be a finite number, got {v!r}")
    return float(v)


def _int(rp: dict[str, Any], key: str) -> int:
    v = rp[key]
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or int(v) != v or v < 1:
        raise ValueError(f"rope parameter {key} must be a positive integer, got {v!r}")
    return int(v)

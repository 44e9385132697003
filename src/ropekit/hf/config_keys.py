# SPDX-License-Identifier: MIT
"""Reading the RoPE keys of a transformers config: the merged rope dict of one layer type.

:func:`ropekit.hf.config.spec_from_hf` turns the result into a RopeSpec; this module holds what comes before:

- the rope dict of one layer type, v5 over v4 over legacy spellings (``shared/reference/rope-types.md``
  sections 3-4), and :data:`KNOWN_KEYS`, the keys each ``rope_type`` requires and allows;
- per-layer-type ``rope_parameters`` (:func:`layer_type_entries`) and a ``rope_scaling`` merged into them;
- transformers' rules for ``original_max_position_embeddings`` and a per-layer-type YaRN ``truncate``
  (in :mod:`ropekit.hf.config_rules`).

Elsewhere: the config as a dict and the value checks (:mod:`ropekit.hf.config_values`) and the top-level key
checks (:mod:`ropekit.hf.config_top_keys`), split out of this module: their names stay importable from here;
transformers' partial-rotary expression ``int(head_dim * partial_rotary_factor)`` in both directions
(:mod:`ropekit.hf.partial_factor`).
"""

from __future__ import annotations

import warnings
from typing import Any

from ropekit.hf.class_defaults import DEFAULT_PARTIAL, PER_LAYER_DEFAULT_FAMILIES
from ropekit.hf.config_families import (
    NEOX_TYPES,
    NTK_ALPHA_TYPES,
    PER_LAYER_TYPE_FAMILIES,
    ROTARY_DIM_AS_FACTOR,
    SCALING_UPDATES,
    per_layer_family,
)
from ropekit.hf.config_rules import nested_truncate, original_max, replaced_note
from ropekit.hf.config_top_keys import (
    TOP_LEVEL_ROPE_KEYS,
    check_layer_types,
    check_top_level_keys,
)
from ropekit.hf.config_values import (
    _FROM_OBJECT,
    _as_dict,
    _did_you_mean,
    _factors,
    _head_dim,
    _int,
    _max_positions,
    _num,
    _pos_int,
    _Reader,
    _unknown_note,
)

__all__ = ["KNOWN_KEYS", "TOP_LEVEL_ROPE_KEYS", "check_top_level_keys"]
#: names that moved to config_values / config_top_keys in the split: still importable from here
__all__ += [
    "_FROM_OBJECT",
    "_Reader",
    "_as_dict",
    "_did_you_mean",
    "_factors",
    "_head_dim",
    "_int",
    "_max_positions",
    "_num",
    "_pos_int",
    "_unknown_note",
    "check_layer_types",
]

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
#: every key a rope dict may hold (a dict with one of them is flat, not per layer type)
_ROPE_KEYS = frozenset(
    {"type", "alpha", "mrope_section", "mrope_interleaved"}.union(
        _COMMON, *(a | b for a, b in KNOWN_KEYS.values())
    )
)


def layer_type_entries(rp: Any) -> dict[str, Any] | None:
    """The per-layer-type entries of rope parameters ({layer type: dict or null}), or None for a flat dict.

    Per layer type: at least one value a dict and every key that is not a rope parameter's name (so that
    ``{"rope_type": None}`` is a flat dict whose rope_type is null, not a layer type called "rope_type") a dict
    or null. transformers 5.23 can leave flat keys beside the entries (a Gemma 3 config built with flat
    ``rope_parameters`` gets its per-layer-type defaults added to them); its rotary modules read only the entries,
    and so does ropekit (:func:`flat_leftovers` names the ignored keys for a warning).
    """
    if not isinstance(rp, dict) or not rp:
        return None
    entries = {k: v for k, v in rp.items() if k not in _ROPE_KEYS}
    if not entries or not any(isinstance(v, dict) for v in entries.values()):
        return None
    if not all(isinstance(v, dict) or v is None for v in entries.values()):
        return None
    return entries


def flat_leftovers(rp: dict[str, Any]) -> list[str]:
    """The flat rope keys beside per-layer-type entries, which transformers' rotary modules do not read."""
    return sorted(k for k in rp if k in _ROPE_KEYS)


def _is_nested(rp: dict[str, Any]) -> bool:
    return layer_type_entries(rp) is not None


def _rope_parameters(cfg: dict[str, Any], model_type: str) -> dict[str, Any] | None:
    """The config's ``rope_parameters`` after transformers merges a ``rope_scaling`` into it; None when neither."""
    rp, rs = cfg.get("rope_parameters"), cfg.get("rope_scaling")
    for key, v in (("rope_parameters", rp), ("rope_scaling", rs)):
        if v is not None and not isinstance(v, dict):
            raise ValueError(
                f"config {key}={v!r} must be a dict (a JSON object) of RoPE parameters or null, "
                f"got a {type(v).__name__}"
            )
    # a config object's rope_parameters is already merged (transformers did it when it built the object)
    if not rs or rp == rs or (rp and cfg.get(_FROM_OBJECT)):
        return rp or None
    if not rp:
        return None  # the v4 form: rope_scaling alone (read below)
    updated = SCALING_UPDATES.get(model_type)
    if updated is None:
        warnings.warn(replaced_note(rp, rs, cfg, model_type), stacklevel=5)
        return dict(rs)
    if not _is_nested(rp) or any(not isinstance(rp.get(t), dict) for t in updated):
        raise ValueError(
            f"config has rope_scaling={rs!r} and rope_parameters={rp!r}; model_type={model_type!r} merges "
            f"rope_scaling into the rope_parameters entries {list(updated)}, which must be dicts"
        )
    return {**rp, **{t: {**rp[t], **rs} for t in updated}}


def _rope_dict(
    cfg: dict[str, Any], layer_type: str | None, model_type: str, r: _Reader
) -> tuple[dict[str, Any], str]:
    """The rope parameters for one layer type, merged with top-level legacy keys (v5 wins over v4 over legacy), and
    a note naming the legacy alias read (for error messages; "" when none)."""
    rp_all = _rope_parameters(cfg, model_type)
    outer: dict[str, Any] | None = None  # the per-layer-type dict, flat keys beside the entries included
    if rp_all is not None and _is_nested(rp_all):
        outer = rp_all
        if flat_leftovers(rp_all):
            warnings.warn(
                f"config rope_parameters has per-layer-type entries {sorted(layer_type_entries(rp_all) or {})} and "
                f"flat keys {flat_leftovers(rp_all)} beside them; transformers' rotary modules read only the "
                "entries, and so does ropekit (the flat keys are ignored)",
                stacklevel=5,
            )
            rp_all = layer_type_entries(rp_all)
            assert rp_all is not None
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
    elif rp_all is not None:
        rp = dict(rp_all)
        if layer_type is not None:
            raise ValueError(
                f"layer_type={layer_type!r} given but the config has a single set of RoPE parameters"
            )
    else:
        if model_type in PER_LAYER_DEFAULT_FAMILIES:
            raise ValueError(
                f"model_type={model_type!r} config has no rope_parameters: transformers then builds a RoPE per "
                "layer type from its config class's defaults (rotated fractions that differ by layer type), which "
                "ropekit does not reproduce; give rope_parameters per layer type, as the published configs do"
            )
        rp = dict(cfg.get("rope_scaling") or {})
        family = per_layer_family(model_type)
        if family is not None:  # v4 form of a family with a RoPE per layer type, from flat keys
            scaled, thetas = PER_LAYER_TYPE_FAMILIES[family]
            if layer_type not in thetas:
                raise ValueError(
                    f"{family} configs have {' and '.join(thetas)} layers with their own RoPE; pass layer_type=, "
                    f"got {layer_type!r}"
                )
            if layer_type not in scaled:  # e.g. Gemma 3's sliding layers are never scaled (vLLM PR #29111)
                rp = {"rope_type": "default"}
            outer = {}  # transformers builds per-layer-type entries from these keys (no flat keys beside them)
            key, default = thetas[layer_type]
            rp.setdefault("rope_theta", cfg.get(key, default))
        elif layer_type is not None:
            raise ValueError(
                f"layer_type={layer_type!r} given but the config has a single set of RoPE parameters"
            )
    if "type" in rp:
        legacy = rp.pop("type")
        if rp.setdefault("rope_type", legacy) != legacy:
            raise ValueError(f"rope parameters give type={legacy!r} and rope_type={rp['rope_type']!r}")
    rp.setdefault("rope_type", "default")
    if rp["rope_type"] is None:
        raise ValueError(
            f"rope parameter rope_type is null; expected one of {sorted(KNOWN_KEYS)} (or no rope_type: 'default')"
        )
    if not isinstance(rp["rope_type"], str):
        raise ValueError(  # noqa: TRY004 - config values are ValueErrors (the CLI reports them)
            f"rope parameter rope_type={rp['rope_type']!r} must be a string; known: {sorted(KNOWN_KEYS)}"
        )
    neox = NEOX_TYPES.get(model_type)
    # top-level keys, as transformers' convert_rope_params_to_dict sets them (a null rope_theta stays null there)
    for key, legacy_key in (("rope_theta", "rotary_emb_base"), ("partial_rotary_factor", "rotary_pct")):
        top = legacy_key if neox is not None else key  # GPT-NeoX: only its own names count
        # a null is kept where transformers keeps it (it then fails; ropekit refuses it by name)
        if key not in rp and top in cfg and (cfg[top] is not None or key == "rope_theta" or neox is not None):
            rp[key] = cfg[top]
    if "partial_rotary_factor" not in rp:
        if neox is not None and neox != 1.0:
            rp["partial_rotary_factor"] = neox
        elif model_type in ROTARY_DIM_AS_FACTOR and cfg.get("rotary_dim") is not None:  # MiniMax-M2
            rp["partial_rotary_factor"] = _pos_int(cfg["rotary_dim"], "rotary_dim") / _head_dim(cfg)
        elif (
            model_type in DEFAULT_PARTIAL
        ):  # the config class's default (GLM, Phi, StableLM, Qwen3-Next, ...)
            rp["partial_rotary_factor"] = DEFAULT_PARTIAL[model_type]
    # Phi-3 config.json: "su" and "yarn" both mean longrope (transformers converts them when it builds the config
    # object; a yarn set on the object afterwards is yarn to its rotary module, as in its own rope-scaling test)
    legacy = ("su",) if cfg.get(_FROM_OBJECT) else ("su", "yarn")
    note = ""
    if model_type in ("phi3", "phimoe") and rp["rope_type"] in legacy:
        note = f"model_type {model_type!r} reads rope_type {rp['rope_type']!r} as 'longrope', as transformers does"
        rp["rope_type"] = "longrope"
    # HunYuan only (its rotary module: dynamic with a truthy alpha is static NTK-alpha); elsewhere alpha is unknown
    if rp["rope_type"] == "dynamic" and rp.get("alpha") and model_type in NTK_ALPHA_TYPES:
        rp["rope_type"] = "ntk_alpha"
    original_max(rp, cfg, model_type, nested=outer is not None, max_pos=_max_positions(cfg), r=r)
    if outer is not None:
        nested_truncate(rp, outer, str(layer_type), r)
    return rp, note

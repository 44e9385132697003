# SPDX-License-Identifier: MIT
"""Reading the RoPE keys of a transformers config: the merged rope dict of one layer type, checked key by key.

:func:`ropekit.hf.config.spec_from_hf` turns the result into a RopeSpec; this module holds what comes before:

- the config as a dict (a config object's ``to_dict()`` plus the attributes it leaves out) and its head dim
  (``qk_rope_head_dim``, ``head_dim``, or hidden size over heads, also under GPT-J's ``n_embd`` / ``n_head``);
- the rope dict of one layer type, v5 over v4 over legacy spellings (``shared/reference/rope-types.md``
  sections 3-4), and :data:`KNOWN_KEYS`, the keys each ``rope_type`` requires and allows;
- the value checks (finite numbers, bounds, positive integers), strict or warning (:class:`_Reader`), and the
  did-you-mean suggestions for misspelt keys;
- transformers' rules for ``original_max_position_embeddings`` and a per-layer-type YaRN ``truncate``
  (in :mod:`ropekit.hf.config_rules`);
- transformers' partial-rotary expression ``int(head_dim * partial_rotary_factor)`` in both directions
  (moved to :mod:`ropekit.hf.partial_factor`).
"""

from __future__ import annotations

import difflib
import numbers
import warnings
from typing import Any

from ropekit.hf.class_defaults import DEFAULT_HEAD_DIM, DEFAULT_PARTIAL, PER_LAYER_DEFAULT_FAMILIES
from ropekit.hf.config_families import (
    ALLOWED_LAYER_TYPES,
    EXTRA_LAYER_TYPES,
    NEOX_TYPES,
    NTK_ALPHA_TYPES,
    PER_LAYER_TYPE_FAMILIES,
    ROTARY_DIM_AS_FACTOR,
    SCALING_UPDATES,
    per_layer_family,
)
from ropekit.hf.config_rules import nested_truncate, original_max
from ropekit.integers import INT64_SPAN, as_int, as_real, past_float64, shown

__all__ = ["KNOWN_KEYS", "TOP_LEVEL_ROPE_KEYS", "check_top_level_keys"]

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


def _pos_int(v: Any, name: str) -> int:
    """``v`` as a positive integer, or ValueError naming ``name`` and the value.

    Ints only (numpy integers too, bool refused): transformers 5.23's config classes are strict dataclasses whose
    ``head_dim`` / ``max_position_embeddings`` / ``qk_rope_head_dim`` fields refuse a float, even 4096.0, and a str.
    """
    if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 1:
        kind = "null" if v is None else f"a {type(v).__name__}"
        if isinstance(v, numbers.Integral) and not isinstance(v, bool):
            kind = f"{v} (< 1)"
        raise ValueError(
            f"config {name}={v!r} must be a positive integer, got {kind}"
            + (
                " (transformers' config classes refuse a float here too; write it as an int)"
                if isinstance(v, float)
                else ""
            )
        )
    return int(v)


def _max_positions(cfg: dict[str, Any]) -> int | None:
    """The config's ``max_position_embeddings`` (None when absent or null), checked as :func:`_pos_int` does."""
    v = cfg.get("max_position_embeddings")
    return None if v is None else _pos_int(v, "max_position_embeddings")


#: GPT-2-style names of the config keys the head dim is read from (GPT-J and CodeGen configs, their config.json
#: and their config objects' ``to_dict()``, spell them this way; transformers maps them with ``attribute_map``)
_LEGACY_NAMES = {"hidden_size": "n_embd", "num_attention_heads": "n_head"}


def _config_int(cfg: dict[str, Any], key: str) -> tuple[str, int] | None:
    """(the name the config uses, its value) for ``key`` or its GPT-2-style name; None when neither is set."""
    for name in (key, _LEGACY_NAMES.get(key)):
        if name is not None and cfg.get(name) is not None:
            return name, _pos_int(cfg[name], name)
    return None


def _head_dim(cfg: dict[str, Any]) -> int:
    for key in ("qk_rope_head_dim", "head_dim"):
        if cfg.get(key) is not None:
            return _pos_int(cfg[key], key)
    fixed = DEFAULT_HEAD_DIM.get(str(cfg.get("model_type")))
    if (
        fixed is not None and "head_dim" not in cfg
    ):  # transformers' class default (an explicit null computes it)
        return fixed
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


def _unknown_note(unknown: list[str], known: set[str]) -> str:
    return f"; unknown keys {unknown}{_did_you_mean(unknown, known)}" if unknown else ""


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
        warnings.warn(
            f"config has both rope_parameters={rp!r} and rope_scaling={rs!r}: transformers uses rope_scaling and "
            "drops rope_parameters (its rope_theta too); so does ropekit. Remove one of them",
            stacklevel=5,
        )
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


def _num(
    r: _Reader, rp: dict[str, Any], key: str, *, lo: float | None = None, lo_open: bool = False
) -> float:
    v = rp[key]
    if v is None:
        raise ValueError(f"rope parameter {key} is null; expected a finite number")
    x = as_real(v)  # numpy scalars too (a config built from arrays); a bool or an int past float64 is refused
    if x is None:
        raise ValueError(f"rope parameter {key} must be a finite number{past_float64(v)}, got {shown(v)}")
    if lo is not None and (x <= lo if lo_open else x < lo):
        r.problem(f"rope parameter {key}={shown(v)} must be {'>' if lo_open else '>='} {lo:g}")
    return x


def _int(rp: dict[str, Any], key: str) -> int:
    v = rp[key]
    if v is None:
        raise ValueError(f"rope parameter {key} is null; expected a positive integer")
    n = as_int(v)
    if n is None:  # an integral float (8192.0) is an integer here, as transformers reads it
        x = as_real(v)
        n = int(x) if x is not None and x.is_integer() else None
    if n is None or n < 1:
        raise ValueError(f"rope parameter {key} must be a positive integer, got {shown(v)}")
    if n > INT64_SPAN:
        raise ValueError(
            f"rope parameter {key} must be a positive integer of at most 2**63 (a context length: positions "
            f"are int64), got {shown(v)}"
        )
    return n


def _factors(rp: dict[str, Any], key: str) -> tuple[float, ...]:
    """LongRoPE's ``short_factor`` / ``long_factor``: a list of finite numbers (its length is checked later)."""
    v = rp[key]
    vals = [as_real(x) for x in v] if isinstance(v, (list, tuple)) else [None]
    if any(x is None for x in vals):
        raise ValueError(f"rope parameter {key} must be a list of finite numbers, got {shown(v, 400)}")
    return tuple(x for x in vals if x is not None)

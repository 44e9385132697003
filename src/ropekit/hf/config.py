# SPDX-License-Identifier: MIT
"""Hugging Face configs -> RopeSpec and back: one parser for every schema and legacy spelling.

Reads a transformers config object or a config.json dict (``shared/reference/rope-types.md`` sections 3-4):

- v5 ``rope_parameters`` (flat, or nested per layer type: pick one with ``layer_type``; ``layer_type`` for a
  config with one set of parameters is refused), v4 ``rope_scaling`` plus top-level ``rope_theta`` /
  ``partial_rotary_factor`` / ``head_dim``; both ``rope_parameters`` and a non-empty ``rope_scaling``: merged as
  transformers' config classes merge them (``rope_scaling`` replaces ``rope_parameters``, with a warning; Gemma
  3-style families update their full-attention entry with it);
- legacy names, each only for the families whose transformers code reads it: ``type`` for ``rope_type``;
  GPT-NeoX ``rotary_pct`` / ``rotary_emb_base`` (gpt_neox, gpt_neox_japanese, which ignore the top-level
  ``rope_theta`` / ``partial_rotary_factor``); ``rotary_dim`` (gptj and codegen: the rotary dim, default 64;
  minimax_m2: ``rotary_dim / head_dim``; every other family ignores it); Phi-3 ``su``/``yarn`` meaning longrope
  with a top-level ``original_max_position_embeddings``; Gemma 3 ``rope_local_base_freq`` (sliding layers, never
  scaled); DeepSeek ``qk_rope_head_dim``; HunYuan ``dynamic`` + ``alpha`` (static NTK-alpha; only for the HunYuan
  families: elsewhere ``alpha`` is an unknown key for ``dynamic``);
- ``original_max_position_embeddings`` of llama3 / yarn / longrope as transformers' ``standardize_rope_params`` sets
  it (:func:`ropekit.hf.config_rules.original_max`: a top-level value wins in flat rope parameters, with a warning
  when it differs; per-layer-type entries never read it), and a per-layer-type YaRN entry's ``truncate`` as
  transformers computes it (the outer dict's, :func:`ropekit.hf.config_rules.nested_truncate`).

The rotary dim is transformers' own ``int(head_dim * partial_rotary_factor)`` (p-RoPE: ``int(factor * head_dim //
2)`` bands), not a rounded one; an odd or zero result is refused. ``to_hf`` writes a factor that expression maps
back exactly.

Strict by default: what transformers only warns about (unknown keys, factor < 1, beta_fast < beta_slow, missing
required keys, wrong list lengths, non-finite values) raises ``ValueError`` naming the key and value, and so does
a top-level key that is a near-miss of a RoPE key ropekit reads (``rope_scalling``: transformers ignores it
silently, so the model loads with a different RoPE; :func:`ropekit.hf.config_top_keys.check_top_level_keys`);
``strict=False`` accepts what transformers accepts, with a warning (a missing ``original_max_position_embeddings``
is filled from ``max_position_embeddings``, as transformers does); a strict refusal of that kind is a
:class:`~ropekit.hf.config_values.StrictRefusal` (a ValueError), and :func:`lenient_reading` makes every read in a
block lenient (the CLI's ``--lenient``). What transformers refuses or fails on, and
values from which no frequency table can be computed (a zero factor, a zero LongRoPE entry, a negative YaRN beta,
...), are refused in both modes, naming the key: a non-dict ``rope_parameters`` / ``rope_scaling``, a null value,
``head_dim`` / ``max_position_embeddings`` / ``qk_rope_head_dim`` that are not ints (4096.0 included: its config
classes refuse floats), unknown ``layer_types`` entries, a Gemma 3 ``sliding_window_pattern`` below 1. A dataclass's
error (``RopeSpec.base must be ...``) is re-raised naming the config key and value it comes from.

The keys are read and checked in :mod:`ropekit.hf.config_keys` (the rope dict of one layer type, the keys
each ``rope_type`` takes), :mod:`ropekit.hf.config_values` (each value, the did-you-mean suggestions) and
:mod:`ropekit.hf.config_top_keys` (near-miss top-level keys, ``layer_types``); this module turns them into a
RopeSpec (the rotary dim, the layout), with the scaling scheme from :mod:`ropekit.hf.config_scaling`. Writing a
spec back (:func:`spec_to_hf`) is :mod:`ropekit.hf.config_write`'s, re-exported here.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from ropekit.hf.config_families import LONGROPE_MSCALE_TYPES, ROTARY_DIM_TYPES
from ropekit.hf.config_keys import _COMMON, KNOWN_KEYS, _rope_dict
from ropekit.hf.config_rules import check_computable, config_errors
from ropekit.hf.config_scaling import _scaling
from ropekit.hf.config_top_keys import check_layer_types, check_top_level_keys
from ropekit.hf.config_values import (
    StrictRefusal,
    _as_dict,
    _did_you_mean,
    _head_dim,
    _max_positions,
    _num,
    _pos_int,
    _Reader,
    _unknown_note,
)
from ropekit.hf.config_write import spec_to_hf
from ropekit.hf.default_theta import DEFAULT_THETA
from ropekit.hf.partial_factor import _hf_kept_bands, _hf_proportional_factor, _hf_rotary_dim
from ropekit.spec import RopeSpec

__all__ = [
    "INTERLEAVED_MODEL_TYPES",
    "KNOWN_KEYS",
    "StrictRefusal",
    "lenient_reading",
    "spec_from_hf",
    "spec_to_hf",
]

#: Families whose q/k weights pair channels (2i, 2i+1) (rope-types.md 5.2); all others use the half split.
INTERLEAVED_MODEL_TYPES = frozenset(
    {
        "gptj",
        "codegen",
        "cohere",
        "cohere2",
        "glm",
        "glm4",
        "helium",
        "ernie4_5",
        "ernie4_5_moe",
        "moonshine",
        "deepseek_v2",
        "deepseek_v3",
        "llama4",
        "llama4_text",
    }
)
#: top-level keys only some families read (:mod:`ropekit.hf.config_keys`): a config without model_type is ambiguous
_FAMILY_KEYS = ("rotary_dim", "rotary_pct", "rotary_emb_base")
_FAMILY_KEYS_NOTE = (
    "rotary_dim: gptj, codegen, minimax_m2; rotary_pct, rotary_emb_base: gpt_neox, gpt_neox_japanese"
)
#: set while :func:`spec_from_hf` parses a config, so that the VL parser's call back for the text part does not
#: report (or warn about) the same top-level keys twice
_KEYS_CHECKED: ContextVar[bool] = ContextVar("ropekit_hf_keys_checked", default=False)
#: set inside :func:`lenient_reading`: every :func:`spec_from_hf` call reads as with ``strict=False``
_LENIENT: ContextVar[bool] = ContextVar("ropekit_hf_lenient", default=False)


@contextmanager
def lenient_reading() -> Iterator[None]:
    """Within the block, every :func:`spec_from_hf` call (``RopeSpec.from_hf`` too, from any caller) reads as with
    ``strict=False``: what transformers accepts with a warning is accepted with a warning, not refused.

    For callers that reach the parser through code without a ``strict`` argument (the CLI's ``--lenient``: its
    layer views call ``RopeSpec.from_hf(config)``). Scoped to the current thread / task (a ContextVar).
    """
    token = _LENIENT.set(True)
    try:
        yield
    finally:
        _LENIENT.reset(token)


def spec_from_hf(
    config: Any, *, layer_type: str | None = None, strict: bool = True, layout: str | None = None
) -> RopeSpec:
    """Build a RopeSpec from a transformers config (object or config.json dict). See the module docstring."""
    if not isinstance(strict, bool):
        raise ValueError(f"strict={strict!r} must be True or False")  # noqa: TRY004 - as schema=: a ValueError
    strict = strict and not _LENIENT.get()
    r = _Reader(strict)
    cfg = _as_dict(config)
    from ropekit.hf.config_vl import is_vl_config, spec_from_hf_vl

    if not _KEYS_CHECKED.get():  # not for the VL parser's call with the text part: the outer call checked it
        check_top_level_keys(cfg, r)
        if isinstance(cfg.get("text_config"), dict):
            check_top_level_keys(cfg["text_config"], r, "config text_config")
    token = _KEYS_CHECKED.set(True)
    try:
        model_type = str(cfg.get("model_type") or "")
        check_layer_types(cfg, model_type)
        # a float, str or bool max_position_embeddings is refused, as transformers' config classes refuse it
        _max_positions(cfg)

        # VL (M-RoPE) configs are parsed in hf/config_vl.py

        if is_vl_config(cfg):
            if layer_type is not None:
                raise ValueError(f"layer_type={layer_type!r} given but VL text decoders have a single RoPE")
            return spec_from_hf_vl(cfg, strict=strict, layout=layout, problem=r.problem)
        if not model_type:
            legacy = [f"{k}={cfg[k]!r}" for k in _FAMILY_KEYS if cfg.get(k) is not None]
            if legacy:
                r.problem(
                    f"config has {', '.join(legacy)} but no model_type: transformers reads these only for their families "
                    f"({_FAMILY_KEYS_NOTE}) and ignores them elsewhere, as ropekit then does; set model_type"
                )
        H = _head_dim(cfg)
        rp, note = _rope_dict(cfg, layer_type, model_type, r)
        with config_errors(rp, cfg, note):
            spec = _spec(r, rp, cfg, model_type, H, layout)
        if not r.strict:  # strict mode's range checks already keep every value computable
            check_computable(spec, rp)
        return spec
    finally:
        _KEYS_CHECKED.reset(token)


def _spec(
    r: _Reader, rp: dict[str, Any], cfg: dict[str, Any], model_type: str, H: int, layout: str | None
) -> RopeSpec:
    """The RopeSpec of one merged rope dict (:func:`spec_from_hf` after the keys are gathered)."""
    t = rp["rope_type"]
    if t not in KNOWN_KEYS:
        raise ValueError(f"unknown rope_type {t!r}; known: {sorted(KNOWN_KEYS)}")
    required, optional = KNOWN_KEYS[t]
    known = _COMMON | required | optional
    if (
        t == "longrope" and model_type in LONGROPE_MSCALE_TYPES
    ):  # Phi-MoE's cos / sin multipliers (config_scaling)
        known = known | {"short_mscale", "long_mscale"}
    null = sorted(k for k in required | {"rope_theta", "partial_rotary_factor"} if k in rp and rp[k] is None)
    if t == "yarn" and null == ["factor"]:  # transformers derives it (its DeepSeek-V3 note); read in _scaling
        null = []
    if null:  # transformers keeps a null and fails on it (or warns and then fails)
        raise ValueError(
            f"rope parameter {null[0]} is null (rope_type {t!r}); expected a value"
            + (" (or leave the key out)" if null[0] not in required else "")
        )
    missing = sorted(k for k in required if k not in rp)
    unknown = sorted(set(rp) - known)
    if missing:
        if t == "proportional" and missing == ["partial_rotary_factor"] and not unknown:
            r.problem("rope_type 'proportional' without partial_rotary_factor is plain RoPE; set the factor")
            rp["partial_rotary_factor"] = 1.0
        else:  # a misspelt required key is both missing and unknown: say both, with the likely spelling
            mp = cfg.get("max_position_embeddings")
            fill = (
                f" (transformers fills original_max_position_embeddings with max_position_embeddings={mp}; "
                "strict=False does too, with a warning)"
                if "original_max_position_embeddings" in missing and mp is not None
                else ""
            )
            # with the fill, strict=False reads it: a strict refusal (the CLI says --lenient reads it)
            raise (StrictRefusal if fill else ValueError)(
                f"rope_type {t!r} requires {missing}; got keys {sorted(rp)}{_unknown_note(unknown, known)}{fill}"
            )
    if unknown:
        r.problem(
            f"unknown keys {unknown} for rope_type {t!r}; known: {sorted(known)}{_did_you_mean(unknown, known)}"
        )
    base = _num(r, rp, "rope_theta") if "rope_theta" in rp else DEFAULT_THETA.get(model_type, 10_000.0)
    prf = _num(r, rp, "partial_rotary_factor", lo=0.0, lo_open=True) if "partial_rotary_factor" in rp else 1.0
    if prf > 1.0:
        raise ValueError(f"rope parameter partial_rotary_factor={prf!r} must be in (0, 1]")
    scaling = _scaling(r, t, rp, cfg, model_type)
    if layout is None:
        layout = "interleaved" if model_type in INTERLEAVED_MODEL_TYPES else "half"
    if t == "proportional":  # whole head, exponent over H, the tail frequencies zeroed
        return RopeSpec(head_dim=H, base=base, layout=layout, p=_proportional_p(H, prf), scaling=scaling)  # type: ignore[arg-type]
    if model_type in ROTARY_DIM_TYPES:  # GPT-J / CodeGen: rotary_dim itself (their config's default 64)
        rotary_dim = _pos_int(cfg.get("rotary_dim", 64), "rotary_dim")
        if base != 10_000.0 or scaling is not None:
            # their attention builds its table with base 10000 and nothing else (create_sinusoidal_positions)
            warnings.warn(
                f"{model_type}: transformers' attention rotates with base 10000 and no scaling whatever the config "
                f"says (rope_theta={base:g}, rope_type={t!r} are ignored there); ropekit reads it the same way",
                stacklevel=4,
            )
            base, scaling = 10_000.0, None
    else:
        rotary_dim = _hf_rotary_dim(H, prf)
        if rotary_dim % 2 or rotary_dim < 2:
            raise ValueError(
                f"rope parameter partial_rotary_factor={prf!r} rotates int({H} * {prf!r}) = {rotary_dim} channels "
                f"of head_dim={H} (transformers' expression); ropekit needs an even number >= 2"
            )
    return RopeSpec(head_dim=H, base=base, rotary_dim=rotary_dim, layout=layout, scaling=scaling)  # type: ignore[arg-type]


def _proportional_p(head_dim: int, prf: float) -> float:
    """The RopeSpec ``p`` that keeps the bands transformers' 'proportional' RoPE keeps, ``int(prf * H // 2)``."""
    kept, n = _hf_kept_bands(head_dim, prf), head_dim // 2
    if kept < 1:
        raise ValueError(
            f"rope parameter partial_rotary_factor={prf!r} keeps int({prf!r} * {head_dim} // 2) = 0 bands of "
            f"head_dim={head_dim} (transformers' 'proportional' expression); expected at least one"
        )
    # ropekit's p keeps floor(p * n) bands (with a 1e-9 guard); kept / n keeps exactly `kept`. It is also what
    # to_hf() writes (nudged up to a float transformers maps to `kept`): reading that back gives kept / n again
    canonical = kept / n
    if prf == _hf_proportional_factor(head_dim, kept, canonical):
        return canonical
    return prf if RopeSpec(head_dim=head_dim, p=prf).n_positional_bands == kept else canonical

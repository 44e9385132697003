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
silently, so the model loads with a different RoPE; :func:`ropekit.hf.config_keys.check_top_level_keys`);
``strict=False`` accepts what transformers accepts, with a warning (a missing ``original_max_position_embeddings``
is filled from ``max_position_embeddings``, as transformers does). What transformers refuses or fails on, and
values from which no frequency table can be computed (a zero factor, a zero LongRoPE entry, a negative YaRN beta,
...), are refused in both modes, naming the key: a non-dict ``rope_parameters`` / ``rope_scaling``, a null value,
``head_dim`` / ``max_position_embeddings`` / ``qk_rope_head_dim`` that are not ints (4096.0 included: its config
classes refuse floats), unknown ``layer_types`` entries, a Gemma 3 ``sliding_window_pattern`` below 1. A dataclass's
error (``RopeSpec.base must be ...``) is re-raised naming the config key and value it comes from.

The keys are read and checked in :mod:`ropekit.hf.config_keys` (the rope dict of one layer type, the keys
each ``rope_type`` takes, the did-you-mean suggestions); this module turns them into a RopeSpec (the scaling
scheme, the rotary dim, the layout) and writes a spec back (:func:`spec_to_hf`).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any, Literal

from ropekit.hf.config_families import ROTARY_DIM_TYPES
from ropekit.hf.config_keys import (
    _COMMON,
    KNOWN_KEYS,
    _as_dict,
    _did_you_mean,
    _factors,
    _head_dim,
    _int,
    _max_positions,
    _num,
    _pos_int,
    _Reader,
    _rope_dict,
    _unknown_note,
    check_layer_types,
    check_top_level_keys,
)
from ropekit.hf.config_rules import check_computable, config_errors, refuse
from ropekit.hf.config_v4 import check_schema, spec_to_hf_v4
from ropekit.hf.default_theta import DEFAULT_THETA
from ropekit.hf.partial_factor import (
    _hf_kept_bands,
    _hf_partial_factor,
    _hf_proportional_factor,
    _hf_rotary_dim,
)
from ropekit.integers import as_real
from ropekit.scaling import NTK, DynamicNTK, Linear, Llama3, LongRope, Scaling, Yarn
from ropekit.scaling.base import unchecked
from ropekit.spec import RopeSpec

__all__ = ["INTERLEAVED_MODEL_TYPES", "KNOWN_KEYS", "spec_from_hf", "spec_to_hf"]

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
_MLA_TYPES = {"deepseek_v2", "deepseek_v3", "deepseek_v32", "kimi_k2", "glm4_moe_lite", "mistral4"}


def _computable(rp: dict[str, Any], key: str, bad: Callable[[float], bool], why: str) -> None:
    """Refuse (both modes) a number ``rp[key]`` for which ``bad`` holds: no frequency table comes from it."""
    v = rp.get(key)
    x = as_real(v)  # numpy scalars too; anything else is refused by name later
    refuse(not (x is not None and bad(x)), key, v, why)


_INF = "it divides the frequencies by zero (infinite frequencies); expected a number >= 1"


def _scaling(r: _Reader, t: str, rp: dict[str, Any], cfg: dict[str, Any], model_type: str) -> Scaling | None:
    def mk(cls: type[Scaling], **kw: Any) -> Scaling:
        return cls(**kw) if r.strict else unchecked(cls, **kw)

    max_pos = _max_positions(cfg)
    if t in ("linear", "proportional", "yarn", "llama3"):
        _computable(rp, "factor", lambda v: v == 0, _INF)
    if t in ("default", "proportional"):
        if t == "proportional" and "factor" in rp:  # Linear(1.0) too: from_hf(spec.to_hf()) == spec
            return mk(Linear, factor=_num(r, rp, "factor", lo=1.0))
        return None
    if t == "linear":
        return mk(Linear, factor=_num(r, rp, "factor", lo=1.0))
    if t in ("ntk", "ntk_alpha"):
        key = "factor" if t == "ntk" else "alpha"
        why = f"the base is multiplied by {key} ** (d / (d - 2)), 0 or not a real number; expected a number >= 1"
        _computable(rp, key, lambda v: v <= 0, why)
    if t == "ntk":
        return mk(NTK, factor=_num(r, rp, "factor", lo=1.0))
    if t == "ntk_alpha":
        if rp.get("factor", 1.0) != 1.0:
            r.problem(
                f"rope parameter factor={rp['factor']!r} beside alpha is ignored by transformers; expected 1.0"
            )
        return mk(NTK, alpha=_num(r, rp, "alpha", lo=1.0))
    if t == "dynamic":
        if max_pos is None:
            raise ValueError("rope_type 'dynamic' needs the config's max_position_embeddings")
        why = "the base is multiplied by (factor * L / max - factor + 1) ** (d / (d - 2)), not a real number past "
        _computable(
            rp, "factor", lambda v: v < 0, why + "a length where it is negative; expected a number >= 1"
        )
        return mk(DynamicNTK, factor=_num(r, rp, "factor", lo=1.0), max_position_embeddings=max_pos)
    if t == "yarn":
        L0 = _int(rp, "original_max_position_embeddings")
        if rp["factor"] is None:  # transformers: max_position_embeddings / original_max_position_embeddings
            if max_pos is None:
                raise ValueError(
                    "rope parameter factor is null (rope_type 'yarn') and the config has no "
                    "max_position_embeddings to derive it from; expected a number"
                )
            r.problem(
                f"rope parameter factor is null (rope_type 'yarn'); transformers then uses max_position_embeddings"
                f" / original_max_position_embeddings = {max_pos}/{L0}"
            )
            rp = {**rp, "factor": max_pos / L0}
        factor = _num(r, rp, "factor", lo=1.0)
        betas = {}
        for key, default in (("beta_fast", 32.0), ("beta_slow", 1.0)):
            why = "YaRN takes the log of L0 / (2 pi beta) (transformers fails too); expected a number > 0"
            _computable(rp, key, lambda v: v < 0, why)
            v = rp.get(key)
            if v is not None:
                v = _num(r, rp, key)
                if v == 0:
                    r.problem(f"rope parameter {key}=0 is invalid (transformers silently uses {default:g})")
                    v = default
            betas[key] = default if v is None else v
        if betas["beta_fast"] < betas["beta_slow"]:
            r.problem(
                f"rope parameter beta_fast={betas['beta_fast']!r} must be >= beta_slow={betas['beta_slow']!r}"
            )
        if max_pos is not None and max_pos / L0 not in (factor, 1.0):
            warnings.warn(
                f"yarn factor {factor:g} differs from max_position_embeddings / original_max_position_embeddings = "
                f"{max_pos}/{L0}; using the explicit factor",
                stacklevel=4,
            )
        kw: dict[str, Any] = dict(factor=factor, original_max_position_embeddings=L0, **betas)
        for key in ("mscale", "mscale_all_dim"):
            if rp.get(key) is not None:
                kw[key] = _num(r, rp, key, lo=0.0)
        if rp.get("attention_factor") is not None:
            kw["attention_factor_"] = _num(r, rp, "attention_factor", lo=0.0, lo_open=True)
        if "truncate" in rp:
            if not isinstance(rp["truncate"], bool):
                raise ValueError(f"rope parameter truncate must be true or false, got {rp['truncate']!r}")
            kw["truncate"] = rp["truncate"]
        with warnings.catch_warnings():
            if model_type in _MLA_TYPES:  # mscale == mscale_all_dim is right for MLA attention
                warnings.simplefilter("ignore")
            return mk(Yarn, **kw)
    if t == "longrope":
        for key in ("short_factor", "long_factor"):
            vals = _factors(rp, key)
            if 0 in vals:
                raise ValueError(
                    f"rope parameter {key} has a zero entry (index {vals.index(0)} of {len(vals)}), which divides "
                    "its band's frequency by zero (an infinite frequency); expected numbers > 0"
                )
            bad = [(i, x) for i, x in enumerate(vals) if x < 0]
            if bad:
                r.problem(
                    f"rope parameter {key} has {len(bad)} entries < 0 (index {bad[0][0]}: {bad[0][1]!r}) of "
                    f"{len(vals)}; expected numbers > 0"
                )
        kw = {
            "short_factor": _factors(rp, "short_factor"),
            "long_factor": _factors(rp, "long_factor"),
            "original_max_position_embeddings": _int(rp, "original_max_position_embeddings"),
            "max_position_embeddings": max_pos,
        }
        if rp.get("factor") is not None:
            kw["factor"] = _num(r, rp, "factor", lo=1.0)
        if rp.get("attention_factor") is not None:
            kw["attention_factor_"] = _num(r, rp, "attention_factor", lo=0.0, lo_open=True)
        return LongRope(**kw) if r.strict else unchecked(LongRope, **kw)
    if t == "llama3":
        L0 = _int(rp, "original_max_position_embeddings")
        if max_pos is not None and L0 >= max_pos:
            r.problem(
                f"llama3 original_max_position_embeddings={L0} must be < max_position_embeddings={max_pos}"
            )
        for key in ("low_freq_factor", "high_freq_factor"):
            why = (
                "llama3 divides original_max_position_embeddings by it (transformers fails too); expected > 0"
            )
            _computable(rp, key, lambda v: v == 0, why)
        lo, hi = (
            _num(r, rp, "low_freq_factor", lo=0, lo_open=True),
            _num(r, rp, "high_freq_factor", lo=0, lo_open=True),
        )
        if hi <= lo:
            r.problem(f"llama3 high_freq_factor={hi!r} must be > low_freq_factor={lo!r}")
        return mk(
            Llama3,
            factor=_num(r, rp, "factor", lo=1.0),
            low_freq_factor=lo,
            high_freq_factor=hi,
            original_max_position_embeddings=L0,
        )
    raise AssertionError(t)  # pragma: no cover - unknown types are refused earlier


def spec_from_hf(
    config: Any, *, layer_type: str | None = None, strict: bool = True, layout: str | None = None
) -> RopeSpec:
    """Build a RopeSpec from a transformers config (object or config.json dict). See the module docstring."""
    if not isinstance(strict, bool):
        raise ValueError(f"strict={strict!r} must be True or False")  # noqa: TRY004 - as schema=: a ValueError
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
            raise ValueError(
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


def spec_to_hf(spec: RopeSpec, schema: Literal["v5", "v4"] = "v5") -> dict[str, Any]:
    """The config fragment of a spec in transformers' v5 (default) or v4 schema.

    - ``schema="v5"``: ``{"head_dim", "rope_parameters", ["max_position_embeddings"]}``.
    - ``schema="v4"``: ``{"head_dim", "rope_theta", "rope_scaling", ["partial_rotary_factor"],
      ["max_position_embeddings"], ["original_max_position_embeddings"]}`` as transformers 4.x configs carry
      it: ``rope_scaling`` is None for plain RoPE, else the scheme's keys with ``rope_type``; LongRoPE is written
      as Phi-3's v4 config (``{"type": "longrope", "short_factor", "long_factor"}``, the original length at the
      top level, where v4 read it).

    The layout is a property of the model family, not of the config: pass ``layout=`` back to ``from_hf``.

    Raises:
        ValueError: for a bad ``schema``; for specs transformers cannot express (explicit freqs; p-RoPE with
            partial rotation or with a scheme other than Linear; in v4 also any p-RoPE, static NTK, and LongRoPE
            whose factor differs from ``max_position_embeddings / original_max_position_embeddings`` without an
            explicit attention factor).
    """
    check_schema(schema)
    if spec.axes is not None:  # multi-axis (M-RoPE): ropekit.hf.config_vl
        from ropekit.hf.config_vl import spec_to_hf_vl

        return spec_to_hf_vl(spec, schema=schema)
    if spec.freqs is not None:
        raise ValueError("a spec with an explicit freqs table has no transformers rope_parameters equivalent")
    if schema == "v4":
        return spec_to_hf_v4(spec)
    rp: dict[str, Any] = {"rope_theta": spec.base}
    out: dict[str, Any] = {"head_dim": spec.head_dim}
    sc = spec.scaling
    if spec.p < 1.0:
        if spec.rotary_dim != spec.head_dim or not (sc is None or isinstance(sc, Linear)):
            raise ValueError(
                "p-RoPE maps to HF 'proportional' only over the whole head and with at most a Linear factor"
            )
        kept = spec.n_positional_bands  # a factor transformers' int(factor * H // 2) maps to the same bands
        rp.update(
            rope_type="proportional",
            partial_rotary_factor=_hf_proportional_factor(spec.head_dim, kept, spec.p),
        )
        if sc is not None:
            rp["factor"] = sc.factor
    else:
        rp.update(sc.to_hf() if sc is not None else {"rope_type": "default"})
        if spec.rotary_dim != spec.head_dim:
            # one transformers' int(head_dim * factor) maps back to rotary_dim (rotary_dim / head_dim may floor below)
            rp["partial_rotary_factor"] = _hf_partial_factor(spec.head_dim, spec.rotary_dim)  # type: ignore[arg-type]
    if isinstance(sc, DynamicNTK):
        out["max_position_embeddings"] = sc.max_position_embeddings
    if isinstance(sc, LongRope) and sc.max_position_embeddings is not None:
        out["max_position_embeddings"] = sc.max_position_embeddings
    out["rope_parameters"] = rp
    return out

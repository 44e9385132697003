# SPDX-License-Identifier: MIT
"""Hugging Face configs -> RopeSpec and back: one parser for every schema and legacy spelling.

Reads a transformers config object or a config.json dict (``shared/reference/rope-types.md`` sections 3-4):

- v5 ``rope_parameters`` (flat, or nested per layer type: pick one with ``layer_type``), v4 ``rope_scaling`` plus
  top-level ``rope_theta`` / ``partial_rotary_factor`` / ``head_dim``;
- legacy names: ``type`` for ``rope_type``; GPT-NeoX ``rotary_pct`` / ``rotary_emb_base``; GPT-J/CodeGen/MiniMax
  ``rotary_dim``; Phi-3 ``su``/``yarn`` meaning longrope with a top-level ``original_max_position_embeddings``;
  Gemma 3 ``rope_local_base_freq`` (sliding layers, never scaled); DeepSeek ``qk_rope_head_dim``; HunYuan
  ``dynamic`` + ``alpha`` (static NTK-alpha).

Strict by default: what transformers only warns about (unknown keys, factor < 1, beta_fast < beta_slow, missing
required keys, wrong list lengths, non-finite values) raises ``ValueError`` naming the key and value;
``strict=False`` accepts what transformers accepts, with a warning.

The keys are read and checked in :mod:`ropekit.hf.config_keys` (the rope dict of one layer type, the keys
each ``rope_type`` takes, the did-you-mean suggestions); this module turns them into a RopeSpec (the scaling
scheme, the rotary dim, the layout) and writes a spec back (:func:`spec_to_hf`).
"""

from __future__ import annotations

import warnings
from typing import Any, Literal

from ropekit.hf.config_keys import (
    _COMMON,
    KNOWN_KEYS,
    _as_dict,
    _did_you_mean,
    _head_dim,
    _int,
    _num,
    _Reader,
    _rope_dict,
    _unknown_note,
)
from ropekit.hf.config_v4 import check_schema, spec_to_hf_v4
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
_MLA_TYPES = {"deepseek_v2", "deepseek_v3", "deepseek_v32", "kimi_k2", "glm4_moe_lite", "mistral4"}


def _scaling(r: _Reader, t: str, rp: dict[str, Any], cfg: dict[str, Any], model_type: str) -> Scaling | None:
    def mk(cls: type[Scaling], **kw: Any) -> Scaling:
        return cls(**kw) if r.strict else unchecked(cls, **kw)

    max_pos = cfg.get("max_position_embeddings")
    if t in ("default", "proportional"):
        if t == "proportional" and rp.get("factor", 1.0) != 1.0:
            return mk(Linear, factor=_num(r, rp, "factor", lo=1.0))
        return None
    if t == "linear":
        return mk(Linear, factor=_num(r, rp, "factor", lo=1.0))
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
        return mk(DynamicNTK, factor=_num(r, rp, "factor", lo=1.0), max_position_embeddings=int(max_pos))
    if t == "yarn":
        factor, L0 = _num(r, rp, "factor", lo=1.0), _int(rp, "original_max_position_embeddings")
        betas = {}
        for key, default in (("beta_fast", 32.0), ("beta_slow", 1.0)):
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
                stacklevel=3,
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
        kw = {
            "short_factor": tuple(rp["short_factor"]),
            "long_factor": tuple(rp["long_factor"]),
            "original_max_position_embeddings": _int(rp, "original_max_position_embeddings"),
            "max_position_embeddings": None if max_pos is None else int(max_pos),
        }
        if rp.get("factor") is not None:
            kw["factor"] = _num(r, rp, "factor", lo=1.0)
        if rp.get("attention_factor") is not None:
            kw["attention_factor_"] = _num(r, rp, "attention_factor", lo=0.0)
        return LongRope(**kw) if r.strict else unchecked(LongRope, **kw)
    if t == "llama3":
        L0 = _int(rp, "original_max_position_embeddings")
        if max_pos is not None and L0 >= max_pos:
            r.problem(
                f"llama3 original_max_position_embeddings={L0} must be < max_position_embeddings={max_pos}"
            )
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
    r = _Reader(strict)
    cfg = _as_dict(config)
    from ropekit.hf.config_vl import is_vl_config, spec_from_hf_vl

    # VL (M-RoPE) configs are parsed in hf/config_vl.py

    if is_vl_config(cfg):
        if layer_type is not None:
            raise ValueError(f"layer_type={layer_type!r} given but VL text decoders have a single RoPE")
        return spec_from_hf_vl(cfg, strict=strict, layout=layout, problem=r.problem)
    model_type = str(cfg.get("model_type") or "")
    H = _head_dim(cfg)
    rp = _rope_dict(cfg, layer_type, model_type)
    t = rp["rope_type"]
    if t not in KNOWN_KEYS:
        raise ValueError(f"unknown rope_type {t!r}; known: {sorted(KNOWN_KEYS)}")
    required, optional = KNOWN_KEYS[t]
    known = _COMMON | required | optional
    missing = sorted(k for k in required if rp.get(k) is None)
    unknown = sorted(set(rp) - known)
    if missing:
        if t == "proportional" and missing == ["partial_rotary_factor"] and not unknown:
            r.problem("rope_type 'proportional' without partial_rotary_factor is plain RoPE; set the factor")
            rp["partial_rotary_factor"] = 1.0
        else:  # a misspelt required key is both missing and unknown: say both, with the likely spelling
            raise ValueError(
                f"rope_type {t!r} requires {missing}; got keys {sorted(rp)}{_unknown_note(unknown, known)}"
            )
    if unknown:
        r.problem(
            f"unknown keys {unknown} for rope_type {t!r}; known: {sorted(known)}{_did_you_mean(unknown, known)}"
        )
    base = _num(r, rp, "rope_theta") if rp.get("rope_theta") is not None else 10_000.0
    prf = (
        _num(r, rp, "partial_rotary_factor", lo=0.0, lo_open=True)
        if rp.get("partial_rotary_factor") is not None
        else 1.0
    )
    if prf > 1.0:
        raise ValueError(f"rope parameter partial_rotary_factor={prf!r} must be in (0, 1]")
    scaling = _scaling(r, t, rp, cfg, model_type)
    if layout is None:
        layout = "interleaved" if model_type in INTERLEAVED_MODEL_TYPES else "half"
    if t == "proportional":  # whole head, exponent over H, the tail frequencies zeroed
        return RopeSpec(head_dim=H, base=base, layout=layout, p=prf, scaling=scaling)  # type: ignore[arg-type]
    rotary_dim = int(H * prf + 1e-9)  # HF: int(H * prf); the guard absorbs 96 * (1/3) = 31.999...
    return RopeSpec(head_dim=H, base=base, rotary_dim=rotary_dim, layout=layout, scaling=scaling)  # type: ignore[arg-type]


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
        rp.update(rope_type="proportional", partial_rotary_factor=spec.p)
        if sc is not None:
            rp["factor"] = sc.factor
    else:
        rp.update(sc.to_hf() if sc is not None else {"rope_type": "default"})
        if spec.rotary_dim != spec.head_dim:
            rp["partial_rotary_factor"] = spec.rotary_dim / spec.head_dim  # type: ignore[operator]
    if isinstance(sc, DynamicNTK):
        out["max_position_embeddings"] = sc.max_position_embeddings
    if isinstance(sc, LongRope) and sc.max_position_embeddings is not None:
        out["max_position_embeddings"] = sc.max_position_embeddings
    out["rope_parameters"] = rp
    return out

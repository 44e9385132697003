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
"""

from __future__ import annotations

import difflib
import math
import warnings
from typing import Any, Literal

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
_MLA_TYPES = {"deepseek_v2", "deepseek_v3", "deepseek_v32", "kimi_k2", "glm4_moe_lite", "mistral4"}


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

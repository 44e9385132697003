"""RopeSpec.from_hf against transformers 5.23 on the findings of the scaling / config-reading user trial.

Oracles: transformers' rotary modules built from the config and ``ROPE_INIT_FUNCTIONS`` (both run transformers'
``standardize_rope_params``, which decides the original length L0), never values ropekit produced.

- top-level ``original_max_position_embeddings`` wins over the rope dict's for yarn / llama3 / longrope (flat), is
  not read for per-layer-type entries (filled from ``max_position_embeddings``), nor by Phi-MoE; Phi-3's config
  class default 4096 counts as a top-level value; a missing L0 is filled with ``strict=False``;
- HunYuan's ``dynamic`` + ``alpha`` only for the HunYuan families;
- values that give no frequency table (zero factors) are refused at from_hf in both modes; LongRoPE's negative
  entries and a zero attention factor warn with ``strict=False``;
- a per-layer-type YaRN entry's ``truncate`` as transformers computes it (the outer dict's);
- p-RoPE + Linear(1.0) round trip; errors name the config key, its value, and Phi-3's ``yarn`` alias.
"""

from __future__ import annotations

import copy
import logging
import re
import warnings
from typing import Any

import pytest
import torch

from ropekit import RopeSpec, rope_tables
from ropekit.scaling import NTK, DynamicNTK, Linear

transformers = pytest.importorskip("transformers")
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

logging.getLogger("transformers").setLevel(logging.ERROR)

SIZES = {"hidden_size": 256, "num_attention_heads": 4, "num_key_value_heads": 4, "num_hidden_layers": 1}
L0_KEY = "original_max_position_embeddings"
YARN = {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0}
LLAMA3 = {
    "rope_type": "llama3",
    "rope_theta": 5e5,
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
}
LONGROPE = {"rope_type": "longrope", "rope_theta": 1e4, "short_factor": [1.0] * 32, "long_factor": [2.0] * 32}


def _hf(cls_name: str, cfg: dict[str, Any]) -> Any:
    """transformers' config object for ``cfg`` (a deep copy: transformers edits the dicts it is given)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return getattr(transformers, cls_name)(
            **copy.deepcopy({k: v for k, v in cfg.items() if k != "model_type"})
        )


def _hf_inv(config: Any, seq_len: int | None = None) -> tuple[torch.Tensor, float]:
    t = config.rope_parameters["rope_type"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        inv, a = ROPE_INIT_FUNCTIONS[t](config, "cpu", seq_len=seq_len)
    return inv, float(a)


def _close(spec: RopeSpec, inv: torch.Tensor, a: float, seq_len: int | None = None) -> None:
    torch.testing.assert_close(spec.inv_freq(seq_len), inv, rtol=5e-7, atol=0)
    assert spec.attention_factor == pytest.approx(a, rel=1e-12)


def _quiet(cfg: Any, **kw: Any) -> RopeSpec:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return RopeSpec.from_hf(cfg, **kw)


# --------------------------------------------------------------------------------------- finding 1: top-level L0


@pytest.mark.parametrize("rope", [YARN, LLAMA3, LONGROPE], ids=lambda r: r["rope_type"])
@pytest.mark.parametrize("schema", ["rope_parameters", "rope_scaling"])
def test_top_level_original_max_wins_over_the_rope_dict(rope: dict[str, Any], schema: str) -> None:
    """transformers' module uses the top-level L0 (1024), not the rope dict's (4096); ropekit read 4096 silently."""
    cfg = {
        **SIZES,
        "model_type": "llama",
        "max_position_embeddings": 16384,
        L0_KEY: 1024,
        schema: {**rope, L0_KEY: 4096},
    }
    hf = _hf("LlamaConfig", cfg)
    from_object = _quiet(hf)  # the object path, before any rotary module re-standardized the object
    for seq_len in (None, 1025):  # LongRoPE switches to its long factors past L0
        inv, a = _hf_inv(_hf("LlamaConfig", cfg), seq_len)
        with pytest.warns(UserWarning, match=f"{L0_KEY}=1024 and rope parameter {L0_KEY}=4096 differ"):
            spec = RopeSpec.from_hf(cfg)  # strict: a warning naming both values, transformers' value used
        _close(spec, inv, a, seq_len)
        _close(from_object, inv, a, seq_len)


def test_equal_top_level_and_rope_dict_original_max_do_not_warn() -> None:
    cfg = {**SIZES, "model_type": "llama", "max_position_embeddings": 16384, L0_KEY: 4096}
    cfg["rope_parameters"] = {**YARN, L0_KEY: 4096}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        spec = RopeSpec.from_hf(cfg)
    _close(spec, *_hf_inv(_hf("LlamaConfig", cfg)))


def test_null_top_level_original_max_is_refused_as_transformers_fails() -> None:
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    cfg: dict[str, Any] = {**SIZES, "model_type": "llama", "max_position_embeddings": 16384, L0_KEY: None}
    cfg["rope_parameters"] = {**YARN, L0_KEY: 4096}
    with pytest.raises(TypeError):
        LlamaRotaryEmbedding(_hf("LlamaConfig", cfg))
    for strict in (True, False):
        with pytest.raises(ValueError, match=f"config {L0_KEY} is null"):
            _quiet(cfg, strict=strict)


def test_phi3_class_default_original_max_wins_and_phimoe_ignores_the_top_level() -> None:
    phi3 = {
        "model_type": "phi3",
        **SIZES,
        "max_position_embeddings": 131072,
        "rope_scaling": {**LONGROPE, L0_KEY: 8192},
    }  # no top-level L0: Phi3Config's field default 4096 wins
    with pytest.warns(UserWarning, match=f"phi3's config class default {L0_KEY}=4096"):
        spec = RopeSpec.from_hf(phi3)
    for seq_len in (4097, 8193):
        _close(spec, *_hf_inv(_hf("Phi3Config", phi3), seq_len), seq_len)
    mscales = {"short_mscale": 1.0, "long_mscale": 1.0}
    moe = {
        **phi3,
        "model_type": "phimoe",
        L0_KEY: 2048,
        "rope_scaling": {**LONGROPE, **mscales, L0_KEY: 8192},
    }
    with pytest.warns(UserWarning, match=f"config {L0_KEY}=2048 is not read for model_type 'phimoe'"):
        spec = RopeSpec.from_hf(moe, strict=False)
    for seq_len in (2049, 8193):  # Phi-MoE multiplies cos / sin by the mscales (1.0), not the attention factor
        inv, _ = _hf_inv(_hf("PhimoeConfig", moe), seq_len)
        _close(spec, inv, mscales["short_mscale"], seq_len)


def _gemma3(full: dict[str, Any], **top: Any) -> dict[str, Any]:
    return {
        "model_type": "gemma3_text",
        **SIZES,
        "head_dim": 64,
        "num_hidden_layers": 2,
        "layer_types": ["sliding_attention", "full_attention"],
        "max_position_embeddings": 16384,
        "rope_parameters": {
            "sliding_attention": {"rope_type": "default", "rope_theta": 1e4},
            "full_attention": full,
        },
        **top,
    }


def _gemma3_module_inv(cfg: dict[str, Any]) -> torch.Tensor:
    from transformers.models.gemma3.modeling_gemma3 import Gemma3RotaryEmbedding

    inv = Gemma3RotaryEmbedding(_hf("Gemma3TextConfig", cfg)).full_attention_inv_freq
    assert isinstance(inv, torch.Tensor)
    return inv


def test_per_layer_type_entry_without_original_max_takes_max_position_embeddings() -> None:
    """Nested entries never read the top-level L0 (ropekit took it: 0.70 relative off); a missing one is
    max_position_embeddings (16384)."""
    cfg = _gemma3({**YARN, "rope_theta": 1e6}, **{L0_KEY: 1024})
    with pytest.raises(ValueError, match=rf"requires \['{L0_KEY}'\].*max_position_embeddings=16384"):
        RopeSpec.from_hf(cfg, layer_type="full_attention")
    with pytest.warns(UserWarning, match=f"{L0_KEY} is missing .* max_position_embeddings=16384"):
        spec = RopeSpec.from_hf(cfg, layer_type="full_attention", strict=False)
    torch.testing.assert_close(spec.inv_freq(), _gemma3_module_inv(cfg), rtol=5e-7, atol=0)
    given = _gemma3({**YARN, "rope_theta": 1e6, L0_KEY: 4096}, **{L0_KEY: 1024})
    with pytest.warns(UserWarning, match=f"config {L0_KEY}=1024 is not read for per-layer-type"):
        spec = RopeSpec.from_hf(given, layer_type="full_attention")
    torch.testing.assert_close(spec.inv_freq(), _gemma3_module_inv(given), rtol=5e-7, atol=0)


# ----------------------------------------------------------------------------- finding 4: missing L0, lenient


@pytest.mark.parametrize("rope", [YARN, LLAMA3, LONGROPE], ids=lambda r: r["rope_type"])
def test_missing_original_max_is_filled_from_max_position_embeddings_when_lenient(
    rope: dict[str, Any],
) -> None:
    cfg = {**SIZES, "model_type": "llama", "max_position_embeddings": 32768, "rope_scaling": dict(rope)}
    with pytest.raises(ValueError, match=rf"requires \['{L0_KEY}'\].*max_position_embeddings=32768"):
        RopeSpec.from_hf(cfg)
    with pytest.warns(UserWarning, match=f"rope parameter {L0_KEY} is missing"):
        spec = RopeSpec.from_hf(cfg, strict=False)
    for seq_len in (None, 32769):
        _close(spec, *_hf_inv(_hf("LlamaConfig", cfg), seq_len), seq_len)


# ------------------------------------------------------------------------------ finding 2: HunYuan's alpha


def _module_inv(model_type: str, cfg: dict[str, Any]) -> tuple[torch.Tensor, str]:
    import importlib

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = transformers.AutoConfig.for_model(model_type, **copy.deepcopy(cfg))
    mod = importlib.import_module(f"transformers.models.{model_type}.modeling_{model_type}")
    emb = next(getattr(mod, n) for n in dir(mod) if n.endswith("RotaryEmbedding"))(config)
    return emb.inv_freq, emb.rope_type


ALPHA = {
    **SIZES,
    "intermediate_size": 64,
    "vocab_size": 32,
    "head_dim": 64,
    "max_position_embeddings": 4096,
    "rope_parameters": {"rope_type": "dynamic", "factor": 1.0, "alpha": 1000.0, "rope_theta": 10000.0},
}


@pytest.mark.parametrize("model_type", ["llama", "qwen2"])
def test_dynamic_alpha_is_an_unknown_key_outside_hunyuan(model_type: str) -> None:
    inv, rope_type = _module_inv(model_type, ALPHA)
    assert rope_type == "dynamic"  # transformers: plain dynamic NTK, alpha ignored
    cfg = {**ALPHA, "model_type": model_type}
    with pytest.raises(ValueError, match=r"unknown keys \['alpha'\] for rope_type 'dynamic'"):
        RopeSpec.from_hf(cfg)
    with pytest.warns(UserWarning, match=r"unknown keys \['alpha'\]"):
        spec = RopeSpec.from_hf(cfg, strict=False)
    assert isinstance(spec.scaling, DynamicNTK)
    torch.testing.assert_close(spec.inv_freq(), inv, rtol=5e-7, atol=0)


@pytest.mark.parametrize("model_type", ["hunyuan_v1_dense", "hunyuan_v1_moe"])
def test_dynamic_alpha_is_ntk_alpha_in_hunyuan(model_type: str) -> None:
    inv, rope_type = _module_inv(model_type, ALPHA)
    assert rope_type == "ntk_alpha"
    spec = RopeSpec.from_hf({**ALPHA, "model_type": model_type})
    assert spec.scaling == NTK(alpha=1000.0)
    torch.testing.assert_close(spec.inv_freq(), inv, rtol=5e-7, atol=0)


# ------------------------------------------------------------------------ finding 5: values with no table


def _llama(rope: dict[str, Any]) -> dict[str, Any]:
    return {"model_type": "llama", "head_dim": 64, "max_position_embeddings": 8192, "rope_parameters": rope}


UNCOMPUTABLE = [
    ({"rope_type": "linear", "factor": 0.0}, "factor=0.0"),
    ({"rope_type": "yarn", "factor": 0, L0_KEY: 2048}, "factor=0"),
    ({**LLAMA3, "factor": 0.0, L0_KEY: 2048}, "factor=0.0"),
    ({**LLAMA3, "low_freq_factor": 0.0, L0_KEY: 2048}, "low_freq_factor=0.0"),
    ({"rope_type": "ntk", "factor": 0.0}, "factor=0.0"),
    ({"rope_type": "ntk", "factor": -2.0}, "factor=-2.0"),
    ({"rope_type": "dynamic", "factor": -1.0}, "factor=-1.0"),
    ({"rope_type": "yarn", "factor": 4.0, L0_KEY: 2048, "beta_slow": -1.0}, "beta_slow=-1.0"),
    ({**LONGROPE, L0_KEY: 2048, "short_factor": [0.0] * 16 + [1.0] * 16}, "short_factor has a zero entry"),
    (
        {"rope_type": "proportional", "rope_theta": 1e6, "partial_rotary_factor": 0.5, "factor": 0.0},
        "factor=0.0",
    ),
    ({"rope_type": "linear", "factor": 1e-320}, "1e-320"),  # not zero, but theta / factor overflows to inf
]


@pytest.mark.parametrize("rope,key", UNCOMPUTABLE, ids=[k for _, k in UNCOMPUTABLE])
@pytest.mark.parametrize("strict", [True, False])
def test_values_with_no_frequency_table_are_refused_at_from_hf(
    rope: dict[str, Any], key: str, strict: bool
) -> None:
    """Refused by name at from_hf in both modes (strict=False gave an OverflowError from rope_tables later)."""
    with pytest.raises(ValueError, match=key):
        _quiet(_llama(rope), strict=strict)


def test_linear_factor_zero_has_no_finite_table_in_transformers_either() -> None:
    cfg = {**SIZES, "rope_parameters": {"rope_type": "linear", "factor": 0.0, "rope_theta": 1e4}}
    inv, _ = _hf_inv(_hf("LlamaConfig", cfg))
    assert not torch.isfinite(inv).all()


@pytest.mark.parametrize(
    "change,message",
    [
        ({"short_factor": [1.0] * 16 + [-1.0] * 16}, "short_factor has 16 entries < 0 (index 16: -1.0)"),
        ({"attention_factor": 0.0}, "attention_factor=0.0 must be > 0"),
    ],
)
def test_lenient_longrope_negative_entries_and_zero_attention_factor_warn_by_key(
    change: dict[str, Any], message: str
) -> None:
    """strict=False accepted these silently; now with a warning naming the key, and transformers' numbers."""
    rope = {**LONGROPE, L0_KEY: 2048, **change}
    with pytest.raises(ValueError, match=re.escape(message)):
        RopeSpec.from_hf(_llama(rope))
    with pytest.warns(UserWarning, match=re.escape(message)):
        spec = RopeSpec.from_hf(_llama(rope), strict=False)
    hf = _hf("LlamaConfig", {**SIZES, "max_position_embeddings": 8192, "rope_parameters": rope})
    _close(spec, *_hf_inv(hf, 100), 100)  # transformers computes these (negative frequencies, factor 0)
    cos, sin = rope_tables(torch.arange(4), spec)[:2]
    assert torch.isfinite(cos).all() and torch.isfinite(sin).all()


# ---------------------------------------------------------------------- finding 6: nested YaRN truncate


def test_per_layer_type_yarn_truncate_is_the_outer_dicts_as_in_transformers() -> None:
    cfg = _gemma3({**YARN, "rope_theta": 1e6, L0_KEY: 32, "truncate": False}, max_position_embeddings=128)
    with pytest.raises(
        ValueError, match=r"truncate=False in the 'full_attention' entry is not what transformers"
    ):
        RopeSpec.from_hf(cfg, layer_type="full_attention")
    with pytest.warns(UserWarning, match="reads truncate from the outer rope_parameters"):
        spec = RopeSpec.from_hf(cfg, layer_type="full_attention", strict=False)
    assert spec.scaling.truncate is True  # type: ignore[union-attr]
    torch.testing.assert_close(spec.inv_freq(), _gemma3_module_inv(cfg), rtol=5e-7, atol=0)


def test_patch_accepts_a_nested_yarn_truncate_entry_and_matches_the_model() -> None:
    import ropekit.hf

    full = {**YARN, "rope_theta": 1e6, L0_KEY: 32, "truncate": False}
    config = _hf(
        "Gemma3TextConfig",
        {
            **_gemma3(full, max_position_embeddings=128),
            "vocab_size": 64,
            "hidden_size": 64,
            "intermediate_size": 64,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "head_dim": 32,
            "sliding_window": 16,
        },
    )
    torch.manual_seed(0)
    model = transformers.Gemma3ForCausalLM(config).eval()
    ids = torch.randint(0, 64, (1, 100))
    with torch.no_grad():
        reference = model(ids).logits
    with pytest.warns(UserWarning, match="reads truncate from the outer rope_parameters"):
        ropekit.hf.patch(model)  # refused before, blaming a config edited after the model was built
    with torch.no_grad():
        torch.testing.assert_close(model(ids).logits, reference, rtol=1e-4, atol=1e-4)


# ------------------------------------------------------------------------------------------------ finding 7


def test_p_rope_with_linear_one_round_trips_and_loads_in_transformers() -> None:
    spec = RopeSpec(64, base=1e6, p=0.5, scaling=Linear(1.0))
    frag = spec.to_hf()
    assert RopeSpec.from_hf(frag) == spec
    hf = _hf("LlamaConfig", {**SIZES, **frag})
    torch.testing.assert_close(spec.inv_freq(), _hf_inv(hf)[0], rtol=5e-7, atol=0)


@pytest.mark.parametrize(
    "rope,message",
    [
        ({"rope_type": "default", "rope_theta": 1.0}, "rope parameter rope_theta=1.0: RopeSpec.base must be"),
        (
            {**LONGROPE, L0_KEY: 2048, "short_factor": [1.0] * 31},
            "rope parameter short_factor (31 values): LongRope.short_factor must have rotary_dim/2 = 32 entries",
        ),
        (
            {**LONGROPE, L0_KEY: 16384},  # no factor: max_position_embeddings / L0 < 1
            "config max_position_embeddings=8192: LongRope.max_position_embeddings must be >=",
        ),
    ],
)
def test_errors_name_the_config_key_and_value(rope: dict[str, Any], message: str) -> None:
    """Dataclass errors (``RopeSpec.base must be ...``) are prefixed with the config key and value they come from."""
    with pytest.raises(ValueError) as info:
        _quiet(_llama(rope))
    assert message in str(info.value)


def test_phi3_yarn_alias_error_names_the_alias() -> None:
    cfg = {
        "model_type": "phi3",
        **SIZES,
        "max_position_embeddings": 131072,
        "rope_scaling": {"type": "yarn", "factor": 4.0, L0_KEY: 4096},
    }
    with pytest.raises(ValueError, match=r"model_type 'phi3' reads rope_type 'yarn' as 'longrope'"):
        RopeSpec.from_hf(cfg)

"""RopeSpec.from_hf per family: legacy spellings, head dim from sizes, per-layer types, transformers' config objects.

Strict validation and lenient mode: test_config_from_hf_validation.py; the to_hf round trip:
test_config_to_hf_lossless.py."""

from __future__ import annotations

import re
import warnings

import pytest
import torch

from ropekit import RopeSpec
from ropekit.scaling import Linear, Llama3, LongRope, Yarn


def test_gpt_neox_legacy_keys() -> None:
    cfg = {
        "model_type": "gpt_neox",
        "hidden_size": 6144,
        "num_attention_heads": 64,
        "rotary_pct": 0.25,
        "rotary_emb_base": 10000,
    }
    spec = RopeSpec.from_hf(cfg)
    assert (spec.head_dim, spec.rotary_dim, spec.base, spec.layout) == (96, 24, 10_000.0, "half")
    no_pct = RopeSpec.from_hf({k: v for k, v in cfg.items() if k != "rotary_pct"})
    assert no_pct.rotary_dim == 24  # GPT-NeoX's default rotary_pct is 0.25


def test_gptj_rotary_dim_is_interleaved_leading_slice() -> None:
    # a GPT-J config.json spells the sizes GPT-2's way (n_embd, n_head), as EleutherAI/gpt-j-6b's does
    spec = RopeSpec.from_hf({"model_type": "gptj", "n_embd": 4096, "n_head": 16, "rotary_dim": 64})
    assert (spec.head_dim, spec.rotary_dim, spec.layout) == (256, 64, "interleaved")


@pytest.mark.parametrize("name", ["GPTJConfig", "CodeGenConfig"])
def test_gpt2_style_config_objects(name: str) -> None:
    """transformers' own objects: their head dim (embed_dim // num_attention_heads, as their attention computes it)
    and rotary_dim, whether the object or its to_dict() (n_embd, n_head) is given."""
    transformers = pytest.importorskip("transformers")
    config = getattr(transformers, name)(n_embd=256, n_head=4, rotary_dim=16)
    for given in (config, config.to_dict()):
        spec = RopeSpec.from_hf(given)
        assert (spec.head_dim, spec.rotary_dim, spec.layout) == (
            config.hidden_size // config.num_attention_heads,
            16,
            "interleaved",
        )


@pytest.mark.parametrize(
    "config, message",
    [
        (
            {"hidden_size": 100, "num_attention_heads": 3},
            "hidden_size=100 is not divisible by num_attention_heads=3",
        ),
        ({"n_embd": 100, "n_head": 3}, "n_embd=100 is not divisible by n_head=3"),
        ({"hidden_size": 128.0, "num_attention_heads": 4}, "hidden_size=128.0 must be a positive integer"),
        ({"hidden_size": 128, "num_attention_heads": 0}, "num_attention_heads=0 must be a positive integer"),
        (
            {"hidden_size": 128, "num_attention_heads": True},
            "num_attention_heads=True must be a positive integer",
        ),
    ],
)
def test_head_dim_from_sizes_is_refused_unless_exact(config: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        RopeSpec.from_hf(config)


def test_explicit_head_dim_wins_over_hidden_over_heads() -> None:
    spec = RopeSpec.from_hf(
        {
            "model_type": "mistral",
            "hidden_size": 5120,
            "num_attention_heads": 32,
            "head_dim": 128,
            "rope_theta": 1e6,
        }
    )
    assert spec.head_dim == 128 and spec.base == 1e6


def test_deepseek_rope_head_and_mla_yarn() -> None:
    cfg = {
        "model_type": "deepseek_v3",
        "hidden_size": 7168,
        "num_attention_heads": 128,
        "qk_rope_head_dim": 64,
        "qk_nope_head_dim": 128,
        "max_position_embeddings": 163840,
        "rope_theta": 10000,
        "rope_scaling": {
            "beta_fast": 32,
            "beta_slow": 1,
            "factor": 40,
            "mscale": 1.0,
            "mscale_all_dim": 1.0,
            "original_max_position_embeddings": 4096,
            "type": "yarn",
        },
    }
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # mscale == mscale_all_dim is right for MLA: no warning
        spec = RopeSpec.from_hf(cfg)
    assert spec.head_dim == 64 and spec.layout == "interleaved" and isinstance(spec.scaling, Yarn)
    assert spec.attention_factor == 1.0
    from ropekit.scaling import mla_softmax_scale

    assert mla_softmax_scale(192, 40.0, 1.0) == pytest.approx(
        192**-0.5 * 1.8739, rel=1e-4
    )  # rope-types.md 1.4


def test_equal_mscales_on_non_mla_model_warn() -> None:
    cfg = {
        "model_type": "llama",
        "head_dim": 64,
        "rope_parameters": {
            "rope_type": "yarn",
            "factor": 4.0,
            "original_max_position_embeddings": 4096,
            "mscale": 1.0,
            "mscale_all_dim": 1.0,
        },
    }
    with pytest.warns(UserWarning, match="mscale == mscale_all_dim"):
        RopeSpec.from_hf(cfg)


PHI3_MINI_128K = {
    "model_type": "phi3",
    "hidden_size": 3072,
    "num_attention_heads": 32,
    "max_position_embeddings": 131072,
    "original_max_position_embeddings": 4096,
    "rope_theta": 10000.0,
    "rope_scaling": {"type": "su", "short_factor": [1.0] * 48, "long_factor": [1.5] * 48},
}


def test_phi3_su_with_top_level_original_length() -> None:
    """transformers 5.23 cannot parse this legacy Phi-3 config; ropekit can."""
    spec = RopeSpec.from_hf(PHI3_MINI_128K)
    sc = spec.scaling
    assert isinstance(sc, LongRope) and sc.original_max_position_embeddings == 4096
    assert spec.attention_factor == pytest.approx(1.190238, abs=1e-6)  # sqrt(1 + ln 32 / ln 4096)
    assert torch.equal(spec.inv_freq(4096), RopeSpec(96).inv_freq())  # short factors of 1.0
    torch.testing.assert_close(spec.inv_freq(4097), RopeSpec(96).inv_freq() / 1.5)
    yarn_named = dict(PHI3_MINI_128K, rope_scaling=dict(PHI3_MINI_128K["rope_scaling"], type="yarn"))
    assert RopeSpec.from_hf(yarn_named) == spec


def test_longrope_list_length_is_checked() -> None:
    bad = dict(
        PHI3_MINI_128K,
        rope_scaling={"type": "longrope", "short_factor": [1.0] * 47, "long_factor": [1.0] * 48},
    )
    with pytest.raises(ValueError, match="short_factor must have rotary_dim/2 = 48 entries, got 47"):
        RopeSpec.from_hf(bad)


GEMMA3_V4 = {
    "model_type": "gemma3_text",
    "hidden_size": 2560,
    "num_attention_heads": 8,
    "head_dim": 256,
    "rope_theta": 1_000_000.0,
    "rope_local_base_freq": 10_000.0,
    "rope_scaling": {"rope_type": "linear", "factor": 8.0},
}
GEMMA3_V5 = {
    "model_type": "gemma3_text",
    "hidden_size": 2560,
    "num_attention_heads": 8,
    "head_dim": 256,
    "rope_parameters": {
        "sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0},
        "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1_000_000.0},
    },
}


@pytest.mark.parametrize("cfg", [GEMMA3_V4, GEMMA3_V5], ids=["v4", "v5"])
def test_gemma3_layer_types(cfg: dict) -> None:
    full = RopeSpec.from_hf(cfg, layer_type="full_attention")
    sliding = RopeSpec.from_hf(cfg, layer_type="sliding_attention")
    assert full == RopeSpec(256, base=1e6, scaling=Linear(8.0))
    assert sliding == RopeSpec(256, base=10_000.0)  # sliding layers are never scaled
    with pytest.raises(ValueError, match="layer_type"):
        RopeSpec.from_hf(cfg)


def test_nope_layer_and_unknown_layer_type() -> None:
    cfg = {
        "head_dim": 64,
        "rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": 1e4}, "no_rope": None},
    }
    with pytest.raises(ValueError, match="NoPE"):
        RopeSpec.from_hf(cfg, layer_type="no_rope")
    with pytest.raises(ValueError, match="'chunked' not in"):
        RopeSpec.from_hf(cfg, layer_type="chunked")


def test_transformers_config_objects() -> None:
    pytest.importorskip("transformers")
    from transformers import Gemma3TextConfig, LlamaConfig

    cfg = LlamaConfig(
        hidden_size=512,
        num_attention_heads=4,
        max_position_embeddings=131072,
        rope_parameters={
            "rope_type": "llama3",
            "factor": 32.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
            "rope_theta": 500000.0,
        },
    )
    assert RopeSpec.from_hf(cfg).scaling == Llama3(32.0, 1.0, 4.0, 8192)
    g = Gemma3TextConfig(
        hidden_size=512,
        num_attention_heads=4,
        head_dim=64,
        rope_parameters={
            "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
            "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6},
        },
    )
    assert RopeSpec.from_hf(g, layer_type="full_attention").scaling == Linear(8.0)

"""RopeSpec.from_hf: legacy spellings, per-layer types, strict validation, lenient mode, lossless round trip."""

from __future__ import annotations

import re
import warnings

import pytest
import torch

from ropekit import RopeSpec
from ropekit.scaling import NTK, DynamicNTK, Linear, Llama3, LongRope, Yarn


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


def test_misspelt_required_key_is_named_with_its_likely_spelling() -> None:
    with pytest.raises(ValueError) as e:
        RopeSpec.from_hf({"head_dim": 128, "rope_parameters": {"rope_type": "linear", "factr": 2.0}})
    assert str(e.value) == (
        "rope_type 'linear' requires ['factor']; got keys ['factr', 'rope_type']; unknown keys ['factr'] "
        "(did you mean 'factor' for 'factr'?)"
    )
    with pytest.raises(
        ValueError, match=re.escape("unknown keys ['fctor']") + r".*did you mean 'factor' for 'fctor'"
    ):
        RopeSpec.from_hf(
            {"head_dim": 128, "rope_parameters": {"rope_type": "linear", "factor": 2.0, "fctor": 3}}
        )


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


STRICT_ERRORS = [
    ({"rope_type": "linear"}, "requires ['factor']"),
    ({"rope_type": "linear", "factor": 0.5}, "factor=0.5 must be >= 1"),
    ({"rope_type": "linear", "factor": float("nan")}, "factor must be a finite number, got nan"),
    ({"rope_type": "yarn", "factor": 4.0}, "requires ['original_max_position_embeddings']"),
    (
        {
            "rope_type": "yarn",
            "factor": 4.0,
            "original_max_position_embeddings": 4096,
            "beta_fast": 1.0,
            "beta_slow": 32.0,
        },
        "beta_fast=1.0 must be >= beta_slow=32.0",
    ),
    (
        {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096, "beta_fast": 0},
        "beta_fast=0 is invalid",
    ),
    (
        {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096, "truncate": "no"},
        "truncate must be true or false",
    ),
    ({"rope_type": "linear", "factor": 2.0, "beta_slow": 1.0}, "unknown keys ['beta_slow']"),
    (
        {"rope_type": "linear", "factr": 2.0, "factor": 2.0},
        "known: ['factor', 'partial_rotary_factor', 'rope_theta', 'rope_type']",
    ),
    ({"rope_type": "magic"}, "unknown rope_type 'magic'"),
    (
        {
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 4.0,
            "high_freq_factor": 1.0,
            "original_max_position_embeddings": 8192,
            "rope_theta": 5e5,
        },
        "high_freq_factor=1.0 must be > low_freq_factor=4.0",
    ),
    (
        {
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
        },
        "requires ['rope_theta']",
    ),
    (
        {
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 200000,
            "rope_theta": 5e5,
        },
        "must be < max_position_embeddings=131072",
    ),
    ({"rope_type": "default", "rope_theta": 0.5}, "RopeSpec.base must be a finite number > 1, got 0.5"),
    ({"rope_type": "default", "partial_rotary_factor": 1.5}, "partial_rotary_factor=1.5"),
    ({"rope_type": "proportional", "rope_theta": 1e6}, "without partial_rotary_factor"),
    ({"type": "linear", "rope_type": "dynamic", "factor": 2.0}, "type='linear' and rope_type='dynamic'"),
]


@pytest.mark.parametrize("rope,message", STRICT_ERRORS)
def test_strict_errors_name_the_key_and_value(rope: dict, message: str) -> None:
    with pytest.raises(ValueError) as info:
        RopeSpec.from_hf(
            {
                "model_type": "llama",
                "head_dim": 128,
                "max_position_embeddings": 131072,
                "rope_parameters": rope,
            }
        )
    assert message in str(info.value)


def test_lenient_mode_accepts_what_transformers_accepts_with_a_warning() -> None:
    transformers = pytest.importorskip("transformers")
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    rope = {"rope_type": "linear", "factor": 0.5, "rope_theta": 10_000.0}
    with pytest.warns(UserWarning, match="strict=False"):
        spec = RopeSpec.from_hf({"head_dim": 64, "rope_parameters": dict(rope)}, strict=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg = transformers.LlamaConfig(hidden_size=256, num_attention_heads=4, rope_parameters=dict(rope))
        inv, _ = ROPE_INIT_FUNCTIONS["linear"](cfg, None, None)
    torch.testing.assert_close(spec.inv_freq(), inv, rtol=5e-7, atol=0)
    with pytest.warns(UserWarning, match="unknown keys"):
        RopeSpec.from_hf(
            {"head_dim": 64, "rope_parameters": {"rope_type": "default", "beta_slow": 1.0}},
            strict=False,
        )


ROUND_TRIP = [
    RopeSpec(128, base=500_000.0),
    RopeSpec(128, base=10_000.0, rotary_dim=32),
    RopeSpec(96, rotary_dim=32),  # 32/96 is not exact in floating point
    RopeSpec(128, layout="interleaved", scaling=Linear(4.0)),
    RopeSpec(128, scaling=NTK(factor=4.0)),
    RopeSpec(128, scaling=NTK(alpha=1000.0)),
    RopeSpec(128, scaling=DynamicNTK(2.0, 4096)),
    RopeSpec(64, base=150_000.0, scaling=Yarn(32.0, 4096, truncate=False)),
    RopeSpec(64, scaling=Yarn(40.0, 4096, mscale=0.707, mscale_all_dim=1.0, attention_factor_=1.0)),
    RopeSpec(96, scaling=LongRope((1.0,) * 48, (2.0,) * 48, 4096, max_position_embeddings=131072)),
    RopeSpec(96, scaling=LongRope((1.0,) * 48, (2.0,) * 48, 4096, factor=16.0, attention_factor_=1.1)),
    RopeSpec(128, base=5e5, scaling=Llama3(8.0, 1.0, 4.0, 8192)),
    RopeSpec(256, base=1e6, p=0.25),
    RopeSpec(256, base=1e6, p=0.25, scaling=Linear(8.0)),
]


@pytest.mark.parametrize("spec", ROUND_TRIP, ids=lambda s: f"{type(s.scaling).__name__}-{s.rotary_dim}-{s.p}")
def test_round_trip_is_lossless(spec: RopeSpec) -> None:
    back = RopeSpec.from_hf(spec.to_hf(), layout=spec.layout)
    assert back == spec
    assert torch.equal(back.inv_freq(), spec.inv_freq())


def test_to_hf_refuses_what_hf_cannot_express() -> None:
    with pytest.raises(ValueError, match="freqs"):
        RopeSpec(4, freqs=(1.0, 0.5)).to_hf()
    with pytest.raises(ValueError, match="proportional"):
        RopeSpec(128, rotary_dim=64, p=0.5).to_hf()


# ---------------------------------------------------------------- misspelt top-level RoPE keys

_LLAMA31 = {
    "model_type": "llama",
    "hidden_size": 4096,
    "num_attention_heads": 32,
    "num_hidden_layers": 2,
    "max_position_embeddings": 131072,
    "rope_theta": 500000.0,
    "rope_scaling": {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    },
}


@pytest.mark.parametrize(
    ("right", "typo", "value"),
    [
        ("rope_scaling", "rope_scalling", _LLAMA31["rope_scaling"]),  # the trial: loads unscaled
        ("rope_scaling", "rope_parameter", _LLAMA31["rope_scaling"]),
        ("rope_theta", "rope_thetta", 500000.0),
        ("partial_rotary_factor", "partial_rotary_factr", 0.5),
        ("original_max_position_embeddings", "original_max_position_embedding", 8192),
        ("rope_parameters", "rope_paramters", {"rope_type": "default", "rope_theta": 1e6}),
    ],
)
def test_misspelt_top_level_rope_key_is_named_with_a_hint(
    right: str, typo: str, value: object, tmp_path: object
) -> None:
    """transformers ignores a misspelt top-level key silently (the oracle: its rotary module built from the same
    config.json); ropekit did too. Strict (the default) refuses it with the did-you-mean hint, as it refuses an
    unknown key inside the rope dict; strict=False warns and reads what transformers reads."""
    from pathlib import Path

    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    from tests.ropekit.hf.config_oracle import hf_config

    cfg = {k: v for k, v in _LLAMA31.items() if k != right}
    if right == "rope_theta":  # llama3 requires a theta: a plain Llama config (transformers' default theta)
        del cfg["rope_scaling"]
    cfg[typo] = value
    suggestion = "rope_parameters" if typo == "rope_parameter" else right
    hint = rf"did you mean '{suggestion}' for '{typo}'\?"
    with pytest.raises(
        ValueError, match=rf"^config has unknown key \['{typo}'\], close to RoPE keys .*{hint}"
    ):
        RopeSpec.from_hf(cfg)
    with pytest.warns(UserWarning, match=rf"{hint}.*\(accepted because strict=False\)"):
        spec = RopeSpec.from_hf(cfg, strict=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hf = LlamaRotaryEmbedding(hf_config(cfg, Path(str(tmp_path))))
    want = hf.inv_freq.to(torch.float64)
    got = spec.frequencies()
    assert got.shape == want.shape
    torch.testing.assert_close(got, want, rtol=1e-6, atol=0)  # transformers forms its table in float32


def test_real_configs_of_every_transformers_family_have_no_near_miss_keys() -> None:
    """A config.json has many top-level keys unrelated to RoPE: the near-miss check must not trip on any real one.
    Oracle: the configs transformers itself builds (every config class it ships, with its defaults: a superset of
    every family ropekit supports, VL families included), as objects and as ``to_dict()``; whatever else from_hf
    says about them (a missing layer_type, a family it refuses), it is not a near-miss key."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    from ropekit.hf.config_vl import VL_FAMILIES

    built = set()
    for mt in list(CONFIG_MAPPING.keys()):
        if not _has_rope_fields(CONFIG_MAPPING[mt]):
            continue
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                obj = CONFIG_MAPPING[mt]()
        except Exception:  # noqa: BLE001, S112 - a config class that cannot build with its defaults
            continue
        for src in (obj, obj.to_dict()):
            for strict in (True, False):
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    try:
                        RopeSpec.from_hf(src, strict=strict)
                    except (ValueError, TypeError) as e:
                        assert "close to RoPE keys" not in str(e), (mt, str(e))
                assert not [w for w in caught if "close to RoPE keys" in str(w.message)], mt
        built.add(mt)
    assert len(built) > 200 and {"llama", "gemma3_text", "gpt_neox", "deepseek_v3", "phi3"} <= built
    assert set(VL_FAMILIES) - {"ernie4_5_moe_vl"} <= built  # ernie4_5_moe_vl: Baidu's remote-code name


def _has_rope_fields(cls: type) -> bool:
    """Whether a transformers config class declares a RoPE field (``rope_*`` / ``rotary_*``) or a text config (VL
    and other composite configs): the classes from_hf can read (the others are skipped: building all ~800 costs
    a minute)."""
    names: set[str] = set()
    for klass in cls.__mro__:
        names |= set(getattr(klass, "__annotations__", {}))
    return "text_config" in names or any("rope" in n or "rotary" in n for n in names)

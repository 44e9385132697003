"""RopeSpec.from_hf strict validation: misspelt keys named with a hint, bad values named with the key, lenient mode.

The families: test_config.py; the to_hf round trip: test_config_to_hf_lossless.py."""

from __future__ import annotations

import re
import warnings

import pytest
import torch

from ropekit import RopeSpec


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

"""RopeSpec.from_hf / to_hf against transformers 5.23 as the oracle (the fourteenth session's user trial, F1-F21c;
the partial-rotary expression is in test_config_partial.py).

Each config dict is written to a config.json and loaded with ``transformers.AutoConfig.from_pretrained`` (what a
checkpoint goes through); ropekit must read it the same way, or refuse it with a ValueError naming the key.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

from ropekit import RopeSpec
from ropekit.analysis import layer_views
from ropekit.scaling import Linear, Yarn

transformers = pytest.importorskip("transformers")
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

from tests.ropekit.hf.config_oracle import SIZES, hf_config, hf_fails, hf_refuses


# ------------------------------------------------------------------ F1: rope_parameters and rope_scaling together
@pytest.mark.parametrize("model_type", ["llama", "qwen2", "mistral", "gpt_neox"])
def test_f1_rope_scaling_replaces_rope_parameters_as_in_transformers(model_type: str, tmp_path: Path) -> None:
    cfg = {
        "model_type": model_type,
        **SIZES,
        "rope_parameters": {"rope_type": "default", "rope_theta": 5e5},
        "rope_scaling": {"rope_type": "linear", "factor": 8.0},
    }
    obj = hf_config(cfg, tmp_path)
    want = obj.rope_parameters  # transformers: linear x8, and rope_parameters' rope_theta is gone (1e4)
    assert want["rope_type"] == "linear" and want["factor"] == 8.0
    with pytest.warns(UserWarning, match="transformers uses rope_scaling"):
        spec = RopeSpec.from_hf(cfg)
    assert spec.scaling == Linear(8.0) and spec.base == want["rope_theta"]
    assert RopeSpec.from_hf(obj) == spec  # the object path agrees with the dict path
    inv, _ = ROPE_INIT_FUNCTIONS["linear"](obj, None, None)
    torch.testing.assert_close(spec.inv_freq(), inv, rtol=5e-7, atol=0)


def test_f1_the_trial_config(tmp_path: Path) -> None:
    cfg = {
        "head_dim": 128,
        "rope_parameters": {"rope_type": "default"},
        "rope_scaling": {"rope_type": "linear", "factor": 8.0},
    }
    assert hf_config({"model_type": "llama", **SIZES, **cfg}, tmp_path).rope_parameters["factor"] == 8.0
    with pytest.warns(UserWarning, match="rope_scaling"):
        assert RopeSpec.from_hf(cfg).scaling == Linear(8.0)
    # an empty rope_parameters beside rope_scaling: transformers takes rope_scaling (ropekit dropped it before)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert RopeSpec.from_hf({**cfg, "rope_parameters": {}}).scaling == Linear(8.0)
        assert RopeSpec.from_hf({**cfg, "rope_scaling": None}).scaling is None
        assert RopeSpec.from_hf({**cfg, "rope_scaling": {}}).scaling is None


def test_f1_nested_rope_parameters(tmp_path: Path) -> None:
    nested = {
        "full_attention": {"rope_type": "default", "rope_theta": 1e6},
        "sliding_attention": {"rope_type": "default", "rope_theta": 1e4},
    }
    scaling = {"rope_type": "linear", "factor": 8.0}
    # Gemma 3 merges rope_scaling into the full-attention entry
    g = {
        "model_type": "gemma3_text",
        **SIZES,
        "head_dim": 128,
        "rope_parameters": nested,
        "rope_scaling": scaling,
    }
    want = hf_config(g, tmp_path).rope_parameters
    for lt in ("full_attention", "sliding_attention"):
        spec = RopeSpec.from_hf(g, layer_type=lt)
        assert spec.base == want[lt]["rope_theta"]
        assert spec.scaling == (Linear(8.0) if want[lt]["rope_type"] == "linear" else None)
    assert RopeSpec.from_hf(g, layer_type="full_attention").scaling == Linear(8.0)
    # Llama replaces the whole nested dict with the flat rope_scaling
    lcfg = {
        "model_type": "llama",
        **SIZES,
        "layer_types": ["full_attention", "sliding_attention"],
        "sliding_window": 16,
        "rope_parameters": nested,
        "rope_scaling": scaling,
    }
    assert hf_config(lcfg, tmp_path).rope_parameters == {**scaling, "rope_theta": 10000.0}
    with pytest.warns(UserWarning, match="rope_scaling"):
        assert RopeSpec.from_hf(lcfg) == RopeSpec(128, scaling=Linear(8.0))
    # Gemma 3 with a flat rope_parameters and rope_scaling: transformers fails (KeyError), ropekit says why
    flat = {**g, "rope_parameters": {"rope_type": "default", "rope_theta": 1e6}}
    assert hf_refuses(flat, tmp_path)
    with pytest.raises(ValueError, match="merges rope_scaling into the rope_parameters entries"):
        RopeSpec.from_hf(flat, layer_type="full_attention")


# ------------------------------------------------------------------ F2: rotary_dim only where transformers reads it
def test_f2_llama_ignores_rotary_dim(tmp_path: Path) -> None:
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    cfg = {"model_type": "llama", **SIZES, "head_dim": 128, "rotary_dim": 64}
    obj = hf_config(cfg, tmp_path)
    assert obj.rotary_dim == 64  # kept as an attribute, so also in the object's to_dict()
    n = LlamaRotaryEmbedding(obj).inv_freq.numel()
    assert RopeSpec.from_hf(cfg).rotary_dim == RopeSpec.from_hf(obj).rotary_dim == 2 * n == 128


@pytest.mark.parametrize(
    "cfg",
    [
        {"model_type": "gptj", "n_embd": 4096, "n_head": 16, "rotary_dim": 32},
        {"model_type": "gptj", "n_embd": 4096, "n_head": 16},  # the class default: 64, not the whole head
        {"model_type": "codegen", "n_embd": 4096, "n_head": 16},
        {"model_type": "codegen", "n_embd": 4096, "n_head": 16, "rotary_dim": 128},
    ],
)
def test_f2_gptj_codegen_rotary_dim(cfg: dict[str, Any], tmp_path: Path) -> None:
    obj = hf_config(cfg, tmp_path)
    assert RopeSpec.from_hf(cfg).rotary_dim == RopeSpec.from_hf(obj).rotary_dim == obj.rotary_dim


@pytest.mark.parametrize("head_dim, rotary_dim", [(96, 32), (128, 64), (128, 48)])
def test_f2_minimax_m2_rotary_dim_is_a_factor(head_dim: int, rotary_dim: int, tmp_path: Path) -> None:
    cfg = {"model_type": "minimax_m2", **SIZES, "head_dim": head_dim, "rotary_dim": rotary_dim}
    prf = hf_config(cfg, tmp_path).rope_parameters["partial_rotary_factor"]
    assert RopeSpec.from_hf(cfg).rotary_dim == int(head_dim * prf)


def test_f2_gpt_neox_reads_its_own_names_only(tmp_path: Path) -> None:
    base = {"model_type": "gpt_neox", **SIZES}
    for extra in (
        {"rope_theta": 5e5, "rotary_emb_base": 1e3},
        {"rope_theta": 5e5},
        {"partial_rotary_factor": 0.5},
        {"partial_rotary_factor": 0.5, "rotary_pct": 0.75},
    ):
        want = hf_config({**base, **extra}, tmp_path).rope_parameters
        spec = RopeSpec.from_hf({**base, **extra})
        assert (spec.base, spec.rotary_dim) == (want["rope_theta"], int(128 * want["partial_rotary_factor"]))
    # and a Llama ignores GPT-NeoX's names
    llama = {"model_type": "llama", **SIZES, "rotary_pct": 0.25, "rotary_emb_base": 1e3}
    want = hf_config(llama, tmp_path).rope_parameters
    assert RopeSpec.from_hf(llama) == RopeSpec(128, base=want["rope_theta"])


def test_f2_family_keys_without_model_type_are_refused() -> None:
    with pytest.raises(ValueError, match="rotary_dim=64 but no model_type"):
        RopeSpec.from_hf({"head_dim": 128, "rotary_dim": 64})
    with pytest.warns(UserWarning, match="no model_type"):
        assert RopeSpec.from_hf({"head_dim": 128, "rotary_dim": 64}, strict=False).rotary_dim == 128


# ------------------------------------------------------------------ F6, F10, F11, F12: malformed values, named
@pytest.mark.parametrize(
    "extra, message",
    [
        ({"rope_parameters": "linear"}, "config rope_parameters='linear' must be a dict"),
        ({"rope_parameters": ["linear", 2.0]}, "config rope_parameters=['linear', 2.0] must be a dict"),
        ({"rope_scaling": "linear"}, "config rope_scaling='linear' must be a dict"),
        ({"rope_scaling": ["linear"]}, "config rope_scaling=['linear'] must be a dict"),
        ({"rope_parameters": {"rope_type": None}}, "rope parameter rope_type is null"),
        ({"rope_parameters": {"type": None}}, "rope parameter rope_type is null"),
        ({"rope_parameters": {"rope_type": ["linear"]}}, "rope_type=['linear'] must be a string"),
        ({"rope_parameters": {"rope_type": "linear", "factor": None}}, "rope parameter factor is null"),
        (
            {"rope_parameters": {"rope_type": "default", "rope_theta": None}},
            "rope parameter rope_theta is null",
        ),
        ({"rope_theta": None}, "rope parameter rope_theta is null"),
        (
            {
                "rope_parameters": {
                    "rope_type": "yarn",
                    "factor": 4.0,
                    "original_max_position_embeddings": None,
                }
            },
            "rope parameter original_max_position_embeddings is null",
        ),
    ],
)
def test_malformed_values_are_named(extra: dict[str, Any], message: str, tmp_path: Path) -> None:
    cfg = {"model_type": "llama", **SIZES, "max_position_embeddings": 8192, **extra}
    assert hf_fails(cfg, tmp_path)  # transformers refuses the config or fails building its rotary module
    for strict in (True, False):  # not a transformers warning that strict=False would accept: refused in both
        with pytest.raises(ValueError) as info:
            RopeSpec.from_hf(cfg, strict=strict)
        assert message in str(info.value)


def test_f12_null_yarn_factor_is_derived_as_in_transformers(tmp_path: Path) -> None:
    cfg = {
        "model_type": "llama",
        **SIZES,
        "max_position_embeddings": 16384,
        "rope_parameters": {"rope_type": "yarn", "factor": None, "original_max_position_embeddings": 4096},
    }
    obj = hf_config(cfg, tmp_path)
    inv, att = ROPE_INIT_FUNCTIONS["yarn"](obj, None, None)  # transformers: factor = 16384 / 4096
    with pytest.raises(ValueError, match="rope parameter factor is null"):
        RopeSpec.from_hf(cfg)
    with pytest.warns(UserWarning, match="factor is null"):
        spec = RopeSpec.from_hf(cfg, strict=False)
    assert spec.scaling == Yarn(4.0, 4096) and spec.attention_factor == pytest.approx(att, rel=1e-12)
    torch.testing.assert_close(spec.inv_freq(), inv, rtol=5e-7, atol=0)


def test_f11_null_rope_type_in_a_nested_entry() -> None:
    cfg = {"head_dim": 64, "rope_parameters": {"full_attention": {"rope_type": None}}}
    with pytest.raises(ValueError, match="rope_type is null"):
        RopeSpec.from_hf(cfg, layer_type="full_attention")


@pytest.mark.parametrize("value", [5, "abc", [1.0, "x"], None, [float("nan")] * 64])
def test_f10_longrope_factor_lists(value: Any) -> None:
    rope = {
        "rope_type": "longrope",
        "short_factor": value,
        "long_factor": [1.0] * 64,
        "original_max_position_embeddings": 4096,
    }
    with pytest.raises(ValueError, match="rope parameter short_factor") as info:
        RopeSpec.from_hf({"head_dim": 128, "max_position_embeddings": 8192, "rope_parameters": rope})
    assert repr(value)[:10] in str(info.value) or "null" in str(info.value)


# ------------------------------------------------------------------ F7: layer_type for a single set of parameters
def test_f7_layer_type_for_flat_v5_parameters_raises_like_v4() -> None:
    for key in ("rope_parameters", "rope_scaling"):
        cfg = {"head_dim": 128, key: {"rope_type": "linear", "factor": 2.0}}
        with pytest.raises(
            ValueError, match="layer_type='sliding_attention' given but the config has a single set"
        ):
            RopeSpec.from_hf(cfg, layer_type="sliding_attention")
        assert RopeSpec.from_hf(cfg).scaling == Linear(2.0)


# ------------------------------------------------------------------ F8, F9: integers, as transformers' classes
@pytest.mark.parametrize(
    "key, value",
    [
        ("head_dim", 130.7),
        ("head_dim", "64"),
        ("head_dim", 64.0),
        ("qk_rope_head_dim", 64.9),
        ("max_position_embeddings", "8192"),
        ("max_position_embeddings", 131072.9),
        ("max_position_embeddings", 4096.0),
        ("max_position_embeddings", True),
        ("max_position_embeddings", 0),
    ],
)
def test_f8_integer_keys(key: str, value: Any, tmp_path: Path) -> None:
    model_type = "deepseek_v3" if key == "qk_rope_head_dim" else "llama"
    cfg = {"model_type": model_type, **SIZES, key: value}
    assert hf_refuses(cfg, tmp_path) or value == 0  # transformers' strict config classes refuse them too
    with pytest.raises(ValueError) as info:
        RopeSpec.from_hf(cfg)
    assert f"config {key}={value!r} must be a positive integer" in str(info.value)


@pytest.mark.parametrize(
    "rope",
    [
        {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 1024},
        {
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 1024,
            "rope_theta": 5e5,
        },
        {"rope_type": "dynamic", "factor": 2.0},
    ],
)
def test_f9_string_max_positions_is_a_value_error(rope: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="max_position_embeddings='4096' must be a positive integer"):
        RopeSpec.from_hf({"head_dim": 128, "max_position_embeddings": "4096", "rope_parameters": rope})


def test_f9_cli_reports_instead_of_a_traceback(tmp_path: Path) -> None:
    import contextlib
    import io

    from ropekit.cli.main import main

    p = tmp_path / "config.json"
    p.write_text(
        json.dumps(
            {
                "model_type": "llama",
                "head_dim": 128,
                "max_position_embeddings": "8192",
                "rope_scaling": {
                    "rope_type": "yarn",
                    "factor": 4.0,
                    "original_max_position_embeddings": 2048,
                },
            }
        )
    )
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        rc = main(["inspect", str(p)])
    assert (
        rc != 0
        and "config max_position_embeddings must be a positive int (the context length), got '8192'"
        in err.getvalue()
        and "Traceback" not in err.getvalue()
    )


def test_integers_still_read() -> None:
    spec = RopeSpec.from_hf(
        {
            "head_dim": 128,
            "max_position_embeddings": 16384,
            "rope_parameters": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096},
        }
    )
    assert spec.scaling == Yarn(4.0, 4096)


# ------------------------------------------------------------------ F13: layer types, as transformers validates them
def test_f13_unknown_layer_type_entries(tmp_path: Path) -> None:
    cfg = {
        "model_type": "llama",
        **SIZES,
        "sliding_window": 512,
        "layer_types": ["sliding_atention", "full_attention"],
    }
    assert hf_refuses(cfg, tmp_path)
    with pytest.raises(ValueError, match="unknown entry 'sliding_atention'.*full_attention.*did you mean"):
        RopeSpec.from_hf(cfg)
    with pytest.raises(ValueError, match="sliding_atention"):  # the trial's call
        layer_views(
            {"head_dim": 64, "sliding_window": 512, "layer_types": ["sliding_atention", "full_attention"]},
            context=8192,
        )
    for bad in (
        {"layer_types": ["full_attention"]},
        {"layer_types": "full_attention"},
    ):  # length 1 of 2; a str
        assert hf_refuses({**cfg, **bad}, tmp_path)
        with pytest.raises(ValueError, match="layer_types"):
            RopeSpec.from_hf({**cfg, **bad})
    ok = {**cfg, "layer_types": ["attention", "sliding_attention"]}  # a legacy name transformers remaps
    assert not hf_refuses(ok, tmp_path)
    assert RopeSpec.from_hf(ok) == RopeSpec(128)


@pytest.mark.parametrize("pattern", [0, -2, 2.5, True, "6"])
def test_f13_sliding_window_pattern(pattern: Any) -> None:
    cfg = {
        "model_type": "gemma3_text",
        **SIZES,
        "head_dim": 128,
        "sliding_window": 512,
        "sliding_window_pattern": pattern,
    }
    with pytest.raises(ValueError, match=f"sliding_window_pattern={pattern!r} must be a positive integer"):
        RopeSpec.from_hf(cfg, layer_type="full_attention")
    with pytest.raises(ValueError, match="sliding_window_pattern"):
        layer_views(cfg, context=4096)


def test_f13_sliding_window_pattern_zero_fails_in_transformers(tmp_path: Path) -> None:
    cfg = {"model_type": "gemma3_text", **SIZES, "head_dim": 128, "sliding_window_pattern": 0}
    assert hf_refuses(cfg, tmp_path)
    assert hf_config({**cfg, "sliding_window_pattern": 2}, tmp_path).layer_types == [
        "sliding_attention",
        "full_attention",
    ]


# ------------------------------------------------------------------ F18, F21c
@pytest.mark.parametrize("strict", [None, "no", 0, 1])
def test_f18_strict_must_be_a_bool(strict: Any) -> None:
    with pytest.raises(ValueError, match=rf"strict={strict!r} must be True or False"):
        RopeSpec.from_hf({"head_dim": 128}, strict=strict)


def test_f21c_to_hf_round_trip_needs_the_layout() -> None:
    spec = RopeSpec(128, layout="interleaved", scaling=Linear(2.0))
    assert RopeSpec.from_hf(spec.to_hf(), layout="interleaved") == spec
    assert RopeSpec.from_hf(spec.to_hf()).layout == "half"  # what the docstring now says
    doc = RopeSpec.to_hf.__doc__ or ""
    assert "layout=spec.layout" in doc and "RopeSpec.from_hf(spec.to_hf()) == spec" not in doc

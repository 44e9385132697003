"""Presets: every one parses through from_hf, and their numbers match the published worked values."""

from __future__ import annotations

import pytest

from ropekit import RopeSpec
from ropekit.presets import PRESETS, get_preset, preset_spec
from ropekit.scaling import Linear, Llama3, LongRope, Yarn

REQUIRED = {
    "llama-2-7b",
    "llama-3.1-8b",
    "llama-3.2-1b",
    "mistral-7b",
    "qwen2.5-7b",
    "qwen2.5-7b-yarn",
    "phi-3-mini-128k",
    "gemma-3-4b",
    "deepseek-v3",
    "gpt-oss-20b",
    "gpt-neox-20b",
}


def test_required_presets_exist_and_parse() -> None:
    assert REQUIRED <= set(PRESETS)
    for name, p in PRESETS.items():
        for lt in p.layer_types or (None,):
            assert isinstance(p.spec(lt), RopeSpec), name


def test_worked_values() -> None:
    """rope-types.md 1.4-1.6 worked values."""
    assert preset_spec("qwen2.5-7b-yarn").attention_factor == pytest.approx(1.1386, abs=1e-4)
    assert preset_spec("gpt-oss-20b").attention_factor == pytest.approx(1.3466, abs=1e-4)
    assert preset_spec("phi-3-mini-128k").attention_factor == pytest.approx(1.1902, abs=1e-4)
    assert preset_spec("deepseek-v3").attention_factor == 1.0
    gpt_oss = preset_spec("gpt-oss-20b").scaling
    assert isinstance(gpt_oss, Yarn)
    lo, hi = gpt_oss.ramp_bounds(150_000.0, 64)
    assert (round(lo, 4), round(hi, 4)) == (8.0928, 17.398)  # un-rounded because truncate is false
    ds = preset_spec("deepseek-v3").scaling
    assert ds.ramp_bounds(10_000.0, 64) == (10, 23)
    qwen = preset_spec("qwen2.5-7b-yarn").scaling
    assert qwen.ramp_bounds(1e6, 128) == (23, 40)


def test_llama31_band_counts() -> None:
    """Llama 3.1 (d 128): 29 pairs unchanged, 6 smoothed, 29 divided by 8."""
    spec = preset_spec("llama-3.1-8b")
    assert isinstance(spec.scaling, Llama3)
    ratio = (
        RopeSpec(128, base=5e5).inv_freq(dtype=__import__("torch").float64)
        / spec.inv_freq(dtype=__import__("torch").float64)
    ).tolist()
    assert sum(abs(r - 1) < 1e-12 for r in ratio) == 29
    assert sum(abs(r - 8) < 1e-9 for r in ratio) == 29
    assert (
        preset_spec("llama-3.2-1b").scaling.factor == 32.0
    )  # not the 8 of 3.1 (meta-llama/llama-models #241)


def test_gemma3_layer_types_and_phi3() -> None:
    assert preset_spec("gemma-3-4b", "sliding_attention") == RopeSpec(256, base=10_000.0)
    assert preset_spec("gemma-3-4b", "full_attention").scaling == Linear(8.0)
    sc = preset_spec("phi-3-mini-128k").scaling
    assert isinstance(sc, LongRope) and len(sc.long_factor) == len(sc.short_factor) == 48
    neox = preset_spec("gpt-neox-20b")
    assert (neox.head_dim, neox.rotary_dim) == (96, 24)
    assert preset_spec("deepseek-v3").layout == "interleaved"


def test_unknown_preset() -> None:
    with pytest.raises(ValueError, match="unknown preset 'llama-9'"):
        get_preset("llama-9")


def test_layer_types_match_the_views() -> None:
    """Every preset's declared layer types are the ones its config yields, and each has a spec."""
    for name, p in PRESETS.items():
        views = p.views()
        assert [v.layer_type for v in views] == (list(p.layer_types) or [None]), name
        for v in views:
            assert v.spec == p.spec(v.layer_type), name


def test_per_layer_type_presets() -> None:
    gpt_oss = get_preset("gpt-oss-20b")
    assert gpt_oss.spec("sliding_attention") == gpt_oss.spec("full_attention") == preset_spec("gpt-oss-20b")
    assert [v.window for v in gpt_oss.views()] == [128, None]
    gemma2 = get_preset("gemma-2-9b")
    assert gemma2.spec("sliding_attention") == RopeSpec(256, base=1e4) and gemma2.context == 8192
    assert [(v.window, v.layers) for v in gemma2.views()] == [(4096, 21), (None, 21)]
    assert [v.window for v in get_preset("mistral-7b").views()] == [4096]
    with pytest.raises(ValueError, match="'local' is not a layer type of gemma-3-4b"):
        get_preset("gemma-3-4b").spec("local")

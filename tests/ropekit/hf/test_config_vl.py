"""VL configs: from_hf / to_hf against transformers' own config classes and VL rotary code (the oracle)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from ropekit import RopeSpec
from ropekit.axis_tables import apply_rope_axes
from ropekit.presets_vl import VL_PRESETS

T = pytest.importorskip("transformers")


def _ernie_config(**kw):
    from transformers.models.ernie4_5_vl_moe.configuration_ernie4_5_vl_moe import Ernie4_5_VLMoeConfig

    return Ernie4_5_VLMoeConfig(**kw)


GLM_TEXT = {"rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5,
                                "mrope_section": [8, 12, 12]}}  # fmt: skip
CONFIGS = {
    "qwen2_vl": lambda: T.Qwen2VLConfig(),
    "qwen2_5_vl": lambda: T.Qwen2_5_VLConfig(),
    "qwen3_vl": lambda: T.Qwen3VLConfig(),
    "qwen3_vl_moe": lambda: T.Qwen3VLMoeConfig(),
    "glm4v": lambda: T.Glm4vConfig(text_config=GLM_TEXT),
    # GLM-4.5V: same sections and partial rotary as GLM-4V, but half-split pairs (its rotate_half)
    "glm4v_moe": lambda: T.Glm4vMoeConfig(text_config={**GLM_TEXT, "head_dim": 128}),
    "ernie4_5_vl_moe": lambda: _ernie_config(),
}


def _hf_rotary(name: str, text_config):
    if name == "qwen2_vl":
        from transformers.models.qwen2_vl import modeling_qwen2_vl as m

        return m, m.Qwen2VLRotaryEmbedding(text_config)
    if name == "qwen2_5_vl":
        from transformers.models.qwen2_5_vl import modeling_qwen2_5_vl as m

        return m, m.Qwen2_5_VLRotaryEmbedding(text_config)
    if name == "qwen3_vl":
        from transformers.models.qwen3_vl import modeling_qwen3_vl as m

        return m, m.Qwen3VLTextRotaryEmbedding(text_config)
    if name == "qwen3_vl_moe":
        from transformers.models.qwen3_vl_moe import modeling_qwen3_vl_moe as m

        return m, m.Qwen3VLMoeTextRotaryEmbedding(text_config)
    if name == "glm4v":
        from transformers.models.glm4v import modeling_glm4v as m

        return m, m.Glm4vTextRotaryEmbedding(text_config)
    if name == "glm4v_moe":
        from transformers.models.glm4v_moe import modeling_glm4v_moe as m

        return m, m.Glm4vMoeTextRotaryEmbedding(text_config)
    from transformers.models.ernie4_5_vl_moe import modeling_ernie4_5_vl_moe as m

    return m, m.Ernie4_5_VLMoeTextRotaryEmbedding(text_config)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_from_hf_config_object_rotates_like_transformers(name: str) -> None:
    cfg = CONFIGS[name]()
    spec = RopeSpec.from_hf(cfg)
    assert spec.axes is not None and spec.n_axes == 3
    m, emb = _hf_rotary(name, cfg.text_config)
    d = spec.head_dim
    q, k = torch.randn(1, 2, 9, d), torch.randn(1, 2, 9, d)
    pos = torch.randint(0, 40, (3, 1, 9))
    cos, sin = emb(q, pos)
    qh, kh = m.apply_rotary_pos_emb(q, k, cos, sin)
    qr, kr = apply_rope_axes(q, k, pos, spec, format="bhsd")
    torch.testing.assert_close(qr, qh, atol=3e-5, rtol=1e-5)
    torch.testing.assert_close(kr, kh, atol=3e-5, rtol=1e-5)
    # the same from the config.json dict (v5 schema, text_config nesting)
    assert RopeSpec.from_hf(cfg.to_dict()) == spec


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_to_hf_round_trip(name: str) -> None:
    spec = RopeSpec.from_hf(CONFIGS[name]())
    frag = spec.to_hf()
    assert "mrope_section" in frag["rope_parameters"]
    back = RopeSpec.from_hf({**frag, "model_type": name})
    assert back == spec


def test_v4_qwen2_vl_legacy_schema() -> None:
    v4 = {"model_type": "qwen2_vl", "hidden_size": 3584, "num_attention_heads": 28, "rope_theta": 1e6,
          "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]}}  # fmt: skip
    spec = RopeSpec.from_hf(v4)
    assert spec.head_dim == 128 and spec.base == 1e6 and spec.axes.letters() == "T" * 16 + "H" * 24 + "W" * 24  # type: ignore[union-attr]
    assert spec == RopeSpec.from_hf(T.Qwen2VLConfig(**{k: v for k, v in v4.items() if k != "model_type"}))


def test_presets_parse() -> None:
    for name, p in VL_PRESETS.items():
        spec = RopeSpec.from_hf(p["config"])
        assert spec.axes is not None, name


def test_errors_name_the_key() -> None:
    bad_sum = {
        "model_type": "qwen2_vl",
        "head_dim": 128,
        "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 20]},
    }
    with pytest.raises(
        ValueError, match=r"mrope_section=\[16, 24, 20\] sums to 60 but the rotary dim 128 has 64"
    ):
        RopeSpec.from_hf(bad_sum)
    with pytest.raises(ValueError, match="mrope_section must be three non-negative ints"):
        RopeSpec.from_hf({"model_type": "qwen2_vl", "head_dim": 128, "rope_scaling": {"mrope_section": [64]}})
    q3 = {"model_type": "qwen3_vl_text", "head_dim": 128,
          "rope_parameters": {"rope_type": "default", "mrope_section": [24, 20, 20], "mrope_interleaved": False}}  # fmt: skip
    # transformers' Qwen3-VL does not read the key: warned and ignored in both modes (test_config_vl_interleaved)
    for strict in (True, False):
        with pytest.warns(
            UserWarning, match="mrope_interleaved=False is ignored for model_type='qwen3_vl_text'"
        ):
            assert RopeSpec.from_hf(q3, strict=strict).axes.scheme == "interleaved"  # type: ignore[union-attr]
    with pytest.raises(ValueError, match="single RoPE"):
        RopeSpec.from_hf(T.Qwen2VLConfig(), layer_type="full_attention")
    with pytest.raises(ValueError, match="unknown keys"):
        RopeSpec.from_hf(
            {
                "model_type": "qwen2_vl",
                "head_dim": 128,
                "rope_scaling": {"mrope_section": [16, 24, 24], "foo": 1},
            }
        )
    from ropekit.presets_vl import pixtral_spec

    with pytest.raises(ValueError, match="no transformers mrope_section equivalent"):
        pixtral_spec().to_hf()


# Configs as transformers v4 (4.45-4.57) wrote them, written by hand from its configuration classes: top-level
# ``rope_theta``, ``rope_scaling`` with the sections; v4 rewrote ``"type": "mrope"`` to ``"default"`` and added
# ``"rope_type"`` when it loaded a config, so re-saved files carry both spellings. Hub files of Qwen2/2.5-VL are
# flat (no text_config); v4.52+ nests the text part.
_Q2_HUB = {"type": "mrope", "mrope_section": [16, 24, 24]}
_Q2_SAVED = {"type": "default", "mrope_section": [16, 24, 24], "rope_type": "default"}
_Q3 = {"mrope_interleaved": True, "mrope_section": [24, 20, 20], "rope_type": "default"}
V4 = {
    "qwen2_vl hub (flat)": ("qwen2_vl", {"model_type": "qwen2_vl", "hidden_size": 1536, "num_attention_heads": 12,
                                         "num_key_value_heads": 2, "rope_theta": 1000000.0, "rope_scaling": _Q2_HUB}),
    "qwen2_vl re-saved (nested)": ("qwen2_vl", {"model_type": "qwen2_vl", "rope_theta": 1000000.0, "text_config": {
        "model_type": "qwen2_vl_text", "hidden_size": 1536, "num_attention_heads": 12, "rope_theta": 1000000.0,
        "rope_scaling": _Q2_SAVED}}),
    "qwen2_5_vl hub (flat)": ("qwen2_5_vl", {"model_type": "qwen2_5_vl", "hidden_size": 3584,
                                             "num_attention_heads": 28, "rope_theta": 1000000.0,
                                             "rope_scaling": _Q2_HUB}),
    "qwen2_5_vl re-saved (nested)": ("qwen2_5_vl", {"model_type": "qwen2_5_vl", "text_config": {
        "model_type": "qwen2_5_vl_text", "hidden_size": 3584, "num_attention_heads": 28, "rope_theta": 1000000.0,
        "rope_scaling": _Q2_SAVED}}),
    "qwen3_vl": ("qwen3_vl", {"model_type": "qwen3_vl", "text_config": {
        "model_type": "qwen3_vl_text", "head_dim": 128, "hidden_size": 4096, "num_attention_heads": 32,
        "rope_theta": 5000000, "rope_scaling": _Q3}}),
    "qwen3_vl_moe": ("qwen3_vl_moe", {"model_type": "qwen3_vl_moe", "text_config": {
        "model_type": "qwen3_vl_moe_text", "head_dim": 128, "hidden_size": 2048, "num_attention_heads": 32,
        "rope_theta": 5000000, "rope_scaling": _Q3}}),
    "glm4v": ("glm4v", {"model_type": "glm4v", "text_config": {
        "model_type": "glm4v_text", "hidden_size": 4096, "num_attention_heads": 32, "partial_rotary_factor": 0.5,
        "rope_theta": 10000.0, "rope_scaling": {"type": "default", "mrope_section": [8, 12, 12]}}}),
    "ernie4_5_vl_moe (v4 spelling)": ("ernie4_5_vl_moe", {"model_type": "ernie4_5_vl_moe", "text_config": {
        "model_type": "ernie4_5_vl_moe_text", "hidden_size": 2560, "num_attention_heads": 20,
        "rope_theta": 500000.0, "rope_scaling": {"rope_type": "default", "mrope_section": [22, 22, 20]}}}),
}  # fmt: skip
#: what each v4 dict means: (head_dim, rotary_dim, base, mrope_section, map scheme, pairing)
V4_EXPECTED = {
    "qwen2_vl hub (flat)": (128, 128, 1e6, (16, 24, 24), "contiguous", "half"),
    "qwen2_vl re-saved (nested)": (128, 128, 1e6, (16, 24, 24), "contiguous", "half"),
    "qwen2_5_vl hub (flat)": (128, 128, 1e6, (16, 24, 24), "contiguous", "half"),
    "qwen2_5_vl re-saved (nested)": (128, 128, 1e6, (16, 24, 24), "contiguous", "half"),
    "qwen3_vl": (128, 128, 5e6, (24, 20, 20), "interleaved", "half"),
    "qwen3_vl_moe": (128, 128, 5e6, (24, 20, 20), "interleaved", "half"),
    "glm4v": (128, 64, 1e4, (8, 12, 12), "contiguous", "interleaved"),
    "ernie4_5_vl_moe (v4 spelling)": (
        128,
        128,
        5e5,
        (20, 22, 22),
        "lta",
        "interleaved",
    ),  # ropekit order t, h, w
}
_CLASSES = {"qwen2_vl": "Qwen2VLConfig", "qwen2_5_vl": "Qwen2_5_VLConfig", "qwen3_vl": "Qwen3VLConfig",
            "qwen3_vl_moe": "Qwen3VLMoeConfig", "glm4v": "Glm4vConfig"}  # fmt: skip


def _v5_config(family: str, v4: dict):
    """transformers 5's own reading of the v4 dict (its backward-compatible path): the rotation oracle."""
    import copy
    import warnings

    kw = {k: v for k, v in copy.deepcopy(v4).items() if k != "model_type"}
    if "text_config" in kw:
        kw["text_config"] = {k: v for k, v in kw["text_config"].items() if k != "model_type"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return _ernie_config(**kw) if family == "ernie4_5_vl_moe" else getattr(T, _CLASSES[family])(**kw)


@pytest.mark.parametrize("name", sorted(V4))
def test_v4_schemas(name: str) -> None:
    import copy

    family, v4 = V4[name]
    spec = RopeSpec.from_hf(copy.deepcopy(v4))
    head_dim, rotary_dim, base, sections, scheme, layout = V4_EXPECTED[name]
    assert (spec.head_dim, spec.rotary_dim, spec.base, spec.layout) == (head_dim, rotary_dim, base, layout)
    assert spec.axes is not None and spec.axes.sections == sections and spec.axes.scheme == scheme
    m, emb = _hf_rotary(family, _v5_config(family, v4).text_config)
    q, k = torch.randn(1, 2, 9, head_dim), torch.randn(1, 2, 9, head_dim)
    pos = torch.randint(0, 40, (3, 1, 9))  # small: transformers' float32 angles are then exact to ~1e-5
    qh, kh = m.apply_rotary_pos_emb(q, k, *emb(q, pos))
    qr, kr = apply_rope_axes(q, k, pos, spec, format="bhsd")
    torch.testing.assert_close(qr, qh, atol=3e-5, rtol=1e-5)
    torch.testing.assert_close(kr, kh, atol=3e-5, rtol=1e-5)


@pytest.mark.parametrize(
    "family", ["qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe", "glm4v", "ernie4_5_vl_moe"]
)
def test_missing_rope_theta_takes_transformers_default_of_that_schema(family: str) -> None:
    """No ``rope_theta`` anywhere: v5 (``rope_parameters``) -> transformers 5's class default (asked from the class
    itself); v4 (``rope_scaling``) -> the v4 class default, written from transformers v4's source."""
    sec = {"qwen3_vl": [24, 20, 20], "qwen3_vl_moe": [24, 20, 20], "glm4v": [8, 12, 12],
           "ernie4_5_vl_moe": [22, 22, 20]}.get(family, [16, 24, 24])  # fmt: skip
    text = {"model_type": f"{family}_text", "head_dim": 128, "hidden_size": 4096, "num_attention_heads": 32}
    if family == "glm4v":
        text["partial_rotary_factor"] = 0.5
    v5 = {"model_type": family, "text_config": {**text, "rope_parameters": {"rope_type": "default",
                                                                             "mrope_section": sec}}}  # fmt: skip
    v4 = {
        "model_type": family,
        "text_config": {**text, "rope_scaling": {"type": "default", "mrope_section": sec}},
    }
    want_v5 = _v5_config(family, {"model_type": family}).text_config.rope_parameters["rope_theta"]
    want_v4 = {"qwen3_vl": 5e6, "qwen3_vl_moe": 5e6, "glm4v": 1e4, "ernie4_5_vl_moe": 5e5}.get(family, 1e6)
    assert RopeSpec.from_hf(v5).base == want_v5
    assert RopeSpec.from_hf(v4).base == want_v4


def test_rope_scaling_wins_over_rope_parameters_as_in_transformers(tmp_path: Path) -> None:
    """Both keys in a Qwen2-VL text config: transformers 5.23 reads rope_scaling (its theta and sections) and drops
    rope_parameters; ropekit read rope_parameters (the user trial). Oracle: AutoConfig.from_pretrained."""
    import json
    import warnings

    text = {"model_type": "qwen2_vl_text", "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 2,
            "rope_parameters": {"rope_type": "default", "rope_theta": 1e4, "mrope_section": [2, 3, 3]},
            "rope_scaling": {"rope_type": "default", "rope_theta": 5e5, "mrope_section": [4, 2, 2]}}  # fmt: skip
    cfg = {"model_type": "qwen2_vl", "text_config": text}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hf = T.AutoConfig.from_pretrained(str(tmp_path)).text_config.rope_parameters
    with pytest.warns(UserWarning, match="transformers uses rope_scaling"):
        spec = RopeSpec.from_hf(cfg)
    assert spec.base == hf["rope_theta"] == 5e5
    assert spec.axes is not None and list(spec.axes.sections) == hf["mrope_section"] == [4, 2, 2]

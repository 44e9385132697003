"""VL configs: from_hf / to_hf against transformers' own config classes and VL rotary code (the oracle)."""

from __future__ import annotations

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
    with pytest.raises(ValueError, match="mrope_interleaved=False but qwen3_vl_text always interleaves"):
        RopeSpec.from_hf(q3)
    with pytest.warns(UserWarning, match="always interleaves"):
        assert RopeSpec.from_hf(q3, strict=False).axes.scheme == "interleaved"  # type: ignore[union-attr]
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

"""Layer types of a config: transformers' own layer_types, windows, and the RoPE of each type."""

from __future__ import annotations

import warnings

import pytest

from ropekit import RopeSpec
from ropekit.analysis.layers import config_layer_types, layer_views
from ropekit.presets import PRESETS
from ropekit.scaling import Linear

transformers = pytest.importorskip("transformers")


def _hf_layer_types(model_type: str, cfg: dict[str, object]) -> list[str]:
    keep = {k: v for k, v in cfg.items() if k not in ("model_type", "rope_scaling", "rope_theta")}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = transformers.AutoConfig.for_model(model_type, **keep)
    return list(config.layer_types)


@pytest.mark.parametrize("name", ["gemma-2-9b", "gemma-3-4b", "gpt-oss-20b"])
def test_layer_types_equal_transformers_own(name: str) -> None:
    cfg = PRESETS[name].config
    assert config_layer_types(cfg) == _hf_layer_types(str(cfg["model_type"]), cfg)


def test_gemma3_views() -> None:
    sliding, full = layer_views(PRESETS["gemma-3-4b"].config, context=131072)
    assert (sliding.layer_type, sliding.window, sliding.layers, sliding.span) == (
        "sliding_attention",
        1024,
        29,
        1024,
    )
    assert sliding.spec == RopeSpec(256, base=1e4)  # never scaled
    assert (full.layer_type, full.window, full.layers, full.span) == ("full_attention", None, 5, 131072)
    assert full.spec == RopeSpec(256, base=1e6, scaling=Linear(8.0))
    (only,) = layer_views(PRESETS["gemma-3-4b"].config, context=512, layer_type="sliding_attention")
    assert only.span == 512  # a window longer than the context is clipped to it


def test_v5_nested_rope_parameters_and_errors() -> None:
    cfg = {
        "head_dim": 64,
        "max_position_embeddings": 4096,
        "layer_types": ["sliding_attention", "sliding_attention", "full_attention"],
        "sliding_window": 256,
        "rope_parameters": {
            "sliding_attention": {"rope_type": "default", "rope_theta": 1e4},
            "full_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1e6},
        },
    }
    s, f = layer_views(cfg, context=4096)
    assert (s.layers, s.span, s.spec.base, f.layers, f.spec.scaling) == (2, 256, 1e4, 1, Linear(2.0))
    with pytest.raises(ValueError, match="'local' is not a layer type"):
        layer_views(cfg, context=4096, layer_type="local")
    with pytest.raises(ValueError, match="sliding_window"):
        layer_views({**cfg, "sliding_window": None}, context=4096)
    with pytest.raises(ValueError, match="single kind"):
        layer_views({"head_dim": 64}, context=10, layer_type="full_attention")


def test_qwen2_sliding_window_only_when_enabled() -> None:
    base = {"model_type": "qwen2", "head_dim": 64, "num_hidden_layers": 4, "sliding_window": 1024}
    assert config_layer_types({**base, "use_sliding_window": False}) is None
    types = config_layer_types({**base, "use_sliding_window": True, "max_window_layers": 2})
    assert types == _hf_layer_types("qwen2", {**base, "use_sliding_window": True, "max_window_layers": 2})


@pytest.mark.parametrize("context", [-5, 0, 1.5, "4096", True])
def test_layer_views_refuses_a_context_that_is_not_a_positive_int(context: object) -> None:
    """The user trial: -5, 1.5 and '4096' came back inside LayerViews unchecked."""
    with pytest.raises(ValueError, match=r"context must be a positive int, got "):
        layer_views({"head_dim": 64, "rope_theta": 1e4}, context=context)  # type: ignore[arg-type]

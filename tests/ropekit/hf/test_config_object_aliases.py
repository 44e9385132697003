"""Phi-3's legacy alias ("yarn" means longrope) applies to config.json dicts, not to standardized config objects.

transformers converts a Phi-3 config.json's "su" / "yarn" to longrope when it builds the config object; a yarn set
on the object afterwards is plain YaRN to its rotary module (transformers' own test_model_rope_scaling_frequencies
does this; found by tools/hf_suite). Oracle: transformers' Phi3RotaryEmbedding on the same config.
"""

from __future__ import annotations

import warnings

import pytest
import torch

transformers = pytest.importorskip("transformers")

import ropekit.hf
from ropekit.hf.config import spec_from_hf
from ropekit.scaling.longrope import LongRope
from ropekit.scaling.yarn import Yarn


def test_yarn_set_on_a_phi3_config_object_is_yarn_like_transformers() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg = transformers.Phi3Config(
            vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=1, num_attention_heads=4,
            max_position_embeddings=64, pad_token_id=0, eos_token_id=None,
        )  # fmt: skip
        model = ropekit.hf.patch(transformers.Phi3Model(cfg))
        cfg.rope_parameters = {
            "rope_type": "yarn",
            "factor": 10.0,
            "rope_theta": 1e4,
            "partial_rotary_factor": 1.0,
        }
        ours = type(model.rotary_emb)(config=cfg)
        theirs = transformers.models.phi3.modeling_phi3.Phi3RotaryEmbedding(config=cfg)
    assert isinstance(next(iter(ours._ropekit_specs.values())).scaling, Yarn)
    x, pos = torch.randn(1), torch.arange(96)[None]
    for a, b in zip(ours(x, pos), theirs(x, pos)):
        assert float((a - b).abs().max()) <= 1e-5


def test_yarn_in_a_phi3_config_json_still_means_longrope() -> None:
    raw = {
        "model_type": "phi3",
        "head_dim": 8,
        "max_position_embeddings": 64,
        "original_max_position_embeddings": 16,
        "rope_scaling": {"type": "yarn", "short_factor": [1.0] * 4, "long_factor": [2.0] * 4},
    }
    assert isinstance(spec_from_hf(raw).scaling, LongRope)

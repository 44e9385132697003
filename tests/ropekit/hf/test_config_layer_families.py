"""The v4 (flat-key) configs of families whose transformers config builds a RoPE per layer type (Gemma 3, OLMo 3,
ModernBERT, ...): ropekit reads each layer type's RoPE as transformers 5.23 does. Oracle: AutoConfig.from_pretrained
of the same config.json (its per-layer-type ``rope_parameters``). The user trial found OLMo 3's sliding layers
scaled by its YaRN ``rope_scaling`` and ModernBERT's local / global thetas read as one."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

from ropekit import RopeSpec
from ropekit.analysis import layer_views
from ropekit.hf.config_families import PER_LAYER_TYPE_FAMILIES

transformers = pytest.importorskip("transformers")

YARN = {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 8192}
THETAS = {"rope_theta": 5e5, "rope_local_base_freq": 2e4, "local_rope_theta": 3e4, "global_rope_theta": 7e5}


@pytest.mark.parametrize("model_type", sorted(PER_LAYER_TYPE_FAMILIES))
@pytest.mark.parametrize("thetas", [THETAS, {}], ids=["thetas", "defaults"])
def test_each_layer_type_reads_as_transformers(
    model_type: str, thetas: dict[str, float], tmp_path: Path
) -> None:
    types = ["sliding_attention", "sliding_attention", "sliding_attention", "full_attention"]
    cfg = {"model_type": model_type, "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 4,
           "head_dim": 16, "layer_types": types, "sliding_window": 8, "max_position_embeddings": 65536,
           "rope_scaling": YARN, **thetas}  # fmt: skip
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            hf = transformers.AutoConfig.from_pretrained(str(tmp_path))
        except Exception as e:  # noqa: BLE001 - a config class that needs more keys than this test gives
            pytest.skip(f"transformers does not build this config: {type(e).__name__}")
    rp = hf.rope_parameters
    views = {v.layer_type: v.spec for v in layer_views(cfg, context=65536)}
    for t in ("sliding_attention", "full_attention"):
        spec = RopeSpec.from_hf(cfg, layer_type=t)
        assert spec.base == rp[t]["rope_theta"], (t, spec.base, rp[t])
        assert (spec.scaling is not None) == (rp[t]["rope_type"] == "yarn"), (t, spec.scaling, rp[t])
        assert views[t] == spec


@pytest.mark.parametrize("model_type", ["gptj", "codegen"])
def test_gptj_codegen_rotate_with_base_10000_whatever_the_config_says(
    model_type: str, tmp_path: Path
) -> None:
    """transformers' GPT-J / CodeGen attention builds its table with base 10000 (create_sinusoidal_positions) and
    ignores rope_theta and rope_scaling: ropekit reads such a config the same way, with a warning. Oracle: the
    model's own embed_positions table (sin | cos of position * inv_freq)."""
    import torch

    cfg = {"model_type": model_type, "n_embd": 64, "n_head": 4, "n_layer": 1, "rotary_dim": 8, "vocab_size": 32,
           "n_positions": 64, "rope_theta": 5e5, "rope_scaling": {"rope_type": "linear", "factor": 4.0}}  # fmt: skip
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hf_cfg = transformers.AutoConfig.from_pretrained(str(tmp_path))
        model = transformers.AutoModelForCausalLM.from_config(hf_cfg)
    attn = next(m for m in model.modules() if hasattr(m, "embed_positions"))
    table = attn.embed_positions[:, :4]  # sin of position * inv_freq, rotary_dim / 2 columns
    with pytest.warns(UserWarning, match="rotates with base 10000 and no scaling"):
        spec = RopeSpec.from_hf(cfg)
    assert spec.base == 1e4 and spec.scaling is None and spec.rotary_dim == 8
    want = torch.sin(torch.arange(64, dtype=torch.float64)[:, None] * spec.inv_freq().double())
    assert (table.double() - want).abs().max() < 1e-5


def test_default_theta_matches_every_transformers_config_class() -> None:
    """Every config class transformers ships: its default_theta (the base of a config.json without rope_theta) is
    ropekit's (ropekit.hf.default_theta; 10000 where absent). A family added there fails until added here."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    from ropekit.hf.default_theta import DEFAULT_THETA

    theirs = {}
    for model_type, cls in CONFIG_MAPPING.items():
        dt = getattr(cls, "default_theta", None)
        if isinstance(dt, (int, float)) and not isinstance(dt, bool):
            theirs[model_type] = float(dt)
    assert {k: v for k, v in theirs.items() if v != 1e4} == DEFAULT_THETA


@pytest.mark.parametrize("model_type", ["minimax_m2", "mixtral", "gpt_oss", "smollm3"])
def test_a_config_without_rope_theta_reads_the_family_default(model_type: str, tmp_path: Path) -> None:
    cfg = {
        "model_type": model_type,
        "hidden_size": 64,
        "num_attention_heads": 4,
        "num_hidden_layers": 2,
        "head_dim": 16,
    }
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            rp = transformers.AutoConfig.from_pretrained(str(tmp_path)).rope_parameters
        except Exception as e:  # noqa: BLE001 - a config class that needs more keys than this test gives
            pytest.skip(f"transformers does not build this config: {type(e).__name__}")
    rp = rp.get("full_attention", rp) if all(isinstance(v, dict) for v in rp.values()) else rp
    assert RopeSpec.from_hf(cfg).base == rp["rope_theta"] != 1e4

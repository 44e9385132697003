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


def _fixed_head_dims(hidden: int, heads: int) -> dict[str, int]:
    """Families whose config class, built with this hidden size and head count and no head_dim, has a head_dim
    other than hidden // heads."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    out = {}
    for model_type in list(CONFIG_MAPPING.keys()):
        try:
            hd = getattr(
                CONFIG_MAPPING[model_type](hidden_size=hidden, num_attention_heads=heads), "head_dim", None
            )
        except Exception:  # noqa: BLE001, S112 - a class that cannot be built this way has no default to read
            continue
        if isinstance(hd, int) and not isinstance(hd, bool) and hd != hidden // heads:
            out[model_type] = hd
    return out


def _default_partials(hidden: int, heads: int) -> dict[str, float | dict[str, float]]:
    """Families whose config class, built with no RoPE keys, rotates a fraction below 1 (per layer type where its
    rope_parameters are per layer type)."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    out: dict[str, float | dict[str, float]] = {}
    for model_type in list(CONFIG_MAPPING.keys()):
        try:
            rp = CONFIG_MAPPING[model_type](hidden_size=hidden, num_attention_heads=heads).rope_parameters
        except Exception:  # noqa: BLE001, S112 - a class that cannot be built this way has no default to read
            continue
        if not isinstance(rp, dict) or not rp:
            continue
        if all(isinstance(v, dict) or v is None for v in rp.values()):
            per = {
                t: float(v.get("partial_rotary_factor", 1.0)) for t, v in rp.items() if isinstance(v, dict)
            }
            if any(f != 1.0 for f in per.values()):
                out[model_type] = per
        elif float(rp.get("partial_rotary_factor", 1.0)) != 1.0:
            out[model_type] = float(rp["partial_rotary_factor"])
    return out


def test_default_partial_factors_match_every_transformers_config_class() -> None:
    """The config classes' default rotated fractions below 1: the flat ones are DEFAULT_PARTIAL (GPT-NeoX's in
    NEOX_TYPES), the per-layer-type ones are PER_LAYER_DEFAULT_FAMILIES (refused without rope_parameters)."""
    from ropekit.hf.class_defaults import DEFAULT_PARTIAL, PER_LAYER_DEFAULT_FAMILIES
    from ropekit.hf.config_families import NEOX_TYPES

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a = _default_partials(96, 3)
    assert a == _default_partials(160, 5)
    flat = {k: v for k, v in a.items() if not isinstance(v, dict)}
    assert flat == {**DEFAULT_PARTIAL, **{k: v for k, v in NEOX_TYPES.items() if v != 1.0}}
    assert {k for k, v in a.items() if isinstance(v, dict)} == PER_LAYER_DEFAULT_FAMILIES


def test_a_flat_config_of_a_per_layer_default_family_is_refused() -> None:
    with pytest.raises(ValueError, match="gemma4_text.*no rope_parameters.*per layer type"):
        RopeSpec.from_hf(
            {"model_type": "gemma4_text", "hidden_size": 64, "num_attention_heads": 4, "head_dim": 16}
        )


@pytest.mark.parametrize(
    "model_type", ["glm", "glm4", "phi", "stablelm", "qwen3_next", "nemotron", "persimmon"]
)
@pytest.mark.parametrize("form", ["flat", "rope_parameters"])
def test_a_config_without_partial_factor_reads_the_family_default(
    model_type: str, form: str, tmp_path: Path
) -> None:
    """No partial_rotary_factor anywhere: the rotated channels are transformers' (AutoConfig's factor, its
    config class's default), in the flat (v4) and the rope_parameters (v5) form."""
    cfg: dict[str, object] = {"model_type": model_type, "hidden_size": 64, "num_attention_heads": 4,
                              "num_hidden_layers": 2, "head_dim": 16}  # fmt: skip
    if form == "rope_parameters":
        cfg["rope_parameters"] = {"rope_type": "default", "rope_theta": 10000.0}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hf = transformers.AutoConfig.from_pretrained(str(tmp_path))
        spec = RopeSpec.from_hf(cfg)
    factor = hf.rope_parameters.get("partial_rotary_factor", 1.0)
    assert factor < 1.0
    assert spec.rotary_dim == int(16 * factor)


def test_default_head_dim_matches_every_transformers_config_class() -> None:
    """Every config class transformers ships, built without head_dim at two hidden sizes / head counts: the ones
    whose head_dim is a fixed default (the same at both, not hidden // heads) are ropekit's DEFAULT_HEAD_DIM, no
    more and no fewer. A family added or changed there fails until it is updated here."""
    from ropekit.hf.class_defaults import DEFAULT_HEAD_DIM

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a, b = _fixed_head_dims(96, 3), _fixed_head_dims(160, 5)
    assert {k: v for k, v in a.items() if b.get(k) == v} == DEFAULT_HEAD_DIM


@pytest.mark.parametrize(
    "model_type", ["minimax_m2", "qwen3", "gemma", "gpt_oss", "glm", "seed_oss", "ernie4_5"]
)
def test_a_config_without_head_dim_reads_the_family_default(model_type: str, tmp_path: Path) -> None:
    """A config.json without head_dim: the rotated head and channels are transformers' (AutoConfig's head_dim,
    times its partial_rotary_factor), not hidden_size // num_attention_heads (the user-trial lead: MiniMax-M2)."""
    cfg = {"model_type": model_type, "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 2}
    if model_type == "minimax_m2":
        cfg["rotary_dim"] = 64
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hf = transformers.AutoConfig.from_pretrained(str(tmp_path))
        spec = RopeSpec.from_hf(cfg)
    rp = hf.rope_parameters
    rp = rp.get("full_attention", rp) if all(isinstance(v, dict) for v in rp.values()) else rp
    assert spec.head_dim == hf.head_dim != 16
    assert spec.rotary_dim == int(hf.head_dim * rp.get("partial_rotary_factor", 1.0))

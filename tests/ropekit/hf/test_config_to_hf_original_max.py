"""``spec.to_hf()`` (v5) merged into a model's config gives transformers' own rotary module the spec's original
length L0 (``original_max_position_embeddings``), in every way the docs merge a fragment into a config.

transformers 5.23's ``standardize_rope_params`` (run again by every rope init function) takes a top-level
``original_max_position_embeddings`` over the rope dict's for llama3 / yarn / longrope, and Phi-3's and
Phi-4-multimodal's config classes always have one (a field, default 4096). A fragment with L0 only inside
``rope_parameters`` therefore computed with 4096 in those families: other frequencies past 4096 tokens and another
attention factor (a user-trial finding). Oracles: LongRoPE's frequencies and attention factor written from the
formula in float64 (checked against transformers' module output, cos and sin included); for YaRN / Llama 3,
transformers' own rotary module on a config written by hand with the intended L0.
"""

from __future__ import annotations

import copy
import importlib
import inspect
import math
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

from ropekit import RopeSpec
from ropekit.hf.config_families import ORIGINAL_MAX_DEFAULT, ORIGINAL_MAX_IGNORES_TOP
from ropekit.presets import PRESETS
from ropekit.scaling import Llama3, LongRope, Yarn

transformers = pytest.importorskip("transformers")
from transformers.models.auto.configuration_auto import CONFIG_MAPPING

from tests.ropekit.hf.config_oracle import hf_config

L0_KEY = "original_max_position_embeddings"
SIZES = {"hidden_size": 256, "num_attention_heads": 4, "num_key_value_heads": 4, "num_hidden_layers": 1}
HEAD, ROTARY = (
    64,
    32,
)  # partial rotation, written explicitly: Phi-4-multimodal's checkpoints rotate a fraction too
MAX = 131072
_SHORT = tuple(1.0 + i / 16 for i in range(ROTARY // 2))
_LONG = tuple(2.0 + 3 * i for i in range(ROTARY // 2))


def _longrope_families() -> list[str]:
    """Every family ropekit knows to carry LongRoPE: the families whose config class has a top-level L0 (its
    field, or Phi-MoE's copy of the rope dict's) and the model types of the presets whose RoPE is LongRoPE.
    (transformers 5.23's config classes declaring the field, enumerated once over CONFIG_MAPPING, ~50 s:
    phi3 and phi4_multimodal, the keys of ORIGINAL_MAX_DEFAULT.)"""
    presets = {
        str(p.config.get("model_type")) for p in PRESETS.values() if isinstance(p.spec().scaling, LongRope)
    }
    return sorted(set(ORIGINAL_MAX_DEFAULT) | set(ORIGINAL_MAX_IGNORES_TOP) | presets)


#: rope keys a family requires beyond what ropekit writes: Phi-MoE's cos/sin multipliers (its module uses them
#: instead of the attention factor); set to the spec's attention factor, so only L0 decides the comparison
def _extra(model_type: str, spec: RopeSpec) -> dict[str, float]:
    a = spec.attention_factor
    return {"short_mscale": a, "long_mscale": a} if model_type == "phimoe" else {}


def _rotary_class(model_type: str) -> type:
    """The text rotary module class of ``model_type``'s modeling file (the one its decoder builds)."""
    mod = importlib.import_module(
        CONFIG_MAPPING[model_type].__module__.replace(".configuration_", ".modeling_")
    )
    found = [
        c
        for n, c in inspect.getmembers(mod, inspect.isclass)
        if n.endswith("RotaryEmbedding") and c.__module__ == mod.__name__
        and not any(k in n for k in ("Vision", "Audio"))
    ]  # fmt: skip
    assert len(found) == 1, (model_type, found)
    return found[0]


def _merged(model_type: str, frag: dict[str, Any], how: str, tmp_path: Path) -> Any:
    """transformers' config of ``model_type`` with ``frag`` merged in ``how`` (the documented ways)."""
    cls = CONFIG_MAPPING[model_type]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if how == "kwargs":  # Phi3Config(**other_fields, **spec.to_hf())
            return cls(**SIZES, **copy.deepcopy(frag))
        if how == "update":  # config.update(spec.to_hf())
            cfg = cls(**SIZES)
            cfg.update(copy.deepcopy(frag))
            return cfg
        return hf_config({"model_type": model_type, **SIZES, **frag}, tmp_path)  # {**config_json, **to_hf()}


def _longrope_oracle(sc: LongRope, base: float, seq_len: int) -> tuple[torch.Tensor, float]:
    """LongRoPE (Phi-3) from the formula, float64: inv_freq_i = 1 / (f_i base^(2i/d)), f = short factors up to L0
    tokens and long factors past it; attention sqrt(1 + ln s / ln L0), s = max / L0."""
    L0 = sc.original_max_position_embeddings
    f = sc.long_factor if seq_len > L0 else sc.short_factor
    inv = torch.tensor(
        [1.0 / (f[i] * base ** (2 * i / ROTARY)) for i in range(ROTARY // 2)], dtype=torch.float64
    )
    s = MAX / L0
    return inv, math.sqrt(1 + math.log(s) / math.log(L0))


@pytest.mark.parametrize("how", ["kwargs", "update", "config.json"])
@pytest.mark.parametrize("L0", [2048, 4096, 8192])  # below, at and above Phi-3's class default 4096
@pytest.mark.parametrize("model_type", _longrope_families())
def test_longrope_fragment_gives_transformers_the_spec_original_length(
    model_type: str, L0: int, how: str, tmp_path: Path
) -> None:
    spec = RopeSpec(HEAD, rotary_dim=ROTARY, scaling=LongRope(_SHORT, _LONG, L0, max_position_embeddings=MAX))
    frag = spec.to_hf()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # top-level and rope-dict L0 agree: no "differ" warning
        assert RopeSpec.from_hf(frag) == spec
    frag["rope_parameters"].update(_extra(model_type, spec))
    emb = _rotary_class(model_type)(_merged(model_type, frag, how, tmp_path))
    sc = spec.scaling
    assert isinstance(sc, LongRope)
    for seq_len in (
        L0 - 1000,
        L0 + 1000,
    ):  # each side of L0: 4096 would pick the other factors for 2048 / 8192
        pos = torch.tensor([[0, 7, seq_len - 1]])
        cos, sin = emb(torch.zeros(1, 3, HEAD), pos)
        inv, attn = _longrope_oracle(sc, spec.base, seq_len)
        torch.testing.assert_close(emb.inv_freq.double(), inv, rtol=1e-6, atol=0)
        assert emb.attention_scaling == pytest.approx(attn, rel=1e-12)
        if model_type == "phimoe" and seq_len > L0:
            continue  # Phi-MoE's forward recomputes its table without seq_len: short factors at any length
        ang = pos[0, :, None].double() * inv
        want = torch.cat((ang, ang), -1)  # angles up to ~1e4 rad, formed in float32 there: ~1e-3 off
        torch.testing.assert_close(cos[0].double(), want.cos() * attn, rtol=0, atol=3e-3)
        torch.testing.assert_close(sin[0].double(), want.sin() * attn, rtol=0, atol=3e-3)


# YaRN / Llama 3: no config class of theirs declares a top-level L0, but a config that carries one (a config.json
# with the key at the top, as Phi-3's; a config object it was set on) wins over the fragment's when the fragment
# is merged with config.update -- unless the fragment writes it at the top level too.
SCALED = {
    "yarn": (RopeSpec(HEAD, base=1e6, scaling=Yarn(4.0, 8192)), "qwen2"),
    "llama3": (RopeSpec(HEAD, base=5e5, scaling=Llama3(8.0, 1.0, 4.0, 8192)), "llama"),
}


@pytest.mark.parametrize("name", sorted(SCALED))
def test_yarn_and_llama3_fragments_win_over_a_stale_top_level_original_length(name: str) -> None:
    spec, model_type = SCALED[name]
    sc = spec.scaling
    assert isinstance(sc, (Yarn, Llama3))
    frag = spec.to_hf()
    cls, emb_cls = CONFIG_MAPPING[model_type], _rotary_class(model_type)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        stale = cls(**SIZES, head_dim=HEAD, max_position_embeddings=32768, **{L0_KEY: 2048})
        stale.update(copy.deepcopy(frag))
        # the oracle: the same rope parameters written by hand, no top-level L0 anywhere
        rp = {"rope_type": name, "rope_theta": spec.base, "factor": sc.factor, L0_KEY: 8192}
        if isinstance(sc, Llama3):
            rp.update(low_freq_factor=sc.low_freq_factor, high_freq_factor=sc.high_freq_factor)
        want = emb_cls(cls(**SIZES, head_dim=HEAD, max_position_embeddings=32768, rope_parameters=rp))
        got = emb_cls(stale)
    torch.testing.assert_close(got.inv_freq, want.inv_freq, rtol=0, atol=0)
    assert got.attention_scaling == want.attention_scaling
    assert want.inv_freq.shape == (HEAD // 2,)
    assert frag[L0_KEY] == frag["rope_parameters"][L0_KEY] == sc.original_max_position_embeddings

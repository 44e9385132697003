"""ropekit.hf.patch across scaling schemes: tiny random models give the same logits patched and unpatched.

Sequences are longer than original_max_position_embeddings so the llama3 / yarn / longrope / dynamic paths run
(the family sweep, ``test_families.py``, runs each family at its default scheme).
"""

from __future__ import annotations

import copy
import warnings

import pytest
import torch

transformers = pytest.importorskip("transformers")
from transformers import AutoModelForCausalLM

import ropekit.hf
from ropekit.hf.rotary import ROPEKIT_TABLES, RopekitRotary

# initializer_range 0.5: with HF's default 0.02 attention is almost uniform and a wrong rotation goes unseen.
SMALL = {
    "vocab_size": 128,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 256,
    "initializer_range": 0.5,
}
L0 = 32  # original length: test sequences (48 tokens, then generation) go past it


def _cfg(model_type: str, **kw):
    base = {**SMALL, **kw}  # later keys win
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return transformers.AutoConfig.for_model(model_type, **base)


SCHEMES = {
    "llama-llama3": lambda: _cfg(
        "llama",
        rope_parameters={
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": L0,
            "rope_theta": 500000.0,
        },
    ),
    "mistral-default": lambda: _cfg(
        "mistral", rope_parameters={"rope_type": "default", "rope_theta": 10000.0}, sliding_window=None
    ),
    "qwen2-yarn": lambda: _cfg(
        "qwen2",
        rope_parameters={
            "rope_type": "yarn",
            "factor": 4.0,
            "original_max_position_embeddings": L0,
            "rope_theta": 1e6,
        },
        max_position_embeddings=4 * L0,
    ),
    "qwen3-dynamic": lambda: _cfg(
        "qwen3",
        head_dim=16,
        rope_parameters={"rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0},
        max_position_embeddings=L0,
    ),
    "phi3-longrope": lambda: _cfg(
        "phi3",
        rope_parameters={
            "rope_type": "longrope",
            "short_factor": [1.0 + 0.1 * i for i in range(8)],
            "long_factor": [2.0 + i for i in range(8)],
            "original_max_position_embeddings": L0,
            "rope_theta": 10000.0,
        },
        pad_token_id=0,
    ),
    "gemma2-linear": lambda: _cfg(
        "gemma2", head_dim=16, rope_parameters={"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0}
    ),
    "gemma3-layer-types": lambda: _cfg(
        "gemma3_text",
        head_dim=16,
        sliding_window=16,
        layer_types=["sliding_attention", "full_attention"],
        rope_parameters={
            "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
            "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6},
        },
    ),
    "gpt_neox-partial": lambda: _cfg(
        "gpt_neox",
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25},
    ),
    "phi-partial": lambda: _cfg(
        "phi", rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5}
    ),
    "gemma-default": lambda: _cfg(
        "gemma", head_dim=16, rope_parameters={"rope_type": "default", "rope_theta": 10000.0}
    ),
    # explicit head_dim: with head_dim=None transformers' own yarn function fails (None * float)
    "mixtral-yarn": lambda: _cfg(
        "mixtral",
        head_dim=16,
        num_local_experts=2,
        num_experts_per_tok=1,
        sliding_window=None,
        rope_parameters={
            "rope_type": "yarn",
            "factor": 4.0,
            "original_max_position_embeddings": L0,
            "rope_theta": 1e6,
        },
        max_position_embeddings=4 * L0,
    ),
    "qwen2_moe-default": lambda: _cfg(
        "qwen2_moe",
        num_experts=2,
        num_experts_per_tok=1,
        moe_intermediate_size=32,
        shared_expert_intermediate_size=32,
        rope_parameters={"rope_type": "default", "rope_theta": 1e6},
    ),
    "qwen3_moe-linear": lambda: _cfg(
        "qwen3_moe",
        head_dim=16,
        num_experts=2,
        num_experts_per_tok=1,
        moe_intermediate_size=32,
        rope_parameters={"rope_type": "linear", "factor": 4.0, "rope_theta": 1e6},
    ),
    "stablelm-partial": lambda: _cfg(
        "stablelm",
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25},
    ),
    "starcoder2-default": lambda: _cfg(
        "starcoder2", sliding_window=None, rope_parameters={"rope_type": "default", "rope_theta": 100000.0}
    ),
    "olmo2-llama3": lambda: _cfg(
        "olmo2",
        rope_parameters={
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": L0,
            "rope_theta": 500000.0,
        },
    ),
    # granite's multipliers amplify float32 rounding at init 0.5 (7.5e-5 before any scaling): keep its logits ~O(5)
    "granite-dynamic": lambda: _cfg(
        "granite",
        initializer_range=0.3,
        rope_parameters={"rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0},
        max_position_embeddings=L0,
    ),
}


def _pair(name: str):
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = AutoModelForCausalLM.from_config(SCHEMES[name](), attn_implementation="eager").eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ours = ropekit.hf.patch(copy.deepcopy(ref))
    return ref, ours


@pytest.mark.parametrize("name", sorted(SCHEMES))
def test_full_forward_logits_equal(name: str) -> None:
    ref, ours = _pair(name)
    assert any(isinstance(m, RopekitRotary) for m in ours.modules())
    ids = torch.randint(0, 128, (2, 48))
    with torch.no_grad():
        a, b = ref(ids).logits, ours(ids).logits
    torch.testing.assert_close(b, a, rtol=0, atol=1e-4)


@pytest.mark.parametrize("name", sorted(SCHEMES))
def test_generation_with_kv_cache_equal(name: str) -> None:
    ref, ours = _pair(name)
    ids = torch.randint(0, 128, (1, L0 - 4))  # prompt below L0, generation crosses it
    kw = {
        "max_new_tokens": 12,
        "do_sample": False,
        "output_scores": True,
        "return_dict_in_generate": True,
        "pad_token_id": 0,
    }
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ga, gb = ref.generate(ids, **kw), ours.generate(ids, **kw)
    assert torch.equal(ga.sequences, gb.sequences)
    for sa, sb in zip(ga.scores, gb.scores):
        torch.testing.assert_close(sb, sa, rtol=0, atol=1e-4)


@pytest.mark.parametrize("name", sorted(SCHEMES))
def test_negative_control_a_wrong_base_is_detected(name: str) -> None:
    """The comparison above can fail: the same patch with every base off by 1% changes the logits."""
    import dataclasses

    ref, ours = _pair(name)
    rot = next(m for m in ours.modules() if isinstance(m, RopekitRotary))
    rot._ropekit_specs = {
        k: dataclasses.replace(v, base=v.base * 1.01) for k, v in rot._ropekit_specs.items()
    }
    ids = torch.randint(0, 128, (2, 48))
    with torch.no_grad():
        assert (ours(ids).logits - ref(ids).logits).abs().max() > 1e-3


def test_unpatched_models_of_the_family_are_untouched() -> None:
    ref, _ours = _pair("llama-llama3")
    other = copy.deepcopy(ref)  # the family's apply function is wrapped, but this model is not patched
    ids = torch.randint(0, 128, (1, 40))
    with torch.no_grad():
        torch.testing.assert_close(other(ids).logits, ref(ids).logits, rtol=0, atol=0)


def test_bf16_patched_model_uses_float32_tables() -> None:
    _ref, ours = _pair("llama-llama3")
    ours = ours.to(torch.bfloat16)
    ids = torch.randint(0, 128, (1, 40))
    with torch.no_grad():
        out = ours(ids).logits
    assert out.dtype == torch.bfloat16 and torch.isfinite(out).all()
    rot = next(m for m in ours.modules() if isinstance(m, RopekitRotary))
    cos, _ = rot(torch.zeros(1, dtype=torch.bfloat16), torch.arange(4).view(1, 4))
    assert cos.dtype == torch.bfloat16 and getattr(cos, ROPEKIT_TABLES).cos.dtype == torch.float32

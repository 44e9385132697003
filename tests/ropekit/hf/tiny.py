"""Tiny random transformers models for the family sweep: every family from its own defaults, shrunk.

``families()`` enumerates the causal-LM model types transformers ships whose modeling file defines a (non-vision)
rotary embedding class; ``tiny_config(model_type)`` shrinks the family's default config (and its sub-configs) to
a few layers of width 64, vocab 128, init std 0.5 (with HF's 0.02 attention is nearly uniform and a wrong rotation
goes unseen).
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import warnings
from typing import Any

import torch
import transformers
from transformers.models.auto.configuration_auto import model_type_to_module_name
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

VOCAB = 128
#: A small Llama-like config shared by the lifecycle, interface and cache tests (init 0.5: attention not uniform).
SMALL: dict[str, Any] = {
    "vocab_size": VOCAB,
    "hidden_size": 64,
    "intermediate_size": 96,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "initializer_range": 0.5,
}
_SIZES: dict[str, Any] = {
    "vocab_size": VOCAB,
    "hidden_size": 64,
    "intermediate_size": 96,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "max_position_embeddings": 256,
    "initializer_range": 0.5,
    "moe_intermediate_size": 32,
    "shared_expert_intermediate_size": 32,
    "num_experts": 4,
    "num_local_experts": 4,
    "n_routed_experts": 4,
    "num_experts_per_tok": 2,
    "n_shared_experts": 1,
    "first_k_dense_replace": 1,
    "n_group": 1,
    "topk_group": 1,
    "q_lora_rank": 32,
    "kv_lora_rank": 32,
    "qk_rope_head_dim": 16,
    "qk_nope_head_dim": 16,
    "v_head_dim": 16,
    "sliding_window": 8,
    "attention_chunk_size": 8,
    "pad_token_id": 0,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "tie_word_embeddings": False,
    # hybrid / SSM parts
    "mamba_d_state": 8,
    "mamba_n_heads": 4,
    "mamba_d_head": 16,
    "mamba_n_groups": 1,
    "mamba_expand": 2,
    "mamba_chunk_size": 16,
    "ssm_state_size": 8,
    "linear_num_value_heads": 4,
    "linear_num_key_heads": 2,
    "linear_key_head_dim": 16,
    "linear_value_head_dim": 16,
    # vision towers of multimodal causal LMs
    "image_size": 32,
    "patch_size": 8,
    "num_channels": 3,
}


def families() -> dict[str, str]:
    """model_type -> modeling module name, for causal-LM families with a text rotary embedding class."""
    out = {}
    for mt, cls_name in sorted(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.items()):
        mod = None
        name = model_type_to_module_name(mt)
        try:
            mod = importlib.import_module(f"transformers.models.{name}.modeling_{name}")
        except ImportError:
            cls = getattr(transformers, cls_name, None)
            mod = importlib.import_module(cls.__module__) if cls is not None else None
        if mod is None:
            continue
        if any(
            inspect.isclass(o) and n.endswith("RotaryEmbedding") and "Vision" not in n and "Audio" not in n
            for n, o in vars(mod).items()
            if getattr(o, "__module__", None) == mod.__name__
        ):
            out[mt] = mod.__name__
    return out


def _shrink(cfg: Any) -> None:
    for key, value in _SIZES.items():
        if key in cfg.__dict__ or hasattr(type(cfg), key):
            with contextlib.suppress(Exception):  # read-only properties stay as they are
                setattr(cfg, key, value)
    if cfg.__dict__.get("qk_rope_head_dim") and cfg.__dict__.get("qk_nope_head_dim") is not None:
        cfg.num_key_value_heads = cfg.num_attention_heads  # MLA: one latent, every head
        if "qk_head_dim" in cfg.__dict__:
            cfg.qk_head_dim = cfg.qk_rope_head_dim + cfg.qk_nope_head_dim
    n = getattr(cfg, "num_hidden_layers", None)
    lt = getattr(cfg, "layer_types", None)
    if isinstance(n, int) and isinstance(lt, list) and len(lt) != n:
        kinds = list(dict.fromkeys(lt))
        cfg.layer_types = [kinds[i % len(kinds)] for i in range(n)]
    for sub in getattr(cfg, "sub_configs", {}) or {}:
        child = getattr(cfg, sub, None)
        if child is not None and hasattr(child, "__dict__"):
            _shrink(child)


#: per-family adjustments the generic shrinking cannot guess (an attention layer in a hybrid, a partial factor
#: that gives an even rotary dim at head_dim 16, ...)
OVERRIDES: dict[str, dict[str, Any]] = {
    "bamba": {"attn_layer_indices": [1], "mamba_d_head": 32},
    "granitemoehybrid": {
        "layer_types": ["linear_attention", "full_attention"],
        "mamba_d_head": 32,
        "position_embedding_type": "rope",
    },
    "recurrent_gemma": {"block_types": ["recurrent", "attention"]},
    "mimo_v2_flash": {"head_dim": 24, "v_head_dim": 24},
    "falcon_h1": {"mamba_d_ssm": 128, "mamba_d_head": 32},
    "zamba2": {
        "attention_hidden_size": 128,
        "attention_head_dim": 32,
        "mamba_headdim": 16,
        "n_mamba_heads": 8,
        "hybrid_layer_ids": [1],
        "layers_block_type": ["mamba", "hybrid"],
        "adapter_rank": 8,
    },
    "hrm_text": {"num_layers_per_stack": 1},
    "lfm2_moe": {"num_dense_layers": 1, "layer_types": ["conv", "full_attention"]},
    "longcat_flash": {
        "num_layers": 1,
        "ffn_hidden_size": 96,
        "expert_ffn_hidden_size": 32,
        "zero_expert_num": 2,
    },
    "gemma3n_text": {
        "num_kv_shared_layers": 0,
        "vocab_size_per_layer_input": 128,
        "hidden_size_per_layer_input": 16,
        "laurel_rank": 8,
    },
}


def tiny_config(model_type: str, **overrides: Any) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg = transformers.AutoConfig.for_model(model_type)
        _shrink(cfg)
        for key, value in {**OVERRIDES.get(model_type, {}), **overrides}.items():
            setattr(cfg, key, value)
    return cfg


def build(model_type: str) -> Any:
    """The family's causal LM from ``tiny_config``, random weights (seed 0), eager attention, eval mode."""
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return transformers.AutoModelForCausalLM.from_config(
            tiny_config(model_type), attn_implementation="eager"
        ).eval()


def padded_inputs() -> tuple[torch.Tensor, torch.Tensor]:
    """ids [2, 12] and their attention mask, the first row left-padded by 3."""
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(3, VOCAB, (2, 12), generator=g)
    mask = torch.ones_like(ids)
    mask[0, :3] = 0  # left padding
    return ids, mask


def rel_masked(a: torch.Tensor, b: torch.Tensor, mask: torch.Tensor) -> float:
    """max |a - b| / max |a| over the unmasked tokens."""
    m = mask.bool()
    return float((a - b)[m].abs().max() / a[m].abs().max())

# SPDX-License-Identifier: MIT
"""What each transformers family's config does with its RoPE keys, as data (transformers 5.23's config classes):
GPT-NeoX's own key names, the families that read a top-level ``rotary_dim``, how ``rope_scaling`` merges into
per-layer-type ``rope_parameters``, the families whose flat (v4) keys build a RoPE per layer type, and the layer
type names transformers accepts. Read by :mod:`ropekit.hf.config_keys` and :mod:`ropekit.hf.config`; the base a
config without ``rope_theta`` gets is in :mod:`ropekit.hf.default_theta`.
"""

from __future__ import annotations

__all__ = [
    "ALLOWED_LAYER_TYPES",
    "EXTRA_LAYER_TYPES",
    "NEOX_TYPES",
    "NTK_ALPHA_TYPES",
    "ORIGINAL_MAX_DEFAULT",
    "ORIGINAL_MAX_IGNORES_TOP",
    "PER_LAYER_TYPE_FAMILIES",
    "ROTARY_DIM_AS_FACTOR",
    "ROTARY_DIM_TYPES",
    "SCALING_UPDATES",
    "per_layer_family",
]

#: families whose transformers config reads GPT-NeoX's names (``rotary_emb_base``, ``rotary_pct``, with this default
#: fraction) and ignores the top-level ``rope_theta`` / ``partial_rotary_factor``
NEOX_TYPES = {"gpt_neox": 0.25, "gpt_neox_japanese": 1.0}
#: families whose transformers rotary module reads ``dynamic`` with a (truthy) ``alpha`` as static NTK-alpha
#: (``HunYuan*RotaryEmbedding``: ``rope_type == "dynamic" and rope_parameters.get("alpha")``); every other family's
#: dynamic NTK ignores ``alpha`` (an unknown key there)
NTK_ALPHA_TYPES = frozenset({"hunyuan_v1_dense", "hunyuan_v1_moe", "hunyuan_vl", "hunyuan_vl_text"})
#: families whose config class declares a top-level ``original_max_position_embeddings`` field (its default), which
#: transformers' ``standardize_rope_params`` then uses over the rope dict's for llama3 / yarn / longrope
ORIGINAL_MAX_DEFAULT = {"phi3": 4096, "phi4_multimodal": 4096}
#: families whose config class overwrites the top-level ``original_max_position_embeddings`` with the rope dict's
#: (Phi-MoE's ``validate_rope``), so a top-level value is never read
ORIGINAL_MAX_IGNORES_TOP = frozenset({"phimoe"})
#: families whose transformers rotary module multiplies a LongRoPE cos and sin by the rope dict's ``short_mscale``
#: (lengths up to ``original_max_position_embeddings``) / ``long_mscale`` (past it) instead of the attention factor
#: (``PhimoeRotaryEmbedding.forward``; Phi-3.5-MoE ships both, 1.2432, where the formula gives 1.1902)
LONGROPE_MSCALE_TYPES = frozenset({"phimoe"})
#: families whose transformers 5.23 rotary forward recomputes LongRoPE frequencies without the length
#: (``self.rope_init_fn(self.config)``), so it keeps the short factors past L0; ropekit switches to the long ones,
#: as Phi-3.5-MoE's reference code and vLLM do (``ropekit.hf.patch`` warns: the outputs differ past L0)
LONGROPE_SHORT_ONLY_TYPES = frozenset({"phimoe"})
#: families whose transformers attention rotates the first ``rotary_dim`` channels (its config class's default: 64)
ROTARY_DIM_TYPES = frozenset({"gptj", "codegen"})
#: families whose transformers config turns a top-level ``rotary_dim`` into ``rotary_dim / head_dim``
ROTARY_DIM_AS_FACTOR = frozenset({"minimax_m2"})
#: families whose transformers config merges ``rope_scaling`` into these entries of per-layer-type
#: ``rope_parameters`` (Gemma 3-style); every other family's replaces ``rope_parameters`` with a non-empty
#: ``rope_scaling`` (``PreTrainedConfig.convert_rope_params_to_dict``: ``rope_scaling or rope_parameters``)
SCALING_UPDATES = {
    **dict.fromkeys(
        ("gemma3_text", "gemma3n_text", "olmo3", "t5gemma2_text", "t5gemma2_decoder"), ("full_attention",)
    ),
    **dict.fromkeys(("modernbert", "modernbert-decoder"), ("full_attention", "sliding_attention")),
}
#: families whose transformers config builds a RoPE per layer type from flat (v4) keys
#: (``convert_rope_params_to_dict``): the layer types ``rope_scaling`` applies to, and each layer type's theta key
#: and default (the config class's ``default_theta``)
PER_LAYER_TYPE_FAMILIES: dict[str, tuple[tuple[str, ...], dict[str, tuple[str, float]]]] = {
    **dict.fromkeys(
        ("gemma3_text", "gemma3n_text", "t5gemma2_text", "t5gemma2_decoder"),
        (
            ("full_attention",),
            {"sliding_attention": ("rope_local_base_freq", 1e4), "full_attention": ("rope_theta", 1e6)},
        ),
    ),
    **dict.fromkeys(
        ("modernbert", "modernbert-decoder"),
        (
            ("full_attention", "sliding_attention"),
            {
                "sliding_attention": ("local_rope_theta", 1e4),
                "full_attention": ("global_rope_theta", 160_000.0),
            },
        ),
    ),
    "olmo3": (
        ("full_attention",),
        {"sliding_attention": ("rope_theta", 500_000.0), "full_attention": ("rope_theta", 500_000.0)},
    ),
    "dots3_note_text": (
        ("full_attention",),
        {"sliding_attention": ("rope_theta", 8e7), "full_attention": ("rope_theta", 8e7)},
    ),
}


def per_layer_family(model_type: str) -> str | None:
    """The :data:`PER_LAYER_TYPE_FAMILIES` entry of ``model_type`` (Gemma 3's multimodal configs read as its text
    part), or None."""
    if model_type in PER_LAYER_TYPE_FAMILIES:
        return model_type
    if model_type.startswith("gemma3n"):
        return "gemma3n_text"
    return "gemma3_text" if model_type.startswith("gemma3") else None


#: transformers 5.23's ALLOWED_ATTN_LAYER_TYPES and the legacy names it remaps to them (configuration_utils.py)
ALLOWED_LAYER_TYPES = (
    *("full_attention", "sliding_attention", "chunked_attention", "window_attention", "indexed_attention"),
    *("compressed_sparse_attention", "heavily_compressed_attention", "minimax_m3_sparse", "conv", "moe"),
    *("hybrid", "hybrid_sliding", "reference_sliding_attention", "linear_attention"),
    # legacy names, remapped before the check
    *("mamba", "attention", "deepseek_sparse_attention", "qwen_sparse_attention"),
)
EXTRA_LAYER_TYPES = {"nemotron_h": ("mlp",)}  # families whose own validate_layer_type allows more

# SPDX-License-Identifier: MIT
"""The RoPE base each transformers family uses when its config gives no ``rope_theta`` (5.23's config classes'
``default_theta``; families absent here default to 10000).

A config.json without ``rope_theta`` is read by transformers with its config class's default, which is not 10000
for these families (e.g. MiniMax-M2 5e6, Mixtral 1e6, gpt-oss 150000); ``RopeSpec.from_hf`` reads it the same way.
tests/ropekit/hf/test_config_layer_families.py checks this table against every config class transformers ships,
so a family added or changed there fails the test until it is updated here.
"""

from __future__ import annotations

__all__ = ["DEFAULT_THETA"]

DEFAULT_THETA: dict[str, float] = {
    "EvollaModel": 500000.0,
    "apertus": 12000000.0,
    "bitnet": 500000.0,
    "blt": 500000.0,
    "blt_global_transformer": 500000.0,
    "blt_local_decoder": 500000.0,
    "blt_local_encoder": 500000.0,
    "cohere": 500000.0,
    "cosmos3_edge_text": 100000000.0,
    "csm": 500000.0,
    "csm_depth_decoder_model": 500000.0,
    "cwm": 1000000.0,
    "dots3_note_text": 80000000.0,
    "emu3_text_model": 1000000.0,
    "eomt_dinov3": 100.0,
    "ernie4_5": 500000.0,
    "ernie4_5_moe": 500000.0,
    "ernie4_5_vl_moe_text": 500000.0,
    "evolla": 500000.0,
    "flex_olmo": 500000.0,
    "fuyu": 25000.0,
    "gemma4_vision": 100.0,
    "gpt_oss": 150000.0,
    "gte": 160000.0,
    "helium": 100000.0,
    "hy_v3": 11158840.0,
    "jina_embeddings_v3": 20000.0,
    "lfm2": 1000000.0,
    "lfm2_moe": 1000000.0,
    "lfm3": 1000000.0,
    "lfm3_vl_vision": 1000000.0,
    "llama4_text": 500000.0,
    "longcat_flash": 10000000.0,
    "minimax": 1000000.0,
    "minimax_m2": 5000000.0,
    "minimax_m3_vl_text": 5000000.0,
    "mixtral": 1000000.0,
    "mllama_text_model": 500000.0,
    "muse_glimmer_assistant": 500000.0,
    "musicflamingo": 1200.0,
    "nomic_bert": 1000.0,
    "olmo3": 500000.0,
    "openai_privacy_filter": 150000.0,
    "paddleocr_vl_text": 500000.0,
    "pe_audio_encoder": 20000.0,
    "pe_audio_video_encoder": 20000.0,
    "pe_video_encoder": 20000.0,
    "phimoe": 1000000.0,
    "qwen2_5_omni_talker": 1000000.0,
    "qwen2_5_omni_text": 1000000.0,
    "qwen2_5_vl_text": 1000000.0,
    "qwen2_vl_text": 1000000.0,
    "qwen3_omni_moe_text": 1000000.0,
    "qwen3_vl_moe_text": 500000.0,
    "qwen3_vl_text": 500000.0,
    "smollm3": 2000000.0,
    "solar_open": 1000000.0,
}

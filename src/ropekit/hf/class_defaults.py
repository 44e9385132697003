# SPDX-License-Identifier: MIT
"""What a transformers config class supplies when a config.json leaves a RoPE key out (transformers 5.23), beyond
the base (:mod:`ropekit.hf.default_theta`): the head dimension and the rotated fraction.

* :data:`DEFAULT_HEAD_DIM`: families whose ``head_dim`` defaults to a fixed number, not hidden size over heads
  (Qwen 3 128, Gemma 256, MiniMax-M2 128, gpt-oss 64, ...). An explicit ``"head_dim": null`` is computed from the
  hidden size, as transformers does.
* :data:`DEFAULT_PARTIAL`: families whose ``partial_rotary_factor`` defaults below 1 (GLM 0.5, Phi 0.5, StableLM
  0.25, Qwen3-Next 0.25, ...), for a config that gives it nowhere (GPT-NeoX's ``rotary_pct`` default is
  ``config_families.NEOX_TYPES``).
* :data:`PER_LAYER_DEFAULT_FAMILIES`: families whose config class builds a RoPE per layer type, with fractions
  that differ by layer type, when the config.json gives no ``rope_parameters`` (Gemma 4, Laguna, LFM 3, ...).
  ropekit does not reproduce those built-in defaults: such a config must give ``rope_parameters`` per layer type
  (as their published configs do), else it is refused by name.

tests/ropekit/hf/test_config_layer_families.py builds every config class transformers ships (at two hidden sizes
and head counts) and checks these tables against them, so a family added or changed there fails until updated.
"""

from __future__ import annotations

__all__ = ["DEFAULT_HEAD_DIM", "DEFAULT_PARTIAL", "PER_LAYER_DEFAULT_FAMILIES"]

DEFAULT_HEAD_DIM: dict[str, int] = {
    "afmoe": 128,
    "axk1": 64,
    "bailing_hybrid": 64,
    "canary_decoder": 128,
    "cohere2_moe": 128,
    "cosmos3_edge_text": 128,
    "cwm": 128,
    "deepseek_v2": 64,
    "deepseek_v3": 64,
    "deepseek_v32": 64,
    "deepseek_v4": 512,
    "dia_decoder": 128,
    "dia_encoder": 128,
    "ernie4_5": 128,
    "flint": 128,
    "gemma": 256,
    "gemma2": 256,
    "gemma3_text": 256,
    "gemma3n_text": 256,
    "gemma4_vision": 64,
    "glm": 128,
    "glm4": 128,
    "glm4_moe_lite": 64,
    "glm_moe_dsa": 64,
    "gpt_oss": 64,
    "helium": 128,
    "higgs_audio_v2": 128,
    "hrm_text": 128,
    "hy_v3": 128,
    "hy_v4": 64,
    "inkling2_text": 128,
    "inkling_text": 128,
    "internlm3": 128,
    "iquestcoder": 128,
    "jetmoe": 128,
    "kimi_linear": 64,
    "kolibri1": 128,
    "kosmos_2_5_vision_model": 64,
    "laguna": 128,
    "lfm3": 128,
    "llama4_text": 128,
    "longcat_flash": 64,
    "longt5": 64,
    "mellum": 128,
    "mimo_v2_flash": 192,
    "minimax_m2": 128,
    "minimax_m3_vl_text": 128,
    "ministral3": 128,
    "mistral4": 128,
    "mistral_large4_text": 64,
    "molmo2_adapter": 72,
    "molmo2_text": 128,
    "molmo2_vision": 72,
    "mt5": 64,
    "muse_glimmer_assistant": 128,
    "muse_glimmer_text": 128,
    "muse_spark_text": 64,
    "musicflamingo": 1280,
    "nemotron_h": 128,
    "neucodec": 64,
    "openai_privacy_filter": 64,
    "paddleocr_vl_text": 128,
    "pe_audio_encoder": 128,
    "pe_audio_video_encoder": 128,
    "pe_video_encoder": 128,
    "qwen2_5_omni_dit": 64,
    "qwen2_5_omni_talker": 128,
    "qwen3": 128,
    "qwen3_5_moe_text": 256,
    "qwen3_5_text": 256,
    "qwen3_next": 256,
    "qwen3_omni_moe_talker_code_predictor": 128,
    "qwen3_vl_text": 128,
    "qwen4_exp_text": 256,
    "seed_oss": 128,
    "solar_open": 128,
    "step3p5": 128,
    "t5": 64,
    "t5_gemma_module": 256,
    "t5gemma2_decoder": 256,
    "t5gemma2_text": 256,
    "timesfm": 80,
    "timesfm2_5": 80,
    "umt5": 64,
    "vaultgemma": 256,
    "voxtral_realtime_encoder": 64,
    "xcodec2": 64,
    "youtu": 64,
    "zamba": 64,
    "zamba2": 64,
}

DEFAULT_PARTIAL: dict[str, float] = {
    "glm": 0.5,
    "glm4": 0.5,
    "glm4_moe": 0.5,
    "glm4v_moe_text": 0.5,
    "glmasr_encoder": 0.5,
    "mistral4": 0.5,
    "moonshine": 0.9,
    "moonshine_streaming": 0.8,
    "musicflamingo": 0.2,
    "nemotron": 0.5,
    "nemotron3_5_transcribe_asr_audio": 0.5,
    "nemotron3_5_transcribe_word_timestamp": 0.5,
    "persimmon": 0.5,
    "phi": 0.5,
    "qwen3_5_moe_text": 0.25,
    "qwen3_5_text": 0.25,
    "qwen3_next": 0.25,
    "recurrent_gemma": 0.5,
    "stablelm": 0.25,
}

PER_LAYER_DEFAULT_FAMILIES: frozenset[str] = frozenset(
    {
        "deepseek_v4",
        "diffusion_gemma_text",
        "gemma4_text",
        "gemma4_unified_text",
        "laguna",
        "lfm3",
        "mimo_v2_flash",
    }
)

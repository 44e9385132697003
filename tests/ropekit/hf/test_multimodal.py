"""Rotary modules are recognised module by module: a LLaVA with a Pixtral vision tower keeps its 2-D rotary."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch

transformers = pytest.importorskip("transformers")

import ropekit.hf
from ropekit.hf.rotary import RopekitRotary


def test_llava_with_pixtral_vision_tower() -> None:
    text = transformers.MistralConfig(
        vocab_size=128,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        initializer_range=0.5,
        sliding_window=None,
        pad_token_id=0,
    )
    vision = transformers.PixtralVisionConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        image_size=32,
        patch_size=8,
    )
    cfg = transformers.LlavaConfig(
        text_config=text, vision_config=vision, image_token_index=5, vision_feature_select_strategy="full"
    )
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = transformers.LlavaForConditionalGeneration(cfg).eval()
    ours = copy.deepcopy(ref)
    with pytest.warns(
        UserWarning, match="left unrecognised rotary modules alone.*PixtralVisionRotaryEmbedding"
    ):
        ropekit.hf.patch(ours)
    kinds = {
        type(m).__name__: isinstance(m, RopekitRotary) for m in ours.modules() if "Rotary" in type(m).__name__
    }
    assert kinds == {"RopekitMistralRotaryEmbedding": True, "PixtralVisionRotaryEmbedding": False}
    ids = torch.randint(6, 128, (1, 20))
    pixels = torch.randn(1, 3, 32, 32)
    ids[0, 2:18] = 5  # 16 image tokens: (32 / 8) ** 2 patches
    with torch.no_grad():
        a = ref(input_ids=ids, pixel_values=pixels, image_sizes=torch.tensor([[32, 32]])).logits
        b = ours(input_ids=ids, pixel_values=pixels, image_sizes=torch.tensor([[32, 32]])).logits
    assert float((a - b).abs().max()) <= 1e-4 * float(a.abs().max())

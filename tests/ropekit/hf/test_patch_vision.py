"""ropekit.hf.patch on vision towers and whole models around them (issue 11 point 5): Pixtral's encoder, a LLaVA
with a Pixtral vision tower (vision rotations counted through ropekit's dispatch), Llama 4's vision encoder and the whole Llama4ForConditionalGeneration (text + vision).
Tiny random-weight models from configs, an image input, float32: outputs and logits equal to the unpatched
transformers model (<= 1e-4 relative), greedy generation with a KV cache gives the same tokens."""

from __future__ import annotations

import warnings

import pytest
import torch

T = pytest.importorskip("transformers")

import ropekit.hf
from ropekit.hf.apply import CALLS
from ropekit.hf.patch_vl import RopekitVLRotary
from ropekit.hf.rotary import RopekitRotary

PIXTRAL_APPLY = ("transformers.models.pixtral.modeling_pixtral", "apply_rotary_pos_emb")


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max() / b.abs().max())


def test_pixtral_vision_encoder_equal_at_two_resolutions() -> None:
    cfg = T.PixtralVisionConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                                head_dim=16, image_size=112, patch_size=14)  # fmt: skip
    torch.manual_seed(0)
    model = T.PixtralVisionModel(cfg).eval()
    for h, w in ((112, 112), (56, 98)):  # the training size and a smaller, non-square one
        x = torch.randn(1, 3, h, w)
        with torch.no_grad():
            ref = model(x, image_sizes=[(h, w)]).last_hidden_state
            with ropekit.hf.patched(model):
                assert isinstance(model.patch_positional_embedding, RopekitVLRotary)
                got = model(x, image_sizes=[(h, w)]).last_hidden_state
        assert _rel(got, ref) <= 1e-4
    assert type(model.patch_positional_embedding).__name__ == "PixtralVisionRotaryEmbedding"


def _llava() -> torch.nn.Module:
    text = T.MistralConfig(vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                           num_attention_heads=4, num_key_value_heads=2, head_dim=16, initializer_range=0.5,
                           sliding_window=None, pad_token_id=0)  # fmt: skip
    vision = T.PixtralVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                                   image_size=32, patch_size=8)  # fmt: skip
    cfg = T.LlavaConfig(text_config=text, vision_config=vision, image_token_index=5,
                        vision_feature_select_strategy="full", vision_feature_layer=-1)  # fmt: skip
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = T.LlavaForConditionalGeneration(cfg).eval()
    with torch.no_grad():  # vision q/k x8: attention sharp enough that the vision rotation matters
        for name, p in model.named_parameters():
            if "vision" in name and ("q_proj" in name or "k_proj" in name):
                p.mul_(8)
    return model


def test_llava_with_pixtral_vision_tower_logits_and_generate_equal() -> None:
    model = _llava()
    ids = torch.randint(6, 128, (1, 20), generator=torch.Generator().manual_seed(1))
    ids[0, 2:18] = 5  # 16 image tokens: (32 / 8) ** 2 patches
    kw = {
        "input_ids": ids,
        "pixel_values": torch.randn(1, 3, 32, 32),
        "image_sizes": torch.tensor([[32, 32]]),
    }
    with torch.no_grad():
        ref = model(**kw).logits
        ref_gen = model.generate(**kw, max_new_tokens=5, do_sample=False)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # every rotary is recognised: no "left alone" warning
            ropekit.hf.patch(model)
        kinds = {type(m).__name__ for m in model.modules() if isinstance(m, (RopekitRotary, RopekitVLRotary))}
        assert kinds == {"RopekitMistralRotaryEmbedding", "RopekitPixtralVisionRotaryEmbedding"}
        before = CALLS[PIXTRAL_APPLY]
        got = model(**kw).logits
        assert CALLS[PIXTRAL_APPLY] - before == 2  # one ropekit rotation per vision layer
        got_gen = model.generate(**kw, max_new_tokens=5, do_sample=False)
        ropekit.hf.unpatch(model)
    assert _rel(got, ref) <= 1e-4
    assert torch.equal(got_gen, ref_gen)


def _llama4() -> torch.nn.Module:
    text = {"vocab_size": 128, "hidden_size": 64, "intermediate_size": 128, "intermediate_size_mlp": 128,
            "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
            "num_local_experts": 2, "num_experts_per_tok": 1, "interleave_moe_layer_step": 2,
            "no_rope_layers": [1, 1], "initializer_range": 0.5, "pad_token_id": 0, "bos_token_id": 1,
            "eos_token_id": 2, "attention_chunk_size": 64}  # fmt: skip
    vision = {"hidden_size": 64, "intermediate_size": 256, "num_hidden_layers": 1, "num_attention_heads": 4,
              "image_size": 56, "patch_size": 14, "vision_output_dim": 64, "projector_input_dim": 64,
              "projector_output_dim": 64, "pixel_shuffle_ratio": 0.5}  # fmt: skip
    cfg = T.Llama4Config(text_config=text, vision_config=vision, image_token_index=5)
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return T.Llama4ForConditionalGeneration(cfg).eval()


def test_llama4_text_and_vision_logits_and_generate_equal() -> None:
    model = _llama4()
    n_img = (56 // 14) ** 2 // 4  # pixel shuffle 0.5: 4 tokens per image
    ids = torch.randint(6, 128, (1, 12), generator=torch.Generator().manual_seed(1))
    ids[0, 3 : 3 + n_img] = 5
    kw = {"input_ids": ids, "pixel_values": torch.randn(1, 3, 56, 56)}
    with torch.no_grad():
        ref = model(**kw).logits
        ref_gen = model.generate(**kw, max_new_tokens=5, do_sample=False)
        ropekit.hf.patch(model)
        kinds = {type(m).__name__ for m in model.modules() if "Rotary" in type(m).__name__}
        assert kinds == {"RopekitLlama4TextRotaryEmbedding", "RopekitLlama4VisionRotary"}
        got = model(**kw).logits
        got_gen = model.generate(**kw, max_new_tokens=5, do_sample=False)
        ropekit.hf.unpatch(model)
    assert _rel(got, ref) <= 1e-4
    assert torch.equal(got_gen, ref_gen)

"""patch_vl: tiny random-weight VL models (built from configs, no downloads) give the same logits (<= 1e-4
relative, float32) and the same greedy tokens with a KV cache, patched vs unpatched; inputs as a processor builds
them (image and video grids, second_per_grid_ts, a left-padded batch of 2)."""

from __future__ import annotations

import pytest
import torch

T = pytest.importorskip("transformers")

from ropekit.hf.patch_vl import RopekitVLRotary, patch_vl, unpatch_vl

IMG, VID, START = 5, 6, 4
TEXT = {"vocab_size": 100, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "bos_token_id": 1, "eos_token_id": 2,
        "pad_token_id": 0}  # fmt: skip
VISION = {"depth": 1, "hidden_size": 32, "num_heads": 2, "patch_size": 14, "spatial_merge_size": 2,
          "temporal_patch_size": 2, "in_channels": 3}  # fmt: skip


def _model(family: str):
    tok = {"image_token_id": IMG, "video_token_id": VID}
    rp = {"rope_type": "default", "rope_theta": 1e4}
    if family == "qwen2_vl":
        cfg = T.Qwen2VLConfig(
            text_config={**TEXT, "rope_parameters": {**rp, "mrope_section": [2, 3, 3]}},
            vision_config={**VISION, "embed_dim": 32, "hidden_size": 64, "mlp_ratio": 2},
            vision_start_token_id=START, **tok,
        )  # fmt: skip
        return T.Qwen2VLForConditionalGeneration(cfg)
    if family == "qwen2_5_vl":
        cfg = T.Qwen2_5_VLConfig(
            text_config={**TEXT, "rope_parameters": {**rp, "mrope_section": [2, 3, 3]}},
            vision_config={**VISION, "intermediate_size": 64, "out_hidden_size": 64, "window_size": 56,
                           "fullatt_block_indexes": [0], "tokens_per_second": 2},
            vision_start_token_id=START, **tok,
        )  # fmt: skip
        return T.Qwen2_5_VLForConditionalGeneration(cfg)
    if family == "qwen3_vl":
        cfg = T.Qwen3VLConfig(
            text_config={**TEXT, "head_dim": 16, "rope_parameters": {**rp, "mrope_section": [4, 2, 2],
                                                                       "mrope_interleaved": True}},
            vision_config={**VISION, "intermediate_size": 64, "out_hidden_size": 64, "num_position_embeddings": 16,
                           "deepstack_visual_indexes": [0]},
            vision_start_token_id=START, **tok,
        )  # fmt: skip
        return T.Qwen3VLForConditionalGeneration(cfg)
    if family == "qwen3_vl_moe":
        cfg = T.Qwen3VLMoeConfig(
            text_config={**TEXT, "head_dim": 16, "num_experts": 4, "num_experts_per_tok": 2,
                         "moe_intermediate_size": 32, "decoder_sparse_step": 1,
                         "rope_parameters": {**rp, "mrope_section": [4, 2, 2], "mrope_interleaved": True}},
            vision_config={**VISION, "intermediate_size": 64, "out_hidden_size": 64, "num_position_embeddings": 16,
                           "deepstack_visual_indexes": [0]},
            vision_start_token_id=START, **tok,
        )  # fmt: skip
        return T.Qwen3VLMoeForConditionalGeneration(cfg)
    if family == "ernie4_5_vl_moe":
        from transformers.models.ernie4_5_vl_moe import modeling_ernie4_5_vl_moe as m
        from transformers.models.ernie4_5_vl_moe.configuration_ernie4_5_vl_moe import Ernie4_5_VLMoeConfig

        cfg = Ernie4_5_VLMoeConfig(
            text_config={**TEXT, "moe_intermediate_size": [32, 32], "moe_k": 2, "moe_num_experts": 4,
                         "moe_num_shared_experts": 1, "rope_parameters": {**rp, "mrope_section": [3, 3, 2]}},
            vision_config={"depth": 1, "hidden_size": 32, "num_heads": 2, "intermediate_size": 64,
                           "spatial_merge_size": 2, "temporal_merge_size": 2, "patch_size": 14},
            image_start_token_id=START, image_end_token_id=7, video_start_token_id=8, video_end_token_id=9, **tok,
        )  # fmt: skip
        return m.Ernie4_5_VLMoeForConditionalGeneration(cfg)
    cfg = T.Glm4vConfig(
        text_config={**TEXT, "rope_parameters": {**rp, "mrope_section": [2, 1, 1], "partial_rotary_factor": 0.5}},
        vision_config={**VISION, "intermediate_size": 64, "out_hidden_size": 64, "image_size": 56},
        image_start_token_id=START, image_end_token_id=7, video_start_token_id=8, video_end_token_id=9, **tok,
    )  # fmt: skip
    return T.Glm4vForConditionalGeneration(cfg)


def _inputs(family: str) -> dict:
    # row 0: text, image (1, 4, 4) -> 4 tokens, text; row 1: left-padded, text, image, text (+ a video for Qwen2.5)
    video = family == "qwen2_5_vl"
    r0 = [3, 10, START, IMG, IMG, IMG, IMG, 11, 12, 13]
    r1 = [0, 0, 14, START, IMG, IMG, IMG, IMG, 15, 16]
    grids, pix = [[1, 4, 4], [1, 4, 4]], 32
    kw: dict = {}
    if (
        video
    ):  # row 1 also holds a video of 2 temporal patches (4 x 4 patches each) at 0.4 s per patch (fps 5)
        r0 = [*r0[:-1], 17, 18, 19, 20, 21, 22, 23, 24, 13]
        r1 = [0] * 6 + r1[2:-1] + [START, VID, VID, VID, VID, VID, VID, VID, VID, 16]
        r1 = r1[-len(r0) :]
        kw = {"pixel_values_videos": torch.randn(32, 3 * 2 * 14 * 14), "video_grid_thw": torch.tensor([[2, 4, 4]]),
              "second_per_grid_ts": torch.tensor([0.4])}  # fmt: skip
    if family == "ernie4_5_vl_moe":
        pix_dim = 3 * 14 * 14  # ERNIE merges time in the vision tower, not in the patch
    else:
        pix_dim = 3 * 2 * 14 * 14
    ids = torch.tensor([r0, r1])
    mask = (ids != 0).long()
    types_ = (ids == IMG).long() + 2 * (ids == VID).long()
    return {"input_ids": ids, "attention_mask": mask, "mm_token_type_ids": types_,
            "pixel_values": torch.randn(pix, pix_dim), "image_grid_thw": torch.tensor(grids), **kw}  # fmt: skip


_SLOW = (
    pytest.mark.slow
)  # CI runs four families (contiguous + video, interleaved, GLM pairs); `make test-all` all six
FAMILIES = [
    "qwen2_vl",
    "qwen2_5_vl",
    "qwen3_vl",
    pytest.param("qwen3_vl_moe", marks=_SLOW),
    "glm4v",
    pytest.param("ernie4_5_vl_moe", marks=_SLOW),
]


@pytest.mark.parametrize("family", FAMILIES)
def test_patched_equals_unpatched(family: str) -> None:
    torch.manual_seed(0)
    model = _model(family).eval()
    kw = _inputs(family)
    with torch.no_grad():
        ref = model(**kw).logits
        ref_gen = model.generate(**kw, max_new_tokens=4, do_sample=False)
        patch_vl(model)
        kinds = sorted(m.kind for m in model.modules() if isinstance(m, RopekitVLRotary))
        assert kinds == ["text", "vision"]
        got = model(**kw).logits
        got_gen = model.generate(**kw, max_new_tokens=4, do_sample=False)
    assert float((got - ref).abs().max() / ref.abs().max()) <= 1e-4
    assert torch.equal(got_gen, ref_gen)
    unpatch_vl(model)
    assert not any(isinstance(m, RopekitVLRotary) for m in model.modules())


def test_refuses_models_without_vl_rotary() -> None:
    with pytest.raises(ValueError, match="no VL rotary module"):
        patch_vl(torch.nn.Linear(2, 2))


def test_pixtral_vision_encoder_equal_at_two_resolutions() -> None:
    cfg = T.PixtralVisionConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                                head_dim=16, image_size=112, patch_size=14)  # fmt: skip
    model = T.PixtralVisionModel(cfg).eval()
    for h, w in ((112, 112), (56, 98)):  # the training size and a smaller, non-square one
        x = torch.randn(1, 3, h, w)
        with torch.no_grad():
            ref = model(x, image_sizes=[(h, w)]).last_hidden_state
            patch_vl(model)
            assert isinstance(model.transformer.layers[0], torch.nn.Module)
            assert any(isinstance(m, RopekitVLRotary) for m in model.modules())
            got = model(x, image_sizes=[(h, w)]).last_hidden_state
            unpatch_vl(model)
        assert float((got - ref).abs().max() / ref.abs().max()) <= 1e-4


def test_llama4_vision_encoder_equal() -> None:
    cfg = T.Llama4VisionConfig(hidden_size=64, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
                               image_size=56, patch_size=14, vision_output_dim=64, projector_input_dim=64,
                               projector_output_dim=64, pixel_shuffle_ratio=0.5)  # fmt: skip
    model = T.Llama4VisionModel(cfg).eval()
    x = torch.randn(1, 3, 56, 56)
    with torch.no_grad():
        ref = model(x).last_hidden_state
        patch_vl(model)
        assert any(type(m).__name__ == "RopekitLlama4VisionRotary" for m in model.modules())
        got = model(x).last_hidden_state
    assert float((got - ref).abs().max() / ref.abs().max()) <= 1e-4


def test_one_d_patch_refuses_a_vl_model_and_names_patch_vl() -> None:
    import ropekit.hf

    m = _model("qwen2_vl")
    before = {n: type(x) for n, x in m.named_modules()}
    with pytest.raises(ValueError, match=r"ropekit\.hf\.patch_vl\(model\)"):
        ropekit.hf.patch(m)
    assert {n: type(x) for n, x in m.named_modules()} == before  # nothing was modified

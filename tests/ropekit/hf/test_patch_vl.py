"""ropekit.hf.patch on VL models: tiny random-weight models (built from configs, no downloads) give the same logits
(<= 1e-4 relative, float32; oracle: the unpatched transformers model) and the same greedy tokens with a KV cache;
inputs as a processor builds them (image and video grids, second_per_grid_ts, a left-padded batch of 2). The text
M-RoPE and the vision towers are rotated by ropekit's dispatch (counted per layer; negative control: shifted ropekit
vision tables move the logits), the lifecycle is the 1-D one (idempotent, undone bit for bit)."""

from __future__ import annotations

import sys

import pytest
import torch

T = pytest.importorskip("transformers")

import ropekit.hf
import ropekit.hf.patch_vl as patch_vl_module
from ropekit.hf.apply import CALLS
from ropekit.hf.patch_vl import RopekitVLRotary, patch_vl, unpatch_vl
from ropekit.hf.rotary import RopekitTables

IMG, VID, START = 5, 6, 4
TEXT = {"vocab_size": 100, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "bos_token_id": 1, "eos_token_id": 2,
        "pad_token_id": 0}  # fmt: skip
VISION = {"depth": 2, "hidden_size": 32, "num_heads": 2, "patch_size": 14, "spatial_merge_size": 2,
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
            vision_config={"depth": 2, "hidden_size": 32, "num_heads": 2, "intermediate_size": 64,
                           "spatial_merge_size": 2, "temporal_merge_size": 2, "patch_size": 14},
            image_start_token_id=START, image_end_token_id=7, video_start_token_id=8, video_end_token_id=9, **tok,
        )  # fmt: skip
        return m.Ernie4_5_VLMoeForConditionalGeneration(cfg)
    if family == "glm4v_moe":  # GLM-4.5V: GLM-4V's sections and partial rotary, half-split pairs, MoE
        cfg = T.Glm4vMoeConfig(
            text_config={**TEXT, "head_dim": 16, "n_routed_experts": 4, "num_experts_per_tok": 2,
                         "moe_intermediate_size": 32, "first_k_dense_replace": 1, "n_group": 1, "topk_group": 1,
                         "rope_parameters": {**rp, "mrope_section": [2, 1, 1], "partial_rotary_factor": 0.5}},
            vision_config={**VISION, "intermediate_size": 64, "out_hidden_size": 64, "image_size": 56},
            image_start_token_id=START, image_end_token_id=7, video_start_token_id=8, video_end_token_id=9, **tok,
        )  # fmt: skip
        return T.Glm4vMoeForConditionalGeneration(cfg)
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
    "glm4v_moe",
    pytest.param("ernie4_5_vl_moe", marks=_SLOW),
]


def _text_apply_key(model: torch.nn.Module) -> tuple[str, str]:
    text = next(m for m in model.modules() if type(m).__name__.endswith("TextRotaryEmbedding") or
                type(m).__name__ in ("Qwen2VLRotaryEmbedding", "Qwen2_5_VLRotaryEmbedding"))  # fmt: skip
    return (type(text).__module__, "apply_rotary_pos_emb")


def _vision_apply_key(model: torch.nn.Module) -> tuple[str, str]:
    return (type(model).__module__, "apply_rotary_pos_emb_vision")


def _vision_rotations(model: torch.nn.Module, kw: dict) -> int:
    """Vision layers x vision-tower calls (images, and videos apart): one ropekit rotation each."""
    return model.config.vision_config.depth * (1 + ("video_grid_thw" in kw))


def _sharpen_vision(model: torch.nn.Module) -> None:
    """Vision attention made sharp (qkv x 8): with the default init it is nearly uniform and the vision rotation
    moves the logits by only ~4e-5 relative; sharp, a wrong vision rotation moves them by ~1e-2."""
    with torch.no_grad():
        for m in model.modules():
            if isinstance(getattr(m, "qkv", None), torch.nn.Linear):
                m.qkv.weight.mul_(8)


def _shifted(tag):  # ropekit's vision tables of the neighbouring token: a rotation transformers never sees
    def tag_cat_tables(cos, sin, spec):
        info = tag(cos, sin, spec)
        return RopekitTables(info.cos.roll(1, 0), info.sin.roll(1, 0), info.family, info.spec)

    return tag_cat_tables


@pytest.mark.parametrize("family", FAMILIES)
def test_patched_equals_unpatched(family: str, monkeypatch: pytest.MonkeyPatch) -> None:
    torch.manual_seed(0)
    model = _model(family).eval()
    _sharpen_vision(model)
    kw = _inputs(family)
    key = _text_apply_key(model)
    with torch.no_grad():
        ref = model(**kw).logits
        ref_gen = model.generate(**kw, max_new_tokens=4, do_sample=False)
        ropekit.hf.patch(model)
        kinds = sorted(m.kind for m in model.modules() if isinstance(m, RopekitVLRotary))
        assert kinds == ["text", "vision"]
        before, before_v = CALLS[key], CALLS[_vision_apply_key(model)]
        got = model(**kw).logits
        n_layers = model.config.text_config.num_hidden_layers
        assert CALLS[key] - before == n_layers  # every text layer rotated by ropekit's dispatch
        # ... and every vision layer
        assert CALLS[_vision_apply_key(model)] - before_v == _vision_rotations(model, kw)
        got_gen = model.generate(**kw, max_new_tokens=4, do_sample=False)
        # negative control: the vision rotation reads ropekit's tables (not the cos/sin transformers passes)
        monkeypatch.setattr(patch_vl_module, "tag_cat_tables", _shifted(patch_vl_module.tag_cat_tables))
        moved = model(**kw).logits
    assert float((got - ref).abs().max() / ref.abs().max()) <= 1e-4
    assert float((moved - ref).abs().max() / ref.abs().max()) > 1e-3
    assert torch.equal(got_gen, ref_gen)
    ropekit.hf.unpatch(model)
    assert not any(isinstance(m, RopekitVLRotary) for m in model.modules())


def _snapshot(model: torch.nn.Module) -> dict:
    mods = dict(model.named_modules())
    return {
        "state": {k: v.clone() for k, v in model.state_dict().items()},
        "buffers": {k: v.clone() for k, v in model.named_buffers()},
        "objects": {n: id(m) for n, m in mods.items()},
        "classes": {n: type(m) for n, m in mods.items()},
        "dicts": {n: sorted(m.__dict__) for n, m in mods.items()},
        "functions": {(name, fn): getattr(sys.modules[type(m).__module__], fn, None)
                      for name, m in mods.items() if "Rotary" in type(m).__name__
                      for fn in ("apply_rotary_pos_emb", "apply_rotary_pos_emb_vision")},
    }  # fmt: skip


def _same(a: dict, b: dict) -> None:
    for k in ("objects", "classes", "dicts", "functions"):
        assert a[k] == b[k], k
    for k in ("state", "buffers"):
        assert a[k].keys() == b[k].keys()
        assert all(torch.equal(a[k][n], b[k][n]) and a[k][n].dtype == b[k][n].dtype for n in a[k])


@pytest.mark.parametrize("family", ["qwen2_vl", "qwen2_5_vl"])  # Qwen2.5-VL: the window permutation wrap too
def test_lifecycle_idempotent_unpatch_bit_for_bit_and_context_manager(family: str) -> None:
    torch.manual_seed(0)
    model = _model(family).eval()
    kw = _inputs(family)
    before = _snapshot(model)
    vision_class = type(model.model.visual.rotary_pos_emb)
    text_class = type(model.model.language_model.rotary_emb)
    with torch.no_grad():
        ref = model(**kw).logits
        assert ropekit.hf.patch(model) is model
        swapped = {n: type(m).__name__ for n, m in model.named_modules() if isinstance(m, RopekitVLRotary)}
        assert swapped == {"model.visual.rotary_pos_emb": f"Ropekit{vision_class.__name__}",
                           "model.language_model.rotary_emb": f"Ropekit{text_class.__name__}"}  # fmt: skip
        # the replacements are instances of the original classes, with their attributes
        assert isinstance(model.model.visual.rotary_pos_emb, vision_class)
        assert isinstance(model.model.language_model.rotary_emb, text_class)
        assert model.model.language_model.rotary_emb.config is model.config.text_config
        assert model.model.language_model.rotary_emb.rope_type == "default"
        wrapped = sys.modules[type(model.model.language_model.layers[0]).__module__].apply_rotary_pos_emb
        modeling = sys.modules[type(model).__module__]
        wrapped_v = modeling.apply_rotary_pos_emb_vision
        assert hasattr(wrapped_v, "_ropekit_original")  # the vision apply function is wrapped too
        window = "permute_input_for_window_attn" in model.model.visual.__dict__
        assert window == (family == "qwen2_5_vl")  # an instance-level wrap, removed by unpatch (_same: dicts)
        assert ropekit.hf.patch(model) is model  # idempotent: nothing re-wrapped or re-replaced
        assert modeling.apply_rotary_pos_emb_vision is wrapped_v
        assert {
            n: type(m).__name__ for n, m in model.named_modules() if isinstance(m, RopekitVLRotary)
        } == swapped
        assert (
            sys.modules[type(model.model.language_model.layers[0]).__module__].apply_rotary_pos_emb is wrapped
        )
        got = model(**kw).logits
        ropekit.hf.unpatch(model)
        _same(before, _snapshot(model))
        assert torch.equal(model(**kw).logits, ref)  # the original modules and functions compute again
        with ropekit.hf.patched(model):
            assert any(isinstance(m, RopekitVLRotary) for m in model.modules())
            inside = model(**kw).logits
        _same(before, _snapshot(model))
    assert float((got - ref).abs().max() / ref.abs().max()) <= 1e-4
    assert torch.equal(inside, got)


def test_patch_vl_and_unpatch_vl_are_aliases() -> None:
    model = _model("glm4v").eval()
    assert patch_vl(model) is model and "_ropekit_patch" in model.__dict__
    assert patch_vl(model) is model  # idempotent like patch
    unpatch_vl(model)
    assert "_ropekit_patch" not in model.__dict__
    assert not any(isinstance(m, RopekitVLRotary) for m in model.modules())


def test_refuses_models_without_vl_rotary() -> None:
    with pytest.raises(ValueError, match="no VL rotary module"):
        patch_vl(torch.nn.Linear(2, 2))


def test_refuses_frequencies_it_cannot_reproduce_and_modifies_nothing() -> None:
    model = _model("qwen2_vl").eval()
    rot = model.model.language_model.rotary_emb
    rot.inv_freq.mul_(
        1.01
    )  # no longer base^(-2j/d): ropekit would silently rotate differently, so it refuses
    before = _snapshot(model)
    with pytest.raises(ValueError, match=r"(?s)refuses this model.*rotary_emb.*matches no base"):
        ropekit.hf.patch(model)
    _same(before, _snapshot(model))
    assert "_ropekit_patch" not in model.__dict__


def test_bf16_model_rotates_with_float32_tables() -> None:
    """The original casts the tables to bf16; ropekit rotates from its exact float32 tables (closer to float64)."""
    torch.manual_seed(0)
    model = _model("qwen2_vl").eval()
    rot = model.model.language_model.rotary_emb
    pos = torch.arange(3000, 3008).view(1, 1, -1).expand(3, 2, -1)
    x = torch.zeros(1, dtype=torch.bfloat16)
    q = torch.randn(2, 4, 8, 16, dtype=torch.float64)
    modeling = sys.modules[type(rot).__module__]
    ang = pos[0, :, :, None].double() * rot.inv_freq.double()  # text positions: all axes equal
    cos64, sin64 = torch.cat([ang.cos()] * 2, -1)[:, None], torch.cat([ang.sin()] * 2, -1)[:, None]
    exact = q * cos64 + torch.cat([-q[..., 8:], q[..., :8]], -1) * sin64  # float64 oracle from the formula
    ref = modeling.apply_rotary_pos_emb(q.bfloat16(), q.bfloat16(), *rot(x, pos))[0]
    with ropekit.hf.patched(model):
        cos, sin = model.model.language_model.rotary_emb(x, pos)
        assert cos.dtype == torch.bfloat16  # transformers' format is kept
        got = modeling.apply_rotary_pos_emb(q.bfloat16(), q.bfloat16(), cos, sin)[0]
    assert got.dtype == torch.bfloat16
    assert (got.double() - exact).abs().max() < (ref.double() - exact).abs().max()


def _mrope_oracle(inv_freq: torch.Tensor, pos: torch.Tensor, section: list[int]) -> torch.Tensor:
    """Qwen2-VL's text cos table from its definition, in float64: band j takes the axis of its mrope_section chunk
    (t, h, w, t, ...), angle pos[axis] * inv_freq[j], the half table repeated (half-split pairs)."""
    axis = [i % 3 for i, n in enumerate(section) for _ in range(n)]
    inv = inv_freq.double()
    ang = torch.stack([pos[axis[j]].double() * inv[j] for j in range(len(axis))], -1)
    return torch.cat([ang.cos()] * 2, -1)


@pytest.mark.parametrize("when", ["before", "after"])
def test_a_cast_vl_model_rotates_with_its_rounded_frequencies(when: str) -> None:
    """``model.to(torch.bfloat16)`` rounds each rotary's inv_freq, and transformers then rotates with the rounded
    values (its forward reads ``inv_freq.float()``). Cast before or after the patch, ropekit follows the buffer, with
    a warning naming the module and the dtype: its tables are the float64 oracle's for the rounded frequencies (to
    float32 rounding), so they equal transformers' to float32 phase error; with the float32 frequencies they would
    be radians off at these positions. The vision tower and the text layers still rotate through ropekit."""
    torch.manual_seed(0)
    model = _model("qwen2_vl").eval()
    t = torch.arange(16)
    pos = torch.stack([t + 3000, t // 4 + 700, t % 4 + 40])[:, None]  # [3, 1, 16], axes differ
    x = torch.zeros(1)
    if when == "before":
        model.to(torch.bfloat16)
    rot = model.model.language_model.rotary_emb
    inv = rot.inv_freq.to(torch.bfloat16)  # the rounded values transformers rotates with after the cast
    key, vision_key = _text_apply_key(model), _vision_apply_key(model)
    warned = r"Qwen2VLRotaryEmbedding: the rotary frequency buffers are torch.bfloat16"
    if when == "before":  # warned by the patch
        with pytest.warns(UserWarning, match=warned):
            ropekit.hf.patch(model)
        cos, _ = model.model.language_model.rotary_emb(x, pos)
    else:  # warned by the first forward after the cast
        ropekit.hf.patch(model)
        model.to(torch.bfloat16)
        with pytest.warns(UserWarning, match=warned):
            cos, _ = model.model.language_model.rotary_emb(x, pos)
    want = _mrope_oracle(inv, pos, [2, 3, 3])
    assert (cos.double() - want).abs().max() < 2e-7
    config_freqs = torch.tensor([1e4 ** (-j / 8) for j in range(8)], dtype=torch.float64)  # head_dim 16, theta 1e4
    assert (cos.double() - _mrope_oracle(config_freqs, pos, [2, 3, 3])).abs().max() > 0.1
    kw = _inputs("qwen2_vl")
    before, before_v = CALLS[key], CALLS[vision_key]
    with torch.no_grad():
        model(**{k: (v.bfloat16() if v.is_floating_point() else v) for k, v in kw.items()})
    assert CALLS[key] - before == model.config.text_config.num_hidden_layers
    assert CALLS[vision_key] - before_v == _vision_rotations(model, kw)
    ropekit.hf.unpatch(model)
    # the original gets the cast buffer back: unpatched, the model rotates as if it had never been patched
    assert model.model.language_model.rotary_emb.inv_freq.dtype == torch.bfloat16
    ref, _ = model.model.language_model.rotary_emb(x, pos)
    assert (ref.double() - want).abs().max() < 2e-3  # transformers: float32 products of the same frequencies


def test_a_vl_rotary_keeps_the_original_buffers_and_gives_them_back() -> None:
    """The replacement holds the original's buffers (inv_freq, original_inv_freq): model.to(...) moves and casts
    them as it would the original's, and unpatch hands the current tensors back."""
    model = _model("qwen2_vl").eval()
    names = {n for n, _ in model.model.language_model.rotary_emb.named_buffers()}
    assert {"inv_freq", "original_inv_freq"} <= names
    ropekit.hf.patch(model)
    assert names <= {n for n, _ in model.model.language_model.rotary_emb.named_buffers()}
    model.to(torch.float64)
    ropekit.hf.unpatch(model)
    for m in (model.model.language_model.rotary_emb, model.model.visual.rotary_pos_emb):
        assert m.inv_freq.dtype == torch.float64 and m.original_inv_freq.dtype == torch.float64


def test_a_vl_model_cast_down_and_back_is_refused_naming_the_round_trip() -> None:
    """bfloat16 and back to float32: rounded values in a float32 buffer; nothing is modified."""
    m = _model("qwen2_vl").eval().to(torch.bfloat16).float()
    classes = [type(x) for x in m.modules()]
    with pytest.raises(ValueError, match=r"inv_freq is torch.float32.* as a round trip through a lower precision"):
        ropekit.hf.patch(m)
    assert [type(x) for x in m.modules()] == classes


def test_fused_static_cache_refuses_a_vl_model_by_name() -> None:
    from ropekit.hf.fused_cache import FusedStaticCache

    m = _model("qwen2_vl").eval()
    with ropekit.hf.patched(m), pytest.raises(ValueError, match=r"its text rotary is multi-axis \(M-RoPE\)"):
        FusedStaticCache(m, max_cache_len=32)

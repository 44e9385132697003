"""Vision towers rotated by ropekit's dispatch (:mod:`ropekit.hf.vision_apply`): Pixtral (inside a LLaVA:
test_patch_vision.py) and Llama 4's vision encoder count one ropekit rotation per vision layer, equal the unpatched transformers
model (float32, <= 1e-4 relative; vision attention sharpened so the rotation matters), and a negative control
(ropekit's tables shifted by one token, transformers' cos/sin untouched) moves the output; a bf16 Pixtral rotation
is closer to a float64 oracle of the formula than transformers' bf16 tables; a modeling file without its vision
apply function is refused with the model untouched. The Qwen-family vision towers are counted and controlled in
test_patch_vl.py."""

from __future__ import annotations

import sys
import warnings

import pytest
import torch

T = pytest.importorskip("transformers")

import ropekit.hf
import ropekit.hf.patch_vl as patch_vl_module
from ropekit.hf.apply import CALLS
from ropekit.hf.patch_vl import RopekitLlama4VisionRotary
from ropekit.hf.rotary import ROPEKIT_TABLES, RopekitTables


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max() / b.abs().max())


def _sharpen(model: torch.nn.Module) -> None:
    with torch.no_grad():
        for name, p in model.named_parameters():
            if ("q_proj" in name or "k_proj" in name) and "vision" in type(model).__name__.lower() + name:
                p.mul_(8)


def _pixtral() -> torch.nn.Module:
    cfg = T.PixtralVisionConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                                head_dim=16, image_size=112, patch_size=14)  # fmt: skip
    torch.manual_seed(0)
    model = T.PixtralVisionModel(cfg).eval()
    _sharpen(model)
    return model


PIXTRAL_KEY = ("transformers.models.pixtral.modeling_pixtral", "apply_rotary_pos_emb")
LLAMA4_KEY = ("transformers.models.llama4.modeling_llama4", "vision_apply_rotary_emb")


def _shifted_cat(tag):  # type: ignore[no-untyped-def]
    def tag_cat_tables(cos, sin, spec):  # type: ignore[no-untyped-def]
        info = tag(cos, sin, spec)
        return RopekitTables(info.cos.roll(1, 0), info.sin.roll(1, 0), info.family, info.spec)

    return tag_cat_tables


def test_pixtral_rotates_through_ropekit_per_layer(monkeypatch: pytest.MonkeyPatch) -> None:
    model = _pixtral()
    x = torch.randn(1, 3, 56, 98)  # non-square, smaller than the training size
    with torch.no_grad():
        ref = model(x, image_sizes=[(56, 98)]).last_hidden_state
        ropekit.hf.patch(model)
        before = CALLS[PIXTRAL_KEY]
        got = model(x, image_sizes=[(56, 98)]).last_hidden_state
        assert CALLS[PIXTRAL_KEY] - before == model.config.num_hidden_layers
        monkeypatch.setattr(patch_vl_module, "tag_cat_tables", _shifted_cat(patch_vl_module.tag_cat_tables))
        moved = model(x, image_sizes=[(56, 98)]).last_hidden_state
        ropekit.hf.unpatch(model)
    assert _rel(got, ref) <= 1e-4
    assert _rel(moved, ref) > 1e-3
    modeling = sys.modules["transformers.models.pixtral.modeling_pixtral"]
    assert not hasattr(modeling.apply_rotary_pos_emb, "_ropekit_original")  # restored


def test_pixtral_bf16_rotation_uses_float32_tables() -> None:
    """transformers casts Pixtral's tables to the activations' dtype; ropekit rotates from exact float32 tables."""
    model = _pixtral()
    rot = model.patch_positional_embedding
    pos = torch.stack(torch.meshgrid(torch.arange(8), torch.arange(8), indexing="ij"), -1).reshape(-1, 2)
    q = torch.randn(1, 4, 64, 16, dtype=torch.float64)
    modeling = sys.modules[type(rot).__module__]
    inv = rot.inv_freq.double()  # [row freqs (even), col freqs (odd)] of Pixtral's 2-D table
    n = inv.numel() // 2
    ang = torch.cat([pos[:, :1].double() * inv[:n], pos[:, 1:].double() * inv[n:]], -1)
    cos64, sin64 = torch.cat([ang.cos()] * 2, -1), torch.cat([ang.sin()] * 2, -1)
    exact = q * cos64 + torch.cat([-q[..., 8:], q[..., :8]], -1) * sin64  # float64 oracle from the formula
    x = torch.zeros(1, dtype=torch.bfloat16)
    ref = modeling.apply_rotary_pos_emb(q.bfloat16(), q.bfloat16(), *rot(x, pos), unsqueeze_dim=0)[0]
    with ropekit.hf.patched(model):
        cos, sin = model.patch_positional_embedding(x, pos)
        assert cos.dtype == torch.bfloat16 and getattr(cos, ROPEKIT_TABLES).cos.dtype == torch.float32
        got = modeling.apply_rotary_pos_emb(q.bfloat16(), q.bfloat16(), cos, sin, unsqueeze_dim=0)[0]
    assert got.dtype == torch.bfloat16
    assert (got.double() - exact).abs().max() < (ref.double() - exact).abs().max()


def test_llama4_vision_rotates_through_ropekit_per_layer() -> None:
    cfg = T.Llama4VisionConfig(hidden_size=64, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
                               image_size=56, patch_size=14, vision_output_dim=64, projector_input_dim=64,
                               projector_output_dim=64, pixel_shuffle_ratio=0.5)  # fmt: skip
    torch.manual_seed(0)
    model = T.Llama4VisionModel(cfg).eval()
    _sharpen(model)
    x = torch.randn(2, 3, 56, 56)
    with torch.no_grad():
        ref = model(x).last_hidden_state
        ropekit.hf.patch(model)
        assert isinstance(model.rotary_embedding, RopekitLlama4VisionRotary)
        before = CALLS[LLAMA4_KEY]
        got = model(x).last_hidden_state
        assert CALLS[LLAMA4_KEY] - before == cfg.num_hidden_layers
        info = getattr(model.rotary_embedding.freqs_ci, ROPEKIT_TABLES)
        assert info.cos.dtype == torch.float32 and info.family.layout == "interleaved"
        info.cos.copy_(info.cos.roll(1, 0))  # negative control: only ropekit's copy of the table changes
        info.sin.copy_(info.sin.roll(1, 0))
        moved = model(x).last_hidden_state
        ropekit.hf.unpatch(model)
        assert type(model.rotary_embedding).__name__ == "Llama4VisionRotaryEmbedding"
        again = model(x).last_hidden_state
    assert _rel(got, ref) <= 1e-4
    assert _rel(moved, ref) > 1e-3
    assert torch.equal(again, ref)  # unpatched: transformers' own table and function again


def test_refuses_a_vision_tower_whose_apply_function_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    model = _pixtral()
    modeling = sys.modules["transformers.models.pixtral.modeling_pixtral"]
    monkeypatch.delattr(modeling, "apply_rotary_pos_emb")
    state = {k: v.clone() for k, v in model.state_dict().items()}
    classes = {n: type(m) for n, m in model.named_modules()}
    with pytest.raises(ValueError, match=r"(?s)refuses this model.*defines no apply_rotary_pos_emb"):
        ropekit.hf.patch(model)
    assert {n: type(m) for n, m in model.named_modules()} == classes
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in state.items())
    assert "_ropekit_patch" not in model.__dict__


def _real_size_vision_rotaries() -> list[tuple[str, torch.nn.Module]]:
    """The vision rotaries at their released head sizes (Qwen2/2.5-VL 80, Qwen3-VL 72, GLM-4V 96, ERNIE 80,
    Pixtral 64, Llama 4 88): float32 ``inv_freq`` rounding differs there from the tiny test models."""
    from transformers.models.ernie4_5_vl_moe import modeling_ernie4_5_vl_moe as e
    from transformers.models.glm4v import modeling_glm4v as g
    from transformers.models.glm4v_moe import modeling_glm4v_moe as gm
    from transformers.models.llama4 import modeling_llama4 as l4
    from transformers.models.pixtral import modeling_pixtral as px
    from transformers.models.qwen2_5_vl import modeling_qwen2_5_vl as q25
    from transformers.models.qwen2_vl import modeling_qwen2_vl as q2
    from transformers.models.qwen3_vl import modeling_qwen3_vl as q3

    return [
        ("qwen2_vl", q2.Qwen2VLVisionRotaryEmbedding(T.Qwen2VLConfig().vision_config)),
        (
            "qwen2_5_vl",
            q25.Qwen2_5_VLVisionRotaryEmbedding(T.Qwen2_5_VLVisionConfig(hidden_size=1280, num_heads=16)),
        ),
        ("qwen3_vl", q3.Qwen3VLVisionRotaryEmbedding(T.Qwen3VLConfig().vision_config)),
        ("glm4v", g.Glm4vVisionRotaryEmbedding(T.Glm4vConfig().vision_config)),
        ("glm4v_moe", gm.Glm4vMoeVisionRotaryEmbedding(T.Glm4vMoeConfig().vision_config)),
        ("ernie", e.Ernie4_5_VLMoeVisionRotaryEmbedding(e.Ernie4_5_VLMoeConfig().vision_config)),
        ("pixtral", px.PixtralVisionRotaryEmbedding(T.PixtralVisionConfig())),
        ("llama4", l4.Llama4VisionRotaryEmbedding(T.Llama4VisionConfig())),
    ]


def test_real_size_vision_rotaries_are_accepted_and_exact() -> None:
    """Regression: at released sizes transformers' float32 ``inv_freq`` lies up to ~3e-7 (relative) from
    ``base^(-2j/d)``; the patch must still recognise it, and ropekit's tables follow the exact formula (float64
    oracle) at a 64 x 64 patch grid."""
    from ropekit.hf.patch_vl import vl_replacement

    grid = torch.stack(torch.meshgrid(torch.arange(64), torch.arange(64), indexing="ij"), -1).reshape(-1, 2)
    for name, rot in _real_size_vision_rotaries():
        new, why = vl_replacement(rot)
        assert new is not None, (name, why)
        if name == "llama4":
            continue  # fixed grid: its table is checked against the formula in tests/ropekit/test_presets_vision.py
        k, base = rot.inv_freq.numel(), float(rot.config.rope_parameters["rope_theta"])
        inv = base ** (-torch.arange(0, 2 * k, 2, dtype=torch.float64) / (2 * k))  # the exact 1-D frequencies
        row, col = grid[:, :1].double(), grid[:, 1:].double()
        if name == "pixtral":  # head_dim / 2 frequencies: rows take the even ones, columns the odd ones
            a = torch.cat([row * inv[0::2], col * inv[1::2]], -1)
        else:  # head_dim / 4 frequencies, each on both axes
            a = torch.cat([row * inv, col * inv], -1)
        with torch.no_grad():
            cos, sin = new(torch.zeros(1), grid)
        torch.testing.assert_close(cos.double(), torch.cat([a.cos(), a.cos()], -1), atol=1e-6, rtol=0)
        torch.testing.assert_close(sin.double(), torch.cat([a.sin(), a.sin()], -1), atol=1e-6, rtol=0)


def test_qwen2_5_vl_vision_gradients_equal_unpatched() -> None:
    """Training through the patched vision tower (window permutation included): the vision weights' gradients
    equal transformers' (the rotation through ropekit's dispatch is differentiable)."""
    from tests.ropekit.hf.test_patch_vl import _inputs, _model, _sharpen_vision

    torch.manual_seed(0)
    model = _model("qwen2_5_vl")
    _sharpen_vision(model)
    kw = _inputs("qwen2_5_vl")

    def grads() -> dict[str, torch.Tensor]:
        model.zero_grad()
        model(**kw).logits.square().mean().backward()
        return {
            n: p.grad.clone() for n, p in model.named_parameters() if "visual" in n and p.grad is not None
        }

    ref = grads()
    key = (type(model).__module__, "apply_rotary_pos_emb_vision")
    with ropekit.hf.patched(model):
        before = CALLS[key]
        got = grads()
        assert CALLS[key] - before == 2 * model.config.vision_config.depth  # image and video calls
    assert ref.keys() == got.keys() and len(ref) > 10
    for n in ref:
        assert float((got[n] - ref[n]).abs().max()) <= 1e-4 * float(ref[n].abs().max()) + 1e-12, n


def test_unpatched_model_of_the_same_family_is_unaffected() -> None:
    """The wrapped vision apply function is shared by the modeling file: an unpatched model beside a patched one
    passes untagged tables and computes exactly as before (transformers' own function), not through ropekit."""
    from tests.ropekit.hf.test_patch_vl import _inputs, _model

    torch.manual_seed(0)
    patched, plain = _model("qwen2_5_vl").eval(), _model("qwen2_5_vl").eval()
    kw = _inputs("qwen2_5_vl")
    key = (type(plain).__module__, "apply_rotary_pos_emb_vision")
    with torch.no_grad():
        ref = plain(**kw).logits
        with ropekit.hf.patched(patched):
            before = CALLS[key]
            beside = plain(**kw).logits
            assert CALLS[key] == before  # nothing of the plain model went through ropekit
    assert torch.equal(beside, ref)


def test_llama4_vision_cast_to_bf16_after_patching_still_rotates_exactly() -> None:
    """``model.to(torch.bfloat16)`` turns the complex ``freqs_ci`` buffer into a real one (imaginary part dropped);
    ropekit rotates from its own float32 tables, so the rotation stays the float32 complex one."""
    cfg = T.Llama4VisionConfig(hidden_size=64, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
                               image_size=56, patch_size=14, vision_output_dim=64, projector_input_dim=64,
                               projector_output_dim=64, pixel_shuffle_ratio=0.5)  # fmt: skip
    torch.manual_seed(0)
    model = T.Llama4VisionModel(cfg).eval()
    table = model.rotary_embedding.freqs_ci.clone()  # transformers' complex64 table [17, 1, 8]
    x = torch.randn(1, 3, 56, 56)
    with torch.no_grad():
        ropekit.hf.patch(model)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch warns about the discarded imaginary part
            model.to(torch.bfloat16)
        assert not model.rotary_embedding.freqs_ci.is_complex()
        before = CALLS[LLAMA4_KEY]
        model(x.bfloat16())  # runs, every layer through ropekit
        assert CALLS[LLAMA4_KEY] - before == cfg.num_hidden_layers
        freqs = model.rotary_embedding(x)  # the real bf16 buffer, tagged with ropekit's float32 tables
        assert getattr(freqs, ROPEKIT_TABLES).cos.dtype == torch.float32
        modeling = sys.modules[LLAMA4_KEY[0]]
        q, k = torch.randn(2, 17, 4, 16), torch.randn(2, 17, 4, 16)
        got = modeling.vision_apply_rotary_emb(q, k, freqs_ci=freqs)
        ref = modeling.vision_apply_rotary_emb._ropekit_original(q, k, freqs_ci=table)
        ropekit.hf.unpatch(model)
    for g, r in zip(got, ref):
        torch.testing.assert_close(g, r, atol=1e-5, rtol=1e-5)

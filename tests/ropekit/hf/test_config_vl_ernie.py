"""ERNIE-4.5-VL's ``freq_allocation`` (issue 10 point 1): from_hf / to_hf in the v4 (remote-code, flat) and v5
(text_config nesting) schemas, checked against two independent oracles -- the band split of ERNIE's own
``apply_rotary_3d`` written out in float64 (time on the last ``freq_allocation`` bands; the others alternate
height / width), and transformers 5.23's ERNIE rotary module (per-token cos/sin) -- plus the refusals, and
``ropekit.hf.patch`` parity on a tiny ERNIE-4.5-VL with a non-default split."""

from __future__ import annotations

import warnings

import pytest
import torch

from ropekit import RopeSpec
from ropekit.axis_tables import axis_tables

T = pytest.importorskip("transformers")

from transformers.models.ernie4_5_vl_moe import modeling_ernie4_5_vl_moe as M
from transformers.models.ernie4_5_vl_moe.configuration_ernie4_5_vl_moe import (
    Ernie4_5_VLMoeConfig,
    Ernie4_5_VLMoeTextConfig,
)


def _original_tables(
    pos: torch.Tensor, fa: int, head_dim: int, base: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """float64 oracle from ERNIE's ``apply_rotary_3d``: per-channel (interleaved) cos, sin for positions [3, N]
    (rows t, h, w). Time takes the last ``fa`` bands; the first ``n - fa`` bands alternate h (even), w (odd)."""
    n = head_dim // 2
    inv = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)  # [n]
    ang = pos.double()[:, :, None] * inv  # [3, N, n]: every axis at every band
    t, h, w = ang[0], ang[1], ang[2]
    hw = torch.stack([h[:, 0 : n - fa : 2], w[:, 1 : n - fa : 2]], dim=-1).flatten(-2)
    thw = torch.cat([hw, t[:, n - fa :]], dim=-1)  # t[:, n - fa:] is empty for fa = 0 (unlike ``[-fa:]``)
    full = thw.repeat_interleave(2, dim=-1)  # interleaved pairs (2j, 2j + 1)
    return full.cos(), full.sin()


def _positions(n_tok: int = 11, hi: int = 50, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, hi, (3, n_tok), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("fa", [20, 16, 4, 0, 64])
def test_band_to_axis_equals_ernie_original_formula(fa: int) -> None:
    cfg = {"model_type": "ernie4_5_moe_vl", "hidden_size": 2560, "num_attention_heads": 20,
           "rope_theta": 500000.0, "freq_allocation": fa}  # fmt: skip  # Baidu's flat remote-code config
    spec = RopeSpec.from_hf(cfg)
    assert spec.layout == "interleaved" and spec.head_dim == 128 and spec.base == 5e5
    pos = _positions()
    cos, sin = axis_tables(pos, spec, dtype=torch.float64)  # [N, 64]
    ref_cos, ref_sin = _original_tables(pos, fa, 128, 5e5)
    torch.testing.assert_close(cos.repeat_interleave(2, -1), ref_cos, atol=1e-12, rtol=0)
    torch.testing.assert_close(sin.repeat_interleave(2, -1), ref_sin, atol=1e-12, rtol=0)
    assert spec.axes is not None and spec.axes.letters() == "HW" * ((64 - fa) // 2) + "T" * fa


@pytest.mark.parametrize("fa", [20, 12, 2])
def test_per_token_tables_equal_transformers_rotary(fa: int) -> None:
    """transformers' ERNIE rotary module (mrope_section = [h, w, t] as its converter writes it) vs ropekit's spec
    read from ``freq_allocation`` alone: the same per-token cos/sin at distinct t, h, w positions."""
    n = 64
    sec = [(n - fa) // 2, (n - fa) // 2, fa]
    text = Ernie4_5_VLMoeTextConfig(hidden_size=2560, num_attention_heads=20,
                                    rope_parameters={"rope_type": "default", "rope_theta": 5e5, "mrope_section": sec})  # fmt: skip
    rot = M.Ernie4_5_VLMoeTextRotaryEmbedding(text)
    pos = _positions(hi=40).unsqueeze(1)  # [3, 1, N]
    cos_hf, sin_hf = rot(torch.zeros(1), pos)  # [1, N, 128], interleaved repeat
    spec = RopeSpec.from_hf({"model_type": "ernie4_5_vl_moe", "text_config": {
        "model_type": "ernie4_5_vl_moe_text", "hidden_size": 2560, "num_attention_heads": 20,
        "freq_allocation": fa, "rope_parameters": {"rope_type": "default", "rope_theta": 5e5}}})  # fmt: skip
    cos, sin = axis_tables(pos, spec)
    torch.testing.assert_close(cos.repeat_interleave(2, -1), cos_hf, atol=2e-5, rtol=0)
    torch.testing.assert_close(sin.repeat_interleave(2, -1), sin_hf, atol=2e-5, rtol=0)


def test_every_spelling_reads_the_same_split() -> None:
    want = RopeSpec.from_hf({"model_type": "ernie4_5_moe_vl", "hidden_size": 2560, "num_attention_heads": 20,
                             "rope_theta": 5e5, "freq_allocation": 16})  # fmt: skip
    text = {"model_type": "ernie4_5_vl_moe_text", "hidden_size": 2560, "num_attention_heads": 20}
    rp = {"rope_type": "default", "rope_theta": 5e5}
    spellings = [
        {"model_type": "ernie4_5_vl_moe", "text_config": {**text, "freq_allocation": 16, "rope_parameters": rp}},
        {"model_type": "ernie4_5_vl_moe", "text_config": {**text, "rope_parameters": {**rp, "freq_allocation": 16}}},
        {"model_type": "ernie4_5_vl_moe", "text_config": {**text, "freq_allocation": 16,
                                                          "rope_parameters": {**rp, "mrope_section": [24, 24, 16]}}},
        {"model_type": "ernie4_5_vl_moe", "text_config": {**text, "rope_theta": 5e5, "freq_allocation": 16}},
        {"hidden_size": 2560, "num_attention_heads": 20, "rope_theta": 5e5, "freq_allocation": 16},  # no type
    ]  # fmt: skip
    for cfg in spellings:
        assert RopeSpec.from_hf(cfg) == want, cfg
    assert want.axes is not None and want.axes.sections == (16, 24, 24)  # (t, h, w)
    obj = Ernie4_5_VLMoeConfig(text_config={**text, "freq_allocation": 16,
                                            "rope_parameters": {**rp, "mrope_section": [24, 24, 16]}})  # fmt: skip
    assert RopeSpec.from_hf(obj) == want  # a transformers config object keeps the extra key


@pytest.mark.parametrize("schema", ["v5", "v4"])
def test_to_hf_writes_freq_allocation_and_transformers_reads_the_same_rotation(schema: str) -> None:
    spec = RopeSpec.from_hf({"model_type": "ernie4_5_moe_vl", "hidden_size": 2560, "num_attention_heads": 20,
                             "rope_theta": 5e5, "freq_allocation": 12})  # fmt: skip
    frag = spec.to_hf(schema=schema)  # type: ignore[arg-type]
    assert frag["freq_allocation"] == 12
    rope = frag["rope_parameters" if schema == "v5" else "rope_scaling"]
    assert rope["mrope_section"] == [26, 26, 12]
    assert RopeSpec.from_hf({**frag, "model_type": "ernie4_5_vl_moe"}) == spec  # round trip
    assert RopeSpec.from_hf({"model_type": "ernie4_5_vl_moe", "text_config": frag}) == spec
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        text = Ernie4_5_VLMoeConfig(
            text_config={"hidden_size": 2560, "num_attention_heads": 20, **frag}
        ).text_config
    rot = M.Ernie4_5_VLMoeTextRotaryEmbedding(text)  # transformers 5's reading of the fragment
    pos = _positions(hi=40).unsqueeze(1)
    cos_hf, _ = rot(torch.zeros(1), pos)
    cos, _ = axis_tables(pos, spec)
    torch.testing.assert_close(cos.repeat_interleave(2, -1), cos_hf, atol=2e-5, rtol=0)


def test_refusals_name_the_key_and_value() -> None:
    base = {"model_type": "ernie4_5_vl_moe", "head_dim": 128}
    cases = [
        ({"freq_allocation": 15}, r"freq_allocation=15 cannot split 64 bands.*49 bands"),
        ({"freq_allocation": 70}, r"freq_allocation=70 exceeds the 64 rotary bands"),
        ({"freq_allocation": -2}, r"freq_allocation must be a non-negative int.*-2"),
        ({"freq_allocation": 2.0}, r"freq_allocation must be a non-negative int.*2\.0"),
        ({"freq_allocation": True}, r"freq_allocation must be a non-negative int.*True"),
        ({"freq_allocation": 20, "rope_parameters": {"rope_type": "default", "mrope_section": [24, 24, 16]}},
         r"mrope_section=\[24, 24, 16\] contradicts freq_allocation=20.*\[22, 22, 20\]"),
        ({"freq_allocation": 20, "rope_parameters": {"rope_type": "default", "freq_allocation": 16}},
         r"freq_allocation=20 \(top level\) and rope_parameters.freq_allocation=16 disagree"),
    ]  # fmt: skip
    for extra, match in cases:
        with pytest.raises(ValueError, match=match):
            RopeSpec.from_hf({**base, **extra})
    qwen = {"model_type": "qwen2_vl", "head_dim": 128, "freq_allocation": 20}
    with pytest.raises(ValueError, match=r"freq_allocation=20 is ERNIE-4.5-VL's band split.*'qwen2_vl'"):
        RopeSpec.from_hf(qwen)
    with pytest.warns(UserWarning, match="does not read it"):
        assert RopeSpec.from_hf(qwen, strict=False).axes.sections == (16, 24, 24)  # type: ignore[union-attr]


def _ernie_model(fa: int | None, sec: list[int]) -> torch.nn.Module:
    text = {"vocab_size": 100, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
            "num_attention_heads": 4, "num_key_value_heads": 2, "bos_token_id": 1, "eos_token_id": 2,
            "pad_token_id": 0, "moe_intermediate_size": [32, 32], "moe_k": 2, "moe_num_experts": 4,
            "moe_num_shared_experts": 1, "rope_parameters": {"rope_type": "default", "rope_theta": 1e4,
                                                             "mrope_section": sec}}  # fmt: skip
    if fa is not None:
        text["freq_allocation"] = fa
    cfg = Ernie4_5_VLMoeConfig(
        text_config=text,
        vision_config={"depth": 1, "hidden_size": 32, "num_heads": 2, "intermediate_size": 64,
                       "spatial_merge_size": 2, "temporal_merge_size": 2, "patch_size": 14},
        image_start_token_id=4, image_end_token_id=7, video_start_token_id=8, video_end_token_id=9,
        image_token_id=5, video_token_id=6,
    )  # fmt: skip
    torch.manual_seed(0)
    return M.Ernie4_5_VLMoeForConditionalGeneration(cfg).eval()


def test_patch_parity_with_non_default_freq_allocation() -> None:
    import ropekit.hf

    model = _ernie_model(6, [1, 1, 6])  # n = 8 bands: time on 6 of them (released models: 20 of 64)
    assert RopeSpec.from_hf(model.config).axes.letters() == "HWTTTTTT"  # type: ignore[union-attr]
    ids = torch.tensor([[3, 10, 4, 5, 5, 5, 5, 7, 11, 12], [0, 0, 14, 4, 5, 5, 5, 5, 7, 16]])
    kw = {"input_ids": ids, "attention_mask": (ids != 0).long(), "mm_token_type_ids": (ids == 5).long(),
          "pixel_values": torch.randn(32, 3 * 14 * 14), "image_grid_thw": torch.tensor([[1, 4, 4], [1, 4, 4]])}  # fmt: skip
    with torch.no_grad():
        ref = model(**kw).logits
        ref_gen = model.generate(**kw, max_new_tokens=3, do_sample=False)
        with ropekit.hf.patched(model):
            got = model(**kw).logits
            got_gen = model.generate(**kw, max_new_tokens=3, do_sample=False)
    assert float((got - ref).abs().max() / ref.abs().max()) <= 1e-4
    assert torch.equal(got_gen, ref_gen)


def test_patch_refuses_a_freq_allocation_transformers_does_not_run() -> None:
    import ropekit.hf

    model = _ernie_model(2, [1, 1, 6])  # says 2 time bands; transformers rotates with 6
    with pytest.raises(
        ValueError, match=r"(?s)refuses this model.*freq_allocation=2.*\[3, 3, 2\].*\[1, 1, 6\]"
    ):
        ropekit.hf.patch(model)
    assert "_ropekit_patch" not in model.__dict__

"""RopeSpec.to_hf(schema="v4"): transformers 4.x config fragments, checked against transformers 5's own reading
of them (its backward-compatible ``rope_scaling`` / ``rope_theta`` path) and against v4's documented forms."""

from __future__ import annotations

import copy
import warnings
from typing import Any

import pytest
import torch

from ropekit import RopeSpec
from ropekit.axes import AxisMap
from ropekit.axis_tables import apply_rope_axes
from ropekit.scaling import NTK, DynamicNTK, Linear, Llama3, LongRope, Yarn

T = pytest.importorskip("transformers")

_SHORT = tuple(1.0 + i / 16 for i in range(16))
_LONG = tuple(2.0 + i / 8 for i in range(16))
SPECS_1D = {
    "default": RopeSpec(64, base=500_000.0),
    "partial": RopeSpec(64, rotary_dim=32),
    "partial-third": RopeSpec(96, rotary_dim=32),  # 32/96 is not exact in floating point
    "linear": RopeSpec(64, scaling=Linear(4.0)),
    "dynamic": RopeSpec(64, scaling=DynamicNTK(2.0, 4096)),
    "yarn": RopeSpec(64, base=150_000.0, scaling=Yarn(32.0, 4096, truncate=False)),
    "yarn-mscale": RopeSpec(64, scaling=Yarn(40.0, 4096, mscale=0.707, mscale_all_dim=1.0)),
    "llama3": RopeSpec(64, base=500_000.0, scaling=Llama3(8.0, 1.0, 4.0, 8192)),
    "longrope": RopeSpec(
        96, rotary_dim=32, scaling=LongRope(_SHORT, _LONG, 4096, max_position_embeddings=131072)
    ),
    "longrope-factor": RopeSpec(
        64, rotary_dim=32, scaling=LongRope(_SHORT, _LONG, 4096, factor=32.0, max_position_embeddings=131072)
    ),
    "longrope-attn": RopeSpec(
        64, rotary_dim=32, scaling=LongRope(_SHORT, _LONG, 4096, factor=16.0, attention_factor_=1.1)
    ),
}


def _hf_1d(spec: RopeSpec, frag: dict[str, Any]) -> Any:
    """transformers 5's config object built from the v4 fragment (Phi-3 where rotation is partial: Llama's rotary
    code ignores partial_rotary_factor)."""
    kw = {"hidden_size": 4 * spec.head_dim, "num_attention_heads": 4, "max_position_embeddings": 131072}
    cls = T.Phi3Config if spec.rotary_dim != spec.head_dim else T.LlamaConfig
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return cls(**{**kw, **copy.deepcopy(frag)})


@pytest.mark.parametrize("name", sorted(SPECS_1D))
def test_1d_fragment_read_by_transformers(name: str) -> None:
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding
    from transformers.models.phi3.modeling_phi3 import Phi3RotaryEmbedding

    spec = SPECS_1D[name]
    frag = spec.to_hf(schema="v4")
    assert (
        "rope_parameters" not in frag
        and frag["rope_theta"] == spec.base
        and frag["head_dim"] == spec.head_dim
    )
    assert (frag["rope_scaling"] is None) == (spec.scaling is None)
    cfg = _hf_1d(spec, frag)
    emb = (Phi3RotaryEmbedding if spec.rotary_dim != spec.head_dim else LlamaRotaryEmbedding)(cfg)
    torch.testing.assert_close(emb.inv_freq, spec.inv_freq(), rtol=1e-6, atol=0)
    assert emb.attention_scaling == pytest.approx(spec.attention_factor, rel=1e-6)
    if spec.dynamic:  # past the trained length: dynamic NTK's base, LongRoPE's long factors
        n = 2 * 131072 if isinstance(spec.scaling, DynamicNTK) else 8192
        inv, attn = ROPE_INIT_FUNCTIONS[spec.scaling.rope_type](cfg, "cpu", seq_len=n)  # type: ignore[union-attr]
        torch.testing.assert_close(inv, spec.inv_freq(n), rtol=1e-6, atol=0)
        assert attn == pytest.approx(spec.attention_factor, rel=1e-6)


@pytest.mark.parametrize("name", sorted(SPECS_1D))
def test_1d_round_trip(name: str) -> None:
    spec = SPECS_1D[name]
    assert RopeSpec.from_hf(spec.to_hf(schema="v4"), layout=spec.layout) == spec


def test_llama31_fragment_equals_v4_config_json() -> None:
    """Llama-3.1-8B's config.json as transformers 4.x wrote it (rope_theta top level, llama3 keys in rope_scaling)."""
    want = {"head_dim": 128, "rope_theta": 500000.0, "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0,
            "high_freq_factor": 4.0, "original_max_position_embeddings": 8192, "rope_type": "llama3"}}  # fmt: skip
    assert RopeSpec(128, base=500000.0, scaling=Llama3(8.0, 1.0, 4.0, 8192)).to_hf(schema="v4") == want


def test_phi3_fragment_equals_v4_config_json() -> None:
    """Phi-3-mini-128k's v4 form: original length top level, exactly three rope_scaling keys (Phi3Config v4
    validates ``type``, ``short_factor``, ``long_factor`` and nothing else)."""
    short, long = [1.0] * 48, [1.5] * 48
    want = {"head_dim": 96, "rope_theta": 10000.0, "original_max_position_embeddings": 4096,
            "max_position_embeddings": 131072,
            "rope_scaling": {"type": "longrope", "short_factor": short, "long_factor": long}}  # fmt: skip
    spec = RopeSpec(96, scaling=LongRope(tuple(short), tuple(long), 4096, max_position_embeddings=131072))
    assert spec.to_hf(schema="v4") == want


VL_NAMES = ["glm4v", "qwen2_5_vl", "qwen2_vl", "qwen3_vl", "qwen3_vl_moe"]


def _vl_spec(name: str) -> tuple[RopeSpec, dict[str, Any]]:
    from tests.ropekit.hf.test_config_vl import CONFIGS

    cfg = CONFIGS[name]()
    tc = cfg.text_config
    return RopeSpec.from_hf(cfg), {
        "hidden_size": tc.hidden_size,
        "num_attention_heads": tc.num_attention_heads,
    }


@pytest.mark.parametrize("name", VL_NAMES)
def test_vl_fragment_rotates_like_transformers(name: str) -> None:
    from tests.ropekit.hf.test_config_vl import _hf_rotary, _v5_config

    spec, dims = _vl_spec(name)
    frag = spec.to_hf(schema="v4")
    assert "mrope_section" in frag["rope_scaling"] and "rope_parameters" not in frag
    v4 = {"model_type": name, "text_config": {"model_type": f"{name}_text", **dims, **frag}}
    m, emb = _hf_rotary(name, _v5_config(name, v4).text_config)
    d = spec.head_dim
    q, k = torch.randn(1, 2, 9, d), torch.randn(1, 2, 9, d)
    pos = torch.randint(0, 40, (3, 1, 9))  # distinct t, h, w per token
    qh, kh = m.apply_rotary_pos_emb(q, k, *emb(q, pos))
    qr, kr = apply_rope_axes(q, k, pos, spec, format="bhsd")
    torch.testing.assert_close(qr, qh, atol=3e-5, rtol=1e-5)
    torch.testing.assert_close(kr, kh, atol=3e-5, rtol=1e-5)
    assert RopeSpec.from_hf(v4) == spec  # round trip through the nested v4 config.json
    assert RopeSpec.from_hf({**frag, "model_type": name}) == spec  # and through the bare text fragment


def test_qwen2_vl_fragment_equals_v4_resaved_form() -> None:
    """Qwen2-VL-7B's text config as transformers 4.x re-saved it: ``type: mrope`` became ``default`` and was copied
    to ``rope_type`` (v4 ``Qwen2VLTextConfig.__init__``)."""
    spec = RopeSpec(128, base=1e6, axes=AxisMap.contiguous((16, 24, 24)))
    want = {"head_dim": 128, "rope_theta": 1000000.0,
            "rope_scaling": {"type": "default", "rope_type": "default", "mrope_section": [16, 24, 24]}}  # fmt: skip
    assert spec.to_hf(schema="v4") == want


def test_qwen3_vl_fragment_equals_v4_config_json() -> None:
    spec = RopeSpec(128, base=5e6, axes=AxisMap.interleaved((24, 20, 20)))
    want = {"head_dim": 128, "rope_theta": 5000000.0,
            "rope_scaling": {"rope_type": "default", "mrope_section": [24, 20, 20], "mrope_interleaved": True}}  # fmt: skip
    assert spec.to_hf(schema="v4") == want


def test_v4_refuses_what_v4_cannot_express() -> None:
    with pytest.raises(ValueError, match=r"schema='v3'.*expected 'v5' or 'v4'"):
        RopeSpec(64).to_hf(schema="v3")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"RopeSpec.p=0.25 .*no transformers v4 form"):
        RopeSpec(256, base=1e6, p=0.25).to_hf(schema="v4")
    for sc in (NTK(factor=4.0), NTK(alpha=1000.0)):
        with pytest.raises(ValueError, match="static NTK"):
            RopeSpec(128, scaling=sc).to_hf(schema="v4")
    with pytest.raises(ValueError, match=r"LongRope\(factor=16.0, max_position_embeddings=None"):
        RopeSpec(64, scaling=LongRope((1.0,) * 32, (2.0,) * 32, 4096, factor=16.0)).to_hf(schema="v4")
    with pytest.raises(ValueError, match="freqs"):
        RopeSpec(4, freqs=(1.0, 0.5)).to_hf(schema="v4")

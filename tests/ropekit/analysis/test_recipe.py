"""The common float32 recipe equals transformers' own float32 init and forward, scheme by scheme (bit for bit)."""

from __future__ import annotations

import warnings
from typing import Any

import pytest
import torch

from ropekit import RopeSpec
from ropekit.analysis.recipe import common_fp32_inv_freq, common_fp32_tables
from ropekit.presets import preset_spec
from ropekit.scaling import NTK, DynamicNTK, Linear, Yarn

mru = pytest.importorskip("transformers.modeling_rope_utils")
from transformers import GPTNeoXConfig, LlamaConfig
from transformers.models.gpt_neox.modeling_gpt_neox import GPTNeoXRotaryEmbedding
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding


def _config(spec: RopeSpec, max_pos: int = 131072) -> Any:
    hf = spec.to_hf()
    kw = {
        "hidden_size": spec.head_dim * 4,
        "num_attention_heads": 4,
        "head_dim": spec.head_dim,
        "max_position_embeddings": hf.get("max_position_embeddings", max_pos),
        "rope_parameters": hf["rope_parameters"],
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if spec.rotary_dim != spec.head_dim:
            return GPTNeoXConfig(**kw)
        return LlamaConfig(**kw)


CASES = {
    "linear": RopeSpec(128, base=1e4, scaling=Linear(8.0)),
    "dynamic": RopeSpec(64, base=1e4, scaling=DynamicNTK(4.0, 2048)),
    "yarn-qwen": preset_spec("qwen2.5-7b-yarn"),
    "yarn-gpt-oss-untruncated": preset_spec("gpt-oss-20b"),
    "yarn-deepseek-mscale": RopeSpec(64, base=1e4, scaling=Yarn(40.0, 4096, mscale=1.0, mscale_all_dim=0.5)),
    "longrope": preset_spec("phi-3-mini-128k"),
    "llama3": preset_spec("llama-3.1-8b"),
    "llama3-x32": preset_spec("llama-3.2-1b"),
    "proportional": RopeSpec(256, base=1e6, p=0.25),
    "proportional-linear": RopeSpec(256, base=1e6, p=0.25, scaling=Linear(8.0)),
}


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("seq_len", [None, 1000, 200_000])
def test_inv_freq_equals_transformers_init(name: str, seq_len: int | None) -> None:
    spec = CASES[name]
    cfg = _config(spec)
    rope_type = cfg.rope_parameters["rope_type"]
    hf_inv, hf_attn = mru.ROPE_INIT_FUNCTIONS[rope_type](cfg, "cpu", seq_len=seq_len)
    ours = common_fp32_inv_freq(spec, seq_len)
    assert ours.dtype == hf_inv.dtype == torch.float32
    assert torch.equal(ours, hf_inv), (name, (ours - hf_inv).abs().max())
    assert spec.attention_factor == pytest.approx(hf_attn, rel=1e-15)


@pytest.mark.parametrize(
    "spec",
    [
        RopeSpec(128, base=5e5),
        RopeSpec(96, base=1e4, rotary_dim=24),
        RopeSpec(64, base=1e4, layout="interleaved"),
    ],
    ids=["plain", "partial", "interleaved"],
)
def test_plain_and_partial_equal_transformers_default(spec: RopeSpec) -> None:
    cfg = _config(spec)
    cls = GPTNeoXRotaryEmbedding if spec.rotary_dim != spec.head_dim else LlamaRotaryEmbedding
    hf_inv, _ = cls.compute_default_rope_parameters(cfg)
    assert torch.equal(common_fp32_inv_freq(spec), hf_inv)


def test_static_ntk_is_the_plain_recipe_at_the_hunyuan_base() -> None:
    # HunYuan: base' = base * alpha ** (d / (d - 2)) in Python floats, then the default float32 init.
    spec = RopeSpec(128, base=1e4, scaling=NTK(alpha=1000.0))
    base = 1e4 * 1000.0 ** (128 / 126)
    expected = 1.0 / (base ** (torch.arange(0, 128, 2, dtype=torch.int64).float() / 128))
    assert torch.equal(common_fp32_inv_freq(spec), expected)


@pytest.mark.parametrize("name", ["yarn-qwen", "dynamic", "longrope", "proportional-linear"])
def test_tables_equal_transformers_rotary_forward(name: str) -> None:
    """Step 2 and 3 as well: transformers' rotary module (dynamic update included) gives the same cos/sin."""
    spec = CASES[name]
    rope = LlamaRotaryEmbedding(_config(spec))
    n = spec.n_bands
    for last in (100, 9000):  # dynamic NTK and LongRoPE switch between these lengths
        pos = torch.arange(last - 64, last + 1)
        cos_hf, sin_hf = rope(torch.zeros(1, dtype=torch.float32), pos[None])
        cos, sin = common_fp32_tables(pos, spec)
        assert torch.equal(cos, cos_hf[0, :, :n]) and torch.equal(sin, sin_hf[0, :, :n]), (name, last)

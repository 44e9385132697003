"""Every scheme equals transformers' own init functions (the installed 5.x is the oracle), both config schemas.

One config dict goes to both sides: transformers parses it with its own config class and computes
(inv_freq, attention_factor) with ROPE_INIT_FUNCTIONS; ropekit parses it with RopeSpec.from_hf. Tolerance:
transformers rounds several times in float32, ropekit once from float64, so they agree to a few float32 ulps.
"""

from __future__ import annotations

import itertools
import warnings

import pytest
import torch

from ropekit import RopeSpec

transformers = pytest.importorskip("transformers")
from transformers import LlamaConfig
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
from transformers.models.phi3.modeling_phi3 import Phi3RotaryEmbedding

RTOL = 5e-7  # ~4 float32 ulps


def _hf(
    rope: dict, *, head_dim: int, max_pos: int, seq_len: int | None, schema: str
) -> tuple[torch.Tensor, float]:
    kw = {
        "hidden_size": head_dim * 4,
        "num_attention_heads": 4,
        "head_dim": head_dim,
        "max_position_embeddings": max_pos,
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if schema == "v5":
            cfg = LlamaConfig(**kw, rope_parameters=dict(rope))
        else:  # v4: rope_scaling + top-level rope_theta / partial_rotary_factor
            scal = {k: v for k, v in rope.items() if k not in ("rope_theta", "partial_rotary_factor")}
            cfg = LlamaConfig(
                **kw,
                rope_scaling=scal,
                rope_theta=rope.get("rope_theta", 10_000.0),
                partial_rotary_factor=rope.get("partial_rotary_factor", 1.0),
            )
        t = cfg.rope_parameters["rope_type"]
        if (
            t == "default"
        ):  # Llama's own default function drops partial_rotary_factor (HF #48630); Phi-3's keeps it
            return Phi3RotaryEmbedding.compute_default_rope_parameters(cfg)
        return ROPE_INIT_FUNCTIONS[t](cfg, None, seq_len)


def _ours(rope: dict, *, head_dim: int, max_pos: int, seq_len: int | None, schema: str) -> RopeSpec:
    cfg: dict = {
        "model_type": "llama",
        "head_dim": head_dim,
        "hidden_size": head_dim * 4,
        "num_attention_heads": 4,
        "max_position_embeddings": max_pos,
    }
    if schema == "v5":
        cfg["rope_parameters"] = dict(rope)
    else:
        cfg["rope_scaling"] = {
            k: v for k, v in rope.items() if k not in ("rope_theta", "partial_rotary_factor")
        }
        for k in ("rope_theta", "partial_rotary_factor"):
            if k in rope:
                cfg[k] = rope[k]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return RopeSpec.from_hf(cfg)


def _check(
    rope: dict, *, head_dim: int = 128, max_pos: int = 131072, seq_lens=(None,), schemas=("v5", "v4")
) -> None:
    for schema, seq_len in itertools.product(schemas, seq_lens):
        inv_hf, a_hf = _hf(rope, head_dim=head_dim, max_pos=max_pos, seq_len=seq_len, schema=schema)
        spec = _ours(rope, head_dim=head_dim, max_pos=max_pos, seq_len=seq_len, schema=schema)
        inv = spec.inv_freq(seq_len)
        assert inv.shape == inv_hf.shape, (rope, schema)
        torch.testing.assert_close(
            inv,
            inv_hf.float(),
            rtol=RTOL,
            atol=0,
            msg=lambda m, schema=schema, seq_len=seq_len: f"{rope} {schema} seq_len={seq_len}: {m}",
        )
        assert spec.attention_factor == pytest.approx(float(a_hf), rel=1e-12), (rope, schema)


@pytest.mark.parametrize(
    "base,head_dim,prf", list(itertools.product([10_000.0, 500_000.0, 1e6], [64, 128], [1.0, 0.5, 0.25]))
)
def test_default(base: float, head_dim: int, prf: float) -> None:
    _check({"rope_type": "default", "rope_theta": base, "partial_rotary_factor": prf}, head_dim=head_dim)


@pytest.mark.parametrize("factor,prf", list(itertools.product([1.0, 2.0, 8.5], [1.0, 0.5])))
def test_linear(factor: float, prf: float) -> None:
    _check({"rope_type": "linear", "factor": factor, "rope_theta": 10_000.0, "partial_rotary_factor": prf})


@pytest.mark.parametrize("factor,max_pos", list(itertools.product([2.0, 4.0], [2048, 4096])))
def test_dynamic_both_sides_of_the_original_length(factor: float, max_pos: int) -> None:
    lens = (None, max_pos // 2, max_pos, max_pos + 1, 3 * max_pos)
    _check({"rope_type": "dynamic", "factor": factor, "rope_theta": 10_000.0}, max_pos=max_pos, seq_lens=lens)


YARN = [
    {"factor": 4.0, "original_max_position_embeddings": 32768, "rope_theta": 1e6},  # Qwen3 / Qwen2.5 x4
    {
        "factor": 32.0,
        "original_max_position_embeddings": 4096,
        "rope_theta": 150_000.0,
        "truncate": False,
        "beta_fast": 32.0,
        "beta_slow": 1.0,
    },  # gpt-oss
    {
        "factor": 40.0,
        "original_max_position_embeddings": 4096,
        "rope_theta": 10_000.0,
        "mscale": 1.0,
        "mscale_all_dim": 1.0,
        "beta_fast": 32,
        "beta_slow": 1,
    },  # DeepSeek-V3
    {
        "factor": 40.0,
        "original_max_position_embeddings": 4096,
        "rope_theta": 10_000.0,
        "mscale": 0.707,
        "mscale_all_dim": 0.707,
    },  # DeepSeek-V2
    {
        "factor": 16.0,
        "original_max_position_embeddings": 8192,
        "rope_theta": 10_000.0,
        "mscale": 1.0,
        "mscale_all_dim": 0.5,
    },
    {
        "factor": 8.0,
        "original_max_position_embeddings": 4096,
        "rope_theta": 10_000.0,
        "beta_fast": 16.0,
        "beta_slow": 2.0,
        "attention_factor": 1.0,
    },  # explicit 1.0 wins
    {
        "factor": 2.0,
        "original_max_position_embeddings": 2048,
        "rope_theta": 500_000.0,
        "attention_factor": 0.8,
        "truncate": True,
    },
    {"factor": 1.0, "original_max_position_embeddings": 4096, "rope_theta": 10_000.0},
]


@pytest.mark.parametrize("params", YARN)
@pytest.mark.parametrize("head_dim,prf", [(128, 1.0), (64, 1.0), (128, 0.5)])
def test_yarn(params: dict, head_dim: int, prf: float) -> None:
    _check({"rope_type": "yarn", **params, "partial_rotary_factor": prf}, head_dim=head_dim)


def _factors(n: int, seed: int) -> tuple[list[float], list[float]]:
    g = torch.Generator().manual_seed(seed)
    short = (1.0 + 0.2 * torch.rand(n, generator=g, dtype=torch.float64)).tolist()
    long = (1.0 + 40 * torch.rand(n, generator=g, dtype=torch.float64)).sort().values.tolist()
    return short, long


@pytest.mark.parametrize(
    "head_dim,extra",
    [
        (96, {}),
        (128, {"factor": 32.0}),
        (96, {"attention_factor": 1.0}),
        (64, {"factor": 4.0, "attention_factor": 1.3}),
    ],
)
def test_longrope_both_sides_of_the_switch(head_dim: int, extra: dict) -> None:
    short, long = _factors(head_dim // 2, head_dim)
    rope = {
        "rope_type": "longrope",
        "short_factor": short,
        "long_factor": long,
        "original_max_position_embeddings": 4096,
        "rope_theta": 10_000.0,
        **extra,
    }
    _check(rope, head_dim=head_dim, seq_lens=(None, 100, 4096, 4097, 20_000))


@pytest.mark.parametrize(
    "factor,low,high,L0,base",
    [
        (8.0, 1.0, 4.0, 8192, 500_000.0),
        (32.0, 1.0, 4.0, 8192, 500_000.0),
        (16.0, 2.0, 8.0, 4096, 10_000.0),
        (4.0, 1.0, 2.0, 2048, 1e6),
    ],
)
def test_llama3(factor: float, low: float, high: float, L0: int, base: float) -> None:
    rope = {
        "rope_type": "llama3",
        "factor": factor,
        "low_freq_factor": low,
        "high_freq_factor": high,
        "original_max_position_embeddings": L0,
        "rope_theta": base,
    }
    _check(rope)


@pytest.mark.parametrize(
    "head_dim,prf,factor", [(256, 0.25, None), (128, 0.5, None), (256, 0.25, 4.0), (128, 1.0, None)]
)
def test_proportional(head_dim: int, prf: float, factor: float | None) -> None:
    rope = {"rope_type": "proportional", "rope_theta": 1e6, "partial_rotary_factor": prf}
    if factor is not None:
        rope["factor"] = factor
    _check(rope, head_dim=head_dim, schemas=("v5",))  # v5-only type


@pytest.mark.parametrize("alpha", [1000.0, 50.0])
def test_hunyuan_ntk_alpha(alpha: float) -> None:
    from transformers import HunYuanDenseV1Config
    from transformers.models.hunyuan_v1_dense.modeling_hunyuan_v1_dense import HunYuanDenseV1RotaryEmbedding

    rope = {
        "rope_type": "dynamic",
        "alpha": alpha,
        "factor": 1.0,
        "rope_theta": 10_000.0,
    }  # as HunYuan ships it
    cfg = HunYuanDenseV1Config(
        hidden_size=512, num_attention_heads=4, head_dim=128, rope_parameters=dict(rope)
    )
    hf = HunYuanDenseV1RotaryEmbedding(cfg)
    spec = RopeSpec.from_hf(
        {"model_type": "hunyuan_v1_dense", "head_dim": 128, "rope_parameters": dict(rope)}
    )
    torch.testing.assert_close(spec.inv_freq(), hf.inv_freq.float(), rtol=RTOL, atol=0)
    assert not spec.dynamic  # static despite the "dynamic" label (pitfalls item 18)

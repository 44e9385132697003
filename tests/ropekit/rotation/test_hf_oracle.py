"""Hugging Face transformers' own functions as an independent oracle of the half-split layout."""

from __future__ import annotations

import pytest
import torch

from ropekit import RopeSpec, apply_rope
from tests.oracles import theta

llama = pytest.importorskip("transformers.models.llama.modeling_llama")
neox = pytest.importorskip("transformers.models.gpt_neox.modeling_gpt_neox")


def _hf_tables(pos: torch.Tensor, spec: RopeSpec) -> tuple[torch.Tensor, torch.Tensor]:
    """float64 cos/sin duplicated to the half layout, as HF's rotary classes lay them out."""
    ang = pos.double()[..., None] * torch.tensor(theta(spec), dtype=torch.float64)
    emb = torch.cat([ang, ang], -1)
    return emb.cos(), emb.sin()


def test_llama_apply_rotary_pos_emb() -> None:
    spec = RopeSpec(head_dim=64, base=500_000.0)
    q, k = torch.randn(2, 8, 5, 64, dtype=torch.float64), torch.randn(2, 2, 5, 64, dtype=torch.float64)
    pos = torch.tensor([[0, 1, 2, 3, 4], [7, 8, 9, 10, 11]])
    cos, sin = _hf_tables(pos, spec)
    hq, hk = llama.apply_rotary_pos_emb(q, k, cos, sin)
    rq, rk = apply_rope(q, k, pos, spec, format="bhsd")
    torch.testing.assert_close(rq, hq, rtol=0, atol=1e-12)
    torch.testing.assert_close(rk, hk, rtol=0, atol=1e-12)


def test_gpt_neox_partial_rotary() -> None:
    """GPT-NeoX rotates the first rotary_ndims channels and passes the rest through."""
    spec = RopeSpec(head_dim=64, rotary_dim=16, base=10_000.0)
    q, k = torch.randn(1, 4, 6, 64, dtype=torch.float64), torch.randn(1, 4, 6, 64, dtype=torch.float64)
    pos = torch.arange(6).view(1, 6)
    cos, sin = _hf_tables(pos, spec)
    q_rot, q_pass = q[..., :16], q[..., 16:]
    k_rot, k_pass = k[..., :16], k[..., 16:]
    hq, hk = neox.apply_rotary_pos_emb(q_rot, k_rot, cos, sin)
    rq, rk = apply_rope(q, k, pos, spec, format="bhsd")
    torch.testing.assert_close(rq, torch.cat([hq, q_pass], -1), rtol=0, atol=1e-12)
    torch.testing.assert_close(rk, torch.cat([hk, k_pass], -1), rtol=0, atol=1e-12)


def test_inv_freq_matches_llama_rotary_embedding() -> None:
    from transformers import LlamaConfig

    cfg = LlamaConfig(hidden_size=256, num_attention_heads=2, rope_theta=500_000.0)
    rot = llama.LlamaRotaryEmbedding(cfg)
    ours = RopeSpec(head_dim=128, base=500_000.0).inv_freq()
    # both are float32 tables of the same float64 values; HF rounds twice (pow, then 1/x), ropekit once.
    torch.testing.assert_close(ours, rot.inv_freq.float(), rtol=2.5e-7, atol=0)

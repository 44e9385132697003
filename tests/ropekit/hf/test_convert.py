"""Meta <-> HF q/k weight permutation: the index formula, the inverse, and unchanged attention."""

from __future__ import annotations

import math

import pytest
import torch

from ropekit import RopeSpec, apply_rope
from ropekit.hf import permute_for_half, permute_for_interleaved


@pytest.mark.parametrize("head_dim,rotary_dim", [(8, None), (16, 8), (12, 4)])
def test_index_formula(head_dim: int, rotary_dim: int | None) -> None:
    """W_hf[h*H + r*(d/2) + j] = W_meta[h*H + 2j + r]; rows past d unchanged (rope-types.md 5.4)."""
    n = 3
    d = rotary_dim or head_dim
    w_meta = torch.arange(n * head_dim, dtype=torch.float64).view(-1, 1).repeat(1, 5)
    w_hf = permute_for_half(w_meta, n, head_dim, rotary_dim)
    for h in range(n):
        for j in range(d // 2):
            for r in (0, 1):
                assert torch.equal(w_hf[h * head_dim + r * (d // 2) + j], w_meta[h * head_dim + 2 * j + r])
        for t in range(d, head_dim):
            assert torch.equal(w_hf[h * head_dim + t], w_meta[h * head_dim + t])
    assert torch.equal(permute_for_interleaved(w_hf, n, head_dim, rotary_dim), w_meta)
    bias = torch.randn(n * head_dim)
    assert torch.equal(
        permute_for_interleaved(permute_for_half(bias, n, head_dim, rotary_dim), n, head_dim, rotary_dim),
        bias,
    )


@pytest.mark.parametrize("rotary_dim", [None, 16])
def test_interleaved_model_with_converted_weights_gives_the_same_logits(rotary_dim: int | None) -> None:
    """A GQA attention: half-split RoPE on HF weights == interleaved RoPE on Meta-converted weights."""
    dim, n_q, n_kv, H = 64, 4, 2, 32
    wq, wk = torch.randn(n_q * H, dim, dtype=torch.float64), torch.randn(n_kv * H, dim, dtype=torch.float64)
    x = torch.randn(2, 10, dim, dtype=torch.float64)
    pos = torch.arange(10) + 1000

    def logits(wq_, wk_, layout):
        spec = RopeSpec(H, base=500_000.0, rotary_dim=rotary_dim, layout=layout)
        q = (x @ wq_.T).view(2, 10, n_q, H)
        k = (x @ wk_.T).view(2, 10, n_kv, H).repeat_interleave(n_q // n_kv, 2)
        q, k = apply_rope(q, k, pos, spec)
        return torch.einsum("bshd,bthd->bhst", q, k) / math.sqrt(H)

    ref = logits(wq, wk, "half")
    got = logits(
        permute_for_interleaved(wq, n_q, H, rotary_dim),
        permute_for_interleaved(wk, n_kv, H, rotary_dim),
        "interleaved",
    )
    torch.testing.assert_close(got, ref, rtol=0, atol=1e-10)
    wrong = logits(wq, wk, "interleaved")  # negative control: interleaved RoPE on HF-ordered weights
    assert (wrong - ref).abs().max() > 1e-2


def test_bad_shapes() -> None:
    with pytest.raises(ValueError, match="n_heads \\* head_dim = 64 rows"):
        permute_for_half(torch.randn(60, 8), 2, 32)
    with pytest.raises(ValueError, match="rotary_dim"):
        permute_for_half(torch.randn(64, 8), 2, 32, rotary_dim=33)

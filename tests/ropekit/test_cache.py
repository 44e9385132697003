"""Dynamic schemes with a KV cache: token-by-token decoding equals a full forward at every length."""

from __future__ import annotations

import math

import pytest
import torch

from ropekit import RopeSpec, apply_rope
from ropekit.cache import rerotate_keys
from ropekit.scaling import DynamicNTK, Linear, LongRope

L0 = 16
SPECS = {
    "dynamic": RopeSpec(16, base=10_000.0, scaling=DynamicNTK(4.0, L0)),
    "longrope": RopeSpec(
        16,
        scaling=LongRope(
            tuple(1.0 + 0.1 * i for i in range(8)), tuple(2.0 + 3 * i for i in range(8)), L0, factor=8.0
        ),
    ),
}


def _full_row(q, k, v, spec, t):
    """Attention output of query t in a full forward over tokens 0..t (frequencies for length t + 1)."""
    pos = torch.arange(t + 1)
    qr, kr = apply_rope(q[:, : t + 1], k[:, : t + 1], pos, spec)
    scores = torch.einsum("bhd,bshd->bhs", qr[:, t], kr) / math.sqrt(q.shape[-1])
    return torch.einsum("bhs,bshd->bhd", scores.softmax(-1), v[:, : t + 1]), scores


@pytest.mark.parametrize("name", sorted(SPECS))
def test_decoding_with_rerotation_matches_full_forward_across_the_switch(name: str) -> None:
    spec = SPECS[name]
    T = 3 * L0
    q, k, v = (torch.randn(2, T, 2, 16, dtype=torch.float64) for _ in range(3))
    cache_k = torch.empty(2, 0, 2, 16, dtype=torch.float64)
    cached_len = 0
    rerotations = 0
    for t in range(T):
        length = t + 1
        if cached_len and spec.keys_stale(cached_len, length):
            rerotate_keys(cache_k, torch.arange(cached_len), spec, from_len=cached_len, to_len=length)
            rerotations += 1
        qr, kr = _rotate_at(q[:, t : t + 1], k[:, t : t + 1], t, spec, length)
        cache_k = torch.cat([cache_k, kr], 1)
        cached_len = length
        scores = torch.einsum("bhd,bshd->bhs", qr[:, 0], cache_k) / math.sqrt(16)
        out = torch.einsum("bhs,bshd->bhd", scores.softmax(-1), v[:, :length])
        ref_out, ref_scores = _full_row(q, k, v, spec, t)
        torch.testing.assert_close(scores, ref_scores, rtol=0, atol=1e-10)
        torch.testing.assert_close(out, ref_out, rtol=0, atol=1e-10)
    assert rerotations > 0  # the switch point was crossed


def _rotate_at(q, k, t, spec, length):
    from ropekit import apply_rope_tables, rope_tables

    cos, sin = rope_tables(torch.tensor([t]), spec, seq_len=length, dtype=torch.float64)
    return apply_rope_tables(q, k, cos, sin, spec)


@pytest.mark.parametrize("name", sorted(SPECS))
def test_without_rerotation_the_cache_goes_stale(name: str) -> None:
    """Negative control: the HF behaviour (keep the old rotation) differs from the full forward past L0."""
    spec = SPECS[name]
    T = 2 * L0
    q, k, v = (torch.randn(1, T, 1, 16, dtype=torch.float64) for _ in range(3))
    cache = torch.cat([_rotate_at(q[:, t : t + 1], k[:, t : t + 1], t, spec, t + 1)[1] for t in range(T)], 1)
    qr, _ = _rotate_at(q[:, T - 1 : T], k[:, T - 1 : T], T - 1, spec, T)
    stale = torch.einsum("bhd,bshd->bhs", qr[:, 0], cache) / 4.0
    _, fresh = _full_row(q, k, v, spec, T - 1)
    assert (stale - fresh).abs().max() > 1e-3


def test_static_specs_are_never_stale() -> None:
    spec = RopeSpec(16, scaling=Linear(4.0))
    assert not spec.keys_stale(10, 10_000)
    k = torch.randn(1, 3, 1, 16)
    assert rerotate_keys(k, torch.arange(3), spec, from_len=3, to_len=1000) is k


def test_dynamic_staleness_is_exact_about_the_boundary() -> None:
    dyn, lr = SPECS["dynamic"], SPECS["longrope"]
    assert not dyn.keys_stale(4, L0) and dyn.keys_stale(L0, L0 + 1) and dyn.keys_stale(L0 + 1, L0 + 2)
    assert not lr.keys_stale(4, L0) and lr.keys_stale(L0, L0 + 1) and not lr.keys_stale(L0 + 1, 10 * L0)

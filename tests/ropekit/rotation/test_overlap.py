"""In-place targets whose elements share memory are refused before anything is written (a user trial rotated an
as_strided q with overlapping heads: error ~1 from apply_rope, Rotary and rope_cache_write, silently). Oracle for the
overlap test itself: every element's offset enumerated in Python, compared as a set."""

from __future__ import annotations

import itertools
import random

import pytest
import torch

from ropekit import RopeSpec, Rotary, apply_rope
from ropekit.rotation.kv_cache import rope_cache_write
from ropekit.rotation.overlap import internal_overlap

SPEC = RopeSpec(16, base=10_000.0)


def _offsets_repeat(shape: tuple[int, ...], strides: tuple[int, ...]) -> bool:
    seen = set()
    for idx in itertools.product(*(range(n) for n in shape)):
        off = sum(i * s for i, s in zip(idx, strides))
        if off in seen:
            return True
        seen.add(off)
    return False


def test_internal_overlap_equals_enumeration_on_random_views() -> None:
    rng = random.Random(0)
    base = torch.zeros(4096)
    for _ in range(400):
        shape = tuple(rng.randint(1, 4) for _ in range(rng.randint(1, 4)))
        strides = tuple(rng.choice([0, 1, 2, 3, 4, 6, 8, 16, 32]) for _ in shape)
        x = base.as_strided(shape, strides)
        assert internal_overlap(x) == _offsets_repeat(shape, strides), (shape, strides)


def _heads_overlap_q() -> torch.Tensor:
    buf = torch.randn(64)
    return buf.as_strided((1, 2, 2, 16), (32, 16, 8, 1))  # head 1 starts halfway into head 0


def test_in_place_rotation_of_overlapping_heads_is_refused_untouched() -> None:
    for call in (
        lambda q: apply_rope(q, None, torch.arange(2), SPEC, inplace=True),
        lambda q: Rotary(SPEC)(q, positions=torch.arange(2), inplace=True),
    ):
        q = _heads_overlap_q()
        before = q.clone()
        with pytest.raises(ValueError, match="q has overlapping memory"):
            call(q)
        assert torch.equal(q, before)
    q = _heads_overlap_q()
    before = q.clone()
    k, v = torch.randn(1, 2, 1, 16), torch.randn(1, 2, 1, 16)
    ck, cv = torch.zeros(1, 1, 8, 16), torch.zeros(1, 1, 8, 16)
    with pytest.raises(ValueError, match="q has overlapping memory"):
        rope_cache_write(k, v, ck, cv, torch.tensor([0]), SPEC, q=q)
    assert torch.equal(q, before) and not ck.any()

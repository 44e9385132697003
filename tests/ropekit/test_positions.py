"""Position builders: offsets, padding masks, packed documents; and their use in apply_rope."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from ropekit import (
    RopeSpec,
    apply_rope,
    positions_from_cu_seqlens,
    positions_from_mask,
    positions_with_offset,
)


def test_offsets() -> None:
    assert positions_with_offset(4, 10).tolist() == [10, 11, 12, 13]
    assert positions_with_offset(2, torch.tensor([0, 7])).tolist() == [[0, 1], [7, 8]]
    assert positions_with_offset(0).tolist() == []
    with pytest.raises(ValueError, match="seq_len"):
        positions_with_offset(-1)
    with pytest.raises(TypeError, match="offset"):
        positions_with_offset(3, 1.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="offset tensor"):
        positions_with_offset(3, torch.tensor([[1]]))


def test_integer_likes_are_ints() -> None:
    """numpy ints (and 0-d integer tensors for seq_len) are ints, as for ropekit.distributed's layouts; a value of
    the wrong type is a TypeError naming the argument (seq_len's used to be a ValueError saying it "must be a
    non-negative int" about np.int64(3))."""
    assert positions_with_offset(np.int64(3), np.int32(5)).tolist() == [5, 6, 7]
    assert positions_with_offset(torch.tensor(2), np.uint8(7)).tolist() == [7, 8]
    assert positions_from_mask(torch.tensor([[0, 1]]), pad_position=np.int64(-1)).tolist() == [[-1, 0]]
    for bad in (1.5, True, np.bool_(True), "3", np.float64(3.0)):
        with pytest.raises(TypeError, match=rf"seq_len must be an int, got {re.escape(repr(bad))}"):
            positions_with_offset(bad)  # type: ignore[arg-type]
        with pytest.raises(
            TypeError, match=rf"offset must be an int or a 1-D integer tensor, got {re.escape(repr(bad))}"
        ):
            positions_with_offset(3, bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"seq_len must be >= 0, got -1"):
        positions_with_offset(np.int64(-1))
    with pytest.raises(ValueError, match=r"offset tensor must be a 0-d or 1-D integer tensor"):
        positions_with_offset(3, torch.tensor([[5]]))  # per-row offsets are [b]; a 0-d tensor is one offset


def test_mask_left_and_right_padding() -> None:
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    assert positions_from_mask(mask).tolist() == [[0, 0, 0, 1, 2], [0, 1, 2, 0, 0], [0, 1, 2, 3, 4]]
    assert positions_from_mask(mask.bool(), pad_position=-1).tolist()[0] == [-1, -1, 0, 1, 2]
    with pytest.raises(ValueError, match="only 0 and 1"):
        positions_from_mask(torch.tensor([[0, 2]]))
    with pytest.raises(ValueError, match="attention_mask"):
        positions_from_mask(torch.ones(3))


def test_cu_seqlens() -> None:
    assert positions_from_cu_seqlens(torch.tensor([0, 3, 5, 5, 9], dtype=torch.int32)).tolist() == [
        0,
        1,
        2,
        0,
        1,
        0,
        1,
        2,
        3,
    ]
    assert positions_from_cu_seqlens(torch.tensor([0])).tolist() == []
    for bad, frag in (
        (torch.tensor([1, 3]), "start at 0"),
        (torch.tensor([0, 4, 2]), "non-decreasing"),
        (torch.tensor([0.0, 2.0]), "integer"),
    ):
        with pytest.raises(ValueError, match=frag):
            positions_from_cu_seqlens(bad)
    cu = torch.tensor([0, 3, 5])
    assert positions_from_cu_seqlens(cu, total=5).tolist() == [0, 1, 2, 0, 1]
    with pytest.raises(ValueError, match=r"ends at 5 tokens but total=6"):
        positions_from_cu_seqlens(cu, total=6)
    assert positions_from_cu_seqlens(cu, total=np.int64(5)).tolist() == [0, 1, 2, 0, 1]
    with pytest.raises(ValueError, match=r"total must be >= 0, got -1"):
        positions_from_cu_seqlens(cu, total=-1)
    for total in (2.0, True, np.bool_(True), "5"):
        with pytest.raises(
            TypeError,
            match=rf"total must be an int \(the token count\) or None, got {re.escape(repr(total))}",
        ):
            positions_from_cu_seqlens(cu, total=total)  # type: ignore[arg-type]


def _scores(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    return torch.einsum("shd,thd->hst", q, k)


def test_left_padding_gives_the_unpadded_scores() -> None:
    spec = RopeSpec(16)
    x = torch.randn(3, 2, 16, dtype=torch.float64)  # a 3-token sequence
    padded = torch.cat([torch.zeros(2, 2, 16, dtype=torch.float64), x]).unsqueeze(0)
    pos = positions_from_mask(torch.tensor([[0, 0, 1, 1, 1]]))
    rp, _ = apply_rope(padded, None, pos, spec)
    ru, _ = apply_rope(x.unsqueeze(0), None, torch.arange(3), spec)
    torch.testing.assert_close(rp[0, 2:], ru[0], rtol=0, atol=0)


def test_packed_documents_equal_separate_sequences() -> None:
    spec = RopeSpec(16, layout="interleaved")
    docs = [torch.randn(n, 2, 16, dtype=torch.float64) for n in (3, 5, 2)]
    cu = torch.tensor([0, 3, 8, 10])
    packed, _ = apply_rope(torch.cat(docs), None, positions_from_cu_seqlens(cu), spec, format="thd")
    for i, d in enumerate(docs):
        alone, _ = apply_rope(d, None, torch.arange(d.shape[0]), spec, format="thd")
        torch.testing.assert_close(packed[cu[i] : cu[i + 1]], alone, rtol=0, atol=0)


def test_kv_cache_decoding_with_offsets_matches_full_sequence() -> None:
    spec = RopeSpec(32, base=500_000.0)
    q, k = torch.randn(1, 9, 4, 32, dtype=torch.float64), torch.randn(1, 9, 2, 32, dtype=torch.float64)
    fq, fk = apply_rope(q, k, torch.arange(9), spec)
    cache = []
    for t in range(9):  # one token at a time, positions start at the cache length
        step_q, step_k = apply_rope(q[:, t : t + 1], k[:, t : t + 1], positions_with_offset(1, t), spec)
        cache.append(step_k)
        torch.testing.assert_close(step_q, fq[:, t : t + 1], rtol=0, atol=0)
    torch.testing.assert_close(torch.cat(cache, 1), fk, rtol=0, atol=0)


@pytest.mark.parametrize(("bad", "err"), [(1.5, TypeError), ("x", TypeError), (True, TypeError)])
def test_pad_position_must_be_an_int(bad: object, err: type[Exception]) -> None:
    """1.5 used to become 1 silently and "x" gave int()'s bare message."""
    with pytest.raises(err, match=rf"pad_position must be an int, got {re.escape(repr(bad))}"):
        positions_from_mask(torch.tensor([[0, 1, 1]]), pad_position=bad)  # type: ignore[arg-type]
    assert positions_from_mask(torch.tensor([[0, 1, 1]]), pad_position=-7).tolist() == [[-7, 0, 1]]


def test_positions_past_int64_are_refused_not_wrapped() -> None:
    """The last position is offset + seq_len - 1: at the top of int64 it must not wrap to -2^63 (tensor offsets did)
    nor fail with torch's unnamed overflow error (int offsets did); up to 2^63 - 1 it is exact."""
    top = 2**63 - 1
    assert positions_with_offset(2, top - 1).tolist() == [top - 1, top]
    assert positions_with_offset(2, torch.tensor([0, top - 1])).tolist() == [[0, 1], [top - 1, top]]
    with pytest.raises(ValueError, match="offset and offset \\+ seq_len - 1 must fit int64"):
        positions_with_offset(2, top)
    with pytest.raises(
        ValueError,
        match="offset \\+ seq_len - 1 must fit int64 .* got offset 9223372036854775806 with seq_len 3",
    ):
        positions_with_offset(3, torch.tensor([top - 1]))

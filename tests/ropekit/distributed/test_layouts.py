"""Context-parallel layouts: the worked examples of the reference (TransformerEngine, Megatron, PyTorch), round
trips, packed documents and the validation errors. No processes needed."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from ropekit import positions_from_cu_seqlens
from ropekit.distributed import LAYOUTS, shard, shard_indices, shard_positions, unshard
from tests.ropekit.distributed._worlds import oracle_rows


def _all(seq: int, world: int, layout: str, **kw: object) -> list[list[int]]:
    return [shard_positions(seq, world, r, layout, **kw).tolist() for r in range(world)]  # type: ignore[arg-type]


# Table 1.1 of docs/distributed.md (context-parallel reference): S = 16, W = 4 and S = 8, W = 2.
def test_worked_examples() -> None:
    assert _all(16, 4, "zigzag") == [[0, 1, 14, 15], [2, 3, 12, 13], [4, 5, 10, 11], [6, 7, 8, 9]]
    assert _all(16, 4, "contiguous") == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11], [12, 13, 14, 15]]
    assert _all(16, 4, "stripe") == [[0, 4, 8, 12], [1, 5, 9, 13], [2, 6, 10, 14], [3, 7, 11, 15]]
    assert _all(8, 2, "zigzag") == [[0, 1, 6, 7], [2, 3, 4, 5]]
    assert shard_positions(8, 2, 1, "stripe").tolist() == [1, 3, 5, 7]  # ring-flash-attention extract_local


def test_zigzag_is_the_default_layout() -> None:
    assert shard_positions(16, 4, 2).tolist() == [4, 5, 10, 11]


@pytest.mark.parametrize("world", [1, 2, 3, 4, 8])
def test_zigzag_equals_transformer_engine_and_megatron_formulas(world: int) -> None:
    """TE fused kernel: pos = s + r*n/2 if s < n/2 else s + n*W - (r+1)*n/2 - n/2 (n local length); Megatron
    slices chunks [r, 2W-1-r] of a (2W, S/2W) view."""
    seq = 24 * world
    n = seq // world
    table = torch.arange(seq).view(2 * world, -1)
    for r in range(world):
        te = [s + r * n // 2 if s < n // 2 else s + n * world - (r + 1) * n // 2 - n // 2 for s in range(n)]
        megatron = table[[r, 2 * world - 1 - r]].flatten().tolist()
        assert shard_positions(seq, world, r, "zigzag").tolist() == te == megatron


def test_packed_documents_match_transformer_engine_rows() -> None:
    """thd_get_partitioned_indices expectations (TE tests) and document-relative positions."""
    cu = torch.tensor([0, 8, 16], dtype=torch.int32)
    assert [shard_indices(16, 2, r, cu_seqlens=cu).tolist() for r in range(2)] == [
        [0, 1, 6, 7, 8, 9, 14, 15],
        [2, 3, 4, 5, 10, 11, 12, 13],
    ]
    assert _all(16, 2, "zigzag", cu_seqlens=cu) == [[0, 1, 6, 7, 0, 1, 6, 7], [2, 3, 4, 5, 2, 3, 4, 5]]
    cu2 = torch.tensor([0, 4, 8])  # int64 works too; Megatron PR #5243: rows [0,3,4,7], positions [0,3,0,3]
    assert shard_indices(8, 2, 0, cu_seqlens=cu2).tolist() == [0, 3, 4, 7]
    assert shard_positions(8, 2, 0, cu_seqlens=cu2).tolist() == [0, 3, 0, 3]
    assert shard_positions(8, 2, 1, cu_seqlens=cu2).tolist() == [1, 2, 1, 2]


@pytest.mark.parametrize("layout", ["contiguous", "stripe"])
def test_packed_contiguous_and_stripe_split_the_packed_row(layout: str) -> None:
    """Defined meaning: the rows are the layout's rows of the packed row; positions restart per document."""
    cu = torch.tensor([0, 3, 8, 12], dtype=torch.int32)
    doc_pos = positions_from_cu_seqlens(cu)
    for r in range(4):
        rows = shard_indices(12, 4, r, layout)  # type: ignore[arg-type]
        assert torch.equal(shard_indices(12, 4, r, layout, cu_seqlens=cu), rows)  # type: ignore[arg-type]
        assert torch.equal(shard_positions(12, 4, r, layout, cu_seqlens=cu), doc_pos[rows])  # type: ignore[arg-type]
    assert shard_positions(12, 4, 0, "contiguous", cu_seqlens=cu).tolist() == [0, 1, 2]
    assert shard_positions(12, 4, 1, "contiguous", cu_seqlens=cu).tolist() == [0, 1, 2]
    assert shard_positions(12, 4, 3, "stripe", cu_seqlens=cu).tolist() == [0, 4, 3]


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("world", [1, 2, 3, 4])
def test_every_token_exactly_once_and_round_trip(layout: str, world: int) -> None:
    seq = 12 * world
    rows = torch.cat([shard_indices(seq, world, r, layout) for r in range(world)])  # type: ignore[arg-type]
    assert sorted(rows.tolist()) == list(range(seq))
    x = torch.randn(2, seq, 3, 5)
    for dim in (1, -3):
        parts = [shard(x, world, r, layout, dim=dim) for r in range(world)]  # type: ignore[arg-type]
        assert all(p.shape == (2, seq // world, 3, 5) for p in parts)
        assert torch.equal(unshard(parts, layout, dim=dim), x)  # type: ignore[arg-type]
    table = torch.randn(seq, 4)  # a cos/sin table: sequence on dim 0
    for r in range(world):
        pos = shard_positions(seq, world, r, layout)  # type: ignore[arg-type]
        assert torch.equal(shard(table, world, r, layout, dim=0), table[pos])  # type: ignore[arg-type]


def test_packed_round_trip_and_restore_permutation() -> None:
    cu = torch.tensor([0, 8, 12, 24])
    x = torch.randn(24, 2)
    parts = [shard(x, 2, r, dim=0, cu_seqlens=cu) for r in range(2)]
    assert torch.equal(unshard(parts, dim=0, cu_seqlens=cu), x)
    concat = torch.cat([shard_indices(8, 2, r) for r in range(2)])
    assert torch.argsort(concat).tolist() == [0, 1, 4, 5, 6, 7, 2, 3]  # reference: inverse for S=8, W=2


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("seq", [0, 1, 5, 7, 10])
def test_world_size_one_is_the_identity_for_any_length(layout: str, seq: int) -> None:
    """docs/distributed.md: with W = 1 every function returns its input unchanged -- odd lengths and documents of
    any length included (zigzag used to demand seq_len % 2 == 0 and every document % 2 == 0 at W = 1)."""
    x = torch.randn(3, seq, 2)
    assert shard_indices(seq, 1, 0, layout).tolist() == list(range(seq))  # type: ignore[arg-type]
    assert shard_positions(seq, 1, 0, layout).tolist() == list(range(seq))  # type: ignore[arg-type]
    assert torch.equal(shard(x, 1, 0, layout), x)  # type: ignore[arg-type]
    assert torch.equal(shard(x, 1, 0, layout, dim=-2), x)  # type: ignore[arg-type]
    assert torch.equal(unshard([x], layout), x)  # type: ignore[arg-type]
    # packed documents of odd lengths (an empty one too): rows unchanged, positions restart per document
    cu = torch.tensor([0, *sorted({seq // 3, seq - 1}), seq]) if seq else torch.tensor([0, 0])
    rows = shard_indices(seq, 1, 0, layout, cu_seqlens=cu)  # type: ignore[arg-type]
    assert rows.tolist() == list(range(seq))
    positions = shard_positions(seq, 1, 0, layout, cu_seqlens=cu)  # type: ignore[arg-type]
    assert torch.equal(positions, positions_from_cu_seqlens(cu))
    assert torch.equal(shard(x, 1, 0, layout, cu_seqlens=cu), x)  # type: ignore[arg-type]
    assert torch.equal(unshard([x], layout, cu_seqlens=cu), x)  # type: ignore[arg-type]


def test_world_size_two_still_needs_divisible_lengths() -> None:
    """The W = 1 identity does not relax W > 1: zigzag's 2W rule holds for the sequence and each document."""
    with pytest.raises(ValueError, match=r"2 \* world_size = 4; got seq_len=6"):
        shard_positions(6, 2, 0)
    with pytest.raises(ValueError, match=r"document 0 has length 2"):
        shard_positions(8, 2, 0, cu_seqlens=torch.tensor([0, 2, 8]))


def test_shard_does_not_modify_its_input() -> None:
    x = torch.arange(16.0).view(1, 16)
    before = x.clone()
    out = shard(x, 4, 1)
    out += 100
    assert torch.equal(x, before)


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (
            lambda: shard_positions(10, 4, 0, "contiguous"),
            r"world_size = 4; got seq_len=10 \(seq_len % 4 = 2",
        ),
        (lambda: shard_positions(10, 4, 0, "stripe"), r"world_size = 4.*seq_len=10"),
        (
            lambda: shard_positions(12, 4, 0, "zigzag"),
            r"2 \* world_size = 8; got seq_len=12 \(seq_len % 8 = 4",
        ),
        (
            lambda: shard_positions(12, 2, 0, cu_seqlens=torch.tensor([0, 6, 12])),
            r"divisible by 2 \* world_size = 4; document 0 has length 6",
        ),
        (lambda: shard_positions(16, 0, 0), r"world_size must be >= 1, got 0"),
        (lambda: shard_positions(16, 4, 4), r"rank must be in \[0, world_size\) = \[0, 4\), got rank=4"),
        (lambda: shard_positions(16, 4, -1), r"rank must be >= 0, got -1"),
        (
            lambda: shard_positions(16, 4, 0, "ring"),
            r"unknown layout 'ring'.*'contiguous', 'zigzag', 'stripe'",
        ),  # type: ignore[arg-type]
        (
            lambda: shard_positions(16, 2, 0, cu_seqlens=torch.tensor([0, 8, 12])),
            r"end at the sequence length 16.*12",
        ),
        (lambda: shard_positions(8, 2, 0, cu_seqlens=torch.tensor([1, 8])), r"start at 0"),
        (lambda: shard_positions(8, 2, 0, cu_seqlens=torch.tensor([0, 6, 4, 8])), r"non-decreasing"),
        (lambda: shard_positions(8, 2, 0, cu_seqlens=torch.tensor([0.0, 8.0])), r"int32 or int64.*float32"),
        (lambda: shard_positions(8, 2, 0, cu_seqlens=torch.tensor([0, 8], dtype=torch.int16)), r"int16"),
        (lambda: shard(torch.zeros(2, 8), 2, 0, dim=2), r"dim=2 is out of range.*\(2, 8\)"),
        (lambda: shard(torch.zeros(2, 9), 2, 0), r"seq_len=9"),
        (lambda: unshard([]), r"non-empty"),
        (lambda: unshard([torch.zeros(1, 4), torch.zeros(1, 2)]), r"parts\[1\] is \(\(1, 2\)"),
        (lambda: unshard([torch.zeros(1, 3), torch.zeros(1, 3)]), r"2 \* world_size = 4.*seq_len=6"),
    ],
)
def test_errors_name_the_numbers(call: object, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        call()  # type: ignore[operator]


def test_type_errors() -> None:
    with pytest.raises(TypeError, match="world_size must be an int, got 2.0"):
        shard_positions(8, 2.0, 0)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="x must be a torch.Tensor"):
        shard([1, 2], 1, 0)  # type: ignore[arg-type]


@given(
    world=st.integers(1, 6),
    units=st.lists(st.integers(0, 4), min_size=1, max_size=5),
    layout=st.sampled_from(LAYOUTS),
)
def test_packed_layouts_partition_and_follow_the_formula(world: int, units: list[int], layout: str) -> None:
    """Any documents (lengths multiples of 2W, empty ones too): every row exactly once, rows equal the textbook
    formula (tests/ropekit/distributed/_worlds.oracle_rows), positions are the document-relative ids of the rows."""
    lengths = [2 * world * u for u in units]
    seq = sum(lengths)
    cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()])
    rows = [shard_indices(seq, world, r, layout, cu_seqlens=cu) for r in range(world)]  # type: ignore[arg-type]
    assert sorted(torch.cat(rows).tolist()) == list(range(seq))
    doc_pos = positions_from_cu_seqlens(cu)
    for r in range(world):
        assert rows[r].tolist() == oracle_rows(layout, seq, world, r, lengths if layout == "zigzag" else None)
        assert torch.equal(shard_positions(seq, world, r, layout, cu_seqlens=cu), doc_pos[rows[r]])  # type: ignore[arg-type]


def test_integer_likes_are_lengths_and_ranks() -> None:
    """numpy ints and 0-d integer tensors are ints (a bool, a float or a string is not)."""
    np = pytest.importorskip("numpy")
    want = shard_positions(16, 2, 1)
    assert torch.equal(shard_positions(np.int64(16), np.int32(2), 1), want)
    assert torch.equal(shard_positions(torch.tensor(16), 2, torch.tensor(1)), want)
    for bad in (True, np.bool_(True), 16.0, "16", torch.tensor(True)):
        with pytest.raises(TypeError, match="seq_len must be an int"):
            shard_positions(bad, 2, 0)  # type: ignore[arg-type]
    x = torch.arange(16).view(1, 16)
    assert torch.equal(shard(x, 2, 1, dim=np.int64(1)), want.view(1, 8))  # dim too, like the lengths
    with pytest.raises(TypeError, match=r"dim must be an int, got 1.0"):
        shard(x, 2, 1, dim=1.0)  # type: ignore[arg-type]

"""Interop with PyTorch's context-parallel load balancers, Ulysses in one process, and the balance counts."""

from __future__ import annotations

import pytest
import torch

from ropekit.distributed import causal_pairs, heads_to_seq, seq_to_heads, shard_indices
from ropekit.distributed.balance import main
from ropekit.distributed.work import ring_computed_entries, ring_step_pairs

lb = pytest.importorskip("torch.distributed.tensor.experimental._context_parallel._load_balancer")


@pytest.mark.parametrize("world", [2, 4, 8])
def test_torch_head_tail_balancer_is_zigzag(world: int) -> None:
    """torch context_parallel rearranges with _HeadTailLoadBalancer, then Shard(seq) splits contiguously."""
    seq = 6 * 2 * world
    idx = lb._HeadTailLoadBalancer(seq, world, "cpu")._generate_indices()[0].to(torch.int64)
    for r, part in enumerate(idx.chunk(world)):
        assert torch.equal(part, shard_indices(seq, world, r, "zigzag"))
    restore = lb._HeadTailLoadBalancer(seq, world, "cpu")._generate_indices(restore=True)[0]
    assert torch.equal(
        restore, torch.argsort(torch.cat([shard_indices(seq, world, r) for r in range(world)]))
    )


def test_torch_per_document_balancer_pieces_and_its_order() -> None:
    """_PerDocumentHeadTailLoadBalancer builds the same per-document pieces as layout="zigzag" with cu_seqlens
    (TransformerEngine THD), but concatenates them document-major, so its contiguous Shard(seq) does not give
    rank r chunks r and 2W-1-r of every document (docs/distributed.md, interop). Mapping: rank r's rows are the
    pieces [start_d + 2 r c_d, start_d + 2 (r + 1) c_d) of its index vector, one per document d."""
    lengths, world = [4, 8, 4], 2
    cu = torch.tensor([0, 4, 12, 16])
    idx = lb._PerDocumentHeadTailLoadBalancer([lengths], world, "cpu")._generate_indices()[0]
    for r in range(world):
        pieces = [idx[a + 2 * r * (n // 4) : a + 2 * (r + 1) * (n // 4)] for a, n in zip([0, 4, 12], lengths)]
        assert torch.equal(torch.cat(pieces), shard_indices(16, world, r, cu_seqlens=cu))
    assert shard_indices(16, world, 0, cu_seqlens=cu).tolist() == [
        0,
        3,
        4,
        5,
        10,
        11,
        12,
        15,
    ]  # torch docstring
    assert idx.chunk(world)[0].tolist() == [0, 3, 1, 2, 4, 5, 10, 11]  # what Shard(seq) of its order holds


def test_ulysses_helpers_are_identity_on_one_process() -> None:
    x = torch.randn(2, 8, 4, 3)
    assert torch.equal(heads_to_seq(seq_to_heads(x)), x)
    with pytest.raises(ValueError, match=r"x must be bshd.*\(8, 4, 3\)"):
        seq_to_heads(x[0])


def test_causal_pair_counts() -> None:
    seq, world = 64, 4
    total = seq * (seq + 1) // 2
    n = seq // world
    contiguous = [sum(p + 1 for p in range(r * n, (r + 1) * n)) for r in range(world)]
    assert causal_pairs(seq, world, "contiguous") == contiguous
    assert causal_pairs(seq, world, "zigzag") == [total // world] * world  # exactly balanced
    stripe = causal_pairs(seq, world, "stripe")
    assert sum(stripe) == total and max(stripe) - min(stripe) == (world - 1) * n  # off by one pair per row
    steps = ring_step_pairs(seq, world, "zigzag")
    assert sum(map(sum, steps)) == total
    assert all(len(set(s)) == 1 for s in steps[1:])  # every later ring step equal on all ranks
    cu = torch.tensor([0, 16, 64])
    assert sum(causal_pairs(seq, world, "zigzag", cu_seqlens=cu)) == 16 * 17 // 2 + 48 * 49 // 2


def test_balance_cli_prints_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--seq-len", "16", "--world-size", "4"]) == 0
    out = capsys.readouterr().out
    # zigzag computes 2(W+1)c^2 = 40 entries per rank (c = 2): diagonal 4c^2, then W-1 half blocks of 2c^2
    assert "| 4 | zigzag | 34, 34, 34, 34 | 1.000 | 1.000 | 40, 40, 40, 40 | 1.176 |" in out
    assert "| 4 | contiguous | 10, 26, 42, 58 | 1.706 | 1.706 | 16, 32, 48, 64 | 1.882 |" in out


def test_computed_entries_follow_the_zigzag_schedule() -> None:
    """By hand, S = 8, W = 2: zigzag step 1 computes half blocks on both ranks (rank 0: its 2 late queries x 4
    keys; rank 1: 4 queries x rank 0's 2 early keys); contiguous leaves rank 0 idle and rank 1 full."""
    assert ring_computed_entries(8, 2, "zigzag") == [[16, 16], [8, 8]]
    assert ring_computed_entries(8, 2, "contiguous") == [[16, 16], [0, 16]]


def test_balance_cli_refuses_an_unsplittable_length_as_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main(["--seq-len", "100", "--world-size", "3"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "error: no layout can split seq_len=100 over world_size=3" in err


def test_balance_cli_keeps_the_layouts_that_split(capsys: pytest.CaptureFixture[str]) -> None:
    """12 tokens over 4 ranks: zigzag needs multiples of 8, contiguous and stripe do not -- their rows print."""
    assert main(["--seq-len", "12", "--world-size", "4"]) == 0
    out = capsys.readouterr().out
    assert "| 4 | zigzag | cannot split: layout 'zigzag' needs seq_len divisible by 2 * world_size = 8" in out
    # causal pairs per rank, counted by hand: contiguous rows 0-2, 3-5, ...: 1+2+3, 4+5+6, 7+8+9, 10+11+12
    assert "| 4 | contiguous | 6, 15, 24, 33 |" in out
    assert "| 4 | stripe | 15, 18, 21, 24 |" in out  # rank r holds r, r+4, r+8: (r+1) + (r+5) + (r+9)

"""The refusal cases of the multi-process worlds (tests/ropekit/distributed/_worlds.py runs them in every world):
one rank's bad argument, or ranks that disagree, raise on every rank with each rank's value -- never a hang, a
checksum, or another dtype's bytes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from ropekit.distributed import ring_attention, seq_to_heads, shard_indices, shard_positions


def agreement_case(world: int, rank: int) -> dict[str, Any]:
    """One rank's bad argument raises ValueError on every rank instead of leaving the others waiting."""
    q = torch.randn(1, 4, 2, 8, dtype=torch.float64)
    pos = torch.arange(3 if rank == world - 1 else 4)  # the last rank passes one position too few
    try:
        ring_attention(q, q, q, positions=pos)
    except ValueError as e:
        msg = str(e)
    else:
        msg = "no error"
    ok = torch.tensor([float(("3 entries" in msg) if rank == world - 1 else (f"[{world - 1}]" in msg))])
    dist.all_reduce(ok, op=dist.ReduceOp.MIN)
    res = {"agreement": bool(ok.item())}
    res.update(disagreement_cases(world, rank))
    return res


def _raised(fn: Callable[[], Any], exc: type[Exception] = ValueError) -> str:
    """``"ErrorType: message"`` of what ``fn`` raises (``exc`` and subclasses), or "no error"."""
    try:
        fn()
    except exc as e:
        return f"{type(e).__name__}: {e}"
    return "no error"


def _everywhere(ok: bool) -> bool:
    flag = torch.tensor([float(ok)])
    dist.all_reduce(flag, op=dist.ReduceOp.MIN)
    return bool(flag.item())


def disagreement_cases(world: int, rank: int) -> dict[str, Any]:
    """Ranks that disagree raise on every rank, with each rank's value (not a checksum or an index)."""
    res: dict[str, Any] = {}
    # two packings with the same weighted sum (0*1 + 6*2 + 8*3 + 16*4 = 0*1 + 3*2 + 10*3 + 16*4 = 100)
    cus = [[0, 6, 8, 16], [0, 3, 10, 16]]
    cu = torch.tensor(cus[min(rank, 1)])
    x = torch.randn(1, 16 // world, 2, 8, dtype=torch.float64)
    pos = shard_indices(16, world, rank, "contiguous", cu_seqlens=cu)
    msg = _raised(lambda: ring_attention(x, x, x, positions=pos, cu_seqlens=cu))
    want = f"ranks disagree on cu_seqlens: {[cus[min(r, 1)] for r in range(world)]}"
    res["disagree/cu_seqlens"] = _everywhere(want in msg)
    # packed: RoPE ids (restarting per document) passed where the offsets belong; every rank names a repeated
    # offset (each rank's ids are in range and distinct enough locally; only the union shows the repeats)
    same = torch.tensor([0, 8, 16])
    ids = shard_positions(16, world, rank, "zigzag", cu_seqlens=same)  # type: ignore[arg-type]
    msg = _raised(lambda: ring_attention(x, x, x, positions=ids, cu_seqlens=same))
    res["disagree/packed-rope-ids"] = _everywhere("offset 0 on ranks [0" in msg and "shard_indices" in msg)
    # dtype: named, not an index into an internal tuple
    y = x.float() if rank == 0 else x
    msg = _raised(lambda: ring_attention(y, y, y, positions=torch.arange(16 // world) + rank * (16 // world)))
    names = ["torch.float32"] + ["torch.float64"] * (world - 1)
    res["disagree/ring-dtype"] = _everywhere(f"ranks disagree on dtype: {names}" in msg)
    # Ulysses: a dtype mismatch used to return another dtype's bytes (or abort in gloo); a bad rank's problem
    # used to leave the others in the all-to-all
    u = torch.randn(1, 4, 2 * world, 8, dtype=torch.float32 if rank == 0 else torch.float64)
    msg = _raised(lambda: seq_to_heads(u))
    res["disagree/ulysses-dtype"] = _everywhere(f"seq_to_heads: ranks disagree on dtype: {names}" in msg)
    heads = 2 * world + (1 if rank == 0 else 0)
    msg = _raised(lambda: seq_to_heads(torch.randn(1, 4, heads, 8)))
    ok = ("not divisible by the group size" in msg) if rank == 0 else ("rank(s) [0] rejected" in msg)
    res["disagree/ulysses-bad-rank"] = _everywhere(ok)
    return res

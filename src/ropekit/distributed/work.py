# SPDX-License-Identifier: MIT
"""Causal work per rank under the context-parallel layouts: counted, not claimed.

Under a causal mask the query at position p sees p + 1 keys (its document's keys up to itself), so a rank's work is
the number of visible (query, key) pairs among its queries. Ring attention runs W lock-step steps; at step i rank
r holds the keys of rank (r - i) mod W, and a step lasts as long as its busiest rank, so the critical path is
``sum_i max_r pairs(r, i)`` against the ideal ``total / W``. :func:`ring_computed_entries` counts what
:func:`ropekit.distributed.ring_attention` really computes: per step it skips query rows and key columns that see
nothing, but computes the rest of the block densely.

Shapes: S sequence length, W world size.
"""

from __future__ import annotations

import torch

from ropekit.distributed.layouts import Layout, shard_indices, shard_positions

__all__ = ["causal_pairs", "ring_computed_entries", "ring_step_pairs"]


def causal_pairs(
    seq_len: int, world_size: int, layout: Layout = "zigzag", *, cu_seqlens: torch.Tensor | None = None
) -> list[int]:
    """Visible causal (query, key) pairs of each rank's queries over the whole sequence, rank order.

    Example:
        >>> causal_pairs(16, 4, "contiguous"), causal_pairs(16, 4, "zigzag")
        ([10, 26, 42, 58], [34, 34, 34, 34])
    """
    return [
        int((shard_positions(seq_len, world_size, r, layout, cu_seqlens=cu_seqlens) + 1).sum())
        for r in range(world_size)
    ]


def ring_step_pairs(
    seq_len: int, world_size: int, layout: Layout = "zigzag", *, cu_seqlens: torch.Tensor | None = None
) -> list[list[int]]:
    """``pairs[i][r]``: visible pairs rank r computes at ring step i (keys of rank (r - i) mod W)."""
    return [[int(m.sum()) for m in step] for step in _visible(seq_len, world_size, layout, cu_seqlens)]


def _visible(
    seq_len: int, world_size: int, layout: Layout, cu_seqlens: torch.Tensor | None
) -> list[list[torch.Tensor]]:
    rows = [shard_indices(seq_len, world_size, r, layout, cu_seqlens=cu_seqlens) for r in range(world_size)]
    doc = [torch.zeros_like(x) for x in rows]
    if cu_seqlens is not None:
        cu = cu_seqlens.to(torch.int64)
        doc = [torch.searchsorted(cu[1:], x, right=True) for x in rows]
    out = []
    for i in range(world_size):
        step = []
        for r in range(world_size):
            j = (r - i) % world_size
            step.append(
                (rows[j].unsqueeze(0) <= rows[r].unsqueeze(1)) & (doc[j].unsqueeze(0) == doc[r].unsqueeze(1))
            )
        out.append(step)
    return out


def ring_computed_entries(
    seq_len: int, world_size: int, layout: Layout = "zigzag", *, cu_seqlens: torch.Tensor | None = None
) -> list[list[int]]:
    """``n[i][r]``: score entries ring_attention computes on rank r at step i (used rows x used columns)."""
    return [
        [int(m.any(1).sum()) * int(m.any(0).sum()) for m in step]
        for step in _visible(seq_len, world_size, layout, cu_seqlens)
    ]

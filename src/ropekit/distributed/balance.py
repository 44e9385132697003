# SPDX-License-Identifier: MIT
"""Causal load balance of the context-parallel layouts, counted rather than claimed.

Under a causal mask query position p attends to p + 1 keys (its document's keys up to itself), so the work of a
rank is the number of visible (query, key) pairs among its queries. Ring attention runs in W lock-step steps; at
step i rank r holds the keys of rank (r - i) mod W, and a step lasts as long as its busiest rank, so the
critical path is ``sum_i max_r pairs(r, i)`` against the ideal ``total / W``.

Run ``python -m ropekit.distributed.balance [--seq-len S] [--world-size W ...]`` to print the table.

Shapes: S sequence length, W world size.
"""

from __future__ import annotations

import argparse

import torch

from ropekit.distributed.layouts import LAYOUTS, Layout, shard_indices, shard_positions

__all__ = ["causal_pairs", "ring_step_pairs"]


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
            vis = (rows[j].unsqueeze(0) <= rows[r].unsqueeze(1)) & (
                doc[j].unsqueeze(0) == doc[r].unsqueeze(1)
            )
            step.append(int(vis.sum()))
        out.append(step)
    return out


def report(seq_len: int, world_sizes: list[int]) -> str:
    """The balance table printed by ``python -m ropekit.distributed.balance`` (Markdown)."""
    lines = [
        f"Causal (query, key) pairs per rank, seq_len = {seq_len}",
        "",
        "| W | layout | pairs per rank | max / mean | ring critical path / ideal |",
        "|---|---|---|---|---|",
    ]
    for w in world_sizes:
        for layout in LAYOUTS:
            per = causal_pairs(seq_len, w, layout)  # type: ignore[arg-type]
            steps = ring_step_pairs(seq_len, w, layout)  # type: ignore[arg-type]
            mean = sum(per) / w
            crit = sum(max(s) for s in steps)
            lines.append(
                f"| {w} | {layout} | {', '.join(map(str, per))} | {max(per) / mean:.3f} | {crit / mean:.3f} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ropekit.distributed.balance", description=__doc__)
    parser.add_argument("--seq-len", type=int, default=4096)
    parser.add_argument("--world-size", type=int, nargs="+", default=[2, 4, 8])
    args = parser.parse_args(argv)
    print(report(args.seq_len, args.world_size))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

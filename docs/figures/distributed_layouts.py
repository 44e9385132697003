"""Draw docs/figures/distributed_layouts.png: which global positions each rank holds, per layout.

Run from the repository root: ``python docs/figures/distributed_layouts.py`` (needs matplotlib). The positions come
from ``ropekit.distributed.shard_positions`` / ``shard_indices``; the figure is what the library computes.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import torch

from ropekit.distributed import shard_indices, shard_positions

SEQ, WORLD = 16, 4
CU = torch.tensor([0, 8, 16])
ROWS = [
    ("contiguous", None),
    ("zigzag", None),
    ("stripe", None),
    ("zigzag", CU),
]
COLORS = ["#4C72B0", "#DD8452", "#55A868", "#C44E52"]


def main() -> Path:
    fig, ax = plt.subplots(figsize=(10, 3.9))
    for y, (layout, cu) in enumerate(ROWS):
        for r in range(WORLD):
            rows = shard_indices(SEQ, WORLD, r, layout, cu_seqlens=cu)  # type: ignore[arg-type]
            pos = shard_positions(SEQ, WORLD, r, layout, cu_seqlens=cu)  # type: ignore[arg-type]
            for t, p in zip(rows.tolist(), pos.tolist()):
                ax.add_patch(plt.Rectangle((t, -y - 0.45), 0.95, 0.9, color=COLORS[r]))
                ax.text(t + 0.47, -y, str(p), ha="center", va="center", color="white", fontsize=9)
    ax.set_xlim(0, SEQ)
    ax.set_ylim(-len(ROWS) + 0.4, 0.6)
    ax.set_yticks([-y for y in range(len(ROWS))])
    ax.set_yticklabels(
        [f"{lay}" + (" + cu_seqlens [0, 8, 16]" if cu is not None else "") for lay, cu in ROWS]
    )
    ax.set_xticks([t + 0.47 for t in range(SEQ)])
    ax.set_xticklabels([str(t) for t in range(SEQ)], fontsize=8)
    ax.set_xlabel("token (row of the full sequence); colour = rank holding it, number = its RoPE position")
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in COLORS]
    ax.legend(
        handles,
        [f"rank {r}" for r in range(WORLD)],
        ncol=WORLD,
        loc="upper center",
        bbox_to_anchor=(0.5, 1.17),
    )
    ax.set_title(f"Context-parallel layouts, S = {SEQ}, W = {WORLD}", pad=36)
    for spine in ("top", "right", "left"):
        ax.spines[spine].set_visible(False)
    fig.tight_layout()
    out = Path(__file__).with_suffix(".png")
    fig.savefig(out, dpi=110)
    return out


if __name__ == "__main__":
    print(main())

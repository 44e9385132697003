"""Draw the figures of docs/multimodal.md and docs/vision.md from ropekit itself.

Run: ``PYTHONPATH=src python docs/figures/multiaxis_figures.py`` (needs matplotlib).
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.colors import ListedColormap

from ropekit import AxisMap, RopeSpec
from ropekit.positions.multimodal import VisionBlock, mrope_positions
from ropekit.presets_vl import (
    axial_spec,
    dinov3_spec,
    ernie_vl_spec,
    glm4v_spec,
    llama4_vision_spec,
    pixtral_spec,
    qwen2_vl_spec,
    qwen3_vl_spec,
    qwen_vit_spec,
    rope_vit_axial_spec,
    videorope_spec,
)

OUT = Path(__file__).parent


def position_ids_figure() -> None:
    segs = [2, VisionBlock((1, 4, 6)), 2, VisionBlock((2, 4, 4), video=True, second_per_grid_t=2.0), 2]
    labels = (
        ["x0", "x1"] + [f"i{k}" for k in range(6)] + ["x2", "x3"] + [f"v{k}" for k in range(8)] + ["x4", "x5"]
    )
    fig, axes = plt.subplots(2, 1, figsize=(11, 4.6))
    for ax, rule in zip(axes, ("v4", "v5")):
        ids = mrope_positions(segs, family="qwen2_5_vl", tokens_per_second=2, rule=rule)  # type: ignore[arg-type]
        kinds = [0] * 2 + [1] * 6 + [0] * 2 + [2] * 8 + [0] * 2
        ax.imshow([kinds] * 3, cmap=ListedColormap(["#e8eef7", "#fde3c8", "#d6f0d6"]), aspect="auto")
        for r in range(3):
            for c in range(ids.shape[1]):
                ax.text(c, r, str(int(ids[r, c])), ha="center", va="center", fontsize=9)
        ax.set_yticks(range(3), ["t", "h", "w"])
        ax.set_xticks(range(len(labels)), labels, fontsize=8)
        ax.set_title(
            f"Qwen2.5-VL M-RoPE ids, rule {rule}: text (blue), image 1x4x6 patches (orange), "
            f"video 2x4x4 at 2 s/temporal patch, tps 2 (green)",
            fontsize=9,
        )
    fig.tight_layout()
    fig.savefig(OUT / "mrope_position_ids.png", dpi=110)
    plt.close(fig)


def axis_maps_figure() -> None:
    fams = [
        ("Qwen2/2.5-VL [16,24,24] half", qwen2_vl_spec()),
        ("Qwen3-VL [24,20,20] half", qwen3_vl_spec()),
        ("GLM-4V [8,12,12] interleaved, rot 64", glm4v_spec()),
        ("ERNIE-4.5-VL [22,22,20] interleaved", ernie_vl_spec()),
        ("VideoRoPE (LTA) half", videorope_spec()),
        ("Qwen ViT (rows | cols) half", qwen_vit_spec(128)),
        ("Pixtral (theta even | odd) half", pixtral_spec(128)),
        ("RoPE-ViT axial x | y complex", rope_vit_axial_spec(128)),
        ("Llama 4 vision x+1 | y+1 complex", llama4_vision_spec(128)),
        ("DINOv3 rows | cols half", dinov3_spec(128)),
        ("Pixtral native (Mistral) even / odd", RopeSpec(128, base=1e4, axes=AxisMap.even_odd(64))),
        ("3-D axial video [16,24,24] t | row | col", axial_spec(128, (16, 24, 24))),
    ]
    colour = {"t": 0, "h": 1, "row": 1, "x": 1, "w": 2, "col": 2, "y": 2}
    grid = []
    for _, spec in fams:
        row = [colour[spec.axes.names[a]] for a in spec.axes.slots]  # type: ignore[union-attr]
        grid.append(row + [3] * (64 - len(row)))
    fig, ax = plt.subplots(figsize=(11, 4.8))
    ax.imshow(grid, cmap=ListedColormap(["#4c72b0", "#dd8452", "#55a868", "#eeeeee"]), aspect="auto")
    ax.set_yticks(range(len(fams)), [f for f, _ in fams], fontsize=8)
    ax.set_xlabel("band (slot) j = 0 .. n-1, high frequency -> low frequency (vision: within each block)")
    ax.set_title(
        "Band-to-axis assignment: blue t, orange h / row / x, green w / col / y, grey: not rotated",
        fontsize=9,
    )
    fig.tight_layout()
    fig.savefig(OUT / "axis_maps.png", dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    position_ids_figure()
    axis_maps_figure()

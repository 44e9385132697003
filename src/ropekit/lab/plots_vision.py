# SPDX-License-Identifier: MIT
"""The vision lab's figure (``ropekit lab vision``), drawn from its result dict (the numbers of vision.json):
accuracy against the evaluation grid per encoding (mean over seeds, min..max as error bars), and the training
loss of seed 0."""

from __future__ import annotations

import statistics
from typing import Any

from ropekit.report.plotting import label_axes, mark_quick, moving_average

__all__ = ["vision"]


def vision(fig: Any, result: dict[str, Any], *, quick: bool) -> None:
    rows, grids, g0 = result["results"], result["grids"], result["train_grid"]
    ax1, ax2 = fig.subplots(1, 2)
    for enc in dict.fromkeys(r["encoding"] for r in rows):
        per = [[r["accuracy"] for r in rows if r["encoding"] == enc and r["grid"] == g] for g in grids]
        mean = [statistics.fmean(v) for v in per]
        err = [[m - min(v) for m, v in zip(mean, per)], [max(v) - m for m, v in zip(mean, per)]]
        ax1.errorbar(grids, mean, yerr=err, marker="o", capsize=3, label=enc)
    ax1.axhline(0.25, color="gray", ls="--", lw=1, label="chance (0.25)")
    ax1.axvline(g0, color="gray", ls=":", label=f"training grid {g0}x{g0}")
    ax1.set_xticks(grids, [f"{g}x{g}" for g in grids])
    ax1.set_ylim(0, 1.02)
    label_axes(
        ax1,
        title=f"Accuracy by grid ({result['seeds']} seed(s), min..max bars)",
        xlabel="evaluation grid (patches per side; same scenes, finer patches)",
        ylabel="accuracy (fraction of 4-class labels)",
        fontsize=8,
    )
    for enc, losses in result["train_loss"].items():
        ax2.plot(moving_average(losses, 20), label=enc)
    ax2.set_ylim(0, None)
    label_axes(
        ax2,
        title=f"Training loss at {g0}x{g0} (seed 0, moving average of 20 steps)",
        xlabel="step",
        ylabel="cross-entropy (nats)",
    )
    mark_quick(fig, quick)

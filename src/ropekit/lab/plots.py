# SPDX-License-Identifier: MIT
"""The lab's figures, drawn with the report's plotting helpers (:mod:`ropekit.report.plotting`): labelled axes
with units, a legend (or colour bar) on every panel, a banner on quick runs, per-position loss smoothed with the
raw curve faint behind it.

Each function takes the figure the experiment's ``write_outputs`` made and the experiment's result dict (the same
numbers as its JSON), so a figure can be redrawn from a saved JSON.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from typing import Any

from ropekit.report.plotting import distinct_colors, label_axes, length_ticks, mark_quick, raw_and_smoothed

__all__ = ["SMOOTH", "extrapolation", "frequencies", "passkey", "scaling"]

SMOOTH = 16  # positions in the per-position loss moving average


def _unique(values: Iterable[Any]) -> list[Any]:
    return list(dict.fromkeys(values))


def _mean(rows: list[dict[str, Any]], value: str, **match: Any) -> float:
    return float(statistics.mean(r[value] for r in rows if all(r[k] == v for k, v in match.items())))


def extrapolation(fig: Any, result: dict[str, Any], *, quick: bool) -> None:
    """Perplexity against evaluation length per encoding, and the per-position loss at the longest length."""
    rows, L = result["results"], result["train_len"]
    ax1, ax2 = fig.subplots(1, 2)
    lengths = sorted(_unique(r["eval_len"] for r in rows))
    encs = _unique(r["encoding"] for r in rows)
    color = distinct_colors([*encs, *(e for e in result["per_position_loss"] if e not in encs)])
    for enc in encs:
        ax1.plot(
            lengths,
            [_mean(rows, "ppl", encoding=enc, eval_len=n) for n in lengths],
            marker="o",
            label=enc,
            color=color[enc],
        )
    ax1.axvline(L, color="gray", ls=":", label=f"training length {L}")
    ax1.set(xscale="log", yscale="log")
    length_ticks(ax1, lengths)
    label_axes(
        ax1,
        title=f"Perplexity by length (trained at {L})",
        xlabel="evaluation length (tokens)",
        ylabel="validation perplexity (per byte)",
    )
    per_pos = result["per_position_loss"]
    for enc, losses in per_pos.items():
        raw_and_smoothed(ax2, losses, label=enc, window=SMOOTH, color=color[enc])
    ax2.axvline(L, color="gray", ls=":", label=f"training length {L}")
    ax2.set_ylim(0, None)
    n = max((len(v) for v in per_pos.values()), default=0)
    label_axes(
        ax2,
        title=f"Loss by position (sequences of {n})",
        xlabel="position (tokens)",
        ylabel="loss (nats/byte)",
        ncol=2,
    )
    mark_quick(fig, quick)


def scaling(fig: Any, result: dict[str, Any], *, quick: bool) -> None:
    """Zero-shot perplexity per scheme against length, and perplexity after fine-tuning at 4x."""
    zs, ft, L = result["zero_shot"], result["finetuned_x4"], result["train_len"]
    ax1, ax2 = fig.subplots(1, 2)
    lengths = sorted(_unique(r["eval_len"] for r in zs))
    schemes = _unique(r["scheme"] for r in zs)
    for name in schemes:
        ax1.plot(
            lengths, [_mean(zs, "ppl", scheme=name, eval_len=n) for n in lengths], marker="o", label=name
        )
    ax1.axvline(L, color="gray", ls=":", label=f"training length {L}")
    ax1.set(xscale="log", yscale="log")
    length_ticks(ax1, lengths)
    label_axes(
        ax1,
        title="Zero-shot (scheme set to each length)",
        xlabel="evaluation length (tokens)",
        ylabel="validation perplexity (per byte)",
    )
    ft_lengths = sorted(_unique(r["eval_len"] for r in ft))
    width = 0.8 / max(1, len(ft_lengths))
    ft_schemes = _unique(r["scheme"] for r in ft)
    for j, n in enumerate(ft_lengths):
        xs = [i + (j - (len(ft_lengths) - 1) / 2) * width for i in range(len(ft_schemes))]
        ax2.bar(
            xs,
            [_mean(ft, "ppl", scheme=s, eval_len=n) for s in ft_schemes],
            width,
            label=f"at {n} ({n // L}x)",
        )
    ax2.set_xticks(range(len(ft_schemes)), ft_schemes)
    steps = result.get("budget", {}).get("ft_steps", "?")
    label_axes(
        ax2,
        title=f"After {steps} fine-tuning steps at {4 * L} (4x)",
        xlabel="scheme",
        ylabel="validation perplexity (per byte)",
    )
    mark_quick(fig, quick)


def passkey(fig: Any, result: dict[str, Any], *, quick: bool) -> None:
    """Passkey accuracy against context length per encoding."""
    rows, L = result["results"], result["train_len"]
    ax = fig.subplots(1, 1)
    lengths = sorted(_unique(r["length"] for r in rows))
    for enc in _unique(r["encoding"] for r in rows):
        ax.plot(
            lengths, [_mean(rows, "accuracy", encoding=enc, length=n) for n in lengths], marker="o", label=enc
        )
    ax.axvline(L, color="gray", ls=":", label=f"training length {L}")
    ax.set(xscale="log", ylim=(-0.05, 1.05))
    length_ticks(ax, lengths)
    label_axes(
        ax,
        title=f"Passkey retrieval ({result.get('trials', '?')} trials per length)",
        xlabel="context length (tokens)",
        ylabel="accuracy (fraction of keys retrieved)",
    )
    mark_quick(fig, quick)


def frequencies(fig: Any, result: dict[str, Any], *, quick: bool) -> None:
    """Mean |q| and |k| per band and layer of the trained RoPE model (Barbero et al. 2025, Fig. 2 analogue)."""
    axes = fig.subplots(1, 2)
    for ax, name in zip(axes, ("q", "k")):
        im = ax.imshow(result["band_norms"][name], aspect="auto", cmap="viridis", interpolation="nearest")
        fig.colorbar(im, ax=ax, label=f"mean |{name}| of the band (pre-rotation norm)")
        label_axes(
            ax,
            title=f"Mean |{name}| per band and layer",
            xlabel="band i (0 = highest frequency)",
            ylabel="layer",
            legend=False,
        )
        ax.grid(False)
    mark_quick(fig, quick)

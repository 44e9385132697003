# SPDX-License-Identifier: MIT
"""Plotting helpers shared by the report and the lab: one look, readable at a glance.

Every panel gets a title, axis labels with units and a legend; quick (reduced-budget) runs are marked on the
figure; noisy per-position curves are drawn smoothed with the raw curve faint behind. matplotlib is imported
lazily (Agg backend) so that ``import ropekit`` never needs it.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Any

from ropekit.integers import whole

__all__ = [
    "QUICK_TEXT",
    "figure",
    "label_axes",
    "length_ticks",
    "mark_quick",
    "moving_average",
    "png_bytes",
    "pyplot",
    "raw_and_smoothed",
]

QUICK_TEXT = "QUICK RUN (reduced budget): indicative only"


def pyplot() -> Any:
    """matplotlib.pyplot on the Agg backend; a clear error when matplotlib is not installed."""
    try:
        import matplotlib
    except ImportError as e:  # pragma: no cover - the dev extra has matplotlib
        raise ImportError("figures need matplotlib: pip install 'ropekit[plot]'") from e
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def figure(ncols: int = 1, *, width: float = 6.4, height: float = 4.2) -> tuple[Any, list[Any]]:
    """A figure with ``ncols`` panels side by side, each ``width`` x ``height`` inches; returns (fig, axes)."""
    plt = pyplot()
    fig, axes = plt.subplots(1, ncols, figsize=(width * ncols, height), squeeze=False)
    return fig, list(axes[0])


def label_axes(
    ax: Any, *, title: str, xlabel: str, ylabel: str, legend: bool = True, **legend_kw: Any
) -> None:
    """Title, axis labels and (unless ``legend`` is False, e.g. for an image panel) a legend of the labelled
    artists; a light grid. Raises ValueError if a legend is asked for and nothing on the panel is labelled."""
    ax.set_title(title, fontsize=11)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, which="major", alpha=0.3)
    if legend:
        handles, _labels = ax.get_legend_handles_labels()
        if not handles:
            raise ValueError(f"panel {title!r}: legend requested but no plotted element has a label")
        ax.legend(fontsize=legend_kw.pop("fontsize", 8), **legend_kw)


def length_ticks(ax: Any, lengths: Sequence[int]) -> None:
    """On a log x axis of lengths: one labelled tick per measured length (plain integers), no minor labels."""
    from matplotlib.ticker import NullFormatter

    ax.set_xticks(list(lengths), [f"{n:,}" for n in lengths])
    ax.xaxis.set_minor_formatter(NullFormatter())


def mark_quick(fig: Any, quick: bool) -> None:
    """Stamp a red "quick run" banner on ``fig`` when ``quick`` is true."""
    if quick:
        fig.suptitle(
            QUICK_TEXT, color="#b00020", fontsize=10, weight="bold"
        )  # tight_layout makes room for it


def moving_average(y: Sequence[float], window: int) -> list[float]:
    """Trailing mean over the last ``window`` points (fewer at the start): out[i] = mean(y[max(0, i-w+1) : i+1])."""
    window = whole(window, 1, f"window must be a positive int, got {window!r}")
    out, acc = [], 0.0
    for i, v in enumerate(y):
        acc += float(v)
        if i >= window:
            acc -= float(y[i - window])
        out.append(acc / min(i + 1, window))
    return out


def distinct_colors(names: Sequence[str]) -> dict[str, Any]:
    """One colour per name, all different: matplotlib's tab10 up to 10 names, tab20 up to 20, then a sampled
    continuous map (the default colour cycle repeats after 10, so an 11th curve would share the first's colour)."""
    import matplotlib

    n = len(names)
    if n <= 10:
        cols = [matplotlib.colormaps["tab10"](i) for i in range(n)]
    elif n <= 20:
        cols = [matplotlib.colormaps["tab20"](i) for i in range(n)]
    else:
        cols = [matplotlib.colormaps["turbo"](i / (n - 1)) for i in range(n)]
    return dict(zip(names, cols))


def raw_and_smoothed(
    ax: Any,
    y: Sequence[float],
    *,
    label: str,
    window: int,
    x: Sequence[float] | None = None,
    color: Any = None,
) -> None:
    """The raw curve faint (unlabelled) and its ``window``-point moving average labelled on top."""
    xs = list(range(len(y))) if x is None else list(x)
    (line,) = ax.plot(xs, list(y), lw=0.6, alpha=0.25, color=color)
    ax.plot(
        xs, moving_average(y, window), lw=1.4, color=line.get_color(), label=f"{label} ({window}-pt mean)"
    )


def png_bytes(fig: Any, *, dpi: int = 100) -> bytes:
    """Render ``fig`` to PNG bytes (tight layout) and close it."""
    plt = pyplot()
    buf = io.BytesIO()
    try:
        fig.tight_layout(rect=(0, 0, 1, 0.97))
        fig.savefig(buf, format="png", dpi=dpi)
    finally:
        plt.close(fig)
    return buf.getvalue()

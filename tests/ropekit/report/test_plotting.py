"""The shared plotting helpers: smoothing against a naive mean, labels and legends enforced, quick-run mark."""

from __future__ import annotations

import pytest

from ropekit.report.plotting import (
    QUICK_TEXT,
    figure,
    label_axes,
    mark_quick,
    moving_average,
    png_bytes,
    raw_and_smoothed,
)


def test_moving_average_is_a_trailing_mean() -> None:
    y = [3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0, 6.0]
    for w in (1, 3, 20):
        want = [sum(y[max(0, i - w + 1) : i + 1]) / len(y[max(0, i - w + 1) : i + 1]) for i in range(len(y))]
        assert moving_average(y, w) == pytest.approx(want)
    with pytest.raises(ValueError, match="window must be a positive int, got 0"):
        moving_average(y, 0)


def test_raw_curve_is_faint_and_unlabelled_smoothed_is_labelled() -> None:
    fig, (ax,) = figure()
    raw_and_smoothed(ax, [float(i % 5) for i in range(50)], label="rope", window=8)
    raw, smooth = ax.get_lines()
    assert raw.get_alpha() == 0.25 and raw.get_label().startswith("_")
    assert smooth.get_label() == "rope (8-pt mean)" and smooth.get_color() == raw.get_color()
    label_axes(ax, title="t", xlabel="position (tokens)", ylabel="loss (nats/byte)")
    assert ax.get_legend() is not None and ax.get_xlabel() == "position (tokens)"
    assert png_bytes(fig).startswith(b"\x89PNG")


def test_legend_is_required_unless_waived() -> None:
    fig, (ax,) = figure()
    ax.plot([0, 1], [0, 1])
    with pytest.raises(ValueError, match="legend requested but no plotted element has a label"):
        label_axes(ax, title="t", xlabel="x", ylabel="y")
    label_axes(ax, title="t", xlabel="x", ylabel="y", legend=False)
    png_bytes(fig)


def test_quick_runs_are_marked() -> None:
    fig, _ = figure()
    mark_quick(fig, False)
    assert not fig.texts
    mark_quick(fig, True)
    assert [t.get_text() for t in fig.texts] == [QUICK_TEXT]
    png_bytes(fig)

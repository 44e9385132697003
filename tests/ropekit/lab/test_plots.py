"""The lab's figures: every panel titled, both axes labelled, a legend (or colour bar), quick runs marked, the
per-position loss smoothed (checked against a naive moving average) over the raw curve."""

from __future__ import annotations

from typing import Any

import pytest

from ropekit.lab import plots
from ropekit.report.plotting import QUICK_TEXT, figure, png_bytes, pyplot

L = 16
PER_POS = {"rope": [float((i * 7) % 5) for i in range(8 * L)], "alibi": [1.0 + (i % 3) for i in range(8 * L)]}
RESULTS: dict[str, dict[str, Any]] = {
    "extrapolation": {
        "train_len": L,
        "results": [
            {"encoding": e, "seed": s, "eval_len": m * L, "ppl": 3.0 + m + s}
            for e in ("rope", "alibi")
            for s in (0, 1)
            for m in (1, 2, 4, 8)
        ],
        "per_position_loss": PER_POS,
    },
    "scaling": {
        "train_len": L,
        "budget": {"ft_steps": 5},
        "zero_shot": [
            {"scheme": n, "seed": 0, "eval_len": m * L, "ppl": 3.0 * m}
            for n in ("none", "linear")
            for m in (1, 2)
        ],
        "finetuned_x4": [
            {"scheme": n, "seed": 0, "eval_len": m * L, "ppl": 4.0}
            for n in ("none", "linear")
            for m in (4, 8)
        ],
    },
    "passkey": {
        "train_len": L,
        "trials": 3,
        "results": [{"encoding": "rope", "seed": 0, "length": m * L, "accuracy": 1 / m} for m in (1, 2, 4)],
    },
    "frequencies": {"band_norms": {"q": [[1.0, 2.0], [3.0, 4.0]], "k": [[1.0, 0.5], [0.2, 0.1]]}},
}


def _draw(name: str, quick: bool) -> Any:
    plt = pyplot()
    fig = plt.figure(figsize=(11, 4.5))
    getattr(plots, name)(fig, RESULTS[name], quick=quick)
    return fig


@pytest.mark.parametrize("name", sorted(RESULTS))
def test_every_panel_is_labelled(name: str) -> None:
    fig = _draw(name, quick=False)
    panels = [ax for ax in fig.axes if ax.get_label() != "<colorbar>"]
    assert panels
    for ax in panels:
        assert ax.get_title() and ax.get_xlabel() and ax.get_ylabel()
        has_colorbar = any(a.get_label() == "<colorbar>" and a.get_ylabel() for a in fig.axes)
        assert ax.get_legend() is not None or (ax.images and has_colorbar)
    assert not fig.texts  # no quick banner on a full run
    assert png_bytes(fig).startswith(b"\x89PNG")


@pytest.mark.parametrize("name", sorted(RESULTS))
def test_quick_runs_are_marked(name: str) -> None:
    fig = _draw(name, quick=True)
    assert [t.get_text() for t in fig.texts] == [QUICK_TEXT]
    png_bytes(fig)


def test_per_position_loss_is_smoothed_over_the_faint_raw_curve() -> None:
    fig = _draw("extrapolation", quick=False)
    ax2 = fig.axes[1]
    lines = {ln.get_label(): ln for ln in ax2.get_lines()}
    smooth = lines[f"rope ({plots.SMOOTH}-pt mean)"]
    y, w = PER_POS["rope"], plots.SMOOTH
    want = [sum(y[max(0, i - w + 1) : i + 1]) / len(y[max(0, i - w + 1) : i + 1]) for i in range(len(y))]
    assert list(smooth.get_ydata()) == pytest.approx(want)
    raw = [ln for ln in ax2.get_lines() if ln.get_label().startswith("_") and list(ln.get_ydata()) == y]
    assert len(raw) == 1 and raw[0].get_alpha() == 0.25
    png_bytes(fig)


def test_figure_helper_is_shared() -> None:
    fig, axes = figure(2)
    assert len(axes) == 2
    png_bytes(fig)


def test_eleven_encodings_get_eleven_colours_the_same_in_both_panels() -> None:
    """The default colour cycle repeats after 10: the 11-encoding extrapolation figure once drew NoPE and the dense
    rotation in the same blue. Every encoding now has its own colour, and the same one in both panels."""
    encs = [f"enc{i}" for i in range(11)]
    result = {
        "train_len": L,
        "results": [{"encoding": e, "seed": 0, "eval_len": m * L, "ppl": 3.0 + m} for e in encs for m in (1, 2)],
        "per_position_loss": {e: [1.0] * (2 * L) for e in encs},
    }
    fig = pyplot().figure(figsize=(11, 4.5))
    plots.extrapolation(fig, result, quick=False)
    ax1, ax2 = fig.axes[:2]
    left = {ln.get_label(): ln.get_color() for ln in ax1.get_lines() if ln.get_label() in encs}
    right = {ln.get_label().split(" (")[0]: ln.get_color() for ln in ax2.get_lines() if "-pt mean" in ln.get_label()}
    assert len(left) == 11 and len({tuple(c) for c in left.values()}) == 11
    assert right == left
    pyplot().close(fig)

# SPDX-License-Identifier: MIT
"""The report's figures, one function each, drawn from the analysis results (:mod:`ropekit.analysis`).

Each returns a matplotlib Figure with a title, labelled axes with units and a legend on every line panel.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from ropekit.analysis.precision_curve import PrecisionCurve
from ropekit.analysis.rotations import Rotations
from ropekit.analysis.schemes import SchemeTable
from ropekit.analysis.spectrum import Spectrum
from ropekit.analysis.weights import WeightAnalysis
from ropekit.report.captions import ASSUMED, train_len_text
from ropekit.report.plotting import figure, label_axes

__all__ = [
    "axes_figure",
    "decay_figure",
    "precision_figure",
    "rotations_figure",
    "schemes_figure",
    "spectrum_figure",
    "weights_figure",
]

_BAND = "band i (0 = highest frequency)"


def _finite(x: torch.Tensor) -> list[float]:
    return [v if math.isfinite(v) else float("nan") for v in x.tolist()]


def spectrum_figure(sp: Spectrum, name: str, *, window: int | None = None) -> Any:
    """Wavelengths against the lengths that matter: the critical dimension as a line where the table has one, else
    each band that never turns within L0 marked (an explicit table is not ordered by frequency)."""
    fig, (ax,) = figure(width=7.5)
    bands = sp.band.tolist()
    ax.semilogy(bands, _finite(sp.wavelength_unscaled), "o-", ms=3, label="wavelength, unscaled (pretrained)")
    if not torch.equal(sp.wavelength, sp.wavelength_unscaled):
        ax.semilogy(bands, _finite(sp.wavelength), "s-", ms=3, label=f"wavelength, scaled at {sp.context:,}")
    length = (
        f"sliding window {sp.context:,} (judged at it)"
        if window is not None
        else f"context length {sp.context:,}"
    )
    ax.axhline(sp.context, color="tab:red", ls="--", label=length)
    if sp.train_len != sp.context:
        ax.axhline(
            sp.train_len, color="tab:green", ls=":", label=train_len_text(sp.train_len, sp.train_len_assumed)
        )
    if sp.critical_dim is not None:
        ax.axvline(
            (sp.critical_band or 0) - 0.5,
            color="black",
            ls="-.",
            label=f"critical dimension {sp.critical_dim} (band {sp.critical_band})",
        )
    else:
        never = ~sp.turns_in_train
        idx = [b for b, n in zip(bands, never.tolist()) if n]
        if idx:
            wl = _finite(sp.wavelength_unscaled[never])
            ax.semilogy(
                idx,
                [w if math.isfinite(w) else float("nan") for w in wl],
                "x",
                color="tab:red",
                ms=7,
                label=f"never turns within {sp.train_len:,} ({len(idx)} bands; no critical dimension)",
            )
    label_axes(ax, title=f"Band spectrum: {name}", xlabel=_BAND, ylabel="wavelength (tokens per turn)")
    return fig


def rotations_figure(rot: Rotations, name: str, *, window: int | None = None, assumed: bool = False) -> Any:
    fig, (ax,) = figure(width=7.5)
    bands = rot.band.tolist()
    lo = 1e-6

    def clip(t: torch.Tensor) -> list[float]:
        return t.clamp_min(lo).tolist()

    over = f"the window {rot.context:,}" if window is not None else f"{rot.context:,}"
    ax.semilogy(bands, clip(rot.before), "o-", ms=3, label=f"before scaling, over {over}")
    if not torch.equal(rot.before, rot.after):
        ax.semilogy(bands, clip(rot.after), "s-", ms=3, label=f"after scaling, over {over}")
    if rot.train_len != rot.context:
        trained = f"{ASSUMED} = {rot.train_len:,}" if assumed else f"{rot.train_len:,}"
        ax.semilogy(bands, clip(rot.at_train), "^-", ms=3, label=f"as trained, over {trained}")
    ax.axhline(1.0, color="black", ls="--", label="one full turn")
    label_axes(ax, title=f"Rotations per band: {name}", xlabel=_BAND, ylabel="full turns within the length")
    return fig


def schemes_figure(
    table: SchemeTable, name: str, *, assumed: bool = False, logit_scales: dict[str, float] | None = None
) -> Any:
    """Per-band ratios and attention factors; ``logit_scales`` (column -> factor on the logits outside the
    rotation, MLA's softmax scale) folds that factor into the column's bar as sqrt(factor), marked on its tick."""
    fig, (ax1, ax2) = figure(2, width=6.2)
    bands = table.band.tolist()
    for scheme, ratio in table.ratio.items():
        ax1.plot(bands, ratio.tolist(), lw=2.2 if scheme.startswith("model:") else 1.2, label=scheme)
    ax1.axhline(table.factor, color="gray", ls=":", label=f"s = {table.factor:g} (full interpolation)")
    ax1.set_yscale("log")
    start = f"{ASSUMED} = {table.original_length:,}" if assumed else f"{table.original_length:,}"
    label_axes(
        ax1,
        title=f"Schemes at {table.target:,} (from {start}): {name}",
        xlabel=_BAND,
        ylabel="frequency ratio theta / theta' (1 = untouched)",
    )
    extra = logit_scales or {}
    names = list(table.attention_factor)
    values = [table.attention_factor[n] for n in names]
    ticks = [f"{n}\n+ MLA softmax" if n in extra else n for n in names]
    colors = [f"C{i}" for i in range(len(names))]
    ax2.bar(ticks, values, color=colors, label="attention factor on cos/sin")
    top = max(values)
    if extra:  # the part of the logit scale the attention adds, as a factor on cos/sin: af * (sqrt(m^2) - 1)
        marked = [(t, table.attention_factor[n]) for t, n in zip(ticks, names) if n in extra]
        grown = [af * math.sqrt(extra[n]) for n, af in table.attention_factor.items() if n in extra]
        ax2.bar(
            [t for t, _ in marked],
            [g - af for g, (_, af) in zip(grown, marked)],
            bottom=[af for _, af in marked],
            color="none",
            edgecolor="black",
            hatch="//",
            label="+ MLA softmax scale, as sqrt(its factor on the logits)",
        )
        top = max(top, *grown)
    ax2.set_ylim(0, top * 1.35)  # room for the legend above the bars
    ax2.tick_params(axis="x", rotation=30)
    label_axes(
        ax2,
        title="Attention factor",
        xlabel="scheme",
        ylabel="factor (logits scale by its square)",
        loc="upper right",
        fontsize=7,
    )
    return fig


def decay_figure(
    distances: torch.Tensor,
    su: torch.Tensor,
    ones: torch.Tensor,
    gauss_mean: torch.Tensor,
    gauss_std: torch.Tensor,
    mc_mean: torch.Tensor,
    mc_std: torch.Tensor,
    rotary_dim: int,
    samples: int,
    name: str,
) -> Any:
    fig, (ax,) = figure(width=9.0)
    m = distances.tolist()
    r = float(rotary_dim)
    ax.plot(
        m, (su / su[0]).tolist(), color="black", lw=1.6, label="Su's relative upper bound (scaled to 1 at 0)"
    )
    ax.plot(m, (ones / r).tolist(), color="tab:orange", lw=0.9, label="all-ones q, k: q.R k / r")
    ax.plot(
        m, (mc_mean / r).tolist(), color="tab:blue", lw=0.9, label=f"Gaussian q, k: mean of {samples} / r"
    )
    ax.fill_between(
        m,
        ((mc_mean - mc_std) / r).tolist(),
        ((mc_mean + mc_std) / r).tolist(),
        color="tab:blue",
        alpha=0.15,
        label="Gaussian q, k: +-1 sample std / r",
    )
    ax.plot(m, (gauss_mean / r).tolist(), color="tab:green", ls="--", label="Gaussian q, k: expectation (0)")
    ax.plot(m, (gauss_std / r).tolist(), color="tab:green", ls=":", label="Gaussian q, k: std sqrt(r) / r")
    ax.set_xscale("symlog", linthresh=1.0)
    label_axes(
        ax,
        title=f"Distance decay: {name}",
        xlabel="relative distance m (tokens)",
        ylabel="dot product per rotary channel",
        loc="upper right",
    )
    return fig


def precision_figure(curve: PrecisionCurve, name: str) -> Any:
    """Both recipes' errors; ropekit's points where the float64 reference does not resolve it are hollow (upper
    bounds), with the reference's own error bound drawn."""
    fig, (ax,) = figure(width=7.5)
    pos = curve.position.tolist()
    ax.loglog(pos, curve.common_fp32.clamp_min(1e-12).tolist(), "o-", label="common float32 recipe")
    ok = curve.resolved
    ropekit = curve.ropekit.clamp_min(1e-12)
    (line,) = ax.loglog(
        [p for p, r in zip(pos, ok.tolist()) if r], ropekit[ok].tolist(), "s-", label="ropekit (exact phases)"
    )
    if not bool(ok.all()):
        bad = ~ok
        ax.loglog(
            [p for p, r in zip(pos, bad.tolist()) if r],
            ropekit[bad].tolist(),
            "s",
            mfc="none",
            color=line.get_color(),
            label="ropekit, not resolved: upper bound (float64 reference's own error)",
        )
    ax.loglog(
        pos,
        curve.oracle_bound.clamp_min(1e-12).tolist(),
        ":",
        color="tab:brown",
        label="float64 reference's error bound",
    )
    ax.axhline(2.0**-24, color="gray", ls=":", label="float32 rounding 2^-24")
    ax.axvline(1 << 24, color="tab:red", ls="--", label="2^24: float32 stops counting integers")
    label_axes(
        ax,
        title=f"Phase precision: {name}",
        xlabel="position (tokens)",
        ylabel=f"max |cos/sin error| over {curve.window} positions",
        loc="upper left",
    )
    return fig


def weights_figure(w: WeightAnalysis, name: str) -> Any:
    fig, axes = figure(4, width=4.3, height=3.9)
    panels = (
        (w.q_norms, "mean |q| per band", _BAND, "layer", "viridis"),
        (w.k_norms, "mean |k| per band", _BAND, "layer", "viridis"),
        (w.previous, "attention on previous token", "head", "layer", "magma"),
        (w.diagonal, "attention on own token", "head", "layer", "magma"),
    )
    from matplotlib.ticker import MaxNLocator

    for ax, (data, title, xl, yl, cmap) in zip(axes, panels):
        attention = "band" not in xl
        limits = {"vmin": 0.0, "vmax": 1.0} if attention else {}
        im = ax.imshow(data.tolist(), aspect="auto", cmap=cmap, interpolation="nearest", **limits)
        fig.colorbar(im, ax=ax, label="attention weight (0..1)" if attention else "mean band norm")
        label_axes(ax, title=f"{title}\n{name}", xlabel=xl, ylabel=yl, legend=False)
        ax.grid(False)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    return fig


def axes_figure(rep: dict[str, Any], name: str) -> Any:
    """Multi-axis specs: each band's wavelength, coloured by the axis it reads, against each axis's extent."""
    fig, (ax,) = figure(width=7.5)
    colours = ["tab:blue", "tab:orange", "tab:green", "tab:purple"]
    for i, a in enumerate(rep["axes"]):
        c = colours[i % len(colours)]
        rows = [b for b in rep["bands"] if b["axis"] == a["axis"] and b["wavelength"] is not None]
        ax.semilogy(
            [b["index"] for b in rows],
            [b["wavelength"] for b in rows],
            "o",
            ms=4,
            color=c,
            label=f"axis {a['axis']}: {a['n_bands']} bands",
        )
        ax.axhline(a["extent"], color=c, ls="--", lw=1, label=f"extent of {a['axis']}: {a['extent']:,.0f}")
    label_axes(
        ax,
        title=f"Bands per axis ({rep['scheme']} {rep['sections']}): {name}",
        xlabel=_BAND,
        ylabel="wavelength (positions per turn)",
        fontsize=7,
    )
    return fig

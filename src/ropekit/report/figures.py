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


def spectrum_figure(sp: Spectrum, name: str) -> Any:
    fig, (ax,) = figure(width=7.5)
    bands = sp.band.tolist()
    ax.semilogy(bands, _finite(sp.wavelength_unscaled), "o-", ms=3, label="wavelength, unscaled (pretrained)")
    if not torch.equal(sp.wavelength, sp.wavelength_unscaled):
        ax.semilogy(bands, _finite(sp.wavelength), "s-", ms=3, label=f"wavelength, scaled at {sp.context:,}")
    ax.axhline(sp.context, color="tab:red", ls="--", label=f"context length {sp.context:,}")
    if sp.train_len != sp.context:
        ax.axhline(sp.train_len, color="tab:green", ls=":", label=f"training length {sp.train_len:,}")
    ax.axvline(
        sp.critical_band - 0.5,
        color="black",
        ls="-.",
        label=f"critical dimension {sp.critical_dim} (band {sp.critical_band})",
    )
    label_axes(ax, title=f"Band spectrum: {name}", xlabel=_BAND, ylabel="wavelength (tokens per turn)")
    return fig


def rotations_figure(rot: Rotations, name: str) -> Any:
    fig, (ax,) = figure(width=7.5)
    bands = rot.band.tolist()
    lo = 1e-6

    def clip(t: torch.Tensor) -> list[float]:
        return t.clamp_min(lo).tolist()

    ax.semilogy(bands, clip(rot.before), "o-", ms=3, label=f"before scaling, over {rot.context:,}")
    if not torch.equal(rot.before, rot.after):
        ax.semilogy(bands, clip(rot.after), "s-", ms=3, label=f"after scaling, over {rot.context:,}")
    if rot.train_len != rot.context:
        ax.semilogy(bands, clip(rot.at_train), "^-", ms=3, label=f"as trained, over {rot.train_len:,}")
    ax.axhline(1.0, color="black", ls="--", label="one full turn")
    label_axes(ax, title=f"Rotations per band: {name}", xlabel=_BAND, ylabel="full turns within the length")
    return fig


def schemes_figure(table: SchemeTable, name: str) -> Any:
    fig, (ax1, ax2) = figure(2, width=6.2)
    bands = table.band.tolist()
    for scheme, ratio in table.ratio.items():
        ax1.plot(bands, ratio.tolist(), lw=2.2 if scheme.startswith("model:") else 1.2, label=scheme)
    ax1.axhline(table.factor, color="gray", ls=":", label=f"s = {table.factor:g} (full interpolation)")
    ax1.set_yscale("log")
    label_axes(
        ax1,
        title=f"Schemes at {table.target:,} (from {table.original_length:,}): {name}",
        xlabel=_BAND,
        ylabel="frequency ratio theta / theta' (1 = untouched)",
    )
    names = list(table.attention_factor)
    values = [table.attention_factor[n] for n in names]
    colors = [f"C{i}" for i in range(len(names))]
    ax2.bar(names, values, color=colors, label="attention factor on cos/sin")
    ax2.tick_params(axis="x", rotation=30)
    label_axes(ax2, title="Attention factor", xlabel="scheme", ylabel="factor (logits scale by its square)")
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
    fig, (ax,) = figure(width=7.5)
    pos = curve.position.tolist()
    ax.loglog(pos, curve.common_fp32.clamp_min(1e-12).tolist(), "o-", label="common float32 recipe")
    ax.loglog(pos, curve.ropekit.clamp_min(1e-12).tolist(), "s-", label="ropekit (exact phases)")
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

# SPDX-License-Identifier: MIT
"""Build a report: run every analysis for each spec of a :class:`~ropekit.report.sources.Source`, draw its
figures, and collect the numbers behind them.

Sections, in order: spectrum, rotations, scaling, decay, precision, and weights (model sources only). A
multi-axis spec (M-RoPE, vision) adds a "bands per axis" section (:mod:`ropekit.analysis.axes`), judged at the
source's extents (a vision preset's patch grid) or, without them, at
:func:`~ropekit.analysis.axes.default_extents` of the context -- the same extents as ``ropekit inspect``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from ropekit.analysis.axes import axis_report, default_extents
from ropekit.analysis.decay import gaussian_dot_moments, gaussian_dot_samples, ones_dot, su_bound
from ropekit.analysis.precision_curve import precision_curve
from ropekit.analysis.rotations import rotations
from ropekit.analysis.schemes import original_length, scheme_table
from ropekit.analysis.spectrum import spectrum
from ropekit.report import figures
from ropekit.report.plotting import png_bytes
from ropekit.report.sources import Source
from ropekit.spec import RopeSpec

__all__ = ["DECAY_SAMPLES", "Figure", "Report", "Section", "build_report", "decay_distances"]

DECAY_SAMPLES = 512

_SECTIONS: dict[str, tuple[str, str]] = {
    "spectrum": ("Band spectrum", "How long each band takes to turn once, against the lengths that matter."),
    "rotations": ("Rotations per band", "How many full turns each band makes over the context."),
    "scaling": ("Scaling schemes", "How each long-context scheme changes each band at a target length."),
    "decay": (
        "Distance decay",
        "Su's bound is an upper bound, not what random queries and keys do (seed 001).",
    ),
    "precision": ("Phase precision", "Exact phases against the usual float32 recipe, far beyond 10^7."),
    "axes": (
        "Bands per axis",
        "Multi-axis RoPE (M-RoPE, 2-D/3-D vision): which bands read which position axis, against its extent.",
    ),
    "weights": (
        "Weights: bands and positional heads",
        "Which bands carry norm, which heads attend by position.",
    ),
}


@dataclass(frozen=True)
class Figure:
    title: str
    caption: str  # one line: what to read in it
    png: bytes


@dataclass
class Section:
    key: str
    title: str
    intro: str
    figures: list[Figure] = field(default_factory=list)


@dataclass
class Report:
    source: Source
    sections: list[Section]
    data: dict[str, Any]  # the numbers behind every figure (JSON-ready)


def decay_distances(context: int) -> torch.Tensor:
    """Integer distances 0..63 then ~900 log-spaced up to ``context`` (unique, sorted, float64)."""
    hi = max(64, int(context))
    dense = torch.arange(0, 64, dtype=torch.float64)
    spread = torch.logspace(math.log10(64), math.log10(hi), 900, dtype=torch.float64).round()
    return torch.tensor(sorted(set(torch.cat([dense, spread]).tolist())), dtype=torch.float64)


def _scheme_target(spec: RopeSpec, context: int) -> int:
    L0 = original_length(spec, context)
    return context if context > L0 else 4 * L0  # an unscaled model: show a 4x extension


def _spec_sections(
    spec: RopeSpec,
    context: int,
    name: str,
    out: dict[str, list[Figure]],
    extents: dict[str, float] | None = None,
) -> dict[str, Any]:
    data: dict[str, Any] = {}

    def add(key: str, caption: str, draw: Callable[[], Any]) -> None:
        out[key].append(Figure(f"{_SECTIONS[key][0]}: {name}", caption, png_bytes(draw())))

    sp = spectrum(spec, context)
    data["spectrum"] = sp.as_dict()
    beyond = spec.n_bands - sp.critical_band
    add(
        "spectrum",
        f"Bands right of the dash-dot line (critical dimension {sp.critical_dim}: {beyond} of {spec.n_bands} bands)"
        f" never complete a turn within the training length {sp.train_len:,}.",
        lambda: figures.spectrum_figure(sp, name),
    )
    rot = rotations(spec, context)
    data["rotations"] = rot.as_dict()
    add(
        "rotations",
        f"Bands below the dashed line turn less than once over the length; scaling moves bands down "
        f"so that {context:,} tokens stay within the angles seen at {rot.train_len:,}.",
        lambda: figures.rotations_figure(rot, name),
    )
    table = scheme_table(spec, context=context, target=_scheme_target(spec, context))
    data["scaling"] = table.as_dict()
    own = "; the thick line is the configuration's own" if spec.scaling is not None else ""
    add(
        "scaling",
        f"Ratio 1 leaves a band untouched, {table.factor:g} interpolates it fully{own}; dynamic NTK (factor "
        f"{table.factor:g}, evaluated at the target) overshoots; LongRoPE needs searched per-band factors, so it "
        "appears only as a LongRoPE model's own."
        + (
            f" Not applicable to this explicit frequency table: {', '.join(table.not_applicable)}."
            if table.not_applicable
            else ""
        ),
        lambda: figures.schemes_figure(table, name),
    )
    m = decay_distances(context)
    su, ones = su_bound(spec, m), ones_dot(spec, m)
    gm, gs = gaussian_dot_moments(spec, m)
    mc = gaussian_dot_samples(spec, m, samples=DECAY_SAMPLES)
    mc_mean, mc_std = mc.mean(0), mc.std(0)
    data["decay"] = {
        "distance": m.tolist(),
        "su_bound": su.tolist(),
        "ones": ones.tolist(),
        "gaussian_expectation": gm.tolist(),
        "gaussian_std": gs.tolist(),
        "gaussian_monte_carlo_mean": mc_mean.tolist(),
        "gaussian_monte_carlo_std": mc_std.tolist(),
        "samples": DECAY_SAMPLES,
    }
    r = int(spec.rotary_dim)  # type: ignore[arg-type]
    add(
        "decay",
        "Su's bound and the all-ones dot product decay with distance; for random Gaussian q, k the expected dot "
        "product is 0 at every distance and its spread does not shrink.",
        lambda: figures.decay_figure(m, su, ones, gm, gs, mc_mean, mc_std, r, DECAY_SAMPLES, name),
    )
    # every scheme is measured as configured: the oracle takes a scaled scheme's own float64 frequencies where it
    # has no independent formula (ropekit.analysis.precision.oracle_frequencies)
    curve, measured = precision_curve(spec), "the configuration's frequencies"
    data["precision"] = {**curve.as_dict(), "measured_on": measured}
    add(
        "precision",
        f"The float32 recipe's error grows with position (to {float(curve.common_fp32[-1]):.2g} at "
        f"{int(curve.position[-1]):.0e}); ropekit stays at float32 rounding ({float(curve.ropekit.max()):.1e}); measured on {measured}.",
        lambda: figures.precision_figure(curve, name),
    )
    if spec.axes is not None:
        ax_rep = axis_report(spec, extents or default_extents(spec, context))
        data["axes"] = ax_rep
        short = [f"{a['axis']} {a['wrapping_bands']}/{a['n_bands']}" for a in ax_rep["axes"]]
        add(
            "axes",
            "Dots below an axis's dashed extent turn at least once across it (fine, periodic), dots above see "
            f"less than a turn (coarse); bands that turn within their extent: {', '.join(short)}.",
            lambda: figures.axes_figure(ax_rep, name),
        )
    return data


def _spec_json(spec: RopeSpec) -> dict[str, Any]:
    """The spec as config.json keys; specs transformers cannot express (a vision tower's per-axis table) as
    ropekit's own fields, with the reason."""
    try:
        return spec.to_hf()
    except ValueError as e:
        return {
            "no_transformers_form": str(e),
            "head_dim": spec.head_dim,
            "rotary_dim": spec.rotary_dim,
            "layout": spec.layout,
            "freqs": None if spec.freqs is None else list(spec.freqs),
            "axes": None if spec.axes is None else spec.axes.as_dict(),
        }


def build_report(source: Source) -> Report:
    """Every analysis and figure for ``source``."""
    figs: dict[str, list[Figure]] = {k: [] for k in _SECTIONS}
    per_spec: dict[str, Any] = {}
    for label, spec in source.specs.items():
        name = f"{source.name} / {label}" if label else source.name
        per_spec[label or "default"] = {
            "spec": _spec_json(spec),
            **_spec_sections(spec, source.context, name, figs, source.extents.get(label)),
        }
    data: dict[str, Any] = {
        "source": source.name,
        "kind": source.kind,
        "context": source.context,
        "specs": per_spec,
    }
    if source.weights is not None:
        w = source.weights
        data["weights"] = w.as_dict()
        n_pos = len(w.positional_heads())
        figs["weights"].append(
            Figure(
                f"{_SECTIONS['weights'][0]}: {source.name}",
                f"Brighter bands carry more of the query/key norm; {n_pos} heads put over half their attention "
                f"on the previous or own token (inputs: {w.inputs}).",
                png_bytes(figures.weights_figure(w, source.name)),
            )
        )
    sections = [Section(k, t, intro, figs[k]) for k, (t, intro) in _SECTIONS.items() if figs[k]]
    return Report(source, sections, data)

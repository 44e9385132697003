# SPDX-License-Identifier: MIT
"""Build a report: run every analysis for each spec of a :class:`~ropekit.report.sources.Source`, draw its
figures, and collect the numbers behind them.

Sections, in order: spectrum, rotations, scaling, decay, precision, and weights (model sources only). A
multi-axis spec (M-RoPE, vision) adds a "bands per axis" section (:mod:`ropekit.analysis.axes`), judged at the
source's extents (a vision preset's patch grid) or, without them, at
:func:`~ropekit.analysis.axes.default_extents` of the context -- the same extents as ``ropekit inspect``.

Sliding-window layer types are judged at their window, as ``ropekit inspect`` judges them: spectrum, rotations and
decay over the window (their training length is the window too), no scaling comparison (a one-line note instead,
:func:`ropekit.analysis.layers.not_compared`); their phase precision is the same measurement as any layer's
(positions are absolute). The captions (:mod:`ropekit.report.captions`) describe only what each figure draws.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from ropekit.analysis.axes import axis_report, default_extents
from ropekit.analysis.compare import default_target
from ropekit.analysis.decay import gaussian_dot_moments, gaussian_dot_samples, ones_dot, su_bound
from ropekit.analysis.layers import not_compared
from ropekit.analysis.precision_curve import precision_curve
from ropekit.analysis.rotations import rotations
from ropekit.analysis.schemes import scheme_table
from ropekit.analysis.spectrum import spectrum
from ropekit.report import captions, figures
from ropekit.report.plotting import png_bytes
from ropekit.report.sources import Source
from ropekit.spec import RopeSpec

__all__ = ["DECAY_SAMPLES", "Figure", "Report", "Section", "build_report", "decay_distances"]

DECAY_SAMPLES = 512

_SECTIONS: dict[str, tuple[str, str]] = {
    "spectrum": (
        "Band spectrum",
        "How long each band takes to turn once, against the lengths that matter (sliding layers: their window).",
    ),
    "rotations": (
        "Rotations per band",
        "How many full turns each band makes over the context (sliding layers: over their window).",
    ),
    "scaling": (
        "Scaling schemes",
        "How each long-context scheme changes each band at a target length (sliding layers are not compared).",
    ),
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
    notes: list[str] = field(default_factory=list)  # one line each, where a layer type has no figure


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


@dataclass(frozen=True)
class _Layer:
    """What one layer type is judged at: the source's context, its span (window or context) and window."""

    context: int
    span: int
    window: int | None  # the layer type's sliding window (or attention chunk), None for full attention
    extents: dict[str, float] | None
    logit_scale: float

    @property
    def sliding(self) -> int | None:
        """The window when it is shorter than the context (the layers are judged at it), else None."""
        return self.window if self.window is not None and self.window < self.context else None


def _spec_sections(
    spec: RopeSpec, at: _Layer, name: str, out: dict[str, list[Figure]], notes: dict[str, list[str]]
) -> dict[str, Any]:
    data: dict[str, Any] = {}
    span, window = at.span, at.sliding

    def add(key: str, caption: str, draw: Callable[[], Any]) -> None:
        out[key].append(Figure(f"{_SECTIONS[key][0]}: {name}", caption, png_bytes(draw())))

    # a sliding layer never sees two tokens further apart than its window, in training or after: L0 = the window
    sp = spectrum(spec, span, train_len=span if window is not None else None)
    data["spectrum"] = sp.as_dict()
    add(
        "spectrum",
        captions.spectrum_caption(sp, spec.n_bands, window=window),
        lambda: figures.spectrum_figure(sp, name, window=window),
    )
    rot = rotations(spec, span)
    if window is not None:  # trained over the window too: "as trained" is "before scaling"
        rot = dataclasses.replace(rot, at_train=rot.before, train_len=span)
    data["rotations"] = rot.as_dict()
    add(
        "rotations",
        captions.rotations_caption(rot, spec, window=window, assumed=sp.train_len_assumed),
        lambda: figures.rotations_figure(rot, name, window=window, assumed=sp.train_len_assumed),
    )
    _scaling(spec, at, sp.train_len_assumed, name, data, add, notes)
    m = decay_distances(span)
    su, ones = su_bound(spec, m, seq_len=span), ones_dot(spec, m, seq_len=span)
    gm, gs = gaussian_dot_moments(spec, m)
    mc = gaussian_dot_samples(spec, m, samples=DECAY_SAMPLES, seq_len=span)
    mc_mean, mc_std = mc.mean(0), mc.std(0)
    data["decay"] = {
        "distance": m.tolist(),
        "seq_len": span,
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
        captions.decay_caption(spec, span, window=window),
        lambda: figures.decay_figure(m, su, ones, gm, gs, mc_mean, mc_std, r, DECAY_SAMPLES, name),
    )
    # every scheme is measured as configured: the oracle takes a scaled scheme's own float64 frequencies where it
    # has no independent formula (ropekit.analysis.precision.oracle_frequencies)
    curve, measured = precision_curve(spec), "the configuration's frequencies"
    data["precision"] = {**curve.as_dict(), "measured_on": measured}
    add(
        "precision",
        captions.precision_caption(curve, measured),
        lambda: figures.precision_figure(curve, name),
    )
    if spec.axes is not None:
        ax_rep = axis_report(spec, at.extents or default_extents(spec, at.context))
        data["axes"] = ax_rep
        short = [f"{a['axis']} {a['wrapping_bands']}/{a['n_bands']}" for a in ax_rep["axes"]]
        add(
            "axes",
            "Dots below an axis's dashed extent turn at least once across it (fine, periodic), dots above see "
            f"less than a turn (coarse); bands that turn within their extent: {', '.join(short)}.",
            lambda: figures.axes_figure(ax_rep, name),
        )
    return data


def _scaling(
    spec: RopeSpec,
    at: _Layer,
    assumed: bool,
    name: str,
    data: dict[str, Any],
    add: Callable[[str, str, Callable[[], Any]], None],
    notes: dict[str, list[str]],
) -> None:
    """The scaling comparison, or for a layer type whose window is shorter than the target, why there is none
    (``inspect --compare``'s rule and words)."""
    target = default_target(spec, at.context)  # the rule inspect --compare uses
    if at.window is not None and at.window < target:
        reason = not_compared(at.window)
        data["scaling"] = {"skipped": reason}
        notes["scaling"].append(f"{name}: not compared: {reason}.")
        return
    table = scheme_table(spec, context=at.context, target=target)
    own = next((k for k in table.ratio if k.startswith("model:")), None)
    scales = {own: at.logit_scale} if own is not None and at.logit_scale != 1.0 else {}
    data["scaling"] = {
        **table.as_dict(),
        "original_length_assumed": assumed,
        "logit_scale": scales,
        "effective_attention_factor": {
            k: v * math.sqrt(scales.get(k, 1.0)) for k, v in table.attention_factor.items()
        },
    }
    add(
        "scaling",
        captions.scaling_caption(table, spec, assumed=assumed, logit_scale=at.logit_scale),
        lambda: figures.schemes_figure(table, name, assumed=assumed, logit_scales=scales),
    )


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
    """Every analysis and figure for ``source``.

    Where ``source.weights_note`` says why a model folder's weights were not analysed (only pickle or TensorFlow /
    Flax files, which ropekit never loads: :attr:`ropekit.report.sources.Source.weights_note`), the report carries
    it: in ``data["weights_note"]`` and, without a weights figure, as the weights section's only note."""
    figs: dict[str, list[Figure]] = {k: [] for k in _SECTIONS}
    notes: dict[str, list[str]] = {k: [] for k in _SECTIONS}
    per_spec: dict[str, Any] = {}
    for label, spec in source.specs.items():
        name = f"{source.name} / {label}" if label else source.name
        span = source.span(label)
        window = source.windows.get(label)
        at = _Layer(
            source.context, span, window, source.extents.get(label), source.logit_scales.get(label, 1.0)
        )
        per_spec[label or "default"] = {
            "spec": _spec_json(spec),
            "layer_type": label or None,
            "layers": source.layers.get(label),
            "window": window,
            "span": span,
            **_spec_sections(spec, at, name, figs, notes),
        }
    data: dict[str, Any] = {
        "source": source.name,
        "kind": source.kind,
        "context": source.context,
        "context_note": source.context_note,
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
    if source.weights_note:  # a model folder whose weights ropekit does not read (pickle only): say so
        data["weights_note"] = source.weights_note
        if not figs["weights"]:
            notes["weights"].append(source.weights_note)
    sections = [
        Section(k, t, intro, figs[k], notes[k]) for k, (t, intro) in _SECTIONS.items() if figs[k] or notes[k]
    ]
    return Report(source, sections, data)

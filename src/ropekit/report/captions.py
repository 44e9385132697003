# SPDX-License-Identifier: MIT
"""The report's one-line captions, built from what each figure draws (never a claim about a curve it lacks).

Each function takes the analysis result behind one figure and the facts of its layer type: the length it is judged
at (a sliding-window layer's window, else the context), whether the training length L0 is stated or assumed as
``context / factor`` (:attr:`~ropekit.analysis.spectrum.Spectrum.train_len_assumed`), and the factor the attention
applies to the logits outside the rotation (:func:`ropekit.analysis.softmax_scale.logit_scale`).
"""

from __future__ import annotations

import math

import torch

from ropekit.analysis.precision import RESOLVED
from ropekit.analysis.precision_curve import PrecisionCurve
from ropekit.analysis.rotations import Rotations
from ropekit.analysis.schemes import SchemeTable
from ropekit.analysis.spectrum import Spectrum
from ropekit.scaling import DynamicNTK, LongRope, Yarn
from ropekit.spec import RopeSpec

__all__ = [
    "ASSUMED",
    "decay_caption",
    "frequencies_at",
    "precision_caption",
    "rotations_caption",
    "scaling_caption",
    "spectrum_caption",
    "train_len_text",
]

#: how a training length derived from the context is labelled wherever it is shown
ASSUMED = "L0 assumed = context / factor"


def train_len_text(train_len: int, assumed: bool) -> str:
    """ "training length 8,192", or "training length L0 assumed = context / factor = 16,384"."""
    return f"training length {ASSUMED} = {train_len:,}" if assumed else f"training length {train_len:,}"


def _cap(text: str) -> str:
    return text[:1].upper() + text[1:]


def _sliding(window: int | None) -> str:
    return (
        ""
        if window is None
        else f"Sliding-window layers never see two tokens more than {window:,} apart, so they are judged at the "
        "window (as ropekit inspect judges them): "
    )


def spectrum_caption(sp: Spectrum, n_bands: int, *, window: int | None = None) -> str:
    """The band spectrum: the critical dimension where the table has one, else the bands marked one by one."""
    within = (
        "the window" if window is not None else f"the {train_len_text(sp.train_len, sp.train_len_assumed)}"
    )
    if sp.critical_dim is not None and sp.critical_band is not None:
        beyond = n_bands - sp.critical_band
        return _cap(
            _sliding(window)
            + f"bands right of the dash-dot line (critical dimension {sp.critical_dim}: {beyond} of {n_bands} "
            f"bands) never complete a turn within {within}."
        )
    never = int((~sp.turns_in_train).sum())
    return _cap(
        _sliding(window)
        + "no critical dimension: this explicit frequency table is not ordered by frequency (a multi-axis table "
        "holds one descending run per axis), so no leading count of bands applies, as ropekit inspect reports "
        f"(critical_dim null); the {never} of {n_bands} bands marked x never complete a turn within {within}."
    )


def rotations_caption(
    rot: Rotations, spec: RopeSpec, *, window: int | None = None, assumed: bool = False
) -> str:
    """Rotations per band: what scaling does, only where the configuration is scaled."""
    scaled = spec.scaling is not None and not torch.equal(rot.before, rot.after)
    scheme = type(spec.scaling).__name__
    if window is not None:
        return (
            f"Over the window of {rot.context:,} tokens (sliding layers never see two tokens further apart), bands "
            "below the dashed line turn less than once"
            + (
                f"; the {scheme} scaling these layers share moves the bands down (after vs before)."
                if scaled
                else "; these layers are not scaled, so there is one curve."
            )
        )
    if not scaled:
        return (
            f"Bands below the dashed line turn less than once over the context of {rot.context:,} tokens; this "
            "configuration is not scaled, so there is one curve."
        )
    return (
        f"Bands below the dashed line turn less than once over the length; the {scheme} scaling moves bands down "
        f"so that {rot.context:,} tokens stay within the angles seen over the "
        f"{train_len_text(rot.train_len, assumed)}."
    )


def _own_factor(spec: RopeSpec) -> float | None:
    f = getattr(spec.scaling, "factor", None)
    return float(f) if isinstance(f, (int, float)) and not isinstance(f, bool) else None


def scaling_caption(
    table: SchemeTable, spec: RopeSpec, *, assumed: bool = False, logit_scale: float = 1.0
) -> str:
    """The scaling schemes at the target: s and where it comes from, the model's own scheme and factor, and only
    the schemes drawn."""
    s = table.factor
    L0 = f"{ASSUMED} = {table.original_length:,}" if assumed else f"L0 = {table.original_length:,}"
    parts = [
        f"All schemes extend {L0} to {table.target:,} tokens: s = {s:g}; ratio 1 leaves a band untouched, "
        + "s interpolates it fully"
    ]
    own = next((k for k in table.ratio if k.startswith("model:")), None)
    if own is not None:
        factor = _own_factor(spec)
        differs = factor is not None and not math.isclose(factor, s)
        parts.append(
            "the thick line is the configuration's own"
            + (f" (its own factor is {factor:g}, not s = {s:g})" if differs else "")
        )
    if "dynamic" in table.ratio:
        parts.append(f"dynamic NTK (factor {s:g}, evaluated at the target) overshoots")
    parts.append("LongRoPE needs searched per-band factors, so it appears only as a LongRoPE model's own")
    text = "; ".join(parts) + "."
    if table.not_applicable:
        what = "explicit frequency table" if spec.freqs is not None else "configuration"
        text += f" Not applicable to this {what}: {', '.join(table.not_applicable)}."
    if own is not None and logit_scale != 1.0 and isinstance(spec.scaling, Yarn):
        af = table.attention_factor[own]
        text += (
            f" {own}'s bar includes MLA's softmax scale: the attention multiplies its logits by "
            f"m(s = {spec.scaling.factor:g}, mscale_all_dim = {spec.scaling.mscale_all_dim:g})^2 = {logit_scale:.4g} "
            f"outside the rotation (mla_softmax_scale), so the bar shows {af:.4g} x sqrt({logit_scale:.4g}) = "
            f"{af * math.sqrt(logit_scale):.4g}, not the tables' {af:.4g}."
        )
    return text


def frequencies_at(spec: RopeSpec, length: int) -> str | None:
    """Which frequencies a figure computed at ``length`` uses, for the schemes whose frequencies depend on the
    length (LongRoPE, dynamic NTK); None for the others."""
    sc = spec.scaling
    if isinstance(sc, LongRope):
        L0 = sc.original_max_position_embeddings
        if length > L0:
            return f"LongRoPE's long factors, which apply beyond its original {L0:,}"
        return f"LongRoPE's short factors, which apply up to its original {L0:,}"
    if isinstance(sc, DynamicNTK):
        if length > sc.max_position_embeddings:
            return f"dynamic NTK's base grown for {length:,} tokens"
        return f"dynamic NTK's unscaled base, which applies up to its {sc.max_position_embeddings:,}"
    return None


def decay_caption(spec: RopeSpec, length: int, *, window: int | None = None) -> str:
    """Distance decay: the reading, and the frequencies (at which length) the curves use."""
    where = (
        f"the window of {length:,} tokens (sliding layers never see further)"
        if window is not None
        else f"the context of {length:,} tokens"
    )
    which = frequencies_at(spec, length)
    freqs = (
        f"the frequencies at a sequence of {length:,} tokens ({which})"
        if which is not None
        else "the configuration's frequencies (the same at every length)"
    )
    return (
        "Su's bound and the all-ones dot product decay with distance; for random Gaussian q, k the expected dot "
        f"product is 0 at every distance and its spread does not shrink. Curves use {freqs}, at distances up to "
        f"{where}."
    )


def precision_caption(curve: PrecisionCurve, measured: str) -> str:
    """Phase precision: the float32 recipe's growth and ropekit's largest *resolved* error; unresolved points are
    named as bounds, as ``ropekit precision`` marks them."""
    pos = curve.position.tolist()
    text = (
        f"The float32 recipe's error grows with position (to {float(curve.common_fp32[-1]):.2g} at "
        f"{int(pos[-1]):.0e}); "
    )
    best = curve.ropekit_resolved_max
    if best is None:
        text += "ropekit's errors are all below what the float64 reference resolves here"
    else:
        text += f"ropekit stays at float32 rounding ({best:.1e}, the largest where the float64 reference resolves it)"
    unresolved = [p for p, r in zip(pos, curve.resolved.tolist()) if not r]
    if unresolved:
        bound = float(curve.oracle_bound[~curve.resolved].max())
        text += (
            f"; from {unresolved[0]:.0e} on the reference's own error (up to {bound:.1e}) exceeds {RESOLVED:g}, so "
            "the hollow points there are upper bounds, not measurements (ropekit precision marks them *)"
        )
    return text + f"; measured on {measured}."

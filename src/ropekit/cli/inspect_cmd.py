# SPDX-License-Identifier: MIT
"""``ropekit inspect``: what a RoPE configuration does at a context length, band by band.

For each band: theta_i, wavelength 2*pi/theta_i, rotations completed within the context, whether it wraps.
Summary: critical dimension (Liu et al. 2024), base lower bound (Men et al. 2024) and whether this base meets it,
and the phase error at the context for the common float32 recipe vs ropekit.
"""

from __future__ import annotations

import json
import math
from typing import Any, TextIO

from ropekit.analysis.bands import (
    band_table,
    base_bound_margin,
    base_lower_bound,
    critical_dim,
    extrapolation_bound,
)
from ropekit.analysis.compare import compare_schemes
from ropekit.analysis.precision import phase_error
from ropekit.spec import RopeSpec

__all__ = ["report", "run", "run_compare"]


def _num(x: float | None) -> float | None:
    return None if x is None or math.isinf(x) else x


def report(spec: RopeSpec, context: int) -> dict[str, Any]:
    """Everything ``inspect`` shows, as plain data (the ``--json`` output)."""
    r = int(spec.rotary_dim)  # type: ignore[arg-type]
    bands = band_table(spec, context)
    plain = spec.freqs is None and spec.p == 1.0 and spec.scaling is None
    d_extra = critical_dim(r, spec.base, context)
    bound = base_lower_bound(r, context)
    margin, first_fail = base_bound_margin(r, spec.base, context)
    err = phase_error(spec, context)
    return {
        "spec": {
            "head_dim": spec.head_dim,
            "rotary_dim": r,
            "base": spec.base,
            "layout": spec.layout,
            "p": spec.p,
            "positional_bands": spec.n_positional_bands,
        },
        "context": context,
        "bands": [b.as_dict() for b in bands],
        "summary": {
            "bands": len(bands),
            "wrapping_bands": sum(b.wraps for b in bands),
            "critical_dim": d_extra,
            "extrapolation_bound": _num(extrapolation_bound(r, spec.base, context)),
            "critical_dim_applies": plain,
            "base_lower_bound": bound,
            "base_meets_bound": first_fail is None,
            "base_bound_first_violation": first_fail,
            "base_bound_min_margin": margin,
            "phase_error_window": err.window,
            "phase_error_common_fp32": err.common_fp32,
            "phase_error_ropekit": err.ropekit,
        },
        **_axes_section(spec, context),
    }


def _axes_section(spec: RopeSpec, context: int) -> dict[str, Any]:
    """Multi-axis specs: bands per axis and wavelengths against each axis's extent (ropekit.analysis.axes)."""
    if spec.axes is None:
        return {}
    from ropekit.analysis.axes import axis_report, default_extents

    return {"axes": axis_report(spec, default_extents(spec, context))}


def _fmt(x: float) -> str:
    return "inf" if math.isinf(x) else f"{x:.4g}"


def run(spec: RopeSpec, context: int, *, as_json: bool, out: TextIO) -> int:
    rep = report(spec, context)
    if as_json:
        json.dump(rep, out, indent=2)
        out.write("\n")
        return 0
    s, sm = rep["spec"], rep["summary"]
    w = out.write
    w(
        f"RoPE head_dim={s['head_dim']} rotary_dim={s['rotary_dim']} base={s['base']:g} layout={s['layout']}"
        + (f" p={s['p']:g}" if s["p"] != 1.0 else "")
        + f"  at context {context:,}\n\n"
    )
    w(f"{'band':>4}  {'theta':>11}  {'wavelength':>11}  {'turns in ctx':>12}  wraps\n")
    d_bands = sm["critical_dim"] // 2
    for b in rep["bands"]:
        if b["index"] == d_bands and sm["critical_dim_applies"] and 0 < d_bands < len(rep["bands"]):
            w(f"{'':>4}  {'-' * 11}  critical dimension: the bands below never complete a turn  {'-' * 4}\n")
        wl = "inf" if b["wavelength"] is None else _fmt(b["wavelength"])
        w(
            f"{b['index']:>4}  {b['theta']:>11.4e}  {wl:>11}  {_fmt(b['rotations']):>12}  {'yes' if b['wraps'] else 'no'}\n"
        )
    w("\nSummary\n")
    w(f"  bands completing a full turn within the context : {sm['wrapping_bands']} of {sm['bands']}\n")
    if sm["critical_dim_applies"]:
        tb = sm["extrapolation_bound"]
        w(
            f"  critical dimension (Liu et al. 2024)             : d_extra = {sm['critical_dim']} of {s['rotary_dim']} dims; "
            f"extrapolation bound ~ {('unbounded' if tb is None else f'{tb:,.0f} tokens')}\n"
        )
    lb = sm["base_lower_bound"]
    verdict = (
        "meets it"
        if sm["base_meets_bound"]
        else f"fails it (B(m) < 0 first at m = {sm['base_bound_first_violation']:,})"
    )
    w(
        f"  base lower bound (Men et al. 2024)               : {('> 1e15' if lb is None else f'{lb:.3g}')} "
        f"for this context; base {s['base']:g} {verdict}\n"
    )
    w(
        f"  phase error at the context (max |dcos|,|dsin| over {sm['phase_error_window']} positions ending at it):\n"
    )
    w(f"      common float32 recipe (HF, Megatron, TE, torchtune) : {sm['phase_error_common_fp32']:.2e}\n")
    w(f"      ropekit                                             : {sm['phase_error_ropekit']:.2e}\n")
    if "axes" in rep:
        from ropekit.analysis.axes import format_axis_report

        w("\n" + format_axis_report(rep["axes"]))
    return 0


def run_compare(
    spec: RopeSpec, context: int, target: int, schemes: tuple[str, ...], *, as_json: bool, out: TextIO
) -> int:
    """``inspect --extend-to T --compare a,b``: per-band interpolation ratio theta / theta' for each scheme."""
    rep = compare_schemes(spec, context=context, target=target, schemes=schemes)
    if as_json:
        json.dump(rep, out, indent=2)
        out.write("\n")
        return 0
    w = out.write
    cols = rep["schemes"]
    w(
        f"RoPE head_dim={spec.head_dim} rotary_dim={spec.rotary_dim} base={spec.base:g}: extending "
        f"{rep['original_length']:,} -> {target:,} tokens (s = {rep['factor']:.4g})\n"
        "each cell: theta / theta' for the band (1 = unchanged, s = fully interpolated)\n\n"
    )
    width = max(10, *(len(c) for c in cols))
    w(f"{'band':>4}  {'wavelength':>11}  " + "  ".join(f"{c:>{width}}" for c in cols) + "\n")
    for b in rep["bands"]:
        wl = "inf" if b["wavelength"] is None else _fmt(b["wavelength"])
        w(f"{b['index']:>4}  {wl:>11}  " + "  ".join(f"{_fmt(b[c]):>{width}}" for c in cols) + "\n")
    w(
        f"{'':>4}  {'attn factor':>11}  "
        + "  ".join(f"{rep['attention_factor'][c]:>{width}.4f}" for c in cols)
        + "\n"
    )
    return 0

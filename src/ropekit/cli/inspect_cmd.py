# SPDX-License-Identifier: MIT
"""``ropekit inspect``: what a RoPE configuration does at a context length, band by band, per layer type.

For each band: theta_i (after p-RoPE and the scheme), wavelength 2*pi/theta_i, rotations completed within the
span the layers attend over, whether it wraps. Summary: critical dimension (Liu et al. 2024, arXiv 2310.05209),
base lower bound (Men et al. 2024, arXiv 2405.14591) and whether this base meets it, and the phase error at the
context for the common float32 recipe vs ropekit (ropekit's marked "* (not resolved)" where the float64 reference's
own error exceeds :data:`ropekit.analysis.precision.RESOLVED`, as ``ropekit precision`` marks it).

Per-layer-type models get one section per layer type: sliding layers are judged at their window (they never
see two tokens further apart), but their phase error is measured at the full context (absolute positions).
"""

from __future__ import annotations

import json
import math
import textwrap
from typing import Any, TextIO

from ropekit.analysis.bands import (
    band_table,
    base_bound_margin,
    base_lower_bound,
    critical_dim,
    extrapolation_bound,
)
from ropekit.analysis.compare import compare_schemes, default_target
from ropekit.analysis.layers import LayerView
from ropekit.analysis.precision import phase_error, unresolved_note
from ropekit.cli.source import scaling_dict, spec_dict
from ropekit.scaling import Scaling
from ropekit.spec import RopeSpec

__all__ = ["report", "run", "run_compare", "run_views", "scaling_text"]


#: the longest span the exact base-bound scan (Men et al.'s B(m) >= 0 for every m < span) runs over in ``inspect``
#: and ``report``: its time grows with the span (1.9 s at 131,072 tokens, 8.5 s at 2^20 on the project's machine);
#: longer spans show the bound as not judged instead of running for minutes or, at 1e29, forever.
BOUND_SCAN_MAX = 1 << 20


def _num(x: float | None) -> float | None:
    return None if x is None or math.isinf(x) else x


def scaling_text(sc: Scaling | None) -> str:
    """One line: the scheme and its parameters ("linear (factor=8)", "none")."""
    return "none" if sc is None else scaling_text_from_hf(scaling_dict(sc))


def report(
    spec: RopeSpec,
    context: int,
    *,
    span: int | None = None,
    layer_type: str | None = None,
    window: int | None = None,
    layers: int | None = None,
    extents: dict[str, float] | None = None,
) -> dict[str, Any]:
    """Everything ``inspect`` shows for one view, as plain data (an entry of ``--json``'s ``views``).

    Bands, critical dimension and base bound are judged at ``span`` (default ``context``); the phase error at
    ``context``. Multi-axis specs also get the per-axis table, against ``extents`` (axis name -> extent: a vision
    preset's patch grid) or :func:`ropekit.analysis.axes.default_extents`.
    """
    span = context if span is None else span
    r = int(spec.rotary_dim)  # type: ignore[arg-type]
    bands = band_table(spec, span)
    explicit = spec.freqs is not None
    plain = not explicit and spec.p == 1.0 and spec.scaling is None
    unjudged = explicit or spec.p != 1.0
    d_extra = critical_dim(r, spec.base, span)
    scanned = span <= BOUND_SCAN_MAX
    bound = base_lower_bound(r, span) if scanned else None
    margin, first_fail = base_bound_margin(r, spec.base, span) if scanned else (None, None)
    unjudged = unjudged or not scanned
    err = phase_error(spec, context)
    return {
        "layer_type": layer_type,
        "layers": layers,
        "window": window,
        "span": span,
        "spec": spec_dict(spec),
        "context": context,
        "bands": [b.as_dict() for b in bands],
        "summary": {
            "bands": len(bands),
            "wrapping_bands": sum(b.wraps for b in bands),
            # explicit freqs: no base, so nothing derived from one (null in the JSON)
            "critical_dim": None if explicit else d_extra,
            "extrapolation_bound": None if explicit else _num(extrapolation_bound(r, spec.base, span)),
            "critical_dim_applies": plain,
            "base_lower_bound": bound,
            "base_bound_scanned": scanned,
            # p-RoPE: Men et al.'s B(m) sums every band's cos(m theta); the bands p-RoPE keeps at frequency 0 add
            # a constant the plain-RoPE bound does not have, so it is not judged (null), as for explicit tables
            "base_meets_bound": None if unjudged else first_fail is None,
            "base_bound_first_violation": None if unjudged else first_fail,
            "base_bound_min_margin": None if unjudged else margin,
            "phase_error_window": err.window,
            "phase_error_common_fp32": err.common_fp32,
            "phase_error_ropekit": err.ropekit,
            # the float64 reference's own error there: above RESOLVED, ropekit's value is the reference's noise
            "phase_error_oracle_bound": err.oracle_bound,
            "phase_error_ropekit_resolved": err.resolved,
        },
        **_axes_section(spec, context, extents),
    }


def _axes_section(spec: RopeSpec, context: int, extents: dict[str, float] | None = None) -> dict[str, Any]:
    """Multi-axis specs: bands per axis and wavelengths against each axis's extent (ropekit.analysis.axes)."""
    if spec.axes is None:
        return {}
    from ropekit.analysis.axes import axis_report, default_extents

    return {"axes": axis_report(spec, extents or default_extents(spec, context))}


def _base_text(s: dict[str, Any]) -> str:
    """``base=...``, or ``freqs=explicit`` for a spec whose frequency table is given (its base field is unused)."""
    return "freqs=explicit" if s["base"] is None else f"base={s['base']:g}"


def _fmt(x: float) -> str:
    return "inf" if math.isinf(x) else f"{x:.4g}"


def _view_header(v: dict[str, Any]) -> str:
    if v["layer_type"] is None:
        return ""
    count = "" if v["layers"] is None else f" ({v['layers']} layers)"
    if v["window"] is None:
        return f"== layer type {v['layer_type']}{count}: full attention, judged at the context\n"
    return (
        f"== layer type {v['layer_type']}{count}: window {v['window']:,} tokens; bands judged at the span "
        f"{v['span']:,}, phase error at the context {v['context']:,}\n"
    )


def _write_view(rep: dict[str, Any], out: TextIO) -> None:
    s, sm, span = rep["spec"], rep["summary"], rep["span"]
    w = out.write
    w(_view_header(rep))
    w(
        f"RoPE head_dim={s['head_dim']} rotary_dim={s['rotary_dim']} {_base_text(s)} layout={s['layout']}"
        + (f" p={s['p']:g}" if s["p"] != 1.0 else "")
        + f"  at {'span' if span != rep['context'] else 'context'} {span:,}\n"
    )
    if s["scaling"] is not None:
        w(
            f"scaling: {scaling_text_from_hf(s['scaling'])}; attention factor {s['attention_factor']:.4g} "
            "(theta below is after scaling)\n"
        )
    w("\n")
    w(f"{'band':>4}  {'theta':>11}  {'wavelength':>11}  {'turns in ctx':>12}  wraps\n")
    d_bands = sm["critical_dim"] // 2 if sm["critical_dim_applies"] else -1
    for b in rep["bands"]:
        if 0 < d_bands < len(rep["bands"]) and b["index"] == d_bands:
            w(f"{'':>4}  {'-' * 11}  critical dimension: the bands below never complete a turn  {'-' * 4}\n")
        wl = "inf" if b["wavelength"] is None else _fmt(b["wavelength"])
        w(
            f"{b['index']:>4}  {b['theta']:>11.4e}  {wl:>11}  {_fmt(b['rotations']):>12}  {'yes' if b['wraps'] else 'no'}\n"
        )
    w("\nSummary\n")
    where = "context" if span == rep["context"] else "span   "
    w(f"  bands completing a full turn within the {where} : {sm['wrapping_bands']} of {sm['bands']}\n")
    if sm["critical_dim_applies"]:
        tb = sm["extrapolation_bound"]
        w(
            f"  critical dimension (Liu et al. 2024)             : d_extra = {sm['critical_dim']} of {s['rotary_dim']} dims; "
            f"extrapolation bound ~ {('unbounded' if tb is None else f'{tb:,.0f} tokens')}\n"
        )
    lb = sm["base_lower_bound"]
    if s["base"] is None:
        verdict = "not judged: explicit frequencies, no single base"
    elif not sm["base_bound_scanned"]:
        verdict = (
            f"not judged: the exact scan over every m < {where.strip()} stops at {BOUND_SCAN_MAX:,} tokens "
            "(its time grows with the length; call ropekit.analysis.base_lower_bound for a longer one)"
        )
    elif sm["base_meets_bound"] is None:
        verdict = (
            f"not judged: p-RoPE (p = {s['p']:g}) keeps bands at zero frequency, outside the bound's RoPE"
        )
    elif sm["base_meets_bound"]:
        verdict = f"base {s['base']:g} meets it"
    else:
        verdict = f"base {s['base']:g} fails it (B(m) < 0 first at m = {sm['base_bound_first_violation']:,})"
        if (
            lb is not None and s["base"] >= lb
        ):  # above the smallest passing base: the condition is not monotone
            verdict += "; the condition is not monotone in the base: a base above the bound can fail it"
    shown = "not computed" if not sm["base_bound_scanned"] else ("> 1e15" if lb is None else f"{lb:.3g}")
    w(
        f"  base lower bound (Men et al. 2024)               : {shown} "
        f"for this {where.strip()}; {verdict}"
        + (" (unscaled RoPE; the scheme changes the effective base)" if s["scaling"] else "")
        + "\n"
    )
    w(
        f"  phase error at the context (max |dcos|,|dsin| over {sm['phase_error_window']} positions ending at it):\n"
    )
    w(f"      common float32 recipe (HF, Megatron, TE, torchtune) : {sm['phase_error_common_fp32']:.2e}\n")
    resolved = sm["phase_error_ropekit_resolved"]
    w(
        f"      ropekit                                             : {sm['phase_error_ropekit']:.2e}"
        + ("\n" if resolved else " * (not resolved)\n")
    )
    if not resolved:
        w(
            textwrap.fill(
                unresolved_note(sm["phase_error_oracle_bound"]),
                110,
                initial_indent="      ",
                subsequent_indent="        ",
            )
            + "\n"
        )
    if "axes" in rep:
        from ropekit.analysis.axes import format_axis_report

        w("\n" + format_axis_report(rep["axes"]))


def scaling_text_from_hf(hf: dict[str, Any]) -> str:
    """:func:`scaling_text` from the scheme's ``to_hf()`` dict (as stored in the JSON report)."""
    hf = dict(hf)
    parts = [str(hf.pop("rope_type"))]
    for key in ("short_factor", "long_factor"):
        if key in hf:
            parts.append(f"{len(hf.pop(key))} per-band {key.split('_')[0]} factors")
    parts += [f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in hf.items()]
    return parts[0] + (" (" + ", ".join(parts[1:]) + ")" if parts[1:] else "")


def run(spec: RopeSpec, context: int, *, as_json: bool, out: TextIO) -> int:
    """``inspect`` of one spec at ``context`` (no layer types)."""
    return run_views(None, [LayerView(None, spec, context)], as_json=as_json, out=out)


def run_views(source: str | None, views: list[LayerView], *, as_json: bool, out: TextIO) -> int:
    """``inspect`` of every view (one per layer type); JSON ``{"source", "views": [report, ...]}``."""
    reps = [
        report(
            v.spec,
            v.context,
            span=v.span,
            layer_type=v.layer_type,
            window=v.window,
            layers=v.layers,
            extents=getattr(v, "extents", None),  # vision presets: the patch grid (ropekit.presets_vision)
        )
        for v in views
    ]
    if as_json:
        json.dump({"source": source, "views": reps}, out, indent=2)
        out.write("\n")
        return 0
    for i, rep in enumerate(reps):
        if i:
            out.write("\n")
        _write_view(rep, out)
    return 0


def _write_compare(spec: RopeSpec, rep: dict[str, Any], out: TextIO) -> None:
    w = out.write
    cols = rep["schemes"]
    w(
        f"RoPE head_dim={spec.head_dim} rotary_dim={spec.rotary_dim} {_base_text(spec_dict(spec))}: extending "
        f"{rep['original_length']:,} -> {rep['target']:,} tokens (s = {rep['factor']:.4g})\n"
        "each cell: theta / theta' for the band at the target length (1 = unchanged, s = fully interpolated)\n\n"
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
    for name, note in rep["notes"].items():
        w(textwrap.fill(f"{name}: {note}", width=110, initial_indent="  ", subsequent_indent="    ") + "\n")


def run_compare(
    spec: RopeSpec, context: int, target: int | None, schemes: tuple[str, ...], *, as_json: bool, out: TextIO
) -> int:
    """``inspect --compare``: per-band interpolation ratio theta / theta' for each scheme (one spec)."""
    return run_compare_views(
        None, [LayerView(None, spec, context)], target, schemes, as_json=as_json, out=out
    )


def _applicable(spec: RopeSpec, schemes: tuple[str, ...]) -> tuple[tuple[str, ...], dict[str, str]]:
    """Split ``schemes`` into those ``spec`` accepts and those it refuses (name -> the spec's reason): a vision
    tower's explicit per-axis frequency table (ropekit.presets_vision) has no base for NTK / dynamic / YaRN."""
    import dataclasses

    from ropekit.analysis.compare import build_scheme

    usable, refused = [], {}
    for name in schemes:
        if name == "longrope" or spec.freqs is None:
            usable.append(name)  # compare_schemes explains longrope itself
            continue
        try:
            dataclasses.replace(spec, scaling=build_scheme(name, 2.0, 1024))
        except ValueError as e:
            refused[name] = str(e)
            continue
        usable.append(name)
    return tuple(usable), refused


def run_compare_views(
    source: str | None,
    views: list[LayerView],
    target: int | None,
    schemes: tuple[str, ...],
    *,
    as_json: bool,
    out: TextIO,
) -> int:
    """``inspect --compare [--extend-to T]`` per layer type; T defaults to :func:`default_target` of each view.

    Sliding-window layers are not compared: they never see distances beyond their window, so extending the
    context does not change what they see (their entry says so).
    """
    entries: list[dict[str, Any]] = []
    for v in views:
        head = {"layer_type": v.layer_type, "window": v.window, "layers": v.layers, "context": v.context}
        if v.window is not None and v.window < (target or default_target(v.spec, v.context)):
            reason = (
                f"sliding window of {v.window:,} tokens: these layers never see two tokens further apart, "
                "so extending the context changes nothing they see and no scaling applies"
            )
            entries.append({**head, "skipped": reason})
            continue
        t = default_target(v.spec, v.context) if target is None else target
        usable, refused = _applicable(v.spec, schemes)
        if not usable:
            entries.append({**head, "skipped": "no requested scheme applies: " + "; ".join(refused.values())})
            continue
        entry = compare_schemes(
            v.spec,
            context=v.context,
            target=t,
            schemes=usable,
            names={"target": "--extend-to", "schemes": "--compare"},
        )
        entries.append({**head, **entry, **({"not_applicable": refused} if refused else {})})
    if as_json:
        json.dump({"source": source, "views": entries}, out, indent=2)
        out.write("\n")
        return 0
    for i, (v, e) in enumerate(zip(views, entries)):
        if i:
            out.write("\n")
        if v.layer_type is not None:
            out.write(f"== layer type {v.layer_type}\n")
        if "skipped" in e:
            out.write(f"not compared: {e['skipped']}\n")
        else:
            _write_compare(v.spec, e, out)
            out.writelines(
                textwrap.fill(f"{name}: not applicable ({why})", 110, subsequent_indent="    ") + "\n"
                for name, why in e.get("not_applicable", {}).items()
            )
    return 0

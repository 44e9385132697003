# SPDX-License-Identifier: MIT
"""``ropekit precision``: measured phase error of ropekit's tables vs the common float32 recipe, by position.

Works for every scheme: the common recipe is each scheme's own float32 init as transformers computes it
(:mod:`ropekit.analysis.recipe`); per-layer-type models get one table per layer type.
"""

from __future__ import annotations

import json
from typing import Any, TextIO

from ropekit.analysis.layers import LayerView
from ropekit.analysis.precision import DEFAULT_POSITIONS, phase_error_table
from ropekit.cli.inspect_cmd import scaling_text
from ropekit.cli.source import spec_dict
from ropekit.spec import RopeSpec

__all__ = ["parse_positions", "run", "run_views"]

_RESOLVED = 1e-8  # oracle error bounds above this are flagged: the table cannot resolve ropekit's ~3e-8 there


def parse_positions(text: str | None) -> tuple[int, ...]:
    """Comma-separated positions ("1e3,1e6,16777216"); None gives :data:`DEFAULT_POSITIONS`."""
    if text is None:
        return DEFAULT_POSITIONS
    try:
        floats = [float(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise ValueError(f"--positions must be comma-separated numbers, got {text!r}") from None
    if not floats or any(not v >= 1 or v != int(v) or v > 2**53 for v in floats):
        raise ValueError(f"--positions must be whole numbers in [1, 2^53], got {text!r}")
    return tuple(int(v) for v in floats)


def run(
    spec: RopeSpec, positions: str | None, window: int, *, as_json: bool, markdown: bool, out: TextIO
) -> int:
    """The table for one spec."""
    return run_views(
        None, [LayerView(None, spec, 1)], positions, window, as_json=as_json, markdown=markdown, out=out
    )


def run_views(
    source: str | None,
    views: list[LayerView],
    positions: str | None,
    window: int,
    *,
    as_json: bool,
    markdown: bool,
    out: TextIO,
) -> int:
    """One table per distinct RoPE; JSON ``{"source", "window", "views": [{"layer_types", "spec", "results"}]}``."""
    if as_json and markdown:
        raise ValueError("--json and --markdown are exclusive: pick one output format")
    if window < 1:
        raise ValueError(f"--window must be >= 1, got {window}")
    pos = parse_positions(positions)
    groups: dict[RopeSpec, list[str | None]] = {}  # layer types sharing one RoPE share one table
    for v in views:
        groups.setdefault(v.spec, []).append(v.layer_type)
    tables: list[dict[str, Any]] = []
    for spec, types in groups.items():
        rows = phase_error_table(spec, pos, window=window)
        tables.append(
            {
                "layer_types": [t for t in types if t is not None],
                "spec": spec_dict(spec),
                "results": [r.as_dict() for r in rows],
            }
        )
    if as_json:
        json.dump({"source": source, "window": window, "views": tables}, out, indent=2)
        out.write("\n")
        return 0
    for i, ((spec, _), t) in enumerate(zip(groups.items(), tables)):
        if i:
            out.write("\n")
        if t["layer_types"]:
            label = f"layer type{'s' if len(t['layer_types']) > 1 else ''} {', '.join(t['layer_types'])}"
            out.write(f"### {label}\n\n" if markdown else f"== {label}\n")
        rows = t["results"]
        mark = [" *" if r["oracle_bound"] > _RESOLVED else "" for r in rows]
        if markdown:
            out.write("| position | common float32 recipe | ropekit |\n|---:|---:|---:|\n")
            out.writelines(
                f"| {r['position']:,} | {r['common_fp32']:.2e} | {r['ropekit']:.2e}{m} |\n"
                for r, m in zip(rows, mark)
            )
        else:
            sc = "" if spec.scaling is None else f"\nscaling: {scaling_text(spec.scaling)}"
            out.write(
                f"max |cos - cos_ref|, |sin - sin_ref| over {window} positions ending at each position "
                f"(head_dim {spec.head_dim}, {'explicit freqs' if spec.freqs is not None else f'base {spec.base:g}'}; "
                f"reference: float64){sc}\n"
            )
            wp = max(12, *(len(f"{r['position']:,}") for r in rows))
            out.write(f"{'position':>{wp}}  {'common fp32':>12}  {'ropekit':>10}\n")
            out.writelines(
                f"{r['position']:>{wp},}  {r['common_fp32']:>12.2e}  {r['ropekit']:>10.2e}{m}\n"
                for r, m in zip(rows, mark)
            )
        if any(mark):
            worst = max(r["oracle_bound"] for r in rows)
            out.write(
                f"\n* the float64 reference is itself only accurate to about {worst:.1e} there (|angle| * 2^-53): "
                "smaller errors are not resolved\n"
            )
    return 0

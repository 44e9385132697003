# SPDX-License-Identifier: MIT
"""``ropekit precision``: measured phase error of ropekit's tables vs the common float32 recipe."""

from __future__ import annotations

import json
from typing import TextIO

from ropekit.analysis.precision import DEFAULT_POSITIONS, phase_error_table
from ropekit.spec import RopeSpec

__all__ = ["parse_positions", "run"]


def parse_positions(text: str | None) -> tuple[int, ...]:
    if text is None:
        return DEFAULT_POSITIONS
    try:
        vals = tuple(int(float(t)) for t in text.split(",") if t.strip())
    except ValueError:
        raise ValueError(f"--positions must be comma-separated numbers, got {text!r}") from None
    if not vals or any(v < 1 for v in vals):
        raise ValueError(f"--positions must be positive, got {text!r}")
    return vals


def run(
    spec: RopeSpec, positions: str | None, window: int, *, as_json: bool, markdown: bool, out: TextIO
) -> int:
    if window < 1:
        raise ValueError(f"--window must be >= 1, got {window}")
    rows = phase_error_table(spec, parse_positions(positions), window=window)
    if as_json:
        json.dump(
            {"spec": _spec_dict(spec), "window": window, "results": [r.as_dict() for r in rows]},
            out,
            indent=2,
        )
        out.write("\n")
        return 0
    if markdown:
        out.write("| position | common float32 recipe | ropekit |\n|---:|---:|---:|\n")
        out.writelines(f"| {r.position:,} | {r.common_fp32:.2e} | {r.ropekit:.2e} |\n" for r in rows)
        return 0
    out.write(
        f"max |cos - cos_ref|, |sin - sin_ref| over {window} positions ending at each position "
        f"(head_dim {spec.head_dim}, base {spec.base:g}; reference: float64)\n"
    )
    out.write(f"{'position':>12}  {'common fp32':>12}  {'ropekit':>10}\n")
    out.writelines(f"{r.position:>12,}  {r.common_fp32:>12.2e}  {r.ropekit:>10.2e}\n" for r in rows)
    return 0


def _spec_dict(spec: RopeSpec) -> dict[str, object]:
    return {
        "head_dim": spec.head_dim,
        "rotary_dim": spec.rotary_dim,
        "base": spec.base,
        "layout": spec.layout,
        "p": spec.p,
    }

# SPDX-License-Identifier: MIT
"""``ropekit precision``: measured phase error of ropekit's tables vs the common float32 recipe, by position.

Works for every scheme: the common recipe is each scheme's own float32 init as transformers computes it
(:mod:`ropekit.analysis.recipe`); per-layer-type models get one table per layer type.
"""

from __future__ import annotations

import json
from typing import Any, TextIO

from ropekit.analysis.layers import LayerView
from ropekit.analysis.precision import DEFAULT_POSITIONS, phase_error_table, unresolved_note
from ropekit.cli.inspect_cmd import scaling_text
from ropekit.cli.source import spec_dict
from ropekit.spec import RopeSpec

__all__ = ["context_positions", "parse_positions", "run", "run_views"]


def context_positions(context: int) -> tuple[int, ...]:
    """The positions ``precision --context C`` measures: :data:`DEFAULT_POSITIONS` below C, then C itself."""
    return (*(p for p in DEFAULT_POSITIONS if p < context), context)


def parse_positions(text: str | None, context: int | None = None) -> tuple[int, ...]:
    """Comma-separated positions ("1e3,1e6,16777216"); None gives :func:`context_positions` of ``context``, or
    :data:`DEFAULT_POSITIONS` without one."""
    if text is None:
        return DEFAULT_POSITIONS if context is None else context_positions(context)
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
    context: int | None = None,
) -> int:
    """One table per distinct RoPE; JSON ``{"source", "window", "window_requested", "views": [{"layer_types",
    "spec", "results"}]}``.

    ``context`` (``--context``), when given without ``positions``, measures :func:`context_positions`. The window
    ending at a position p < ``window`` - 1 starts at 0 and holds p + 1 positions: each result's ``window`` is the
    one measured, the top-level ``window`` is the one every result used (null when they differ; the text header
    then says "or from position 0 where fewer"), ``window_requested`` is ``--window``.
    """
    if as_json and markdown:
        raise ValueError("--json and --markdown are exclusive: pick one output format")
    if window < 1:
        raise ValueError(f"--window must be >= 1, got {window}")
    pos = parse_positions(positions, context)
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
                "results": [{**r.as_dict(), "resolved": r.resolved} for r in rows],
            }
        )
    used = {r["window"] for t in tables for r in t["results"]}
    common = next(iter(used)) if len(used) == 1 else None
    if as_json:
        json.dump(
            {"source": source, "window": common, "window_requested": window, "views": tables}, out, indent=2
        )
        out.write("\n")
        return 0
    if common is None:  # some positions are below window - 1: their window is 0..position
        over = f"{window} positions ending at each position, or from position 0 where fewer"
    elif common != window:
        over = f"{common} positions ending at each position (--window {window} cut at position 0)"
    else:
        over = f"{window} positions ending at each position"
    for i, ((spec, _), t) in enumerate(zip(groups.items(), tables)):
        if i:
            out.write("\n")
        if t["layer_types"]:
            label = f"layer type{'s' if len(t['layer_types']) > 1 else ''} {', '.join(t['layer_types'])}"
            out.write(f"### {label}\n\n" if markdown else f"== {label}\n")
        rows = t["results"]
        mark = [" *" if not r["resolved"] else "" for r in rows]
        if markdown:
            out.write("| position | common float32 recipe | ropekit |\n|---:|---:|---:|\n")
            out.writelines(
                f"| {r['position']:,} | {r['common_fp32']:.2e} | {r['ropekit']:.2e}{m} |\n"
                for r, m in zip(rows, mark)
            )
        else:
            sc = "" if spec.scaling is None else f"\nscaling: {scaling_text(spec.scaling)}"
            out.write(
                f"max |cos - cos_ref|, |sin - sin_ref| over {over} "
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
            out.write("\n" + unresolved_note(max(r["oracle_bound"] for r in rows)) + "\n")
    return 0

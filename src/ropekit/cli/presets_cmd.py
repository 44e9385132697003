# SPDX-License-Identifier: MIT
"""``ropekit presets``: the embedded checkpoint presets, as a list or as JSON (one entry per layer type)."""

from __future__ import annotations

import json
from typing import Any, TextIO

from ropekit.cli.source import spec_dict
from ropekit.presets import PRESETS

__all__ = ["list_presets", "presets_data"]


def presets_data() -> list[dict[str, Any]]:
    """Every preset: name, description, context, layer types and, per layer type, its window and spec."""
    out = []
    for name, p in PRESETS.items():
        views = [
            {"layer_type": v.layer_type, "layers": v.layers, "window": v.window, "spec": spec_dict(v.spec)}
            for v in p.views()
        ]
        out.append(
            {
                "name": name,
                "description": p.description,
                "context": p.context,
                "layer_types": list(p.layer_types),
                "views": views,
            }
        )
    return out


def list_presets(*, as_json: bool, out: TextIO) -> int:
    """Print the presets (``--json``: :func:`presets_data`)."""
    if as_json:
        json.dump(presets_data(), out, indent=2)
        out.write("\n")
        return 0
    width = max(map(len, PRESETS))
    for name, p in PRESETS.items():
        types = f"  [layer types: {', '.join(p.layer_types)}]" if p.layer_types else ""
        out.write(f"{name:<{width}}  {p.description}{types}\n")
    return 0

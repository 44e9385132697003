# SPDX-License-Identifier: MIT
"""Side by side: how each scaling scheme changes each band when a model is extended to a target length.

For a model pretrained at L0 and a target length T (s = T / L0), every scheme is built from the model's unscaled
spec with s and L0, and each band's interpolation ratio theta_i / theta'_i is reported: 1 means the band is left
alone (extrapolates), s means it is fully interpolated. The model's own scheme, if it has one, is a column too.

Shapes: n bands, k schemes.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from ropekit.scaling import NTK, DynamicNTK, Linear, Llama3, LongRope, Scaling, Yarn
from ropekit.spec import RopeSpec

__all__ = ["SCHEMES", "build_scheme", "compare_schemes", "original_length"]

SCHEMES: tuple[str, ...] = ("linear", "ntk", "dynamic", "yarn", "llama3")


def original_length(spec: RopeSpec, context: int) -> int:
    """The pretraining length L0: the scheme's original length if the spec is scaled, else ``context``."""
    sc = spec.scaling
    for attr in ("original_max_position_embeddings", "max_position_embeddings"):
        if sc is not None and getattr(sc, attr, None) is not None:
            return int(getattr(sc, attr))
    return int(context)


def build_scheme(name: str, factor: float, original_len: int) -> Scaling:
    """A scheme with HF's default parameters (YaRN betas 32/1; Llama 3 low 1, high 4)."""
    if name == "linear":
        return Linear(factor)
    if name == "ntk":
        return NTK(factor=factor)
    if name == "dynamic":
        return DynamicNTK(factor, original_len)
    if name == "yarn":
        return Yarn(factor, original_len)
    if name == "llama3":
        return Llama3(factor, 1.0, 4.0, original_len)
    raise ValueError(f"unknown scheme {name!r} for --compare; known: {', '.join(SCHEMES)}")


def compare_schemes(
    spec: RopeSpec, *, context: int, target: int, schemes: tuple[str, ...] = SCHEMES
) -> dict[str, Any]:
    """Per-band interpolation ratios theta / theta' at length ``target`` for each scheme (plus the model's own)."""
    L0 = original_length(spec, context)
    if target < L0:
        raise ValueError(f"--extend-to {target} is below the model's original length {L0}")
    s = target / L0
    plain = dataclasses.replace(spec, scaling=None)
    theta = plain.frequencies().tolist()
    columns: dict[str, RopeSpec] = {}
    if spec.scaling is not None:
        columns[f"model:{type(spec.scaling).__name__}"] = spec
    for name in schemes:
        if name == "longrope":
            if not isinstance(spec.scaling, LongRope):
                raise ValueError(
                    "longrope needs the model's own per-band factors; only a LongRoPE model has them"
                )
            continue
        columns[name] = dataclasses.replace(spec, scaling=build_scheme(name, s, L0))
    ratios = {}
    for name, sp in columns.items():
        th = sp.frequencies(target).tolist()
        ratios[name] = [t / u if u > 0 else (1.0 if t == 0 else math.inf) for t, u in zip(theta, th)]
    return {
        "original_length": L0,
        "target": target,
        "factor": s,
        "bands": [
            {
                "index": i,
                "theta": t,
                "wavelength": (2 * math.pi / t if t > 0 else None),
                **{k: v[i] for k, v in ratios.items()},
            }
            for i, t in enumerate(theta)
        ],
        "attention_factor": {name: sp.attention_factor for name, sp in columns.items()},
        "schemes": list(columns),
    }

# SPDX-License-Identifier: MIT
"""Side by side: how each scaling scheme changes each band when a model is extended to a target length.

For a model pretrained at L0 and a target length T (s = T / L0), every scheme is built from the model's unscaled
spec with s and L0 (transformers' default parameters), and each band's interpolation ratio theta_i / theta'_i at
length T is reported: 1 means the band is left alone (extrapolates), s means it is fully interpolated. The model's
own scheme, if it has one, is a column too.

Length-dependent schemes are shown at the target length T. Dynamic NTK (and LongRoPE's switch) change nothing
up to L0; beyond it transformers' dynamic NTK grows the base as (s * l / L0 - (s - 1))^(d / (d - 2)) with the
current length l, which at l = T = s * L0 is (s^2 - s + 1)^(d / (d - 2)): the slowest band is interpolated by
s^2 - s + 1, more than s (:data:`NOTES` says this in the output).

Without a given target, :func:`default_target` is max(4 * L0, context): four times the pretraining length, or
the model's own extended context when that is longer.

Shapes: n bands, k schemes.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from ropekit.scaling import NTK, DynamicNTK, Linear, Llama3, LongRope, Scaling, Yarn
from ropekit.spec import RopeSpec

__all__ = ["NOTES", "SCHEMES", "build_scheme", "compare_schemes", "default_target", "original_length"]

SCHEMES: tuple[str, ...] = ("linear", "ntk", "dynamic", "yarn", "llama3")
#: What a length-dependent column means, keyed by column name ({s}: the factor T / L0; {m}: s * s - s + 1).
NOTES: dict[str, str] = {
    "dynamic": (
        "dynamic NTK, shown at the target length: every band is unchanged (1) up to L0; beyond, the base grows "
        "with the current length l as (s * l / L0 - (s - 1))^(d / (d - 2)), which reaches s^2 - s + 1 = {m:.4g} "
        "at the target, so the slowest band is interpolated by {m:.4g}, more than s = {s:.4g} (transformers' "
        "formula uses s both as the factor and in the length ratio)"
    ),
    "model:DynamicNTK": "the model's dynamic NTK, shown at the target length (1 up to L0, growing with the length)",
    "model:LongRope": (
        "the model's LongRoPE: long factors, used once the sequence exceeds L0 (below it, the short factors)"
    ),
}


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
    if name == "longrope":
        raise ValueError(
            "longrope needs the model's own per-band factors: use a LongRoPE model's config.json"
        )
    raise ValueError(f"unknown scheme {name!r}; known: {', '.join(SCHEMES)}")


def default_target(spec: RopeSpec, context: int) -> int:
    """max(4 * L0, context): four times the pretraining length, or the model's extended context if longer."""
    return max(4 * original_length(spec, context), int(context))


def compare_schemes(
    spec: RopeSpec, *, context: int, target: int, schemes: tuple[str, ...] = SCHEMES
) -> dict[str, Any]:
    """Per-band interpolation ratios theta / theta' at length ``target`` for each scheme (plus the model's own)."""
    L0 = original_length(spec, context)
    unknown = [n for n in schemes if n not in SCHEMES and n != "longrope"]
    if unknown:
        raise ValueError(
            f"unknown scheme {unknown[0]!r} for --compare; known: {', '.join(SCHEMES)}, longrope"
        )
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
        "notes": {name: NOTES[name].format(s=s, m=s * s - s + 1) for name in columns if name in NOTES},
    }

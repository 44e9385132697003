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

Without a given target, :func:`default_target` is the model's own extended context when it has one (context >
L0: its scheme is compared with the others at the length it was extended to, where s is its own factor), else
four times the pretraining length (an unscaled model: a 4x extension). ``inspect --compare`` and the report use it.

Shapes: n bands, k schemes.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

from ropekit.integers import whole
from ropekit.scaling import NTK, DynamicNTK, Linear, Llama3, LongRope, Scaling, Yarn
from ropekit.spec import RopeSpec, require_spec

__all__ = [
    "MODEL_ONLY",
    "NOTES",
    "SCHEMES",
    "build_scheme",
    "compare_schemes",
    "default_target",
    "original_length",
    "scheme_columns",
]

#: Schemes :func:`build_scheme` builds from a factor and L0 alone (HF's default parameters): the default columns.
SCHEMES: tuple[str, ...] = ("linear", "ntk", "dynamic", "yarn", "llama3")
#: Schemes that need the model's own searched parameters. ``schemes`` may name them only for a spec that has one;
#: they add no column of their own: the spec's scheme is always shown as ``model:<type>``.
MODEL_ONLY: dict[str, type[Scaling]] = {"longrope": LongRope}
#: What a length-dependent column means, keyed by column name ({s}: the factor T / L0; {m}: s * s - s + 1;
#: {than}: "more than", or "the same as" at s = 1, where m = s).
NOTES: dict[str, str] = {
    "dynamic": (
        "dynamic NTK, shown at the target length: every band is unchanged (1) up to L0; beyond, the base grows "
        "with the current length l as (s * l / L0 - (s - 1))^(d / (d - 2)), which reaches s^2 - s + 1 = {m:.4g} "
        "at the target, so the slowest band is interpolated by {m:.4g}, {than} s = {s:.4g} (transformers' "
        "formula uses s both as the factor and in the length ratio)"
    ),
    "model:DynamicNTK": "the model's dynamic NTK, shown at the target length (1 up to L0, growing with the length)",
    "model:LongRope": (
        "the model's LongRoPE: long factors, used once the sequence exceeds L0 (below it, the short factors)"
    ),
}


def original_length(spec: RopeSpec, context: int) -> int:
    """The pretraining length L0 of ``spec`` used at ``context`` tokens.

    - YaRN, Llama 3, LongRoPE: their ``original_max_position_embeddings``; dynamic NTK: its
      ``max_position_embeddings`` (the length it starts growing the base at);
    - schemes defined by a factor alone (:class:`~ropekit.scaling.Linear`, :class:`~ropekit.scaling.NTK` with
      ``factor``): ``context / factor`` rounded down (a model interpolated by 4 to 8192 tokens was trained at
      2048), at least 1;
    - unscaled specs and NTK with ``alpha`` (HunYuan's alpha is not a length ratio): ``context``.

    Raises:
        ValueError: ``context`` is not a positive int.
    """
    check_length("context", context)
    sc = spec.scaling
    for attr in ("original_max_position_embeddings", "max_position_embeddings"):
        if sc is not None and getattr(sc, attr, None) is not None:
            return int(getattr(sc, attr))
    factor = getattr(sc, "factor", None)
    if isinstance(sc, (Linear, NTK)) and factor is not None:
        return max(1, int(context / factor))
    return int(context)


def build_scheme(name: str, factor: float, original_len: int) -> Scaling:
    """A scheme with HF's default parameters (YaRN betas 32/1; Llama 3 low 1, high 4).

    Raises:
        ValueError: ``name`` is not in :data:`SCHEMES` (``longrope`` needs a model's own factors); ``original_len``
            not a positive int (for every scheme); the scheme's own checks on ``factor``.
    """
    if isinstance(original_len, bool) or not isinstance(original_len, int) or original_len < 1:
        # checked for every scheme: linear and ntk have no use for it, but a bad one is a caller's mistake
        raise ValueError(f"original_len must be a positive int, got {original_len!r}")
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
    if name in MODEL_ONLY:
        raise ValueError(f"{name} needs the model's own per-band factors: use a LongRoPE model's config.json")
    raise ValueError(f"unknown scheme {name!r}; known: {', '.join(SCHEMES)}")


def default_target(spec: RopeSpec, context: int) -> int:
    """The length schemes are compared at: ``context`` for a model already extended past its pretraining length
    L0 (context > L0), else 4 * L0.

    Raises:
        ValueError: ``context`` is not a positive int.
    """
    L0 = original_length(spec, context)
    return int(context) if context > L0 else 4 * L0


def check_length(name: str, value: object) -> int:
    """``value`` if it is a positive int (not a bool), else ValueError naming ``name`` and the value."""
    value = whole(value, 1, f"{name} must be a positive int, got {value!r}")
    return value


def scheme_columns(
    spec: RopeSpec,
    *,
    context: int,
    target: int,
    schemes: tuple[str, ...],
    names: Mapping[str, str] | None = None,
) -> tuple[int, dict[str, RopeSpec], dict[str, str]]:
    """(L0, column name -> spec, scheme -> why it does not apply): the columns both tables show.

    The spec's own scheme comes first as ``model:<type>``. Each name in ``schemes`` is built by
    :func:`build_scheme` with s = ``target`` / L0; one the spec refuses (NTK, dynamic NTK, YaRN need a base, which
    an explicit ``freqs`` table such as a vision tower's does not have) is left out with the spec's reason. A name
    in :data:`MODEL_ONLY` adds no column (the model's own is there) and is an error for a spec without that scheme.

    ``names`` renames the arguments in error messages (default: their Python names), e.g.
    ``{"context": "--context", "target": "--extend-to", "schemes": "--compare"}`` for a command line.

    Raises:
        ValueError: ``context`` or ``target`` not a positive int, ``target`` below L0, ``schemes`` empty or not a
            tuple of known, distinct names, or a model-only scheme the spec does not have (each named with its
            value).
    """
    require_spec(spec)

    def arg(name: str) -> str:
        return (names or {}).get(name, name)

    try:
        L0 = original_length(spec, context)
    except ValueError:
        raise ValueError(f"{arg('context')} must be a positive int, got {context!r}") from None
    target = whole(target, 1, f"{arg('target')} must be a positive int, got {target!r}")
    if target < L0:
        raise ValueError(
            f"{arg('target')}={target!r} is below the model's original length {L0} (expected an int >= {L0})"
        )
    if not isinstance(schemes, (tuple, list)) or not all(isinstance(n, str) for n in schemes):
        raise ValueError(f"{arg('schemes')} must be a tuple of scheme names, got {schemes!r}")
    if not schemes:
        raise ValueError(
            f"{arg('schemes')} needs at least one scheme (expected some of {', '.join(SCHEMES)}), got {schemes!r}"
        )
    known = (*SCHEMES, *MODEL_ONLY)
    unknown = [n for n in schemes if n not in known]
    if unknown:
        raise ValueError(f"unknown scheme {unknown[0]!r} in {arg('schemes')}; known: {', '.join(known)}")
    if len(set(schemes)) != len(schemes):
        raise ValueError(f"{arg('schemes')} names a scheme twice: {tuple(schemes)!r}")
    columns: dict[str, RopeSpec] = {}
    if spec.scaling is not None:
        columns[f"model:{type(spec.scaling).__name__}"] = spec
    refused: dict[str, str] = {}
    s = target / L0
    for name in schemes:
        if name in MODEL_ONLY:
            if not isinstance(spec.scaling, MODEL_ONLY[name]):
                raise ValueError(
                    f"{name} needs the model's own per-band factors; only a LongRoPE model has them "
                    f"({arg('schemes')}={tuple(schemes)!r})"
                )
            continue
        try:
            columns[name] = dataclasses.replace(spec, scaling=build_scheme(name, s, L0))
        except ValueError as e:  # the spec refuses the scheme (explicit freqs, rotary_dim 2)
            refused[name] = str(e)
    return L0, columns, refused


def compare_schemes(
    spec: RopeSpec,
    *,
    context: int,
    target: int,
    schemes: tuple[str, ...] = SCHEMES,
    names: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Per-band interpolation ratios theta / theta' at length ``target`` for each scheme (plus the model's own).

    The columns are those of :func:`scheme_columns` (shared with :func:`ropekit.analysis.scheme_table`); schemes
    the spec refuses are listed under ``not_applicable`` (name -> reason), present only when not empty.
    ``names`` renames the arguments in error messages (a command line passes its flags).

    Raises:
        ValueError: as :func:`scheme_columns`.
    """
    L0, columns, refused = scheme_columns(spec, context=context, target=target, schemes=schemes, names=names)
    s = target / L0
    plain = dataclasses.replace(spec, scaling=None)
    theta = plain.frequencies().tolist()
    ratios = {}
    for name, sp in columns.items():
        th = sp.frequencies(target).tolist()
        ratios[name] = [t / u if u > 0 else (1.0 if t == 0 else math.inf) for t, u in zip(theta, th)]
    out: dict[str, Any] = {
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
        "notes": {
            name: NOTES[name].format(s=s, m=s * s - s + 1, than="more than" if s > 1 else "the same as")
            for name in columns
            if name in NOTES
        },
    }
    if refused:
        out["not_applicable"] = refused
    return out

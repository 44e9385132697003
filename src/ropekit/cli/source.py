# SPDX-License-Identifier: MIT
"""What a command looks at: a preset, a config.json, or a spec from flags -- as one view per layer type.

``ropekit inspect`` and ``ropekit precision`` share the same source arguments:

- ``SOURCE``: a preset name (``ropekit presets``), a path to a transformers ``config.json`` or a model folder
  holding one (``save_pretrained``; only its config.json is read);
- or spec flags: ``--head-dim --base --rotary-dim --layout --p`` and a scheme ``--scaling NAME --factor F
  [--original-length L0]`` (L0 defaults to context / factor: the length the model was trained at);
- ``--layer-type`` picks one layer type of a per-layer-type model; ``--context`` overrides the context;
  ``--lenient`` reads a config.json as ``RopeSpec.from_hf(strict=False)`` does (:mod:`ropekit.cli.lenient`).

Shapes: none (argument handling only).
"""

from __future__ import annotations

import argparse
import difflib
import json
import re
import sys
from pathlib import Path
from typing import Any

from ropekit.analysis.compare import SCHEMES, build_scheme
from ropekit.analysis.config_context import (
    config_context,
    config_text,
    declared_context,
    text_part,
    yarn_extended_context,
)
from ropekit.analysis.layers import LayerView, layer_views
from ropekit.cli.lenient import add_lenient_arg, lenient_scope
from ropekit.presets import PRESETS, get_preset
from ropekit.scaling import DynamicNTK, Scaling
from ropekit.spec import LAYOUTS, RopeSpec

__all__ = [
    "DEFAULT_BASE",
    "DEFAULT_CONTEXT",
    "DEFAULT_HEAD_DIM",
    "add_source_args",
    "check_length",
    "resolve_views",
    "spec_dict",
]

DEFAULT_HEAD_DIM = 128
DEFAULT_BASE = 500_000.0  # Llama 3.x
DEFAULT_CONTEXT = 131_072  # Llama 3.1's extended context
_SPEC_FLAGS = ("head_dim", "base", "rotary_dim", "layout", "p", "scaling", "factor", "original_length")


def add_source_args(p: argparse.ArgumentParser) -> None:
    """SOURCE, the spec flags, --layer-type, --context and --json."""
    p.add_argument(
        "source",
        nargs="?",
        default=None,
        metavar="SOURCE",
        help="a preset name (`ropekit presets`), a config.json path or a model folder with one "
        "(default: the spec flags)",
    )
    p.add_argument(
        "--head-dim", type=int, default=None, help=f"channels per head (default {DEFAULT_HEAD_DIM})"
    )
    p.add_argument("--base", type=float, default=None, help=f"frequency base (default {DEFAULT_BASE:g})")
    p.add_argument(
        "--rotary-dim", type=int, default=None, help="leading channels that rotate (default: head dim)"
    )
    p.add_argument("--layout", choices=LAYOUTS, default=None, help="channel pairing (default half)")
    p.add_argument("--p", type=float, default=None, help="p-RoPE fraction of frequencies kept (default 1)")
    p.add_argument(
        "--scaling",
        choices=SCHEMES,
        default=None,
        help="scaling scheme with transformers' default parameters (longrope: use a config.json)",
    )
    p.add_argument("--factor", type=float, default=None, help="scaling factor s (with --scaling)")
    p.add_argument(
        "--original-length",
        type=int,
        default=None,
        help="pretraining length L0 for --scaling dynamic/yarn/llama3 (default: context / factor)",
    )
    p.add_argument(
        "--context",
        type=int,
        default=None,
        help=f"context length (default: a preset's or config's; for a config without max_position_embeddings, "
        f"transformers' default for its model_type; for a YaRN config whose context equals its "
        f"original_max_position_embeddings L0, L0 x factor; for --base/--head-dim flags, {DEFAULT_CONTEXT})",
    )
    p.add_argument(
        "--layer-type", default=None, help="one layer type of per-layer-type models (e.g. sliding_attention)"
    )
    p.add_argument("--json", action="store_true", help="print machine-readable JSON")
    add_lenient_arg(p)


#: the longest --context: positions up to 2^53 are exact in float64 (the phase-error window ends at the context)
MAX_CONTEXT = 1 << 53


def check_length(flag: str, value: int) -> None:
    """Refuse a length flag (``--context``, ``--extend-to``) outside 1..2^53, naming ``flag`` and ``value``."""
    if not 1 <= value <= MAX_CONTEXT:
        raise ValueError(f"{flag} must be a positive int <= 2^53 = {MAX_CONTEXT:,}, got {value}")


#: field of a spec or scheme (as its errors name it: ``RopeSpec.base``, ``Yarn.factor``) -> the flag that sets it
_FIELD_FLAGS = {
    "head_dim": "--head-dim",
    "base": "--base",
    "rotary_dim": "--rotary-dim",
    "layout": "--layout",
    "p": "--p",
    "factor": "--factor",
    "original_max_position_embeddings": "--original-length",
    "max_position_embeddings": "--original-length",
}
_FIELD = re.compile(r"\b(?:RopeSpec|Linear|NTK|DynamicNTK|Yarn|Llama3)\.(\w+)|\bhead_dim=")


def _flag_spec(args: argparse.Namespace, context: int) -> RopeSpec:
    """The spec the flags describe; the spec's and scheme's own errors are re-raised naming the flags as typed
    (``RopeSpec.base must be ...`` -> ``--base must be ...``), with their reason and value."""
    try:
        return _build_flag_spec(args, context)
    except ValueError as e:
        msg = str(e)
        named = _FIELD.sub(_flag_for, msg)
        if named == msg:
            raise
        raise ValueError(named) from None


def _flag_for(m: re.Match[str]) -> str:
    if m.group(1) is None:  # "head_dim=128" inside another field's message
        return "--head-dim="
    return _FIELD_FLAGS.get(m.group(1), m.group(0))


def _build_flag_spec(args: argparse.Namespace, context: int) -> RopeSpec:
    if args.scaling is None:
        extra = [f for f in ("factor", "original_length") if getattr(args, f) is not None]
        if extra:
            raise ValueError(f"--{extra[0].replace('_', '-')} needs --scaling (one of {', '.join(SCHEMES)})")
        scaling = None
    else:
        if args.factor is None:
            raise ValueError(f"--scaling {args.scaling} needs --factor")
        if not args.factor >= 1.0:
            raise ValueError(f"--factor must be >= 1, got {args.factor}")
        if args.original_length is not None and args.scaling in ("linear", "ntk"):
            raise ValueError(
                f"--original-length has no effect on --scaling {args.scaling} (it uses only the factor); drop it"
            )
        L0 = args.original_length if args.original_length is not None else max(1, int(context / args.factor))
        if L0 < 1:
            raise ValueError(f"--original-length must be a positive int, got {L0}")
        scaling = build_scheme(args.scaling, args.factor, L0)
    return RopeSpec(
        head_dim=DEFAULT_HEAD_DIM if args.head_dim is None else args.head_dim,
        base=DEFAULT_BASE if args.base is None else args.base,
        rotary_dim=args.rotary_dim,
        layout="half" if args.layout is None else args.layout,
        p=1.0 if args.p is None else args.p,
        scaling=scaling,
    )


def resolve_views(args: argparse.Namespace) -> tuple[str | None, list[LayerView]]:
    """(source name or None, one view per layer type) from the parsed source arguments."""
    if args.context is not None:
        check_length("--context", args.context)
    if getattr(args, "lenient", False) and (args.source is None or args.source in PRESETS):
        raise ValueError(
            "--lenient applies to a config.json SOURCE (how its keys are read); "
            + ("the spec flags have" if args.source is None else f"preset {args.source!r} has")
            + " no config to read: drop it"
        )
    if args.source is None:
        if args.layer_type is not None:
            raise ValueError("--layer-type needs a preset or config.json SOURCE")
        context = DEFAULT_CONTEXT if args.context is None else args.context
        return None, [LayerView(None, _flag_spec(args, context), context)]
    given = [f"--{k.replace('_', '-')}" for k in _SPEC_FLAGS if getattr(args, k) is not None]
    if given:
        raise ValueError(
            f"{', '.join(given)} cannot be combined with a preset or config file ({args.source!r})"
        )
    if args.source in PRESETS:
        return args.source, get_preset(args.source).views(args.context, args.layer_type)
    path = Path(args.source)
    if (
        path.is_dir()
    ):  # a transformers model folder (save_pretrained): its config.json, as `ropekit report` reads
        if not (path / "config.json").is_file():
            raise ValueError(f"SOURCE {args.source!r} is a folder without config.json")
        path = path / "config.json"
    elif not path.is_file():
        near = difflib.get_close_matches(args.source.lower(), list(PRESETS), n=1, cutoff=0.8)
        hint = f" (did you mean {near[0]!r}?)" if near else ""
        what = (
            "no such file or folder, and not a preset"
            if not path.exists()
            else "not a regular file or preset"
        )
        raise ValueError(
            f"{args.source!r}: {what}{hint}; SOURCE is a preset ({', '.join(PRESETS)}), a config.json file or a "
            "model folder"
        )
    text = config_text(
        path, f"a preset name ({', '.join(PRESETS)}), a config.json or a model folder holding one"
    )
    try:
        cfg = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"{args.source!r} is not valid JSON: {e}") from None
    if not isinstance(cfg, dict):
        raise ValueError(  # noqa: TRY004 - a bad file is a bad argument value: exit 2 with the message
            f"{args.source!r} must hold a JSON object (a config.json), got {type(cfg).__name__}"
        )
    cfg = text_part(cfg)  # a multimodal config's language model, as `ropekit report` reads it
    try:
        declared_context(
            cfg
        )  # a bad max_position_embeddings is refused even with --context, as by the report
    except ValueError as e:
        raise ValueError(f"SOURCE {args.source!r}: {e}") from None
    if args.context is not None:
        context = args.context
    else:  # the config's own, else transformers' default for its family (said on stderr), else refused
        try:
            context, note = config_context(cfg)
        except ValueError as e:
            raise ValueError(f"{e}; pass --context") from None
        if note:
            print(f"ropekit: context {context:,} tokens: {note}", file=sys.stderr)
    with lenient_scope(args):
        views = layer_views(cfg, context=context, layer_type=args.layer_type)
    # a YaRN config stating its L0 as its length: L0 x factor (ropekit.analysis.config_context); never --context
    extended = None if args.context is not None else yarn_extended_context(views, context)
    if extended is not None:
        views, context, note = extended
        print(f"ropekit: context {context:,} tokens: {note}", file=sys.stderr)
    return str(path), views


def spec_dict(spec: RopeSpec) -> dict[str, Any]:
    """The spec's fields as JSON data (scaling as its transformers ``rope_parameters`` keys).

    ``base`` is null when the spec has explicit ``freqs`` (vision and VL presets): the field then holds an unused
    default, not the base the frequencies came from. ``axes`` is null for 1-D specs, else the band-to-axis map
    (scheme, sections, names, and the slot letters, e.g. "TTHHHWWW").
    """
    return {
        "head_dim": spec.head_dim,
        "rotary_dim": spec.rotary_dim,
        "base": None if spec.freqs is not None else spec.base,
        "layout": spec.layout,
        "p": spec.p,
        "positional_bands": spec.n_positional_bands,
        "freqs": None if spec.freqs is None else list(spec.freqs),
        "scaling": None if spec.scaling is None else scaling_dict(spec.scaling),
        "attention_factor": spec.attention_factor,
        "axes": None if spec.axes is None else spec.axes.as_dict(),
    }


def scaling_dict(sc: Scaling) -> dict[str, Any]:
    """The scheme's ``to_hf()`` fragment, plus the length dynamic NTK starts from (in a config that is the top-level
    ``max_position_embeddings``, which the fragment leaves out; without it two different schemes print alike)."""
    out = sc.to_hf()
    if isinstance(sc, DynamicNTK):
        out["max_position_embeddings"] = sc.max_position_embeddings
    return out

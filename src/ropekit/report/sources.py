# SPDX-License-Identifier: MIT
"""What ``ropekit report SOURCE`` can read, resolved to specs (one per layer type) and optional weights.

SOURCE is, in this order: a preset name (``ropekit presets``); a folder with ``config.json`` (and, for the weight
analysis, ``*.safetensors`` weights -- needs the ``hf`` extra); a ``config.json`` file; a lab checkpoint
(``*.safetensors`` written by :func:`ropekit.lab.train.save_checkpoint`, :mod:`ropekit.report.lab_source`). Nothing
is unpickled: a folder whose only weights are pickle files (``pytorch_model.bin`` ...) or TensorFlow / Flax weights
gets the configuration-only report, and :attr:`Source.weights_note` says why its weights were not analysed. A file
that is not UTF-8 text (a binary file passed by mistake) is refused naming it.

Presets and config files are read as ``ropekit inspect`` reads them: a config's ``text_config`` is unwrapped
(:func:`ropekit.analysis.config_context.text_part`) and both give one
:class:`~ropekit.analysis.layers.LayerView` per layer type (:func:`~ropekit.analysis.layers.layer_views`), so a
config.json and its preset give the same labels, windows and numbers. :class:`Source` keeps each label's spec,
sliding window (those layers are judged at the window) and layer count.

The context: ``context=`` (``--context``), else the config's ``max_position_embeddings``, else transformers' default
for the model's family (:data:`~ropekit.analysis.config_context.DEFAULT_CONTEXTS`, stated on the page), else the
source is refused naming the key. A config whose ``max_position_embeddings`` is not a positive int is refused. A
YaRN config whose own context (not ``context=``) equals its ``original_max_position_embeddings`` (Qwen's model
cards: 32768, factor 4) is reported at L0 x factor, as ``ropekit inspect`` judges it
(:func:`~ropekit.analysis.config_context.yarn_extended_context`; :attr:`Source.context_note` says so).

Multi-axis specs: :class:`Source` carries, for vision presets, each axis's extent (the preset's patch grid, as
``ropekit inspect`` uses); other multi-axis specs are judged at :func:`ropekit.analysis.axes.default_extents` of
the context.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ropekit.analysis.config_context import (
    config_context,
    config_text,
    declared_context,
    text_part,
    yarn_extended_context,
)
from ropekit.analysis.layers import LayerView, layer_views
from ropekit.analysis.softmax_scale import logit_scale
from ropekit.analysis.weights import WeightAnalysis
from ropekit.presets import PRESETS, get_preset
from ropekit.report.lab_source import LAB_ENCODINGS, lab_checkpoint
from ropekit.spec import RopeSpec

__all__ = ["LAB_ENCODINGS", "MAX_CONTEXT", "OTHER_WEIGHTS", "PICKLE_WEIGHTS", "Source", "resolve"]

#: the longest context a report describes: positions up to 2^53 are exact in float64 (as ``ropekit precision``)
MAX_CONTEXT = 2**53


@dataclass(frozen=True)
class Source:
    name: str  # what the user passed, shortened for titles
    kind: str  # "preset", "config", "hf-model" or "lab-checkpoint"
    specs: dict[str, RopeSpec]  # label ("" for a single spec, else the layer type) -> spec
    context: int  # the length the model is used at
    weights: WeightAnalysis | None = None
    # label -> axis name -> extent, for multi-axis specs with known extents (a vision preset's patch grid);
    # a multi-axis spec without an entry is judged at ropekit.analysis.axes.default_extents of the context
    extents: dict[str, dict[str, float]] = field(default_factory=dict)
    # label -> sliding window (or attention chunk) in tokens, for the layer types that attend over one
    windows: dict[str, int] = field(default_factory=dict)
    # label -> number of layers of that type, where the config says
    layers: dict[str, int] = field(default_factory=dict)
    # label -> factor the attention applies to the logits outside the rotation (MLA's softmax scale), where not 1
    logit_scales: dict[str, float] = field(default_factory=dict)
    # how the context was chosen when the configuration does not state it (a family default) or states a YaRN
    # config's original length (extended by its factor), else None
    context_note: str | None = None
    # why a model folder's weights were not analysed although it holds some (only pickle files), else None
    weights_note: str | None = None

    def __post_init__(self) -> None:
        c = self.context
        if type(c) is not int or not 1 <= c <= MAX_CONTEXT:
            raise ValueError(
                f"SOURCE {self.name!r}: context {c!r} is out of range: a context length must be an int in "
                f"1..2^53 ({MAX_CONTEXT:,}; positions beyond are not exact in float64)"
            )

    def span(self, label: str) -> int:
        """Tokens the layers of ``label`` attend over: their window (at most the context) or the context."""
        w = self.windows.get(label)
        return self.context if w is None else min(w, self.context)


def _from_views(
    name: str,
    kind: str,
    views: list[LayerView],
    context: int,
    model_type: str | None,
    note: str | None = None,
) -> Source:
    """A :class:`Source` holding ``views`` (one per layer type), labelled by layer type ("" for a single one)."""
    labels = [v.layer_type or "" for v in views]
    return Source(
        name,
        kind,
        {lab: v.spec for lab, v in zip(labels, views)},
        context,
        extents={lab: dict(e) for lab, v in zip(labels, views) if (e := getattr(v, "extents", None))},
        windows={lab: v.window for lab, v in zip(labels, views) if v.window is not None},
        layers={lab: v.layers for lab, v in zip(labels, views) if v.layers is not None},
        logit_scales={
            lab: f for lab, v in zip(labels, views) if (f := logit_scale(model_type, v.spec)) != 1.0
        },
        context_note=note,
    )


def _model_type(cfg: dict[str, Any]) -> str | None:
    mt = cfg.get("model_type")
    return mt if isinstance(mt, str) else None


def _config_views(
    raw: dict[str, Any], path: Path, context: int | None
) -> tuple[list[LayerView], int, dict[str, Any], str | None]:
    """(views, context, text part, note) of a config.json dict, read as ``ropekit inspect`` reads it."""
    cfg = text_part(raw)
    try:
        declared_context(cfg)  # a bad max_position_embeddings is refused even with --context
    except ValueError as e:
        raise ValueError(f"SOURCE {str(path)!r}: {e}") from None
    if context is not None:  # the user's length: never extended
        return _views(cfg, context, path), context, cfg, None
    try:
        context, note = config_context(cfg)
    except ValueError as e:
        _views(cfg, 1, path)  # a RoPE it cannot read is refused first, as with a context
        raise ValueError(
            f"SOURCE {str(path)!r}: {e}; pass --context N to report it at a length you choose"
        ) from None
    views = _views(cfg, context, path)
    extended = yarn_extended_context(views, context)  # a YaRN config stating its L0: L0 x factor, as inspect
    if extended is not None:
        views, context, yarn_note = extended
        note = "; ".join(filter(None, [note, yarn_note]))
    return views, context, cfg, note


def _views(cfg: dict[str, Any], context: int, path: Path) -> list[LayerView]:
    try:
        return layer_views(cfg, context=context)
    except ValueError as e:  # the spec's message, with the file it came from
        raise ValueError(f"SOURCE {str(path)!r}: {e}") from None


def _read_json(path: Path) -> dict[str, Any]:
    try:
        text = config_text(
            path, "a preset name, a config.json, a model folder or a lab checkpoint (.safetensors)"
        )
        cfg = json.loads(text)
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"SOURCE {str(path)!r}: cannot read it as JSON ({e})") from None
    if not isinstance(cfg, dict):
        raise ValueError(  # noqa: TRY004 - the CLI reports ValueErrors
            f"SOURCE {str(path)!r}: expected a JSON object (a config.json), got {type(cfg).__name__}"
        )
    return cfg


def resolve(source: str, *, weights: bool = True, context: int | None = None) -> Source:
    """Resolve ``source`` (see the module docstring); ``weights=False`` skips running a model's weights;
    ``context`` overrides the model's context length (``--context``)."""
    if source in PRESETS:
        p = get_preset(source)
        ctx = p.context if context is None else context
        return _from_views(source, "preset", p.views(ctx), ctx, _model_type(text_part(p.config)))
    path = Path(source)
    looks_like_path = os.sep in source or "/" in source or source.endswith((".json", ".safetensors"))
    if looks_like_path and not path.exists():
        raise ValueError(f"SOURCE {source!r} does not exist (no such file or folder)")
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ValueError(f"SOURCE {source!r} is a folder without config.json")
        raw = _read_json(path / "config.json")
        # a config it cannot read is refused before the weights load
        views, ctx, cfg, note = _config_views(raw, path, context)
        src = _from_views(path.name, "config", views, ctx, _model_type(cfg), note)
        if not weights:
            return src
        if not any(path.glob("*.safetensors")):
            return dataclasses.replace(src, weights_note=_unread_weights(path))
        w = _hf_weights(path, views[-1].spec, ctx)
        return dataclasses.replace(src, kind="hf-model", weights=w)
    if path.is_file() and path.suffix == ".safetensors":
        spec, train_len, lab_w = lab_checkpoint(path, weights)
        ctx = train_len if context is None else context
        return Source(path.stem, "lab-checkpoint", {"": spec}, ctx, lab_w)
    if path.is_file():
        views, ctx, cfg, note = _config_views(_read_json(path), path, context)
        return _from_views(path.name, "config", views, ctx, _model_type(cfg), note)
    raise ValueError(
        f"SOURCE {source!r} is not a preset ({', '.join(PRESETS)}), a config.json, a model folder "
        "or a lab checkpoint (.safetensors)"
    )


#: weight files of a model folder the report does not read: pickles (``torch.save``: transformers' legacy
#: ``pytorch_model*.bin``), which ropekit never loads, and TensorFlow / Flax weights
PICKLE_WEIGHTS = ("*.bin", "*.pt", "*.pth", "*.ckpt", "*.pkl")
OTHER_WEIGHTS = ("*.h5", "*.msgpack")


def _unread_weights(path: Path) -> str | None:
    """The note saying why the weights of the model folder ``path`` (no ``*.safetensors``) are not analysed, when
    it holds weight files in another format; None when it holds none (a configuration-only folder)."""
    found = sorted(
        {f.name for pat in (*PICKLE_WEIGHTS, *OTHER_WEIGHTS) for f in path.glob(pat) if f.is_file()}
    )
    if not found:
        return None
    pickles = [f for f in found if any(Path(f).match(pat) for pat in PICKLE_WEIGHTS)]
    never = "ropekit never loads pickle files (unpickling can run code)"
    if len(pickles) == len(found):
        why = f"pickle files: {never}"
    elif pickles:
        why = f"pickle files or TensorFlow / Flax weights: {never} and does not read the others"
    else:
        why = "TensorFlow / Flax weights, which ropekit does not read"
    return (
        f"weights section skipped: the folder's weights are only {_few(found)}, {why}; convert them to "
        "safetensors (transformers: save_pretrained(..., safe_serialization=True)) for the weight analysis. "
        "This report describes config.json only"
    )


def _hf_weights(path: Path, spec: RopeSpec, context: int) -> WeightAnalysis:
    """The weight analysis of the model folder ``path`` (``spec``: the RoPE of its last layer type)."""
    try:
        from transformers import AutoModelForCausalLM
    except ImportError as e:
        raise ValueError(
            f"SOURCE {str(path)!r} has weights; analysing them needs transformers: pip install 'ropekit[hf]'"
        ) from e
    from ropekit.report.models import analyse_hf_model, sample_tokens

    _check_safetensors(path)
    try:
        loaded: Any = AutoModelForCausalLM.from_pretrained(
            str(path), attn_implementation="eager", use_safetensors=True, output_loading_info=True
        )
    except (OSError, RuntimeError, ValueError, KeyError, TypeError) as e:
        raise ValueError(
            f"SOURCE {str(path)!r}: transformers cannot load the model ({type(e).__name__}: {e})"
        ) from None
    model, info = loaded
    _check_loaded(path, info)
    model.eval()
    vocab = int(model.get_input_embeddings().num_embeddings)  # the loaded model's own (text_config or not)
    return analyse_hf_model(model, spec, sample_tokens(vocab, 2, min(64, context)))


def _check_safetensors(path: Path) -> None:
    """Every ``*.safetensors`` in the folder ``path`` must have a readable header (ValueError naming the file)."""
    from safetensors import safe_open

    for f in sorted(path.glob("*.safetensors")):
        try:
            with safe_open(str(f), framework="pt"):
                pass
        except Exception as e:  # noqa: BLE001 - safetensors raises its own error types
            raise ValueError(
                f"SOURCE {str(path)!r}: {str(f)!r} is not a readable safetensors file ({e})"
            ) from None


def _check_loaded(path: Path, info: dict[str, Any]) -> None:
    """Refuse a model whose checkpoint lacks weights the analysis runs through: transformers initialises missing
    weights at random, and the queries, keys and attention of every layer depend on the embeddings, the norms and
    the earlier layers. Only the output head (``lm_head``), which the analysis never reaches, may be missing.
    Refuse unexpected weights too (e.g. more layers than config.json says): transformers drops them, and the
    report would then describe a model the folder's weights do not hold. Rotary ``inv_freq`` buffers, which
    older checkpoints store and transformers recomputes, are not weights."""
    missing = sorted(
        (k for k in info.get("missing_keys") or () if not str(k).startswith("lm_head.")),
        key=lambda k: (not ("q_proj" in k or "k_proj" in k), k),  # the projections analysed first
    )
    if missing:
        raise ValueError(
            f"SOURCE {str(path)!r}: its safetensors lack {len(missing)} weight(s) the analysis needs "
            f"({_few(missing)}); transformers would initialise them at random. Pass its "
            "config.json for the configuration-only report"
        )
    unexpected = sorted(
        str(k) for k in info.get("unexpected_keys") or () if not str(k).endswith("rotary_emb.inv_freq")
    )
    if unexpected:
        raise ValueError(
            f"SOURCE {str(path)!r}: its safetensors hold {len(unexpected)} weight(s) its config.json has no "
            f"place for ({_few(unexpected)}); transformers would drop them. Check that config.json belongs to "
            "these weights (e.g. num_hidden_layers)"
        )


def _few(keys: list[str], n: int = 5) -> str:
    return ", ".join(keys[:n]) + (f" and {len(keys) - n} more" if len(keys) > n else "")

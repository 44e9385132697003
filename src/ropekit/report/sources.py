# SPDX-License-Identifier: MIT
"""What ``ropekit report SOURCE`` can read, resolved to specs (one per layer type) and optional weights.

SOURCE is, in this order: a preset name (``ropekit presets``); a folder with ``config.json`` (and, for the weight
analysis, ``*.safetensors`` weights -- needs the ``hf`` extra); a ``config.json`` file; a lab checkpoint
(``*.safetensors`` written by :func:`ropekit.lab.train.save_checkpoint`). Nothing is unpickled.

Extension point for multi-axis specs: :class:`Source` carries one spec per *label*; a multi-axis spec would add
its axes' extents here and a "bands per axis" section in :mod:`ropekit.report.build`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ropekit.analysis.weights import WeightAnalysis
from ropekit.presets import PRESETS, get_preset
from ropekit.spec import RopeSpec

__all__ = ["Source", "layer_types", "resolve"]

DEFAULT_CONTEXT = 131_072


@dataclass(frozen=True)
class Source:
    name: str  # what the user passed, shortened for titles
    kind: str  # "preset", "config", "hf-model" or "lab-checkpoint"
    specs: dict[str, RopeSpec]  # label ("" for a single spec, else the layer type) -> spec
    context: int  # the length the model is used at
    weights: WeightAnalysis | None = None


def layer_types(cfg: dict[str, Any]) -> tuple[str | None, ...]:
    """The layer types with their own RoPE parameters in a config.json dict, or (None,) for one set."""
    rp = cfg.get("rope_parameters")
    if isinstance(rp, dict) and rp and all(isinstance(v, dict) or v is None for v in rp.values()):
        return tuple(t for t, v in rp.items() if v is not None)
    if str(cfg.get("model_type", "")).startswith("gemma3"):
        return ("sliding_attention", "full_attention")
    return (None,)


def _from_config(cfg: dict[str, Any], name: str, kind: str, weights: WeightAnalysis | None = None) -> Source:
    specs = {t or "": RopeSpec.from_hf(cfg, layer_type=t) for t in layer_types(cfg)}
    context = int(cfg.get("max_position_embeddings") or DEFAULT_CONTEXT)
    return Source(name, kind, specs, context, weights)


def _read_json(path: Path) -> dict[str, Any]:
    try:
        cfg = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"SOURCE {str(path)!r}: cannot read it as JSON ({e})") from None
    if not isinstance(cfg, dict):
        raise ValueError(  # noqa: TRY004 - the CLI reports ValueErrors
            f"SOURCE {str(path)!r}: expected a JSON object (a config.json), got {type(cfg).__name__}"
        )
    return cfg


def resolve(source: str, *, weights: bool = True) -> Source:
    """Resolve ``source`` (see the module docstring); ``weights=False`` skips running a model's weights."""
    if source in PRESETS:
        p = get_preset(source)
        types = p.layer_types or (None,)
        return Source(source, "preset", {t or "": p.spec(t) for t in types}, p.context)
    path = Path(source)
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ValueError(f"SOURCE {source!r} is a folder without config.json")
        cfg = _read_json(path / "config.json")
        has_weights = any(path.glob("*.safetensors"))
        if not (weights and has_weights):
            return _from_config(cfg, path.name, "config")
        return _from_config(cfg, path.name, "hf-model", _hf_weights(path, cfg))
    if path.is_file() and path.suffix == ".safetensors":
        return _lab_checkpoint(path, weights)
    if path.is_file():
        return _from_config(_read_json(path), path.name, "config")
    raise ValueError(
        f"SOURCE {source!r} is not a preset ({', '.join(PRESETS)}), a config.json, a model folder "
        "or a lab checkpoint (.safetensors)"
    )


def _hf_weights(path: Path, cfg: dict[str, Any]) -> WeightAnalysis:
    try:
        from transformers import AutoModelForCausalLM
    except ImportError as e:
        raise ValueError(
            f"SOURCE {str(path)!r} has weights; analysing them needs transformers: pip install 'ropekit[hf]'"
        ) from e
    from ropekit.report.models import analyse_hf_model, sample_tokens

    model: Any = AutoModelForCausalLM.from_pretrained(
        str(path), attn_implementation="eager", use_safetensors=True
    )
    model.eval()
    types = layer_types(cfg)
    spec = RopeSpec.from_hf(cfg, layer_type=types[-1])
    length = min(64, int(cfg.get("max_position_embeddings") or 64))
    return analyse_hf_model(model, spec, sample_tokens(int(cfg["vocab_size"]), 2, length))


def _lab_checkpoint(path: Path, weights: bool) -> Source:
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt") as f:
            md = f.metadata() or {}
    except Exception as e:  # noqa: BLE001 - safetensors raises its own error types
        raise ValueError(f"SOURCE {str(path)!r}: not a readable safetensors file ({e})") from None
    if "meta" not in md:
        raise ValueError(f"SOURCE {str(path)!r}: a safetensors file without lab checkpoint metadata ('meta')")
    meta = json.loads(md["meta"])
    if meta.get("encoding") != "rope":
        raise ValueError(
            f"SOURCE {str(path)!r}: lab checkpoint with encoding {meta.get('encoding')!r}; only RoPE models have bands"
        )
    from ropekit.lab.model import LMConfig, TinyLM
    from ropekit.lab.train import load_checkpoint

    train_len = int(meta["train_len"])
    cfg = LMConfig(**{**meta.get("config", {}), "encoding": "rope", "max_positions": train_len})
    spec = _lab_spec(meta, cfg.head_dim)
    w = None
    if weights:
        from ropekit.report.models import analyse_lab_model

        model = TinyLM(cfg, spec=spec)
        load_checkpoint(path, model, None, None)
        model.eval()
        text = Path(json.__file__).read_bytes()[: 2 * train_len]  # stdlib text: deterministic, no download
        tokens = _bytes_tokens(text, train_len)
        w = analyse_lab_model(model, tokens, f"2 x {train_len} bytes of Python's json/__init__.py")
    return Source(path.stem, "lab-checkpoint", {"": spec}, train_len, w)


def _lab_spec(meta: dict[str, Any], head_dim: int) -> RopeSpec:
    if isinstance(meta.get("spec"), dict):
        return RopeSpec.from_hf(meta["spec"])
    tag = str(meta.get("tag", "rope"))
    p = (
        float(tag[len("prope") :]) if tag.startswith("prope") else 1.0
    )  # the frequencies experiment's p-RoPE tags
    return RopeSpec(head_dim, p=p)


def _bytes_tokens(text: bytes, length: int) -> Any:
    import torch

    t = torch.tensor(list(text), dtype=torch.int64)
    return t[: 2 * length].view(2, length)

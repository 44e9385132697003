# SPDX-License-Identifier: MIT
"""What ``ropekit report SOURCE`` can read, resolved to specs (one per layer type) and optional weights.

SOURCE is, in this order: a preset name (``ropekit presets``); a folder with ``config.json`` (and, for the weight
analysis, ``*.safetensors`` weights -- needs the ``hf`` extra); a ``config.json`` file; a lab checkpoint
(``*.safetensors`` written by :func:`ropekit.lab.train.save_checkpoint`). Nothing is unpickled.

Multi-axis specs: :class:`Source` carries one spec per *label* and, for vision presets, each axis's extent (the
preset's patch grid, as ``ropekit inspect`` uses); other multi-axis specs are judged at
:func:`ropekit.analysis.axes.default_extents` of the context.

Lab checkpoints of the rotary encodings whose rotation is a :class:`~ropekit.spec.RopeSpec` are read: ``rope``
(its spec from the checkpoint's metadata, e.g. the frequencies experiment's p-RoPE tags), ``p-rope`` and
``single-frequency`` (their default parameters, which the lab trains). ``xpos`` (a per-band decay no RopeSpec
describes), ``dense-rotation`` (no bands) and the non-rotary encodings are refused.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ropekit.analysis.weights import WeightAnalysis
from ropekit.presets import PRESETS, get_preset
from ropekit.spec import RopeSpec

if TYPE_CHECKING:
    from ropekit.lab.model import LMConfig

__all__ = ["LAB_ENCODINGS", "MAX_CONTEXT", "Source", "layer_types", "resolve"]

DEFAULT_CONTEXT = 131_072
#: the longest context a report describes: positions up to 2^53 are exact in float64 (as ``ropekit precision``)
MAX_CONTEXT = 2**53
#: lab encodings a report can read: their rotation is a RopeSpec (see the module docstring)
LAB_ENCODINGS = ("rope", "p-rope", "single-frequency")
_LAB_REFUSED = {
    "xpos": "xPos scales q and k by a per-band decay that no RopeSpec describes, so the report's spectrum, decay "
    "and precision would describe plain RoPE",
    "dense-rotation": "a dense rotation of the whole head has no bands",
}


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

    def __post_init__(self) -> None:
        c = self.context
        if type(c) is not int or not 1 <= c <= MAX_CONTEXT:
            raise ValueError(
                f"SOURCE {self.name!r}: context {c!r} is out of range: a context length must be an int in "
                f"1..2^53 ({MAX_CONTEXT:,}; positions beyond are not exact in float64)"
            )


def layer_types(cfg: dict[str, Any]) -> tuple[str | None, ...]:
    """The layer types with their own RoPE parameters in a config.json dict, or (None,) for one set."""
    rp = cfg.get("rope_parameters")
    if isinstance(rp, dict) and rp and all(isinstance(v, dict) or v is None for v in rp.values()):
        return tuple(t for t, v in rp.items() if v is not None)
    if str(cfg.get("model_type", "")).startswith("gemma3"):
        return ("sliding_attention", "full_attention")
    return (None,)


def _from_config(cfg: dict[str, Any], path: Path, kind: str) -> Source:
    try:
        specs = {t or "": RopeSpec.from_hf(cfg, layer_type=t) for t in layer_types(cfg)}
    except ValueError as e:  # the spec's message, with the file it came from
        raise ValueError(f"SOURCE {str(path)!r}: {e}") from None
    context = int(cfg.get("max_position_embeddings") or DEFAULT_CONTEXT)
    return Source(path.name, kind, specs, context)


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
        extents = {  # a vision preset's views carry its patch grid, as ``ropekit inspect`` reads them
            v.layer_type or "": dict(grid) for v in p.views() if (grid := getattr(v, "extents", None))
        }
        return Source(source, "preset", {t or "": p.spec(t) for t in types}, p.context, extents=extents)
    path = Path(source)
    looks_like_path = os.sep in source or "/" in source or source.endswith((".json", ".safetensors"))
    if looks_like_path and not path.exists():
        raise ValueError(f"SOURCE {source!r} does not exist (no such file or folder)")
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ValueError(f"SOURCE {source!r} is a folder without config.json")
        cfg = _read_json(path / "config.json")
        has_weights = any(path.glob("*.safetensors"))
        src = _from_config(cfg, path, "config")  # a config it cannot read is refused before the weights load
        if not (weights and has_weights):
            return src
        return dataclasses.replace(src, kind="hf-model", weights=_hf_weights(path, cfg))
    if path.is_file() and path.suffix == ".safetensors":
        return _lab_checkpoint(path, weights)
    if path.is_file():
        return _from_config(_read_json(path), path, "config")
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
    types = layer_types(cfg)
    spec = RopeSpec.from_hf(cfg, layer_type=types[-1])
    length = min(64, int(cfg.get("max_position_embeddings") or 64))
    return analyse_hf_model(model, spec, sample_tokens(int(cfg["vocab_size"]), 2, length))


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


def _lab_checkpoint(path: Path, weights: bool) -> Source:
    from ropekit.lab.model import LMConfig
    from ropekit.lab.train import checkpoint_info

    info = checkpoint_info(path)  # ValueError naming the file when it is not a readable lab checkpoint
    meta = info.meta
    train_len = meta.get("train_len")
    if type(train_len) is not int or train_len < 1:
        raise ValueError(
            f"SOURCE {str(path)!r}: lab checkpoint metadata 'train_len' must be a positive int, got {train_len!r}"
        )
    encoding = info.config.encoding if info.config is not None else meta.get("encoding")
    if encoding not in LAB_ENCODINGS:
        why = _LAB_REFUSED.get(str(encoding), "only RoPE models have bands")
        raise ValueError(
            f"SOURCE {str(path)!r}: lab checkpoint with encoding {encoding!r}; {why} (the report reads "
            f"{', '.join(LAB_ENCODINGS)})"
        )
    # written before the model config was recorded: the default model at the training length
    cfg = info.config or LMConfig(encoding=str(encoding), max_positions=train_len)
    try:
        spec = _lab_spec(meta, cfg)
    except ValueError as e:
        raise ValueError(
            f"SOURCE {str(path)!r}: lab checkpoint metadata gives no usable RoPE ({e})"
        ) from None
    if spec.head_dim != cfg.head_dim:
        raise ValueError(
            f"SOURCE {str(path)!r}: lab checkpoint metadata 'spec' has head_dim {spec.head_dim}, the model's "
            f"head_dim is {cfg.head_dim}"
        )
    w = None
    if weights:
        w = _lab_weights(path, cfg, spec, train_len)
    return Source(path.stem, "lab-checkpoint", {"": spec}, train_len, w)


def _lab_weights(path: Path, cfg: LMConfig, spec: RopeSpec, train_len: int) -> WeightAnalysis:
    from ropekit.lab.model import TinyLM
    from ropekit.lab.train import load_checkpoint
    from ropekit.report.models import analyse_lab_model

    if cfg.vocab < 256:
        raise ValueError(
            f"SOURCE {str(path)!r}: the weight analysis feeds bytes (vocab 256), the model's vocab is {cfg.vocab}"
        )
    model = TinyLM(cfg, spec=spec) if cfg.encoding == "rope" else TinyLM(cfg)
    load_checkpoint(path, model, None, None)  # ValueError naming the file when its tensors do not fit
    model.eval()
    text = Path(json.__file__).read_bytes()  # stdlib text: deterministic, no download
    length = min(train_len, len(text) // 2)
    tokens = _bytes_tokens(text, length)
    return analyse_lab_model(model, tokens, f"2 x {length} bytes of Python's json/__init__.py")


def _lab_spec(meta: dict[str, Any], cfg: LMConfig) -> RopeSpec:
    """The RoPE of a lab model: ``rope``'s from the metadata, the other encodings' from the encoding itself."""
    if cfg.encoding != "rope":  # p-rope, single-frequency: their spec at the parameters the lab trains
        from ropekit.lab.encodings import build_encoding

        spec = getattr(build_encoding(cfg.encoding, cfg.d_model, cfg.n_heads, cfg.head_dim), "spec", None)
        assert isinstance(spec, RopeSpec), cfg.encoding
        return spec
    if isinstance(meta.get("spec"), dict):
        return RopeSpec.from_hf(meta["spec"])
    tag = str(meta.get("tag", "rope"))
    p = (
        float(tag[len("prope") :]) if tag.startswith("prope") else 1.0
    )  # the frequencies experiment's p-RoPE tags
    return RopeSpec(cfg.head_dim, p=p)


def _bytes_tokens(text: bytes, length: int) -> Any:
    import torch

    t = torch.tensor(list(text), dtype=torch.int64)
    return t[: 2 * length].view(2, length)

# SPDX-License-Identifier: MIT
"""``ropekit.hf.patch(model)``: a transformers model computes its cos/sin and its rotation with ropekit.

What changes, per patched model:

- each ``*RotaryEmbedding`` module is replaced by :class:`RopekitRotaryEmbedding`, which has the same call
  signature (``(x, position_ids)``, or ``(x, position_ids, layer_type)`` for per-layer-type models such as Gemma 3)
  and returns cos/sin in transformers' format, built from ropekit's exact float64-reduced phases and its parsed
  spec (every scaling scheme; dynamic and LongRoPE as pure functions of ``max(position_ids) + 1``, like HF);
- the family's ``apply_rotary_pos_emb`` is wrapped once: when the cos it receives comes from a ropekit rotary
  module it rotates with ropekit (float32 tables and float32 math, result in the activation dtype, autograd as the
  inverse rotation); for any other model of the family it calls the original function unchanged.

So a float32 model gives the same logits as before within float32 rounding (tested to 1e-4), and bf16/fp16 models
gain float32 tables instead of tables cast to the activation dtype. Families whose attention follows the standard
half-split pattern are supported (:data:`SUPPORTED_MODEL_TYPES`); others are refused with a clear error.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from ropekit.phases import rope_tables
from ropekit.rotation.torch_backend import rotate
from ropekit.spec import RopeSpec

__all__ = ["SUPPORTED_MODEL_TYPES", "RopekitRotaryEmbedding", "patch", "unpatch_function"]

#: model_type values whose rotary pattern ropekit reproduces (half-split, HF `rotate_half` apply).
SUPPORTED_MODEL_TYPES = frozenset(
    {
        "llama",
        "mistral",
        "mixtral",
        "qwen2",
        "qwen2_moe",
        "qwen3",
        "qwen3_moe",
        "phi3",
        "gemma",
        "gemma2",
        "gemma3_text",
        "gpt_neox",
        "phi",
        "stablelm",
        "starcoder2",
        "olmo2",
        "granite",
    }
)
_ATTR = "_ropekit_tables"


class RopekitRotaryEmbedding(nn.Module):
    """Drop-in for a transformers rotary module; see the module docstring.

    Args:
        specs: {layer_type or None: RopeSpec}.
        original_class: name of the replaced class (for repr).
    """

    def __init__(self, specs: dict[str | None, RopeSpec], original_class: str) -> None:
        super().__init__()
        self.specs = specs
        self.original_class = original_class

    def forward(
        self, x: torch.Tensor, position_ids: torch.Tensor, layer_type: str | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if layer_type not in self.specs:
            raise ValueError(
                f"layer_type={layer_type!r} unknown to this rotary module; known: {sorted(map(str, self.specs))}"
            )
        spec = self.specs[layer_type]
        seq_len = int(position_ids.max()) + 1 if spec.dynamic and position_ids.numel() else None
        cos_h, sin_h = rope_tables(position_ids, spec, seq_len=seq_len, device=x.device)  # [b, s, n] float32
        cos = torch.cat([cos_h, cos_h], -1).to(x.dtype)  # HF's duplicated half-split layout
        sin = torch.cat([sin_h, sin_h], -1).to(x.dtype)
        setattr(cos, _ATTR, (cos_h, sin_h))
        setattr(sin, _ATTR, (cos_h, sin_h))
        return cos, sin

    def extra_repr(self) -> str:
        return f"replaces={self.original_class}, layer_types={list(self.specs)}"


def _wrap_apply(original: Callable[..., Any]) -> Callable[..., Any]:
    sig = inspect.signature(original)

    def apply_rotary_pos_emb(*args: Any, **kwargs: Any) -> Any:
        bound = sig.bind(*args, **kwargs)
        bound.apply_defaults()
        a = bound.arguments
        tables = getattr(a["cos"], _ATTR, None)
        if tables is None:
            return original(*args, **kwargs)
        dim = int(a.get("unsqueeze_dim", 1))
        cos_h, sin_h = (t.unsqueeze(dim) for t in tables)
        r = 2 * cos_h.shape[-1]
        q = rotate(a["q"], cos_h, sin_h, rotary_dim=r, layout="half", inplace=False)
        k = rotate(a["k"], cos_h, sin_h, rotary_dim=r, layout="half", inplace=False)
        return q, k

    apply_rotary_pos_emb._ropekit_original = original  # type: ignore[attr-defined]
    apply_rotary_pos_emb.__doc__ = original.__doc__
    return apply_rotary_pos_emb


def unpatch_function(modeling_module: Any) -> None:
    """Restore a modeling module's original ``apply_rotary_pos_emb`` (affects every model of that family)."""
    fn = getattr(modeling_module, "apply_rotary_pos_emb", None)
    if fn is not None and hasattr(fn, "_ropekit_original"):
        modeling_module.apply_rotary_pos_emb = fn._ropekit_original


def _specs_for(config: Any, strict: bool) -> dict[str | None, RopeSpec]:
    rp = getattr(config, "rope_parameters", None)
    if isinstance(rp, dict) and rp and all(isinstance(v, dict) or v is None for v in rp.values()):
        return {
            lt: RopeSpec.from_hf(config, layer_type=lt, strict=strict)
            for lt, v in rp.items()
            if v is not None
        }
    return {None: RopeSpec.from_hf(config, strict=strict)}


def patch(model: nn.Module, *, strict: bool = True) -> nn.Module:
    """Make a transformers model use ropekit for its cos/sin and its rotation; returns the model.

    Raises:
        ValueError: for an unsupported family, a config ropekit refuses (see ``RopeSpec.from_hf``; ``strict=False``
            accepts what transformers accepts), or a model without a rotary module. Nothing is modified then.
    """
    config = getattr(model, "config", None)
    if config is None:
        raise ValueError(f"patch expects a transformers model with a .config, got {type(model).__name__}")
    text_config = config.get_text_config() if hasattr(config, "get_text_config") else config
    model_type = getattr(text_config, "model_type", None)
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise ValueError(
            f"ropekit.hf.patch does not support model_type={model_type!r}; supported: {sorted(SUPPORTED_MODEL_TYPES)}"
        )
    specs = _specs_for(text_config, strict)
    bad = [lt for lt, s in specs.items() if s.layout != "half"]
    if bad:
        raise ValueError(
            f"model_type={model_type!r} uses the interleaved layout, which patch does not support"
        )
    targets = [
        (n, m)
        for n, m in model.named_modules()
        if type(m).__name__.endswith("RotaryEmbedding") and not isinstance(m, RopekitRotaryEmbedding)
    ]
    if not targets:
        raise ValueError(f"no *RotaryEmbedding module found in {type(model).__name__}")
    modeling_modules = {sys.modules[type(m).__module__] for _, m in targets}
    for mod in modeling_modules:
        if not callable(getattr(mod, "apply_rotary_pos_emb", None)):
            raise ValueError(  # noqa: TRY004 - an unsupported model, not a wrong argument type
                f"{mod.__name__} has no apply_rotary_pos_emb to route through ropekit"
            )
    for name, module in targets:  # all checks passed: modify
        parent = model.get_submodule(name.rsplit(".", 1)[0]) if "." in name else model
        setattr(parent, name.rsplit(".", 1)[-1], RopekitRotaryEmbedding(specs, type(module).__name__))
    for mod in modeling_modules:
        if not hasattr(mod.apply_rotary_pos_emb, "_ropekit_original"):
            mod.apply_rotary_pos_emb = _wrap_apply(mod.apply_rotary_pos_emb)
    return model

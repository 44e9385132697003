# SPDX-License-Identifier: MIT
"""``patch_vl(model)``: transformers' vision-language models take their M-RoPE and vision-tower tables from ropekit.

Every text M-RoPE rotary (Qwen2-VL, Qwen2.5-VL, Qwen3-VL, Qwen3-VL-MoE, GLM-4V, ERNIE-4.5-VL) and every 2-D
vision-tower rotary of those families and of Pixtral is replaced by :class:`RopekitVLRotary`, which keeps the call signature
``(x, position_ids)`` and the output format. It computes cos/sin of ``position * theta_k`` with ropekit's exact
float64-reduced phases for each of transformers' frequencies (matched to the exact float64 value they round
from, in transformers' own order -- ERNIE's pre-permuted table included) and hands them to the original module's
``recomposition_frequencies``: the band-to-axis layout is transformers' own, only the phases change (float32
angles lose ~pos * 6e-8 rad; ropekit's are exact). The attention code and its apply function are untouched.

So a float32 model gives the same logits within float32 rounding (tests: ``tests/ropekit/hf/test_patch_vl.py``),
and long contexts or large temporal ids (Qwen2.5-VL's absolute time) keep exact phases. :func:`unpatch_vl`
restores the original modules. Llama 4's vision encoder keeps a fixed complex table; it is rebuilt exactly by
:class:`RopekitLlama4VisionRotary`. The integrator may route ``ropekit.hf.patch`` here for VL model types.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from ropekit.phases import rope_tables
from ropekit.spec import RopeSpec

__all__ = ["VL_ROTARY_CLASSES", "RopekitLlama4VisionRotary", "RopekitVLRotary", "patch_vl", "unpatch_vl"]

#: rotary class name -> (kind, output cast to x.dtype like the original)
VL_ROTARY_CLASSES: dict[str, tuple[str, bool]] = {
    "Qwen2VLRotaryEmbedding": ("text", True),
    "Qwen2_5_VLRotaryEmbedding": ("text", True),
    "Qwen3VLTextRotaryEmbedding": ("text", True),
    "Qwen3VLMoeTextRotaryEmbedding": ("text", True),
    "Glm4vTextRotaryEmbedding": ("text", True),
    "Ernie4_5_VLMoeTextRotaryEmbedding": ("text", False),
    "Qwen2VLVisionRotaryEmbedding": ("vision", False),
    "Qwen2_5_VLVisionRotaryEmbedding": ("vision", False),
    "Qwen3VLVisionRotaryEmbedding": ("vision", False),
    "Qwen3VLMoeVisionRotaryEmbedding": ("vision", False),
    "Glm4vVisionRotaryEmbedding": ("vision", False),
    "Ernie4_5_VLMoeVisionRotaryEmbedding": ("vision", False),
    "PixtralVisionRotaryEmbedding": ("vision", True),
}
_ORIGINALS = "_ropekit_vl_originals"


def _exact_frequencies(orig: nn.Module) -> tuple[float, ...]:
    """transformers' float32 ``inv_freq``, each replaced by the exact float64 ``base^(-2j/dim)`` it rounds from."""
    cfg = orig.config
    rp = dict(getattr(cfg, "rope_parameters", None) or {})
    if rp.get("rope_type", "default") not in ("default", "axial"):
        raise ValueError(
            f"{type(orig).__name__}: rope_type={rp.get('rope_type')!r} is not supported by patch_vl "
            "(default M-RoPE and axial vision RoPE only)"
        )
    base = float(rp["rope_theta"])
    hf = orig.inv_freq.detach().to("cpu", torch.float64)  # type: ignore[operator]
    # text (rotary dim 2k) and vision (half head 2k) tables are base^(-2j/(2k)), j < k -- ERNIE's permuted too
    candidates = RopeSpec(head_dim=2 * hf.numel(), base=base).frequencies().tolist()
    out = []
    for v in hf.tolist():
        best = min(candidates, key=lambda t: abs(t - v) / t)
        if abs(best - v) > 2e-7 * best:
            raise ValueError(
                f"{type(orig).__name__}: inv_freq entry {v!r} matches no base^(-2j/dim) of base {base:g}; "
                "patch_vl refuses frequencies it cannot reproduce exactly"
            )
        out.append(best)
    return tuple(out)


class RopekitVLRotary(nn.Module):
    """Drop-in replacement of a VL rotary module: exact phases, the original's layout (see the module docstring)."""

    def __init__(self, orig: nn.Module, kind: str, cast: bool) -> None:
        super().__init__()
        self.kind, self.cast = kind, cast
        self.config = orig.config
        self.attention_scaling = float(getattr(orig, "attention_scaling", 1.0))
        self._recompose: Callable[[torch.Tensor], torch.Tensor] = orig.recomposition_frequencies  # type: ignore[assignment]
        self.inv_freq = orig.inv_freq
        if hasattr(orig, "mrope_section"):
            self.mrope_section = orig.mrope_section
        freqs = _exact_frequencies(orig)
        self.spec = RopeSpec(head_dim=2 * len(freqs), freqs=freqs)

    @torch.no_grad()
    def forward(self, x: torch.Tensor, position_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        pos = position_ids
        if self.kind == "text" and pos.dim() == 2:
            pos = pos.unsqueeze(0).expand(3, -1, -1)  # (b, s) text ids: every axis equal
        elif self.kind == "text" and pos.dim() == 3 and pos.shape[0] != 3:
            pos = pos.expand(3, -1, -1)
        cos, sin = rope_tables(pos, self.spec, device=x.device)  # float32, exact phases
        if self.attention_scaling != 1.0:
            cos, sin = cos * self.attention_scaling, sin * self.attention_scaling
        cos, sin = self._recompose(cos), self._recompose(sin)
        if self.cast:
            cos, sin = cos.to(x.dtype), sin.to(x.dtype)
        return cos, sin


class RopekitLlama4VisionRotary(nn.Module):
    """Llama 4's vision rotary (a fixed complex table ``freqs_ci`` [idx^2 + 1, 1, D/2]) rebuilt from
    :func:`ropekit.presets_vl.llama4_vision_spec`: 1-based (x, y), class token last at angle 0, exact phases."""

    freqs_ci: torch.Tensor

    def __init__(self, orig: nn.Module) -> None:
        super().__init__()
        from ropekit.axis_tables import axis_tables
        from ropekit.positions.grid import grid_positions, with_prefix
        from ropekit.presets_vl import llama4_vision_spec

        cfg: Any = orig.config
        self.config = cfg
        idx = int(cfg.image_size) // int(cfg.patch_size)
        head_dim = int(cfg.hidden_size) // int(cfg.num_attention_heads)
        spec = llama4_vision_spec(head_dim, float(cfg.rope_parameters["rope_theta"]))
        xy = with_prefix(grid_positions((idx, idx), start=1)[[1, 0]], 1, where="last")
        cos, sin = axis_tables(xy, spec)  # [idx^2 + 1, D/2]
        ref: torch.Tensor = orig.freqs_ci  # type: ignore[assignment]
        table = torch.complex(cos, sin).unsqueeze(1)
        if tuple(table.shape) != tuple(ref.shape):  # pragma: no cover - a transformers layout change
            raise ValueError(
                f"Llama 4 vision table shape {tuple(ref.shape)} differs from ropekit's {tuple(table.shape)}"
            )
        self.register_buffer("freqs_ci", table.to(ref.device), persistent=False)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.freqs_ci.to(hidden_states.device)


def patch_vl(model: nn.Module) -> nn.Module:
    """Replace every VL rotary module of ``model`` in place (text M-RoPE and vision towers); returns the model.

    Raises:
        ValueError: when the model holds no known VL rotary, or a rotary's frequencies cannot be reproduced.
    """
    if getattr(model, _ORIGINALS, None):
        raise ValueError("model is already patched by ropekit.hf.patch_vl; call unpatch_vl first")
    swaps: list[tuple[nn.Module, str, nn.Module, nn.Module]] = []
    for _, parent in model.named_modules():
        for child_name, child in parent.named_children():
            if type(child).__name__ == "Llama4VisionRotaryEmbedding":
                swaps.append((parent, child_name, child, RopekitLlama4VisionRotary(child)))
                continue
            entry = VL_ROTARY_CLASSES.get(type(child).__name__)
            if entry is not None:
                swaps.append(
                    (parent, child_name, child, RopekitVLRotary(child, *entry))
                )  # built before any swap
    if not swaps:
        raise ValueError(
            f"{type(model).__name__} has no VL rotary module ropekit knows ({', '.join(sorted(VL_ROTARY_CLASSES))})"
        )
    for parent, name, _, new in swaps:
        setattr(parent, name, new)
    object.__setattr__(model, _ORIGINALS, [(p, n, o) for p, n, o, _ in swaps])
    return model


def unpatch_vl(model: nn.Module) -> nn.Module:
    """Put the original rotary modules back."""
    for parent, name, orig in getattr(model, _ORIGINALS, None) or []:
        setattr(parent, name, orig)
    object.__setattr__(model, _ORIGINALS, None)
    return model

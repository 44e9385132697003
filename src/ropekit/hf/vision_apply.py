# SPDX-License-Identifier: MIT
"""Vision towers of transformers' VL models rotated by ropekit's dispatch (2-D axial RoPE: Heo et al. 2024,
"Rotary Position Embedding for Vision Transformer", arXiv 2403.13298; Qwen2-VL, Wang et al. 2024, arXiv 2409.12191).

The vision rotary modules replaced by :mod:`ropekit.hf.patch_vl` tag their (cos, sin) with ropekit's exact float32
per-token half tables (:class:`ropekit.hf.rotary.RopekitTables`, [N, n]); the family's vision apply function is
wrapped by :func:`ropekit.hf.apply.wrap_apply` (as the text one) and rotates from those tables with ropekit's
dispatch (fused CPU kernel, Triton on CUDA), float32 math, output in the input's dtype:

| rotary class | wrapped function (modeling file) | kind | q, k | tables |
|---|---|---|---|---|
| Qwen2-VL, Qwen2.5-VL, Qwen3-VL(-MoE), GLM-4V(-MoE), ERNIE-4.5-VL vision | ``apply_rotary_pos_emb_vision`` | "vision_thd" | [N, heads, d] | cat [N, d] |
| Pixtral | ``apply_rotary_pos_emb`` (``unsqueeze_dim=0``) | "qk_shared" | [1, heads, N, d] | cat [N, d] |
| Llama 4 vision | ``vision_apply_rotary_emb`` | "vision_complex" | [b, N, heads, d] | complex [N, 1, d/2] |

The cat tables are ``[a, a]`` (half-split pairs ``(j, j + d/2)``); Llama 4's complex table rotates the pairs
``(2j, 2j + 1)`` (interleaved). Qwen2.5-VL permutes the tables for window attention
(``permute_input_for_window_attn``, a method of its vision model): that method is wrapped on the instance so the
permuted tables keep their tag (ropekit's half tables permuted the same way). Llama 4's vision rotary is replaced
by :class:`RopekitLlama4VisionRotary` (its fixed table rebuilt from ropekit's exact phases).

Shapes: N vision tokens, n = d // 2 bands.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from ropekit.hf.families import Family
from ropekit.hf.rotary import ROPEKIT_TABLES, RopekitTables
from ropekit.spec import RopeSpec

__all__ = [
    "LLAMA4_VISION",
    "LLAMA4_VISION_FAMILY",
    "VISION_APPLIES",
    "VISION_FAMILY",
    "RopekitLlama4VisionRotary",
    "attach_window_permute",
    "tag_cat_tables",
    "tag_complex_table",
    "verify_vision_apply",
]

#: rotary class name -> (apply function in the same modeling file, apply kind of :func:`ropekit.hf.apply.wrap_apply`)
VISION_APPLIES: dict[str, tuple[str, str]] = {
    **{
        f"{stem}VisionRotaryEmbedding": ("apply_rotary_pos_emb_vision", "vision_thd")
        for stem in ("Qwen2VL", "Qwen2_5_VL", "Qwen3VL", "Qwen3VLMoe", "Glm4v", "Glm4vMoe", "Ernie4_5_VLMoe")
    },
    "PixtralVisionRotaryEmbedding": ("apply_rotary_pos_emb", "qk_shared"),
    "Llama4VisionRotaryEmbedding": ("vision_apply_rotary_emb", "vision_complex"),
}
#: the rows the apply wrapper reads for vision tables (pairing); their functions are wrapped from VISION_APPLIES
VISION_FAMILY = Family("vision 2-D (half split, cat tables)", (), tables="cat", layout="half", applies=())
LLAMA4_VISION_FAMILY = Family(
    "Llama 4 vision (complex, interleaved pairs)", (), tables="complex", layout="interleaved", applies=()
)
_PERMUTE = "permute_input_for_window_attn"
LLAMA4_VISION = "Llama4VisionRotaryEmbedding"


def tag_cat_tables(cos: torch.Tensor, sin: torch.Tensor, spec: RopeSpec) -> RopekitTables:
    """Half tables [N, d/2] of float32 cat tables [N, d] (``[a, a]``), for the wrapped vision apply function."""
    n = cos.shape[-1] // 2
    return RopekitTables(cos[..., :n].contiguous(), sin[..., :n].contiguous(), VISION_FAMILY, spec)


def tag_complex_table(
    freqs_ci: torch.Tensor, tables: tuple[torch.Tensor, torch.Tensor], spec: RopeSpec
) -> torch.Tensor:
    """Tag Llama 4's table ``freqs_ci`` [N, 1, d/2] (once per tensor) with ropekit's exact float32 ``tables``
    (cos, sin) [N, d/2], moved to its device: the wrapped ``vision_apply_rotary_emb`` rotates from those, whatever
    became of the buffer (a ``model.to(torch.bfloat16)`` turns transformers' complex buffer into a real one)."""
    if getattr(freqs_ci, ROPEKIT_TABLES, None) is None:
        cos, sin = (t.to(freqs_ci.device) for t in tables)
        setattr(freqs_ci, ROPEKIT_TABLES, RopekitTables(cos, sin, LLAMA4_VISION_FAMILY, spec))
    return freqs_ci


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
        self._tables = (
            cos,
            sin,
        )  # exact float32 [idx^2 + 1, D/2]: not buffers, so no dtype cast reaches them
        self.spec = spec
        self.vision_applies = (VISION_APPLIES[LLAMA4_VISION],)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        # tagged once per tensor: vision_apply_rotary_emb (wrapped) rotates from its real / imaginary parts
        return tag_complex_table(self.freqs_ci.to(hidden_states.device), self._tables, self.spec)


def attach_window_permute(parent: nn.Module) -> Callable[[], None] | None:
    """Wrap ``parent.permute_input_for_window_attn`` (Qwen2.5-VL's vision model) on the instance so that a tagged
    table keeps a tag with ropekit's half tables permuted alike. Returns the undo, or None (no such method)."""
    original = getattr(parent, _PERMUTE, None)
    if not callable(original) or _PERMUTE in parent.__dict__:
        return None

    def permute(input_tensor: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        out: torch.Tensor = original(input_tensor, *args, **kwargs)
        info: RopekitTables | None = getattr(input_tensor, ROPEKIT_TABLES, None)
        if info is not None:
            key = (*args, *kwargs.values())
            memo = info.extra.get("permuted")
            if memo is None or not _same_args(memo[0], key):
                cos, sin = original(info.cos, *args, **kwargs), original(info.sin, *args, **kwargs)
                memo = info.extra["permuted"] = (key, RopekitTables(cos, sin, info.family, info.spec))
            setattr(out, ROPEKIT_TABLES, memo[1])
        return out

    parent.__dict__[_PERMUTE] = permute

    def undo() -> None:
        parent.__dict__.pop(_PERMUTE, None)

    return undo


def _same_args(a: tuple[Any, ...], b: tuple[Any, ...]) -> bool:
    """The same permutation arguments: the very same tensors (held by the memory), equal plain values."""
    if len(a) != len(b):
        return False
    return all(
        x is y if isinstance(x, torch.Tensor) or isinstance(y, torch.Tensor) else x == y for x, y in zip(a, b)
    )


def _probe_qk(kind: str, n_tok: int, d: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator(device="cpu").manual_seed(0)
    shape = {"vision_thd": (n_tok, 3, d), "qk_shared": (1, 3, n_tok, d), "vision_complex": (2, n_tok, 3, d)}[
        kind
    ]
    return torch.randn(shape, generator=gen).to(device), torch.randn(shape, generator=gen).to(device)


def verify_vision_apply(orig: nn.Module, tables: tuple[torch.Tensor, ...]) -> str | None:
    """None when the wrapped vision apply function of ``orig``'s modeling file rotates like the original from the
    tagged probe ``tables`` (and was routed through ropekit), else why not."""
    import sys

    from ropekit.hf.apply import check_route

    entry = VISION_APPLIES.get(type(orig).__name__)
    if entry is None:
        return f"no vision apply function is known for {type(orig).__name__}"
    fn_name, kind = entry
    modeling = sys.modules[type(orig).__module__]
    fn = getattr(modeling, fn_name, None)
    if not callable(fn):
        return f"{modeling.__name__} defines no {fn_name}"
    original = getattr(fn, "_ropekit_original", fn)
    info: RopekitTables | None = getattr(tables[0], ROPEKIT_TABLES, None)
    if info is None:
        return "the replacement's tables carry no ropekit tables"
    q, k = _probe_qk(kind, info.cos.shape[0], 2 * info.cos.shape[-1], tables[0].device)
    args: tuple[Any, ...] = (q, k, *tables) + ((0,) if kind == "qk_shared" else ())
    return check_route(original, kind, "probe-vision", args, f"ropekit's {info.family.layout!r} pairing")

# SPDX-License-Identifier: MIT
"""Time in RoPE inside a VL vision tower, patched against unpatched: the vision case of ``ropekit bench --mode hf``.

A random Qwen2-VL vision tower (4 blocks, width 640 = 8 heads of 80, 14-pixel patches, 2 x 2 spatial merge; as
Qwen2-VL's 2-D RoPE, Wang et al. 2024, arXiv 2409.12191: half of each head's bands on the patch row, half on the
column) encodes one image of side x side patches (32 x 32; 16 x 16 with ``quick``), timed round by round in the
same process as :mod:`ropekit.hf.bench` times the decoders: the rotary module's forward plus every call of the
modeling file's ``apply_rotary_pos_emb_vision``, summed over the forward by one timer, installed identically on
both towers. Floors: ``copy_`` of every block's q and k (RoPE), the unpatched tower with RoPE skipped (forward).

Shapes: q, k [N, 8, 80] per block, N = side * side patches; pixel rows [N, 3 * 2 * 14 * 14].
"""

from __future__ import annotations

import copy
import time
import warnings
from collections.abc import Callable
from typing import Any

import torch

from ropekit.hf import bench as _bench
from ropekit.hf.bench import (
    FLOOR_FWD,
    FLOOR_ROPE,
    PATCHED,
    UNPATCHED,
    _Clock,
    _installed,
    _record,
    _skipped,
)

__all__ = ["measure_vision"]

_WIDTH, _HEADS = 640, 8
_NAMES = ("rotary_pos_emb", "apply_rotary_pos_emb_vision")


def _towers() -> tuple[Any, Any, Any]:
    """(unpatched tower, patched tower, modeling module)."""
    import transformers
    from transformers.models.qwen2_vl import modeling_qwen2_vl

    import ropekit.hf

    torch.manual_seed(0)
    text = {
        "vocab_size": 100, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 1,
        "num_attention_heads": 4, "num_key_value_heads": 2, "bos_token_id": 1, "eos_token_id": 2,
        "pad_token_id": 0, "rope_parameters": {"rope_type": "default", "rope_theta": 1e4, "mrope_section": [2, 3, 3]},
    }  # fmt: skip
    vision = {"depth": _bench._LAYERS, "embed_dim": _WIDTH, "hidden_size": 64, "num_heads": _HEADS, "mlp_ratio": 2}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg = transformers.Qwen2VLConfig(text_config=text, vision_config=vision)
        ref = transformers.Qwen2VLForConditionalGeneration(cfg).eval()  # type: ignore[no-untyped-call]
        ours = ropekit.hf.patch(copy.deepcopy(ref))
    return ref.model.visual, ours.model.visual, modeling_qwen2_vl  # type: ignore[union-attr]


def measure_vision(
    *, quick: bool = False, rounds: int = 9, progress: Callable[[str], None] | None = None
) -> tuple[str, dict[str, list[float]], dict[str, list[float]]]:
    """(case name, {impl: forward ms per round}, {impl: ms in RoPE per round})."""
    side = 16 if quick else 32
    layers = _bench._LAYERS
    name = f"qwen2-vl vision tower {layers} blocks, image {side}x{side} patches"
    if progress:
        progress(f"hf: {name}")
    ref, ours, modeling = _towers()
    wrapped = getattr(modeling, _NAMES[1])
    original = getattr(wrapped, "_ropekit_original", wrapped)
    g = torch.Generator().manual_seed(0)
    n = side * side
    pixels = torch.randn(n, 3 * 2 * 14 * 14, generator=g)
    grid = torch.tensor([[1, side, side]])
    hd = _WIDTH // _HEADS
    q = torch.randn(layers, n, _HEADS, hd, generator=g)
    qo, ko, k = torch.empty_like(q), torch.empty_like(q), torch.randn(layers, n, _HEADS, hd, generator=g)
    fwd: dict[str, list[float]] = {FLOOR_FWD: [], UNPATCHED: [], PATCHED: []}
    rope: dict[str, list[float]] = {FLOOR_ROPE: [], UNPATCHED: [], PATCHED: []}

    def forward(tower: Any) -> float:
        t0 = time.perf_counter()
        tower(pixels, grid_thw=grid)
        return (time.perf_counter() - t0) * 1e3

    with torch.no_grad():
        tables: list[Any] = []
        real = type(ref.rotary_pos_emb).forward.__get__(ref.rotary_pos_emb)

        def keep(*a: Any, **kw: Any) -> Any:
            tables.append(real(*a, **kw))
            return tables[-1]

        ref.rotary_pos_emb.forward = keep
        forward(ref)  # the tables the unpatched tower uses, stored for the RoPE-free floor
        del ref.rotary_pos_emb.forward
        for r in range(rounds + 1):  # round 0 warms up and is dropped
            with _skipped(ref, modeling, tables[0], _NAMES):
                t_skip = forward(ref)
            t0 = time.perf_counter()
            for i in range(layers):
                qo[i].copy_(q[i])
                ko[i].copy_(k[i])
            t_copy = (time.perf_counter() - t0) * 1e3
            row = {}
            for key, tower, fn in ((UNPATCHED, ref, original), (PATCHED, ours, wrapped)):
                clock = _Clock()
                with _installed(tower, modeling, fn, clock, _NAMES):
                    row[key] = (forward(tower), clock.total * 1e3)
            if r:
                _record(fwd, rope, t_skip, t_copy, row)
    return name, fwd, rope

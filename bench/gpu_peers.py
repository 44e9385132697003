"""Peers for bench/gpu.py: transformers (eager and compiled), Liger-Kernel, flash-attn's Triton rotary, FlashInfer,
vLLM -- each loaded where installed, else reported with the reason -- and ropekit's own entry points, as
zero-argument calls on the same q and k; plus the check that every one computes the same rotation."""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable
from typing import Any

import torch
from gpu_timing import Fn, Unavailable

BF16 = torch.bfloat16
SHAPES = {"llama3-8b": (32, 8, 128), "llama3-70b": (64, 8, 128)}


# ---------------------------------------------------------------------------------------------------- peers
def hf_apply() -> Callable[..., Any]:
    try:
        from transformers.models.llama.modeling_llama import apply_rotary_pos_emb
    except ImportError as e:
        raise Unavailable(f"transformers not importable: {e}") from e
    return apply_rotary_pos_emb


_COMPILED: dict[str, Any] = {}


def hf_compiled() -> Callable[..., Any]:
    if "hf" not in _COMPILED:
        import torch._dynamo

        torch._dynamo.config.cache_size_limit = (
            256  # one graph per benchmarked shape, never an eager fallback
        )
        _COMPILED["hf"] = torch.compile(hf_apply(), dynamic=False)
    return _COMPILED["hf"]


def liger() -> Any:
    try:
        from liger_kernel.ops.rope import LigerRopeFunction
    except ImportError as e:
        raise Unavailable(f"liger-kernel not importable: {e}") from e
    return LigerRopeFunction


def flash_attn() -> Any:
    src = os.environ.get("FLASH_ATTN_SRC")
    if src and src not in sys.path:
        sys.path.insert(0, src)
    try:
        return importlib.import_module("flash_attn.ops.triton.rotary"), importlib.import_module(
            "flash_attn.layers.rotary"
        )
    except ImportError as e:
        raise Unavailable(f"flash-attn's rotary not importable: {e}") from e


def flashinfer_mod() -> Any:
    try:
        import flashinfer
    except ImportError as e:
        raise Unavailable(f"flashinfer not importable: {e}") from e
    return flashinfer


def vllm_mod() -> Any:
    try:
        from vllm import _custom_ops
    except ImportError as e:
        raise Unavailable(f"vllm not importable: {e}") from e
    return _custom_ops


# ---------------------------------------------------------------------------------------------------- inputs
def spec_for(layout: str = "half") -> Any:
    from ropekit import RopeSpec

    return RopeSpec(128, base=500_000.0, layout=layout)


def hf_tables(pos: torch.Tensor, spec: Any, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """HF's cos/sin [b, s, d] (halves repeated) in the model dtype, as LlamaRotaryEmbedding returns them."""
    inv = 1.0 / (spec.base ** (torch.arange(0, 128, 2, device=pos.device, dtype=torch.float32) / 128))
    f = pos.float()[..., None] * inv
    emb = torch.cat((f, f), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def qk(
    b: int, s: int, hq: int, hk: int, d: int, dtype: torch.dtype = BF16, device: str = "cuda"
) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(b, s, hq, d, device=device, dtype=dtype), torch.randn(
        b, s, hk, d, device=device, dtype=dtype
    )


def impls(q: torch.Tensor, k: torch.Tensor, pos: torch.Tensor, layout: str) -> dict[str, Callable[[], Fn]]:
    """name -> builder of a zero-argument call that rotates q and k (bshd storage) once, in place where it can."""
    from ropekit import apply_rope, apply_rope_tables, rope_tables

    spec = spec_for(layout)
    cos, sin = rope_tables(pos, spec)  # float32 [b|s, n]
    hcos, hsin = hf_tables(pos if pos.dim() == 2 else pos[None], spec, q.dtype)
    qh, kh = q.transpose(1, 2), k.transpose(1, 2)  # HF's [b, h, s, d] views of the same storage
    total = q.numel() + k.numel()
    src = torch.randn(total, device=q.device, dtype=q.dtype)
    dst = torch.empty_like(src)

    def fa() -> Fn:
        ops, _ = flash_attn()
        n = int(pos.max()) + 1
        fcos, fsin = rope_tables(torch.arange(n, device=q.device), spec)
        offs = pos[:, 0].to(torch.int32).contiguous() if pos.dim() == 2 and pos.shape[1] == 1 else 0
        il = layout == "interleaved"

        def run() -> None:
            ops.apply_rotary(q, fcos, fsin, seqlen_offsets=offs, interleaved=il, inplace=True)
            ops.apply_rotary(k, fcos, fsin, seqlen_offsets=offs, interleaved=il, inplace=True)

        return run

    def liger_call() -> Fn:  # not `liger`: that name is the module-level import helper it calls
        if layout != "half":
            raise Unavailable("Liger's rope is half-split only")
        f = liger()
        return lambda: f.apply(qh, kh, hcos, hsin)

    def hf(fn: Callable[[], Callable[..., Any]]) -> Callable[[], Fn]:
        def build() -> Fn:
            if layout != "half":
                raise Unavailable("transformers' Llama rotate_half is half-split only")
            g = fn()
            return lambda: g(qh, kh, hcos, hsin)

        return build

    def flashinfer() -> Fn:
        fi = flashinfer_mod()
        n = int(pos.max()) + 1
        fcos, fsin = rope_tables(torch.arange(n, device=q.device), spec)
        cache = torch.cat((fcos, fsin), dim=-1).contiguous()
        flat = pos.reshape(-1)
        qf, kf = q.view(flat.numel(), -1), k.view(flat.numel(), -1)
        return lambda: fi.apply_rope_with_cos_sin_cache_inplace(
            flat, qf, kf, 128, cache, is_neox=layout == "half"
        )

    def vllm() -> Fn:
        ops = vllm_mod()
        n = int(pos.max()) + 1
        fcos, fsin = rope_tables(torch.arange(n, device=q.device), spec)
        cache = torch.cat((fcos, fsin), dim=-1).to(q.dtype).contiguous()
        flat = pos.reshape(-1)
        qf, kf = q.view(flat.numel(), -1), k.view(flat.numel(), -1)
        return lambda: ops.rotary_embedding(flat, qf, kf, 128, cache, layout == "half")

    def rotary() -> Fn:
        from ropekit import Rotary

        rope = Rotary(spec).to(q.device)
        return lambda: rope(q, k, positions=pos, inplace=True)

    def launch_only() -> Fn:
        from ropekit.rotation import triton_backend as tb

        c3 = cos if cos.dim() == 3 else cos[None]
        s3 = sin if sin.dim() == 3 else sin[None]
        return lambda: tb.rotate_qk(q, k, c3, s3, 128, layout, True)

    return {
        "copy (floor)": lambda: lambda: dst.copy_(src),
        "ropekit rotate_qk (kernel launch only)": launch_only,
        "ropekit apply_rope_tables": lambda: lambda: apply_rope_tables(q, k, cos, sin, spec, inplace=True),
        "ropekit apply_rope (positions)": lambda: lambda: apply_rope(q, k, pos, spec, inplace=True),
        "ropekit Rotary module": rotary,
        "transformers eager": hf(hf_apply),
        "transformers torch.compile": hf(hf_compiled),
        "liger-kernel": liger_call,
        "flash-attn triton": fa,
        "flashinfer": flashinfer,
        "vllm": vllm,
    }


def check_same_rotation(q: torch.Tensor, k: torch.Tensor, pos: torch.Tensor) -> dict[str, float]:
    """Sanity: every peer computes the same rotation as ropekit's PyTorch backend (max abs difference over q and k,
    bf16 outputs)."""
    from ropekit import apply_rope

    want_q, want_k = apply_rope(q, k, pos, spec_for(), backend="torch")
    assert want_k is not None
    out: dict[str, float] = {}
    for name in impls(q, k, pos, "half"):
        if name.startswith("copy"):
            continue
        q2, k2 = q.clone(), k.clone()
        try:
            r = impls(q2, k2, pos, "half")[name]()()
        except Unavailable:
            continue
        got_q, got_k = q2, k2  # in place
        if isinstance(r, tuple) and isinstance(r[0], torch.Tensor) and not name.startswith("ropekit"):
            got_q, got_k = (x.transpose(1, 2) if x.shape != y.shape else x for x, y in ((r[0], q), (r[1], k)))
        out[name] = max(
            float((got_q.float() - want_q.float()).abs().max()),
            float((got_k.float() - want_k.float()).abs().max()),
        )
    return out

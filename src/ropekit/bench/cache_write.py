# SPDX-License-Identifier: MIT
"""``ropekit bench --mode cache-write``: RoPE fused with the KV-cache write against the cache write alone.

The floor is the cache write without any rotation, done the way frameworks do it: for a contiguous per-sequence
cache ``[B, Hkv, S_max, D]`` (HF's static cache) ``copy_`` into the slice (one offset for all sequences) or
``index_copy_`` along the sequence dim, or advanced-index assignment (a different offset per sequence); for a
paged cache ``[num_blocks, block_size, Hkv, D]`` ``index_copy_`` of k and v at the slot mapping (vLLM's
``reshape_and_cache`` in PyTorch). Target: the fused write (k rotated into the cache, v copied) <= 1.1x the floor.
Also timed: the fused write computing its tables from positions, the fused write rotating q as well, and the
unfused composition (ropekit rotates k out of place, then the write).

Shapes: Hkv 8, D 128, Hq 32 (for q), cache S_max 4096 rows per sequence / 256 blocks of 16; prefill 1 x 2048
tokens (512 with --quick) at offset 1024; long prefill (contiguous, full runs only) 1 x 8192 tokens at offset 1024
of a 9216-row cache; decode 32 sequences x 1 token at random offsets / random distinct slots.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ropekit.bench.timing import measure, rows
from ropekit.phases import rope_tables
from ropekit.rotation.apply import apply_rope_tables
from ropekit.rotation.kv_cache import rope_cache_write, rope_paged_cache_write
from ropekit.spec import RopeSpec

__all__ = ["run_cache_write"]

_HK, _HQ, _D, _SMAX, _BS = 8, 32, 128, 4096, 16
_PREFILL, _QUICK_PREFILL = 2048, 512
#: the long prefill (full runs, contiguous caches): k and v of 8192 tokens, 16-32 MB each, past this CPU's L3,
#: where the write is memory-bound in every dtype (at 2048 tokens bf16 k and v stay in cache and the rotation's
#: arithmetic shows)
_LONG_PREFILL = 8192
_DT = {torch.float32: "fp32", torch.bfloat16: "bf16"}


def _contiguous(kind: str, dt: torch.dtype, prefill: int) -> tuple[dict[str, Callable[[], Any]], list[str]]:
    g = torch.Generator().manual_seed(0)
    B, S = (32, 1) if kind == "decode" else (1, _LONG_PREFILL if kind == "long prefill" else prefill)
    smax = max(_SMAX, S + 1024)
    spec = RopeSpec(_D, base=500_000.0)
    k, v = (
        torch.randn(B, _HK, S, _D, generator=g).to(dt) for _ in range(2)
    )  # bhsd, as HF attention has them
    q = torch.randn(B, _HQ, S, _D, generator=g).to(dt)
    ck, cv = torch.zeros(B, _HK, smax, _D, dtype=dt), torch.zeros(B, _HK, smax, _D, dtype=dt)
    off = (
        torch.randint(0, smax - 1, (B,), generator=g)
        if kind == "decode"
        else torch.full((B,), min(1024, smax - S))
    ).long()
    pos = off[:, None] + torch.arange(S)
    cos, sin = rope_tables(pos, spec)
    bi, si = torch.arange(B)[:, None].expand(B, S), pos
    ckv, cvv = ck.transpose(1, 2), cv.transpose(1, 2)  # [B, S_max, H, D] views for advanced indexing
    vv_ = v.transpose(1, 2)

    def write_indexed(kk: torch.Tensor) -> None:
        ckv[bi, si] = kk.transpose(1, 2)
        cvv[bi, si] = vv_

    impls: dict[str, Callable[[], Any]] = {"floor: index_put (advanced indexing)": lambda: write_indexed(k)}
    floors = ["floor: index_put (advanced indexing)"]
    if kind != "decode":
        o = int(off[0])
        impls["floor: copy_ into the slice"] = lambda: (
            ck[:, :, o : o + S].copy_(k),
            cv[:, :, o : o + S].copy_(v),
        )
        cp = pos[0]
        impls["floor: index_copy_ (HF static cache)"] = lambda: (
            ck.index_copy_(2, cp, k),
            cv.index_copy_(2, cp, v),
        )
        floors += ["floor: copy_ into the slice", "floor: index_copy_ (HF static cache)"]
    impls["ropekit fused (tables given)"] = lambda: rope_cache_write(
        k, v, ck, cv, off, spec, tables=(cos, sin), format="bhsd", cache_format="bhsd"
    )
    impls["ropekit fused (positions)"] = lambda: rope_cache_write(
        k, v, ck, cv, off, spec, format="bhsd", cache_format="bhsd"
    )
    impls["ropekit fused + q (tables given)"] = lambda: rope_cache_write(
        k, v, ck, cv, off, spec, tables=(cos, sin), q=q, format="bhsd", cache_format="bhsd"
    )
    impls["unfused: ropekit rotate k, then index_put"] = lambda: write_indexed(
        apply_rope_tables(k, None, cos, sin, spec, format="bhsd")[0]
    )
    return impls, floors


def _paged(kind: str, dt: torch.dtype, prefill: int) -> tuple[dict[str, Callable[[], Any]], list[str]]:
    g = torch.Generator().manual_seed(1)
    T = prefill if kind == "prefill" else 32
    nb = _SMAX // _BS
    spec = RopeSpec(_D, base=500_000.0)
    k, v = (torch.randn(T, _HK, _D, generator=g).to(dt) for _ in range(2))
    q = torch.randn(T, _HQ, _D, generator=g).to(dt)
    ck, cv = torch.zeros(nb, _BS, _HK, _D, dtype=dt), torch.zeros(nb, _BS, _HK, _D, dtype=dt)
    slots = torch.randperm(nb * _BS, generator=g)[:T]
    pos = torch.randint(0, 100_000, (T,), generator=g)
    cos, sin = rope_tables(pos, spec)
    ckf, cvf = ck.view(nb * _BS, _HK, _D), cv.view(nb * _BS, _HK, _D)
    floor = "floor: index_copy_ at the slots (vLLM reshape_and_cache)"
    impls: dict[str, Callable[[], Any]] = {
        floor: lambda: (ckf.index_copy_(0, slots, k), cvf.index_copy_(0, slots, v)),
        "ropekit fused (tables given)": lambda: rope_paged_cache_write(
            k, v, ck, cv, slots, spec, tables=(cos, sin)
        ),
        "ropekit fused (positions)": lambda: rope_paged_cache_write(k, v, ck, cv, slots, spec, positions=pos),
        "ropekit fused + q (tables given)": lambda: rope_paged_cache_write(
            k, v, ck, cv, slots, spec, tables=(cos, sin), q=q
        ),
        "unfused: ropekit rotate k, then index_copy_": lambda: (
            ckf.index_copy_(0, slots, apply_rope_tables(k, None, cos, sin, spec, format="thd")[0]),
            cvf.index_copy_(0, slots, v),
        ),
    }
    return impls, [floor]


def run_cache_write(
    *, quick: bool, rounds: int, progress: Callable[[str], None] | None
) -> list[dict[str, Any]]:
    """Result rows (see :func:`ropekit.bench.timing.rows`) for contiguous and paged caches, prefill and decode."""
    out: list[dict[str, Any]] = []
    dtypes = (torch.float32,) if quick else (torch.float32, torch.bfloat16)
    with torch.no_grad():
        for layout, build in (("contiguous", _contiguous), ("paged", _paged)):
            kinds = ("prefill", "decode") if quick or layout == "paged" else ("prefill", "long prefill", "decode")
            for kind in kinds:
                for dt in dtypes:
                    name = f"cache write {layout} {kind} {_DT[dt]}"
                    if progress:
                        progress(f"cache-write: {name}")
                    impls, floors = build(kind, dt, _QUICK_PREFILL if quick else _PREFILL)
                    samples = measure(impls, inner=200 if kind == "decode" else 1, rounds=rounds)
                    out += rows(name, "cache-write", samples, floors)
    return out

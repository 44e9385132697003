# SPDX-License-Identifier: MIT
"""RoPE fused with the KV-cache write: rotate k into a preallocated cache, copy v, rotate q, in one pass.

Serving is decode-bound, and at decode RoPE is a separate pass over k that the cache write then reads again.
Fusing them (as vLLM's ``reshape_and_cache`` fusion and FlashInfer's ``append_paged_kv_cache`` do on GPUs) reads
k, v and q once and writes the cache and q once. Two cache layouts:

* contiguous per-sequence caches, ``[B, Hkv, S_max, D]`` (``cache_format="bhsd"``, HF's static cache) or
  ``[B, S_max, Hkv, D]`` (``"bshd"``), written at a per-sequence offset: token s of sequence b goes to row
  ``offsets[b] + s`` (:func:`rope_cache_write`);
* paged caches like vLLM's, ``[num_blocks, block_size, Hkv, D]``, where token t goes to slot ``slots[t]``, i.e.
  block ``slots[t] // block_size``, row ``slots[t] % block_size`` (:func:`rope_paged_cache_write`).

k is rotated by the exact ropekit tables (:func:`ropekit.rope_tables`, float64 phases rounded once to float32) at
its positions and stored rotated; k itself is left unchanged. v is copied. q, when given, is rotated in place.
Everything is validated before anything is written (dtypes, shapes, devices, every slot and offset in range,
no two tokens writing the same slot; the checks are in :mod:`ropekit.rotation.kv_cache_checks`). CPU tensors
of float32/bfloat16/float16 with unit last stride use the C kernel (``kernels/rope_cache_write.h``); everything
else uses the PyTorch path, which gives the same bits.

Shapes: B batch, S new tokens per sequence, T = tokens (paged), Hq/Hkv heads, D head dim, Dv value head dim,
n = rotary_dim // 2. Paper: RoFormer (Su et al., 2021), eq. 34, applied at write time as in vLLM/FlashInfer.
"""

from __future__ import annotations

import torch

from ropekit.phases import INT_DTYPES, check_positions, rope_tables
from ropekit.rotation import torch_backend
from ropekit.rotation.kv_cache_checks import (
    _broadcasts,
    _check_fmt,
    _check_offsets,
    _check_slots,
    _check_untransformed,
    _index,
    _no_overlap,
    _q_not_input,
    _same,
    _self_overlap,
    _tensor,
    offsets_range,
    slots_range,
)
from ropekit.rotation.kv_cache_kernel import fast_write, kernel_write, plan_key, use_kernel
from ropekit.spec import RopeSpec, require_spec
from ropekit.table_cache import shared_tables

__all__ = ["rope_cache_write", "rope_paged_cache_write"]

Tables = tuple[torch.Tensor, torch.Tensor]


def _tables(
    spec: RopeSpec,
    positions: torch.Tensor | None,
    tables: Tables | None,
    shape: tuple[int, ...],
    device: torch.device,
    dtype: torch.dtype = torch.float32,
    exact: bool = False,
) -> Tables:
    """(cos, sin) of shape [*shape, n] (or broadcastable to it) from positions or given tables: float32, or float64
    for float64 data (``dtype``), so a float64 write is float64-accurate as :func:`ropekit.apply_rope` is.
    Positions must broadcast to ``shape``, or (``exact``) have exactly that shape."""
    n = spec.n_bands
    wide = dtype == torch.float64
    if tables is not None:
        if positions is not None:
            raise ValueError("pass positions or tables, not both")
        if not isinstance(tables, tuple) or len(tables) != 2:
            raise ValueError("tables must be a (cos, sin) tuple of float32 tensors")
        cos, sin = tables
        for nm, t in (("tables[0] (cos)", cos), ("tables[1] (sin)", sin)):
            ok = (torch.float32, torch.float64) if wide else (torch.float32,)
            if not isinstance(t, torch.Tensor) or t.dtype not in ok:
                got = t.dtype if isinstance(t, torch.Tensor) else type(t).__name__
                want = "a float32 or float64" if wide else "a float32"
                raise ValueError(f"{nm} must be {want} tensor (exact ropekit tables), got {got}")
            if t.shape[-1:] != (n,) or not _broadcasts(tuple(t.shape), (*shape, n)):
                raise ValueError(f"{nm} shape {tuple(t.shape)} does not broadcast to {(*shape, n)}")
            if t.device != device:
                raise ValueError(f"{nm} is on {t.device}, expected {device}")
        return cos, sin
    assert positions is not None
    if spec.axes is not None:  # [n_axes, ...] positions would be read as [B, S] (silently, when B == n_axes)
        raise ValueError(
            f"spec has {len(spec.axes.names)} position axes {spec.axes.names}: the cache write takes 1-D positions, "
            "so pass tables=ropekit.axis_tables(positions, spec) (positions [n_axes, B, S] or [n_axes, T]) instead "
            "of positions (or the default positions)"
        )
    check_positions(positions)
    if exact and tuple(positions.shape) != shape:
        raise ValueError(
            f"positions must have shape {shape} (one position per token of k), got shape {tuple(positions.shape)}"
        )
    if not _broadcasts(tuple(positions.shape), shape):
        raise ValueError(f"positions of shape {tuple(positions.shape)} do not broadcast to {shape}")
    if positions.device.type == "meta" and device.type != "meta":  # no values to rotate k by
        raise ValueError(f"positions are on the meta device (no values) but k is on {device}")
    if wide:
        return rope_tables(positions, spec, dtype=torch.float64, device=device)
    if positions.dtype in INT_DTYPES and positions.device == device and not torch.compiler.is_compiling():
        rows = shared_tables(positions, spec)  # row views of the exact shared cache (read-only here): no copy
        if rows is not None:
            return rows
    return rope_tables(positions, spec, device=device)


def _bshd(x: torch.Tensor, fmt: str) -> torch.Tensor:
    return x.transpose(1, 2) if fmt == "bhsd" else x


def rope_cache_write(
    k: torch.Tensor,
    v: torch.Tensor,
    cache_k: torch.Tensor,
    cache_v: torch.Tensor,
    offsets: torch.Tensor | int,
    spec: RopeSpec,
    *,
    positions: torch.Tensor | None = None,
    tables: Tables | None = None,
    q: torch.Tensor | None = None,
    format: str = "bshd",
    cache_format: str = "bhsd",
) -> torch.Tensor | None:
    """Rotate k and write k, v into per-sequence caches at ``offsets``; rotate q in place. Returns q.

    Args:
        k: [B, S, Hkv, D] (format "bshd") or [B, Hkv, S, D] ("bhsd"); not modified.
        v: like k with last dim Dv.
        cache_k: [B, Hkv, S_max, D] (cache_format "bhsd") or [B, S_max, Hkv, D] ("bshd"); written in place.
        cache_v: like cache_k with last dim Dv.
        offsets: [B] integer tensor (or one int, Python or numpy, for all): token s of sequence b goes to row
            offsets[b] + s; 0 <= offsets[b] and offsets[b] + S <= S_max.
        spec: the RoPE spec (head_dim D, rotary_dim, layout).
        positions: rotation positions broadcastable to [B, S]; default offsets[b] + s. A dynamic scheme (dynamic
            NTK, LongRoPE) takes its frequencies for the length max(positions) + 1 of the whole call, as
            transformers does for a batch: sequences that need their own lengths' frequencies are written in
            separate calls, or with ``tables`` (``rope_tables(positions, spec, seq_len=...)`` per sequence).
        tables: precomputed float32 (cos, sin) broadcastable to [B, S, n] instead of positions
            (e.g. one :func:`ropekit.rope_tables` call per forward, shared by every layer).
        q: [B, S, Hq, D] or [B, Hq, S, D] (same format as k), rotated in place at the same positions.

    Raises:
        ValueError / TypeError naming the argument, before anything is written; also for a dual tensor
        (forward-mode AD) and under a torch.func transform: the write is inference-only.
    """
    spec = require_spec(spec)
    _check_untransformed("rope_cache_write", "offsets", k, v, cache_k, cache_v, offsets, q, positions, tables)
    plan_args = plan_key(
        f"{format}/{cache_format}", k, v, cache_k, cache_v, offsets, q, positions, tables, spec
    )
    if plan_args is not None and fast_write(plan_args):
        return q
    _check_fmt("format", format)
    _check_fmt("cache_format", cache_format)
    k = _tensor("k", k, 4, f"in {format} layout")
    v = _tensor("v", v, 4, f"in {format} layout")
    ck = _tensor("cache_k", cache_k, 4, f"in {cache_format} layout")
    cv = _tensor("cache_v", cache_v, 4, f"in {cache_format} layout")
    names, xs = ["k", "v", "cache_k", "cache_v"], [k, v, ck, cv]
    if q is not None:
        names, xs = [*names, "q"], [*xs, _tensor("q", q, 4, f"in {format} layout")]
    _same(names, xs)
    _self_overlap(names[2:], xs[2:])  # cache_k, cache_v (and q): written in place
    _q_not_input(xs[4] if q is not None else None, [("k", k), ("v", v)])
    kb, vb, ckb, cvb = _bshd(k, format), _bshd(v, format), _bshd(ck, cache_format), _bshd(cv, cache_format)
    B, S, H, D = kb.shape
    if D != spec.head_dim:
        raise ValueError(f"k head dim {D} does not match spec.head_dim {spec.head_dim}")
    if vb.shape[:3] != kb.shape[:3]:
        raise ValueError(f"v shape {tuple(v.shape)} does not match k shape {tuple(k.shape)} ({format})")
    if ckb.shape[0] != B or ckb.shape[2:] != (H, D):
        raise ValueError(
            f"cache_k shape {tuple(ck.shape)} ({cache_format}) does not fit k: expected batch {B}, "
            f"{H} heads, head dim {D}"
        )
    if cvb.shape[:3] != ckb.shape[:3] or cvb.shape[3] != vb.shape[3]:
        raise ValueError(
            f"cache_v shape {tuple(cv.shape)} does not fit cache_k {tuple(ck.shape)} and v {tuple(v.shape)}"
        )
    qb = None
    if q is not None:
        qb = _bshd(q, format)
        if qb.shape[:2] != (B, S) or qb.shape[3] != D:
            raise ValueError(f"q shape {tuple(q.shape)} does not match k shape {tuple(k.shape)} ({format})")
    s_max = ckb.shape[1]
    off = _index("offsets", offsets, (B,), k.device, lambda: offsets_range(S, s_max))
    _check_offsets(off, S, s_max)
    if positions is None and tables is None:
        positions = off[:, None] + torch.arange(S, device=k.device)
    cos, sin = _tables(spec, positions, tables, (B, S), k.device, k.dtype)
    _no_overlap(
        [("cache_k", ck), ("cache_v", cv)], list(zip(names[:2] + names[4:], xs[:2] + xs[4:], strict=True))
    )
    if use_kernel(kb, vb, ckb, cvb, qb):
        kernel_write(kb, vb, ckb, cvb, qb, cos, sin, off, (B, S), 0, 0, spec, plan_args)
    else:
        bi = torch.arange(B, device=k.device)[:, None].expand(B, S)
        si = off[:, None] + torch.arange(S, device=k.device)
        _torch_write(kb, vb, ckb, cvb, qb, cos, sin, (bi, si), spec)
    return q


def rope_paged_cache_write(
    k: torch.Tensor,
    v: torch.Tensor,
    cache_k: torch.Tensor,
    cache_v: torch.Tensor,
    slots: torch.Tensor,
    spec: RopeSpec,
    *,
    positions: torch.Tensor | None = None,
    tables: Tables | None = None,
    q: torch.Tensor | None = None,
) -> torch.Tensor | None:
    """Rotate k and write k, v into a paged cache at ``slots`` (vLLM's slot mapping); rotate q in place.

    Args:
        k: [T, Hkv, D] token-major ("thd"); not modified. v: [T, Hkv, Dv].
        cache_k: [num_blocks, block_size, Hkv, D]; cache_v: [num_blocks, block_size, Hkv, Dv]; written in place.
        slots: [T] integer slot per token, 0 <= slot < num_blocks * block_size, no slot twice (padding tokens must
            be dropped by the caller: a negative slot is an error, not a skip).
        spec: the RoPE spec.
        positions: [T] rotation positions, one per token (required unless tables are given; shape (T,) exactly:
            a single position is not broadcast over the tokens). A dynamic scheme (dynamic NTK, LongRoPE) takes
            its frequencies for the length max(positions) + 1 of the whole call: in continuous batching, requests
            of different lengths need their own ``tables`` rows (``rope_tables(positions_of_r, spec,
            seq_len=length_of_r)`` per request, concatenated) to keep their own frequencies.
        tables: precomputed float32 (cos, sin) broadcastable to [T, n] instead of positions.
        q: [T, Hq, D], rotated in place at the same positions.

    Raises:
        ValueError / TypeError naming the argument, before anything is written; also for a dual tensor
        (forward-mode AD) and under a torch.func transform: the write is inference-only.
    """
    spec = require_spec(spec)
    _check_untransformed(
        "rope_paged_cache_write", "slots", k, v, cache_k, cache_v, slots, q, positions, tables
    )
    plan_args = plan_key("paged", k, v, cache_k, cache_v, slots, q, positions, tables, spec)
    if plan_args is not None and fast_write(plan_args):
        return q
    k = _tensor("k", k, 3, "[T, Hkv, D]")
    v = _tensor("v", v, 3, "[T, Hkv, Dv]")
    ck = _tensor("cache_k", cache_k, 4, "[num_blocks, block_size, Hkv, D]")
    cv = _tensor("cache_v", cache_v, 4, "[num_blocks, block_size, Hkv, Dv]")
    names, xs = ["k", "v", "cache_k", "cache_v"], [k, v, ck, cv]
    if q is not None:
        names, xs = [*names, "q"], [*xs, _tensor("q", q, 3, "[T, Hq, D]")]
    _same(names, xs)
    _self_overlap(names[2:], xs[2:])  # cache_k, cache_v (and q): written in place
    _q_not_input(xs[4] if q is not None else None, [("k", k), ("v", v)])
    T, H, D = k.shape
    if D != spec.head_dim:
        raise ValueError(f"k head dim {D} does not match spec.head_dim {spec.head_dim}")
    if v.shape[:2] != k.shape[:2]:
        raise ValueError(f"v shape {tuple(v.shape)} does not match k shape {tuple(k.shape)}")
    if ck.shape[2:] != (H, D):
        raise ValueError(f"cache_k shape {tuple(ck.shape)} does not fit k: expected [*, *, {H}, {D}]")
    if cv.shape[:3] != ck.shape[:3] or cv.shape[3] != v.shape[2]:
        raise ValueError(
            f"cache_v shape {tuple(cv.shape)} does not fit cache_k {tuple(ck.shape)} and v {tuple(v.shape)}"
        )
    if q is not None and (q.shape[0] != T or q.shape[2] != D):
        raise ValueError(f"q shape {tuple(q.shape)} does not match k shape {tuple(k.shape)}")
    nb, bs = ck.shape[0], ck.shape[1]
    sl = _index("slots", slots, (T,), k.device, lambda: slots_range(nb * bs))
    _check_slots(sl, nb * bs)
    if positions is None and tables is None:
        raise ValueError("rope_paged_cache_write needs positions (or tables): slots are not positions")
    cos, sin = _tables(spec, positions, tables, (T,), k.device, k.dtype, exact=True)  # [T]: no broadcast
    _no_overlap(
        [("cache_k", ck), ("cache_v", cv)], list(zip(names[:2] + names[4:], xs[:2] + xs[4:], strict=True))
    )
    k4, v4, q4 = k[None], v[None], (q[None] if q is not None else None)
    cos4, sin4 = cos[None] if cos.dim() == 2 else cos, sin[None] if sin.dim() == 2 else sin
    if use_kernel(k4, v4, ck, cv, q4):
        kernel_write(k4, v4, ck, cv, q4, cos4, sin4, sl, (1, T), 1, bs, spec, plan_args)
    else:
        _torch_write(k4, v4, ck, cv, q4, cos4, sin4, (sl[None] // bs, sl[None] % bs), spec)
    return q


def _torch_write(
    kb: torch.Tensor,
    vb: torch.Tensor,
    ckb: torch.Tensor,
    cvb: torch.Tensor,
    qb: torch.Tensor | None,
    cos: torch.Tensor,
    sin: torch.Tensor,
    where: tuple[torch.Tensor, torch.Tensor],
    spec: RopeSpec,
) -> None:
    """The PyTorch path: rotate k out of place, then index_put k and v; q in place. Same float32 operations."""
    r, layout = int(spec.rotary_dim or spec.head_dim), str(spec.layout)
    c, s = cos.unsqueeze(-2), sin.unsqueeze(-2)  # broadcast over heads: [.., 1, n]
    krot = torch_backend.raw_rotate(kb, c, s, r, layout, inplace=False)
    ckb[where] = krot
    cvb[where] = vb
    if qb is not None:
        torch_backend.raw_rotate(qb, c, s, r, layout, inplace=True)

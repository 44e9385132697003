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
no two tokens writing the same slot). CPU tensors of float32/bfloat16/float16 with unit last stride use the C
kernel (``kernels/rope_cache_write.h``); everything else uses the PyTorch path, which gives the same bits.

Shapes: B batch, S new tokens per sequence, T = tokens (paged), Hq/Hkv heads, D head dim, Dv value head dim,
n = rotary_dim // 2. Paper: RoFormer (Su et al., 2021), eq. 34, applied at write time as in vLLM/FlashInfer.
"""

from __future__ import annotations

import ctypes

import torch

from ropekit.kernels import cpu_build
from ropekit.phases import INT_DTYPES, check_positions, rope_tables
from ropekit.rotation import torch_backend
from ropekit.rotation.kv_cache_kernel import fast_write, kernel_write, plan_key, use_kernel
from ropekit.spec import RopeSpec
from ropekit.table_cache import shared_tables

__all__ = ["rope_cache_write", "rope_paged_cache_write"]

_FLOATS = (torch.float32, torch.bfloat16, torch.float16, torch.float64)
Tables = tuple[torch.Tensor, torch.Tensor]


def _tensor(name: str, x: object, dims: int, what: str) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor {what}, got {type(x).__name__}")
    if x.dim() != dims:
        raise ValueError(f"{name} must be {dims}-D {what}, got shape {tuple(x.shape)}")
    if x.dtype not in _FLOATS:
        raise ValueError(f"{name} must be float32, bfloat16, float16 or float64, got {x.dtype}")
    if x.requires_grad and torch.is_grad_enabled():
        raise ValueError(
            f"{name} requires grad, but the cache write is inference-only (nothing is differentiated through the "
            "cache): call it under torch.no_grad() or detach"
        )
    return x


def _same(names: list[str], xs: list[torch.Tensor]) -> None:
    for n, x in zip(names[1:], xs[1:], strict=True):
        if x.dtype != xs[0].dtype:
            raise ValueError(f"{n} has dtype {x.dtype} but {names[0]} has {xs[0].dtype}; they must match")
        if x.device != xs[0].device:
            raise ValueError(f"{n} is on {x.device} but {names[0]} is on {xs[0].device}; they must match")


def _index(name: str, x: object, shape: tuple[int, ...], device: torch.device) -> torch.Tensor:
    if isinstance(x, int) and not isinstance(x, bool):
        x = torch.full(shape, x, dtype=torch.int64)
    if not isinstance(x, torch.Tensor) or x.dtype not in INT_DTYPES:
        got = x.dtype if isinstance(x, torch.Tensor) else type(x).__name__
        raise ValueError(f"{name} must be an integer tensor of shape {shape}, got {got}")
    if tuple(x.shape) != shape:
        raise ValueError(f"{name} must have shape {shape}, got {tuple(x.shape)}")
    return x.to(device=device, dtype=torch.int64)


def _byte_range(x: torch.Tensor) -> tuple[int, int]:
    span = 1
    for size, st in zip(x.shape, x.stride(), strict=True):
        span += (size - 1) * abs(st)
    p = x.data_ptr()
    return p, p + span * x.element_size()


def _broadcasts(shape: tuple[int, ...], target: tuple[int, ...]) -> bool:
    return len(shape) <= len(target) and all(
        a == 1 or a == b for a, b in zip(reversed(shape), reversed(target), strict=False)
    )


def _check_slots(sl: torch.Tensor, capacity: int) -> None:
    """Every slot in [0, capacity) and none twice (in C when the kernel is there: no per-call tensor ops)."""
    T = sl.numel()
    if not T:
        return
    if torch.compiler.is_compiling():  # traced: checked on the device when the graph runs, no host sync
        srt = sl.sort().values
        ok = (srt[0] >= 0) & (srt[-1] < capacity) & (srt[1:] != srt[:-1]).all()
        torch._assert_async(ok, f"slots must be distinct and inside the cache (0 <= slot < {capacity})")
        return
    lib = cpu_build.load() if sl.device.type == "cpu" else None
    if lib is not None:
        sl = sl.contiguous()
        bad = ctypes.c_int64(0)
        rc = lib.ropekit_check_slots(sl.data_ptr(), T, capacity, ctypes.byref(bad))
    else:
        out = (sl < 0) | (sl >= capacity)
        bad = ctypes.c_int64(int(torch.argmax(out.to(torch.int8))))
        rc = 1 if bool(out.any()) else (2 if torch.unique(sl).numel() != T else 0)
    if rc == 1:
        raise ValueError(
            f"slots[{bad.value}] = {int(sl[bad.value])} is outside the cache (0 <= slot < {capacity})"
        )
    if rc == 3:
        raise MemoryError("ropekit: could not allocate memory to check the slots")
    if rc:  # a repeated slot (the error path: tensor ops are fine here)
        vals, counts = torch.unique(sl, return_counts=True)
        dup = int(vals[counts > 1][0])
        tokens = (sl == dup).nonzero().flatten().tolist()
        raise ValueError(
            f"slots must be distinct: slot {dup} is given to tokens {tokens[:4]}{' ...' if len(tokens) > 4 else ''} "
            "(each would overwrite the other's k and v)"
        )


def _check_offsets(off: torch.Tensor, S: int, rows: int) -> None:
    B = off.numel()
    if not B:
        return
    if torch.compiler.is_compiling():  # traced: checked on the device when the graph runs
        ok = ((off >= 0) & (off + S <= rows)).all()
        torch._assert_async(
            ok, f"offsets must fit {S} new tokens in a cache of {rows} rows (0 <= offset <= {rows - S})"
        )
        return
    lib = cpu_build.load() if off.device.type == "cpu" else None
    if lib is not None:
        off = off.contiguous()
        bad = ctypes.c_int64(0)
        rc = lib.ropekit_check_offsets(off.data_ptr(), B, S, rows, ctypes.byref(bad))
        b = bad.value
    else:
        wrong = (off < 0) | (off + S > rows)
        rc = int(bool(wrong.any()))
        b = int(torch.argmax(wrong.to(torch.int8)))
    if rc:
        raise ValueError(
            f"offsets[{b}] = {int(off[b])} does not fit {S} new tokens in a cache of {rows} rows "
            f"(need 0 <= offset <= {rows - S})"
        )


def _self_overlap(names: list[str], xs: list[torch.Tensor]) -> None:
    """Refuse a written tensor (a cache, q) whose elements share memory (an expanded view): every token would
    land in, or be rotated through, the same elements -- a silently wrong cache or a q rotated several times."""
    for name, x in zip(names, xs, strict=True):
        if any(st == 0 and sz > 1 for sz, st in zip(x.shape, x.stride(), strict=True)) or (
            not torch.compiler.is_compiling() and torch._debug_has_internal_overlap(x) == 1
        ):
            raise ValueError(
                f"{name} has overlapping memory (e.g. an expanded view, strides {x.stride()}); it is written in "
                "place, so every element must be its own memory"
            )


def _q_not_input(q: torch.Tensor | None, ins: list[tuple[str, torch.Tensor]]) -> None:
    """q is rotated in place; k and v are read and must stay unmodified: q must not be one of them."""
    if q is None or torch.compiler.is_compiling():
        return
    for name, x in ins:
        if x.numel() and q.data_ptr() == x.data_ptr():
            raise ValueError(f"q and {name} share memory; q is rotated in place and {name} must not change")


def _no_overlap(outs: list[tuple[str, torch.Tensor]], ins: list[tuple[str, torch.Tensor]]) -> None:
    """Refuse a cache that overlaps the other cache or an input (the result would depend on the write order).

    Inputs may share a buffer (k and v as views of a packed qkv tensor), and the two caches may be halves of one
    tensor (``kv[0]``, ``kv[1]``): only the memory spans of distinct tensors are compared. Traced by
    ``torch.compile`` there are no storage addresses to compare: the check runs in eager calls only.
    """
    if torch.compiler.is_compiling():
        return
    spans = [(n, _byte_range(x)) for n, x in outs + ins if x.numel()]
    n_out = sum(1 for _, x in outs if x.numel())
    for i, (na, (a0, a1)) in enumerate(spans[:n_out]):
        for nb, (b0, b1) in spans[i + 1 :]:
            if a0 < b1 and b0 < a1:
                raise ValueError(f"{na} and {nb} overlap in memory; the cache write needs separate buffers")


def _tables(
    spec: RopeSpec,
    positions: torch.Tensor | None,
    tables: Tables | None,
    shape: tuple[int, ...],
    device: torch.device,
) -> Tables:
    """Float32 (cos, sin) of shape [*shape, n] (or broadcastable to it) from positions or given tables."""
    n = spec.n_bands
    if tables is not None:
        if positions is not None:
            raise ValueError("pass positions or tables, not both")
        if not isinstance(tables, tuple) or len(tables) != 2:
            raise ValueError("tables must be a (cos, sin) tuple of float32 tensors")
        cos, sin = tables
        for nm, t in (("tables[0] (cos)", cos), ("tables[1] (sin)", sin)):
            if not isinstance(t, torch.Tensor) or t.dtype != torch.float32:
                got = t.dtype if isinstance(t, torch.Tensor) else type(t).__name__
                raise ValueError(f"{nm} must be a float32 tensor (exact ropekit tables), got {got}")
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
    if not _broadcasts(tuple(positions.shape), shape):
        raise ValueError(f"positions of shape {tuple(positions.shape)} do not broadcast to {shape}")
    if positions.dtype in INT_DTYPES and positions.device == device and not torch.compiler.is_compiling():
        rows = shared_tables(positions, spec)  # row views of the exact shared cache (read-only here): no copy
        if rows is not None:
            return rows
    return rope_tables(positions, spec, device=device)


def _bshd(x: torch.Tensor, fmt: str) -> torch.Tensor:
    return x.transpose(1, 2) if fmt == "bhsd" else x


def _check_fmt(name: str, fmt: str) -> None:
    if fmt not in ("bshd", "bhsd"):
        raise ValueError(f'{name} must be "bshd" or "bhsd", got {fmt!r}')


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
        offsets: [B] integer tensor (or one int for all): token s of sequence b goes to row offsets[b] + s;
            0 <= offsets[b] and offsets[b] + S <= S_max.
        spec: the RoPE spec (head_dim D, rotary_dim, layout).
        positions: rotation positions broadcastable to [B, S]; default offsets[b] + s.
        tables: precomputed float32 (cos, sin) broadcastable to [B, S, n] instead of positions
            (e.g. one :func:`ropekit.rope_tables` call per forward, shared by every layer).
        q: [B, S, Hq, D] or [B, Hq, S, D] (same format as k), rotated in place at the same positions.

    Raises:
        ValueError / TypeError naming the argument, before anything is written.
    """
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
    off = _index("offsets", offsets, (B,), k.device)
    _check_offsets(off, S, s_max)
    if positions is None and tables is None:
        positions = off[:, None] + torch.arange(S, device=k.device)
    cos, sin = _tables(spec, positions, tables, (B, S), k.device)
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
        positions: [T] rotation positions (required unless tables are given).
        tables: precomputed float32 (cos, sin) broadcastable to [T, n] instead of positions.
        q: [T, Hq, D], rotated in place at the same positions.

    Raises:
        ValueError / TypeError naming the argument, before anything is written.
    """
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
    sl = _index("slots", slots, (T,), k.device)
    _check_slots(sl, nb * bs)
    if positions is None and tables is None:
        raise ValueError("rope_paged_cache_write needs positions (or tables): slots are not positions")
    cos, sin = _tables(spec, positions, tables, (T,), k.device)
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

# SPDX-License-Identifier: MIT
"""``ring_attention``: exact softmax attention over a sequence sharded across the ranks of a process group.

Ring attention (Liu, Zaharia, Abbeel 2023, "Ring Attention with Blockwise Transformers", arXiv 2310.01889): every
rank keeps its query shard; the key/value shards and their **global** position ids travel around the ring (rank r
sends to r + 1 and receives from r - 1, ``batch_isend_irecv``, the next transfer overlapping the current block's
compute). Each block is masked from global positions (causal: key position <= query position; with
``cu_seqlens``: same document), so any sharding works (contiguous, zigzag, stripe or your own), and partial results
merge exactly by log-sum-exp (:mod:`ropekit.distributed.blocks`). Rows or columns of a block that the mask empties
are skipped, so the zigzag layout's balance becomes real compute savings.

Backward (a custom ``autograd.Function``) runs the ring again: K/V travel with their dK/dV accumulators, every rank
adds its queries' contributions, and one last hop brings dK/dV home to the rank that owns them. It builds no graph
(float copies, received blocks), so a backward with ``create_graph=True`` is refused rather than silently wrong.

Shapes (bshd, already rotated by RoPE at global positions):
    q: [b, s, h_q, d]   k: [b, s, h_kv, d]   v: [b, s, h_kv, d_v]   positions: [s]   output: [b, s, h_q, d_v]
with s the local sequence length (the same on every rank) and h_q a multiple of h_kv (GQA: q head h reads kv head
h // (h_q / h_kv)).
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import torch
import torch.distributed as dist

from ropekit.distributed.agree import FLOATS, agree, agree_partition, agree_values, group_info
from ropekit.distributed.blocks import block_backward, block_forward, block_mask, merge_lse
from ropekit.distributed.layouts import check_cu_seqlens

__all__ = ["ring_attention"]

_INTS = (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8)
_META = (
    "batch",
    "local seq",
    "q heads",
    "kv heads",
    "head_dim",
    "v head_dim",
    "dtype",
    "causal",
    "cu_seqlens length",
)
#: what packed ring attention's positions are, for the partition check's message
_OFFSETS = (
    "with cu_seqlens, positions are the tokens' global offsets in the packed sequence "
    "(ropekit.distributed.shard_indices), not their RoPE position ids (shard_positions, which restart at 0 in "
    "each document)"
)
#: why a backward with create_graph=True is refused (every rank raises it, before any communication)
_NO_DOUBLE_BACKWARD = (
    "ring_attention is differentiable once only: its backward was called with create_graph=True "
    "(double backward: a gradient penalty, a Hessian-vector product, MAML), but the ring's backward works on "
    "copies without autograd history and received blocks, so second-order gradients would be silently wrong. "
    "Compute its gradients without create_graph=True"
)
#: how the agreement errors print a field (dtype as its name, not its index)
_SHOW = {"dtype": lambda i: str(FLOATS[i]), "causal": lambda i: str(bool(i))}


def _local_problem(
    q: object,
    k: object,
    v: object,
    positions: object,
    causal: object,
    scale: object,
    cu_seqlens: object,
    world: int,
) -> tuple[type[Exception], str] | None:
    """The first thing wrong with this rank's arguments, or None."""
    if not isinstance(causal, bool):
        return TypeError, f"causal must be True or False, got {causal!r}"
    for name, x in (("q", q), ("k", k), ("v", v), ("positions", positions)):
        if not isinstance(x, torch.Tensor):
            return TypeError, f"{name} must be a torch.Tensor, got {type(x).__name__}"
    assert isinstance(q, torch.Tensor) and isinstance(k, torch.Tensor) and isinstance(v, torch.Tensor)
    assert isinstance(positions, torch.Tensor)
    for name, x in (("q", q), ("k", k), ("v", v)):
        if x.dim() != 4:
            return (
                ValueError,
                f"{name} must be bshd [batch, seq, heads, head_dim], got shape {tuple(x.shape)}",
            )
        if x.dtype not in FLOATS:
            return ValueError, f"{name} must be float64, float32, bfloat16 or float16, got {x.dtype}"
    if k.dtype != q.dtype or v.dtype != q.dtype:
        return ValueError, f"q, k, v must share one dtype, got {q.dtype}, {k.dtype}, {v.dtype}"
    if k.device != q.device or v.device != q.device:
        return ValueError, f"q, k, v must be on one device, got {q.device}, {k.device}, {v.device}"
    if k.shape[:2] != q.shape[:2] or v.shape[:3] != k.shape[:3]:
        return ValueError, (
            f"k and v must have q's batch and sequence and each other's heads: q {tuple(q.shape)}, "
            f"k {tuple(k.shape)}, v {tuple(v.shape)}"
        )
    if k.shape[3] != q.shape[3]:
        return ValueError, f"k's head_dim {k.shape[3]} differs from q's {q.shape[3]}"
    if k.shape[2] == 0 or q.shape[2] % k.shape[2]:
        return ValueError, f"q heads ({q.shape[2]}) must be a multiple of k/v heads ({k.shape[2]}) for GQA"
    if positions.dim() != 1 or positions.dtype not in _INTS:
        return ValueError, (
            f"positions must be 1-D integer global position ids (shared by the batch), got {positions.dtype} "
            f"of shape {tuple(positions.shape)}"
        )
    if positions.numel() != q.shape[1]:
        return (
            ValueError,
            f"positions has {positions.numel()} entries but q's local sequence has {q.shape[1]}",
        )
    if scale is not None and (bad := _scale_problem(scale)) is not None:
        return bad
    if cu_seqlens is not None:
        total = world * q.shape[1]
        try:
            check_cu_seqlens(cu_seqlens, total)
        except ValueError as e:
            return ValueError, f"{e} (the global sequence is world_size * local seq = {total})"
        if positions.numel() and (int(positions.min()) < 0 or int(positions.max()) >= total):
            return ValueError, (
                f"with cu_seqlens, positions are the tokens' global offsets in the packed sequence "
                f"(ropekit.distributed.shard_indices), in [0, {total}); got values "
                f"{int(positions.min())}..{int(positions.max())}"
            )
    return None


def _scale_problem(scale: object) -> tuple[type[Exception], str] | None:
    """A real number (Python or numpy float or int, via ``float()``; not a bool) that is finite and > 0."""
    if isinstance(scale, bool) or not isinstance(scale, numbers.Real):
        return TypeError, f"scale must be a real number (a positive finite float) or None, got {scale!r}"
    try:
        x = float(scale)
    except OverflowError:  # an int past float's range
        x = math.inf
    if not (math.isfinite(x) and x > 0):
        return ValueError, f"scale must be a positive finite float or None, got {scale!r}"
    return None


def _meta(q: Any, k: Any, v: Any, causal: bool, cu_seqlens: Any) -> list[tuple[str, int]]:
    n_cu = 0 if cu_seqlens is None else int(cu_seqlens.numel())  # the values themselves: agree_values
    vals = [*q.shape[:3], k.shape[2], q.shape[3], v.shape[3], FLOATS.index(q.dtype), int(causal), n_cu]
    return list(zip(_META, vals, strict=True))


def _exchange(
    tensors: list[torch.Tensor], group: Any, world: int, rank: int, tag0: int = 0
) -> tuple[list[torch.Tensor], list[Any]]:
    """Start sending ``tensors`` to rank + 1 and receiving their counterparts from rank - 1 (tags from tag0)."""
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    if group is not None:
        nxt, prv = dist.get_global_rank(group, nxt), dist.get_global_rank(group, prv)
    recv = [torch.empty_like(t) for t in tensors]
    ops = []
    for tag, (t, r) in enumerate(zip(tensors, recv), start=tag0):
        ops.append(dist.P2POp(dist.isend, t, nxt, group, tag))
        ops.append(dist.P2POp(dist.irecv, r, prv, group, tag))
    return recv, dist.batch_isend_irecv(ops)


def _docs(pos: torch.Tensor, cu: torch.Tensor | None) -> torch.Tensor | None:
    return None if cu is None else torch.searchsorted(cu[1:], pos, right=True)


def _select(mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
    """Query rows and key columns the block mask uses (None if empty)."""
    rows, cols = mask.any(1), mask.any(0)
    if not bool(rows.any()):
        return None
    return rows.nonzero().flatten(), cols.nonzero().flatten()


class _Ring(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: Any,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        pos: torch.Tensor,
        cu: torch.Tensor | None,
        causal: bool,
        scale: float,
        group: Any,
        world: int,
        rank: int,
    ) -> torch.Tensor:
        ct = torch.float64 if q.dtype == torch.float64 else torch.float32
        b, s, hq, d = q.shape
        hkv, dv = k.shape[2], v.shape[3]
        q5 = q.to(ct).view(b, s, hkv, hq // hkv, d).permute(0, 2, 3, 1, 4).contiguous()  # [b, hkv, g, s, d]
        k4 = k.to(ct).permute(0, 2, 1, 3).contiguous()  # [b, hkv, s, d]
        v4 = v.to(ct).permute(0, 2, 1, 3).contiguous()  # [b, hkv, s, dv]
        q_doc = _docs(pos, cu)
        o = q5.new_zeros(*q5.shape[:-1], dv)
        lse = q5.new_full(q5.shape[:-1], float("-inf"))
        kb, vb, pb = k4, v4, pos
        for step in range(world):
            pending = _exchange([kb, vb, pb], group, world, rank) if step < world - 1 else None
            mask = block_mask(pos, pb, causal=causal, q_doc=q_doc, k_doc=_docs(pb, cu))
            sel = _select(mask)
            if sel is not None:
                ri, ci = sel
                ob, lb = block_forward(q5[:, :, :, ri], kb[:, :, ci], vb[:, :, ci], mask[ri][:, ci], scale)
                o_r, l_r = merge_lse(o[:, :, :, ri], lse[:, :, :, ri], ob, lb)
                o.index_copy_(3, ri, o_r)
                lse.index_copy_(3, ri, l_r)
            if pending is not None:
                (kb, vb, pb), works = pending
                for w in works:
                    w.wait()
        ctx.save_for_backward(q5, k4, v4, pos, o, lse, cu)
        ctx.meta = (causal, scale, group, world, rank, q.dtype, k.dtype, (b, s, hq, d))
        return o.permute(0, 3, 1, 2, 4).reshape(b, s, hq, dv).to(q.dtype)

    @staticmethod
    def backward(ctx: Any, dout: torch.Tensor) -> tuple[Any, ...]:
        # the engine runs a backward in grad mode exactly when create_graph=True
        if torch.is_grad_enabled():
            raise RuntimeError(_NO_DOUBLE_BACKWARD)
        q5, k4, v4, pos, o, lse, cu = ctx.saved_tensors
        causal, scale, group, world, rank, q_dtype, k_dtype, (b, s, hq, d) = ctx.meta
        hkv, dv = k4.shape[1], v4.shape[3]
        do = dout.to(o.dtype).view(b, s, hkv, hq // hkv, dv).permute(0, 2, 3, 1, 4)  # [b, hkv, g, s, dv]
        delta = (do * o).sum(-1)
        q_doc = _docs(pos, cu)
        dq = torch.zeros_like(q5)
        dkb, dvb = torch.zeros_like(k4), torch.zeros_like(v4)
        kb, vb, pb = k4, v4, pos
        for step in range(world):
            pending = _exchange([kb, vb, pb], group, world, rank) if step < world - 1 else None
            mask = block_mask(pos, pb, causal=causal, q_doc=q_doc, k_doc=_docs(pb, cu))
            sel = _select(mask)
            if sel is not None:
                ri, ci = sel
                dq_c, dk_c, dv_c = block_backward(
                    q5[:, :, :, ri], kb[:, :, ci], vb[:, :, ci], mask[ri][:, ci], scale,
                    do[:, :, :, ri], lse[:, :, :, ri], delta[:, :, :, ri],
                )  # fmt: skip
                dq.index_add_(3, ri, dq_c)
                dkb.index_add_(2, ci, dk_c)
                dvb.index_add_(2, ci, dv_c)
            if world > 1:  # dK/dV travel with their block; the last hop brings them home
                (dkb, dvb), dworks = _exchange([dkb, dvb], group, world, rank, tag0=3)
                for w in dworks:
                    w.wait()
            if pending is not None:
                (kb, vb, pb), works = pending
                for w in works:
                    w.wait()
        dq_out = dq.permute(0, 3, 1, 2, 4).reshape(b, s, hq, d).to(q_dtype)
        dk_out = dkb.permute(0, 2, 1, 3).to(k_dtype)
        dv_out = dvb.permute(0, 2, 1, 3).to(k_dtype)
        return dq_out, dk_out, dv_out, None, None, None, None, None, None, None


def ring_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    positions: torch.Tensor,
    group: dist.ProcessGroup | None = None,
    causal: bool = True,
    scale: float | None = None,
    cu_seqlens: torch.Tensor | None = None,
) -> torch.Tensor:
    """Softmax attention of this rank's queries over the keys of every rank in ``group``.

    Args:
        q: [b, s, h_q, d] this rank's queries, already rotated by RoPE at their global positions.
        k: [b, s, h_kv, d] this rank's keys (rotated the same way), h_q % h_kv == 0.
        v: [b, s, h_kv, d_v] this rank's values.
        positions: [s] integer global position ids of this rank's tokens (e.g. from
            :func:`ropekit.distributed.shard_positions`); any ids work, the masks come from them. With
            ``cu_seqlens`` they are the tokens' global offsets in the packed sequence
            (:func:`ropekit.distributed.shard_indices`), which locate each token's document: together the ranks
            must hold each offset once (checked; RoPE ids restarting per document are refused).
        group: process group (default: the world when torch.distributed is initialized; without it the call is
            plain single-process attention).
        causal: mask key position > query position.
        scale: score scale, default 1 / sqrt(d): a positive finite real number (numpy floats too).
        cu_seqlens: [n + 1] int32/int64 document offsets of the packed global sequence (last value =
            world_size * s); tokens attend only within their document.

    Returns:
        [b, s, h_q, d_v] in q's dtype (computed in float64 for float64 inputs, else float32). Differentiable
        once: dq, dk, dv reach the ranks that own q, k, v (the backward runs the ring again; every rank must call
        it). Double backward is refused (below).

    Raises:
        TypeError, ValueError: naming the argument and its value, on every rank (the ranks exchange a small
            agreement record first, so one rank's bad argument cannot leave the others waiting); also when this
            process is not a member of ``group``.
        RuntimeError: from the backward, when it runs with ``create_graph=True`` (second-order gradients are
            not supported; refused on every rank before any communication, rather than silently wrong).
    """
    world, rank = group_info("ring_attention", group)
    problem = _local_problem(q, k, v, positions, causal, scale, cu_seqlens, world)
    dev = q.device if isinstance(q, torch.Tensor) else torch.device("cpu")
    fields = _meta(q, k, v, causal, cu_seqlens) if problem is None else [(n, 0) for n in _META]
    agree("ring_attention", problem, fields, group, world, dev, _SHOW)
    if cu_seqlens is not None:
        agree_values("ring_attention", "cu_seqlens", cu_seqlens, group, world, dev)
        agree_partition(
            "ring_attention",
            "positions (with cu_seqlens)",
            positions,
            world * q.shape[1],
            group,
            world,
            dev,
            _OFFSETS,
        )
    sc = float(scale) if scale is not None else 1.0 / math.sqrt(q.shape[-1])
    pos = positions.to(q.device, torch.int64).contiguous()
    cu = None if cu_seqlens is None else cu_seqlens.to(q.device, torch.int64)
    out: torch.Tensor = _Ring.apply(  # type: ignore[no-untyped-call]
        q.contiguous(), k.contiguous(), v.contiguous(), pos, cu, bool(causal), sc, group, world, rank
    )
    return out

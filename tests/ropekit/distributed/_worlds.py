"""Multi-process worlds for the context-parallel tests: one spawn per world size runs every case.

Each rank builds the same global float64 q, k, v from a seed, computes the single-process oracle (full softmax
attention written here from the definition, RoPE at global positions via ``ropekit.apply_rope``), then runs its
shard through ``ropekit.distributed`` and reports the max error of the output and of the gradients of q, k, v
(before RoPE) against the oracle's rows. Errors are reduced with MAX over ranks; rank 0 writes them as JSON.

The oracle's rows for a rank come from the layout formulas of docs/distributed.md written again here, not from
``shard_indices``; the worker also records whether the two agree.
"""

from __future__ import annotations

import datetime
import json
import math
import os
import socket
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from ropekit import RopeSpec, apply_rope
from ropekit.distributed import (
    heads_to_seq,
    ring_attention,
    seq_to_heads,
    shard,
    shard_indices,
    shard_positions,
    unshard,
)
from tests.ropekit.distributed._world_refusals import _everywhere, _raised, agreement_case

SPEC = RopeSpec(head_dim=16, base=10000.0)
B, HQ, HKV, D = 2, 4, 2, 16
OFFSET = 1000  # a KV-cache/chunk offset: positions need not start at 0
LAYOUTS = ("contiguous", "zigzag", "stripe")
_OPS = ("seq_to_heads", "heads_to_seq", "ring_attention")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def doc_lengths(world: int) -> list[int]:
    """Packed documents: every length a multiple of 2W (zigzag per document), unequal lengths."""
    return [4 * world, 2 * world, 6 * world, 4 * world]


def oracle_rows(layout: str, seq: int, world: int, rank: int, lengths: list[int] | None) -> list[int]:
    """Rows of rank ``rank`` from the textbook formulas (context-parallel reference, section 1)."""
    if layout == "contiguous":
        n = seq // world
        return list(range(rank * n, (rank + 1) * n))
    if layout == "stripe":
        return [t for t in range(seq) if t % world == rank]
    rows, start = [], 0
    for n in lengths or [seq]:
        c = n // (2 * world)
        local = range(2 * c)
        rows += [start + (rank * c + i if i < c else (2 * world - 1 - rank) * c + (i - c)) for i in local]
        start += n
    return rows


def attention_oracle(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, visible: torch.Tensor
) -> torch.Tensor:
    """softmax(q k^T / sqrt(d) + mask) v for bshd tensors; kv heads repeated for GQA; visible [S_q, S_k]."""
    g = q.shape[2] // k.shape[2]
    k, v = k.repeat_interleave(g, dim=2), v.repeat_interleave(g, dim=2)
    scores = torch.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(q.shape[-1])
    scores = scores.masked_fill(~visible, float("-inf"))
    return torch.einsum("bhqk,bkhd->bqhd", torch.softmax(scores, dim=-1), v)


def visibility(seq: int, lengths: list[int] | None, causal: bool) -> torch.Tensor:
    doc = torch.repeat_interleave(torch.arange(len(lengths)), torch.tensor(lengths)) if lengths else None
    vis = torch.ones(seq, seq, dtype=torch.bool)
    if causal:
        vis = torch.tril(vis)
    if doc is not None:
        vis &= doc[:, None] == doc[None, :]
    return vis


def rope_positions(seq: int, lengths: list[int] | None) -> torch.Tensor:
    if lengths is None:
        return torch.arange(seq) + OFFSET
    return torch.cat([torch.arange(n) for n in lengths])


def global_problem(seq: int, seed: int) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return {
        "q": torch.randn(B, seq, HQ, D, generator=gen, dtype=torch.float64),
        "k": torch.randn(B, seq, HKV, D, generator=gen, dtype=torch.float64),
        "v": torch.randn(B, seq, HKV, D, generator=gen, dtype=torch.float64),
        "g": torch.randn(B, seq, HQ, D, generator=gen, dtype=torch.float64),
    }


def oracle(p: dict[str, torch.Tensor], pos: torch.Tensor, vis: torch.Tensor) -> dict[str, torch.Tensor]:
    q, k, v = (p[n].clone().requires_grad_() for n in "qkv")
    qr, kr = apply_rope(q, k, pos, SPEC)
    assert kr is not None
    out = attention_oracle(qr, kr, v, vis)
    (out * p["g"]).sum().backward()
    assert q.grad is not None and k.grad is not None and v.grad is not None
    return {"out": out.detach(), "dq": q.grad, "dk": k.grad, "dv": v.grad}


Attend = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


def sharded_run(
    p: dict[str, torch.Tensor],
    rows: list[int],
    rope_pos: torch.Tensor,
    attend: Attend,
    dtype: torch.dtype,
) -> dict[str, torch.Tensor]:
    """This rank's output and gradients of its own q, k, v shards (float64 for comparison)."""
    idx = torch.tensor(rows)
    q, k, v = (p[n].index_select(1, idx).to(dtype).requires_grad_() for n in "qkv")
    qr, kr = apply_rope(q, k, rope_pos, SPEC)
    assert kr is not None
    out = attend(qr, kr, v)
    (out * p["g"].index_select(1, idx).to(dtype)).sum().backward()
    grads = {"dq": q.grad, "dk": k.grad, "dv": v.grad}
    return {"out": out.detach().double(), **{n: t.double() for n, t in grads.items() if t is not None}}


def max_errors(
    mine: dict[str, torch.Tensor], ref: dict[str, torch.Tensor], rows: list[int]
) -> dict[str, float]:
    idx = torch.tensor(rows)
    errs = torch.tensor(
        [float((mine[n] - ref[n].index_select(1, idx)).abs().max()) for n in ref], dtype=torch.float64
    )
    dist.all_reduce(errs, op=dist.ReduceOp.MAX)
    return dict(zip(ref, errs.tolist()))


def ring_cases(world: int, rank: int) -> dict[str, Any]:
    res: dict[str, Any] = {}
    seq = 16 * world
    for packed in (False, True):
        lengths = doc_lengths(world) if packed else None
        seq_p = sum(lengths) if lengths else seq
        cu = (
            torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32)
            if lengths
            else None
        )
        p = global_problem(seq_p, seed=7 + packed)
        ref = oracle(p, rope_positions(seq_p, lengths), visibility(seq_p, lengths, causal=True))
        for layout in LAYOUTS:
            rows = oracle_rows(layout, seq_p, world, rank, lengths)
            mine_rows = shard_indices(seq_p, world, rank, layout, cu_seqlens=cu).tolist()  # type: ignore[arg-type]
            ok = torch.tensor([float(rows == mine_rows)])
            dist.all_reduce(ok, op=dist.ReduceOp.MIN)
            kind = "packed" if packed else "ring"
            res[f"rows/{kind}/{layout}"] = bool(ok.item())
            if lengths:
                rope_pos = shard_positions(seq_p, world, rank, layout, cu_seqlens=cu)  # type: ignore[arg-type]
                ring_pos = torch.tensor(rows)
            else:
                rope_pos = shard_positions(seq_p, world, rank, layout) + OFFSET  # type: ignore[arg-type]
                ring_pos = rope_pos

            def attend(
                q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, pos: torch.Tensor = ring_pos, cu: Any = cu
            ) -> torch.Tensor:
                return ring_attention(q, k, v, positions=pos, cu_seqlens=cu)

            for dtype in (torch.float64, torch.float32):
                name = f"{kind}/{layout}/{str(dtype).removeprefix('torch.')}"
                res[name] = max_errors(sharded_run(p, rows, rope_pos, attend, dtype), ref, rows)
            # negative control: RoPE with local positions (the classic bug), masks still from global positions
            local = torch.arange(len(rows)) + (0 if lengths else OFFSET)
            res[f"negative/{kind}/{layout}"] = max_errors(
                sharded_run(p, rows, local, attend, torch.float64), ref, rows
            )
    return res


def noncausal_case(world: int, rank: int) -> dict[str, Any]:
    lengths = doc_lengths(world)
    seq = sum(lengths)
    cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int64)
    p = global_problem(seq, seed=11)
    ref = oracle(p, rope_positions(seq, lengths), visibility(seq, lengths, causal=False))
    rows = oracle_rows("zigzag", seq, world, rank, lengths)

    def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return ring_attention(q, k, v, positions=torch.tensor(rows), cu_seqlens=cu, causal=False)

    pos = shard_positions(seq, world, rank, "zigzag", cu_seqlens=cu)
    return {
        "noncausal-packed/zigzag/float64": max_errors(
            sharded_run(p, rows, pos, attend, torch.float64), ref, rows
        )
    }


def ulysses_case(world: int, rank: int) -> dict[str, Any]:
    """Contiguous shard, RoPE at global positions, all-to-all to head shards, full causal attention, back."""
    seq = 8 * world
    gen = torch.Generator().manual_seed(13)
    hq, hkv = 2 * world, world
    p = {
        n: torch.randn(B, seq, h, D, generator=gen, dtype=torch.float64)
        for n, h in zip("qkvg", (hq, hkv, hkv, hq))
    }
    q, k, v = (p[n].clone().requires_grad_() for n in "qkv")
    qr, kr = apply_rope(q, k, torch.arange(seq) + OFFSET, SPEC)
    assert kr is not None
    out = attention_oracle(qr, kr, v, visibility(seq, None, causal=True))
    (out * p["g"]).sum().backward()
    ref = {"out": out.detach(), "dq": q.grad, "dk": k.grad, "dv": v.grad}
    rows = oracle_rows("contiguous", seq, world, rank, None)

    def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        qh, kh, vh = seq_to_heads(q), seq_to_heads(k), seq_to_heads(v)  # [b, S, h / W, d]
        return heads_to_seq(attention_oracle(qh, kh, vh, visibility(seq, None, causal=True)))

    pos = shard_positions(seq, world, rank, "contiguous") + OFFSET
    return {
        "ulysses/contiguous/float64": max_errors(sharded_run(p, rows, pos, attend, torch.float64), ref, rows)
    }


def second_order(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, attend: Attend
) -> dict[str, torch.Tensor]:
    """dq of sum(out * g) with create_graph=True, then the gradients of q, k, v of sum(dq * q) (a Hessian-vector
    product plus dq itself: a missing second-order path shows as an error, not only as "no grad_fn")."""
    q, k, v = (t.clone().requires_grad_() for t in (q, k, v))
    (dq,) = torch.autograd.grad((attend(q, k, v) * g).sum(), q, create_graph=True)
    # a lost path would read as zeros (allow_unused), the silent version of the bug
    hq, hk, hv = torch.autograd.grad((dq * q).sum(), (q, k, v), allow_unused=True, materialize_grads=True)
    return {"dq": dq.detach(), "hq": hq, "hk": hk, "hv": hv}


def double_backward_case(world: int, rank: int) -> dict[str, Any]:
    """Ulysses: exact second-order gradients through the all-to-alls; ring: create_graph=True refused everywhere."""
    seq = 4 * world
    gen = torch.Generator().manual_seed(19)
    p = {
        n: torch.randn(B, seq, h, D, generator=gen, dtype=torch.float64)
        for n, h in zip("qkvg", (2 * world, world, world, 2 * world))
    }
    vis = visibility(seq, None, causal=True)
    rows = oracle_rows("contiguous", seq, world, rank, None)
    idx = torch.tensor(rows)

    def ulysses(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return heads_to_seq(attention_oracle(seq_to_heads(q), seq_to_heads(k), seq_to_heads(v), vis))

    ref = second_order(p["q"], p["k"], p["v"], p["g"], lambda q, k, v: attention_oracle(q, k, v, vis))
    mine = second_order(*(p[n].index_select(1, idx) for n in "qkvg"), ulysses)
    res: dict[str, Any] = {"double-backward/ulysses": max_errors(mine, ref, rows)}
    x = torch.randn(1, 4, 2, 8, dtype=torch.float64, requires_grad=True)
    pos = torch.arange(4) + 4 * rank
    out = ring_attention(x, x, x, positions=pos)
    msg = _raised(lambda: torch.autograd.grad(out.square().sum(), x, create_graph=True), Exception)
    res["double-backward/ring"] = _everywhere(
        msg.startswith("RuntimeError: ring_attention is differentiable once only")
    )
    return res


def torch_cp_case(world: int, rank: int) -> dict[str, Any]:
    """PyTorch's context_parallel sharding order vs ropekit's zigzag (and its per-document balancer)."""
    try:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor.experimental import context_parallel
        from torch.distributed.tensor.experimental._attention import context_parallel_unshard
    except ImportError as e:  # pragma: no cover - older/newer torch
        return {"torch_cp": f"skipped: {e}"}
    mesh = init_device_mesh("cpu", (world,))
    seq = 4 * world
    x = torch.randn(B, seq, 3, generator=torch.Generator().manual_seed(3))
    x_buf, pos_buf = x.clone(), torch.arange(seq)
    with context_parallel(
        mesh, buffers=[x_buf, pos_buf], buffer_seq_dims=[1, 0], no_restore_buffers={x_buf, pos_buf}
    ):
        torch_x, torch_pos = x_buf.clone(), pos_buf.clone()
    (back,) = context_parallel_unshard(mesh, [torch_x], [1])
    parts = [torch.empty_like(torch_x) for _ in range(world)]
    dist.all_gather(parts, torch_x.contiguous())
    checks = torch.tensor(
        [
            float(torch.equal(torch_pos, shard_positions(seq, world, rank, "zigzag"))),
            float(torch.equal(torch_x, shard(x, world, rank, "zigzag"))),
            float(torch.equal(back, x)),
            float(torch.equal(unshard(parts, "zigzag"), x)),
        ]
    )
    dist.all_reduce(checks, op=dist.ReduceOp.MIN)
    return {
        "torch_cp": dict(zip(("positions", "shard", "torch_unshard", "ropekit_unshard"), checks.tolist()))
    }


def subgroup_case(world: int, rank: int) -> dict[str, Any]:
    """ring_attention on a 2-rank subgroup of non-adjacent global ranks {1, 3} (group ranks != global ranks)."""
    members = [1, 3]
    group = dist.new_group(members)  # every rank must call new_group
    # rank 0 is outside the group (new_group gave it torch's placeholder -100): refused before any communication,
    # naming group (seq_to_heads used to fail inside torch with "chunk expects `chunks` > 0, got: -1")
    ok = True
    if rank not in members:
        x = torch.randn(1, 4, 4, 8)
        msgs = [
            _raised(lambda: seq_to_heads(x, group), Exception),
            _raised(lambda: heads_to_seq(x, group), Exception),
            _raised(lambda: ring_attention(x, x, x, positions=torch.arange(4), group=group), Exception),
        ]
        want = f"ValueError: {{}}: this process (global rank {rank}) is not a member of group"
        ok = all(m.startswith(want.format(op)) and "-100" not in m for m, op in zip(msgs, _OPS, strict=True))
    res: dict[str, Any] = {"subgroup/non-member": _everywhere(ok)}
    seq = 16
    p = global_problem(seq, seed=17)
    ref = oracle(p, rope_positions(seq, None), visibility(seq, None, causal=True))
    if rank not in members:
        zero = torch.zeros(4, dtype=torch.float64)
        dist.all_reduce(zero, op=dist.ReduceOp.MAX)
        return res
    sub = members.index(rank)
    rows = oracle_rows("zigzag", seq, 2, sub, None)
    pos = shard_positions(seq, 2, sub, "zigzag") + OFFSET

    def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return ring_attention(q, k, v, positions=pos, group=group)

    res["subgroup/zigzag/float64"] = max_errors(sharded_run(p, rows, pos, attend, torch.float64), ref, rows)
    return res


def run(rank: int, world: int, port: int, out: str) -> None:
    torch.set_num_threads(1)
    if sys.platform.startswith("linux"):
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # loopback only, whatever the host name resolves to
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world,
        timeout=datetime.timedelta(seconds=180),  # a hang fails the test instead of blocking CI
    )
    finished = False
    try:
        res: dict[str, Any] = {}
        res.update(ring_cases(world, rank))
        res.update(noncausal_case(world, rank))
        res.update(ulysses_case(world, rank))
        res.update(agreement_case(world, rank))
        res.update(double_backward_case(world, rank))
        if world == 2:  # entering torch's context_parallel costs seconds; one world shows the order
            res.update(torch_cp_case(world, rank))
        if world == 4:
            res.update(subgroup_case(world, rank))
        if rank == 1:  # a member of every case (rank 0 is not in the subgroup)
            Path(out).write_text(json.dumps(res, indent=1))
        dist.barrier()  # leave together
        finished = True
    finally:
        dist.destroy_process_group()
    if finished:
        # torch's DeviceMesh registry (torch_cp_case) keeps the gloo group alive past destroy_process_group; its
        # C++ threads then die during interpreter finalization and abort about one run in ten ("terminate called
        # without an active exception", SIGABRT after both ranks destroyed the group; seen in CI). The results
        # are written and the group is destroyed: leave without finalization. A failing case still raises above.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)

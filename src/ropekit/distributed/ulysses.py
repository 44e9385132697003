# SPDX-License-Identifier: MIT
"""DeepSpeed-Ulysses all-to-all: sequence shards <-> head shards (Jacobs et al. 2023, arXiv 2309.14509).

Outside attention every rank holds a sequence shard with all heads; :func:`seq_to_heads` turns that into the whole
sequence with ``heads / W`` heads, attention runs locally, and :func:`heads_to_seq` goes back. RoPE is applied
**before** :func:`seq_to_heads`, on the sequence shard, with the shard's global positions; the all-to-all moves
rotated vectors and never changes a position. After :func:`seq_to_heads` the sequence is the concatenation of the
ranks' shards in rank order: the global order for the "contiguous" layout, and for any other layout the order of
``torch.cat([shard_positions(S, W, r, layout) for r in range(W)])``, which is then the causal mask's positions.

Heads are split contiguously (rank j gets heads [j*h/W, (j+1)*h/W)), so with GQA and ``h_kv % W == 0`` the q
heads of a rank read exactly the kv heads of that rank.

Shapes (bshd): [b, s, h, d] with s = S / W  <->  [b, S, h / W, d].
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from ropekit.distributed.agree import FLOATS, agree, group_info

__all__ = ["heads_to_seq", "seq_to_heads"]

_FIELDS = ("batch", "seq", "heads", "head_dim", "dtype")


def _a2a(x: torch.Tensor, group: Any, world: int, split: int, cat: int) -> torch.Tensor:
    """Split x into W pieces along ``split``, send piece j to rank j, concatenate the received along ``cat``."""
    if world == 1:
        return x
    send = torch.stack(x.chunk(world, dim=split)).contiguous()  # [W, ...]: piece j goes to rank j
    recv = torch.empty_like(send)
    dist.all_to_all_single(recv, send, group=group)
    return torch.cat(recv.unbind(0), dim=cat)


class _SeqToHeads(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, group: Any, world: int) -> torch.Tensor:
        ctx.group, ctx.world = group, world
        return _a2a(x, group, world, split=2, cat=1)

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> tuple[Any, ...]:
        # the adjoint is the inverse all-to-all, applied as the Function itself so that a backward with
        # create_graph=True records it: the second-order gradients stay exact (a bare all-to-all has no history)
        return _HeadsToSeq.apply(g.contiguous(), ctx.group, ctx.world), None, None  # type: ignore[no-untyped-call]


class _HeadsToSeq(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, group: Any, world: int) -> torch.Tensor:
        ctx.group, ctx.world = group, world
        return _a2a(x, group, world, split=1, cat=2)

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> tuple[Any, ...]:
        return _SeqToHeads.apply(g.contiguous(), ctx.group, ctx.world), None, None  # type: ignore[no-untyped-call]


def _problem(x: object, dim: int, what: str, world: int) -> tuple[type[Exception], str] | None:
    if not isinstance(x, torch.Tensor):
        return TypeError, f"x must be a torch.Tensor, got {type(x).__name__}"
    if x.dim() != 4:
        return ValueError, f"x must be bshd [batch, seq, heads, head_dim], got shape {tuple(x.shape)}"
    if x.dtype not in FLOATS:
        return ValueError, f"x must be float64, float32, bfloat16 or float16, got {x.dtype}"
    if x.shape[dim] % world:
        return ValueError, f"x has {x.shape[dim]} {what}, not divisible by the group size {world}"
    return None


def _check(op: str, x: object, dim: int, what: str, group: Any, world: int) -> torch.Tensor:
    """Local checks, then agreement of shape and dtype across the ranks (one small all_gather): an all-to-all of
    mismatched tensors aborts (gloo), hangs (NCCL) or returns another dtype's bytes."""
    problem = _problem(x, dim, what, world)
    fields: list[tuple[str, int]] = [(n, 0) for n in _FIELDS]
    if problem is None:
        assert isinstance(x, torch.Tensor)
        fields = list(zip(_FIELDS, [*x.shape, FLOATS.index(x.dtype)], strict=True))
    dev = x.device if isinstance(x, torch.Tensor) else torch.device("cpu")
    agree(op, problem, fields, group, world, dev, {"dtype": lambda i: str(FLOATS[i])})
    return x  # type: ignore[return-value]


def seq_to_heads(x: torch.Tensor, group: dist.ProcessGroup | None = None) -> torch.Tensor:
    """[b, s, h, d] sequence shard -> [b, W*s, h/W, d] (all ranks' shards in rank order, this rank's heads).

    Differentiable to any order (the backward is :func:`heads_to_seq`, recorded under ``create_graph=True``).
    Every rank of ``group`` must call it.

    Raises:
        TypeError, ValueError: x not a bshd float tensor, heads not divisible by the group size, or the ranks'
            shapes or dtypes differ -- on every rank (they agree first, so none is left waiting); this process
            not a member of ``group`` (before any communication).
    """
    world, _ = group_info("seq_to_heads", group)
    _check("seq_to_heads", x, 2, "heads", group, world)
    out: torch.Tensor = _SeqToHeads.apply(x.contiguous(), group, world)  # type: ignore[no-untyped-call]
    return out


def heads_to_seq(x: torch.Tensor, group: dist.ProcessGroup | None = None) -> torch.Tensor:
    """Inverse of :func:`seq_to_heads`: [b, W*s, h/W, d] -> [b, s, h, d]. Differentiable to any order.

    Raises:
        TypeError, ValueError: x not a bshd float tensor, sequence not divisible by the group size, or the ranks'
            shapes or dtypes differ -- on every rank; this process not a member of ``group``.
    """
    world, _ = group_info("heads_to_seq", group)
    _check("heads_to_seq", x, 1, "sequence entries", group, world)
    out: torch.Tensor = _HeadsToSeq.apply(x.contiguous(), group, world)  # type: ignore[no-untyped-call]
    return out

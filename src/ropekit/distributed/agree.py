# SPDX-License-Identifier: MIT
"""Argument agreement across the ranks of a collective, before any data moves.

A collective whose ranks pass different shapes or dtypes does not fail cleanly: gloo aborts the process, NCCL
hangs, and a mismatched dtype can even return reinterpreted bytes on one rank. A rank whose own arguments are bad
raises while the others wait in the collective. :func:`agree` runs first: every rank contributes one small row
(whether its arguments passed its local checks, then the values that must match), one ``all_gather`` moves them,
and every rank raises the same error -- the local problem of a bad rank, "rank(s) [..] rejected their arguments"
on the others, or the first field the ranks disagree on, with each rank's value. :func:`agree_values` compares a
small integer tensor itself (``cu_seqlens``), not a checksum of it; :func:`agree_partition` checks that the ranks'
offsets together cover a sequence once (packed ring attention's ``positions``). :func:`group_info` resolves
``group`` first and refuses a process outside it.

Used by :func:`ropekit.distributed.ring_attention` and the Ulysses all-to-alls. Single process (world 1): no
communication, the local problem (if any) is raised.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.distributed as dist

__all__ = ["FLOATS", "agree", "agree_partition", "agree_values", "group_info"]

#: the float dtypes the collectives accept, indexed in the agreement rows
FLOATS = (torch.float64, torch.float32, torch.bfloat16, torch.float16)

Problem = tuple[type[Exception], str] | None


def group_info(op: str, group: Any) -> tuple[int, int]:
    """(world size, this process's rank) in ``group``; (1, 0) for one process without torch.distributed.

    Raises:
        ValueError: ``group`` given without an initialized torch.distributed, or this process not a member of
            ``group`` (``torch.distributed.new_group`` hands the ranks outside the group a placeholder; a
            collective on it would fail deep inside torch or be skipped), before any communication.
    """
    initialized = dist.is_available() and dist.is_initialized()
    if group is None and not initialized:
        return 1, 0  # single process: no communication
    if not initialized:
        raise ValueError(f"{op}: group={group!r} was given but torch.distributed is not initialized")
    rank = dist.get_rank(group)
    if rank < 0:
        what = (
            "group (here group is torch's non-member placeholder GroupMember.NON_GROUP_MEMBER, which new_group "
            "returns on the ranks it leaves out)"
            if isinstance(group, int) and group == dist.GroupMember.NON_GROUP_MEMBER
            else f"group={group!r}"
        )
        raise ValueError(
            f"{op}: this process (global rank {dist.get_rank()}) is not a member of {what}; call {op} only on "
            "the group's ranks"
        )
    return dist.get_world_size(group), rank


def _gather(row: torch.Tensor, group: Any, world: int, dev: torch.device) -> torch.Tensor:
    if dev.type != "cpu" and dist.get_backend(group) == "nccl":  # NCCL moves device tensors only
        row = row.to(dev)
    rows = [torch.empty_like(row) for _ in range(world)]
    dist.all_gather(rows, row, group=group)
    return torch.stack(rows).cpu()


def agree(
    op: str,
    problem: Problem,
    fields: Sequence[tuple[str, int]],
    group: Any,
    world: int,
    dev: torch.device,
    show: dict[str, Callable[[int], str]] | None = None,
) -> None:
    """Raise on every rank if any rank's arguments are bad (``problem``) or the ranks' ``fields`` differ.

    Args:
        op: the caller's name, for the messages (e.g. "ring_attention").
        problem: this rank's local refusal (exception type, message), or None.
        fields: (name, int value) pairs that must be equal on every rank (ignored when ``problem`` is set; every
            rank must pass the same number of fields).
        show: how to print a field's values (e.g. a dtype index as its name); default the int.
    """
    if world > 1:
        vals = [0] * len(fields) if problem is not None else [v for _, v in fields]
        table = _gather(torch.tensor([int(problem is not None), *vals], dtype=torch.int64), group, world, dev)
        if problem is None and bool(table[:, 0].any()):
            bad = table[:, 0].nonzero().flatten().tolist()
            raise ValueError(f"{op}: rank(s) {bad} rejected their arguments (see their error)")
        if problem is None:
            for j, (name, _) in enumerate(fields):
                col = table[:, j + 1].tolist()
                if any(c != col[0] for c in col):
                    fmt = (show or {}).get(name, str)
                    raise ValueError(f"{op}: ranks disagree on {name}: {[fmt(c) for c in col]} (rank order)")
    if problem is not None:
        raise problem[0](problem[1])


def agree_values(op: str, name: str, values: torch.Tensor, group: Any, world: int, dev: torch.device) -> None:
    """Raise on every rank unless every rank passed the same 1-D integer ``values`` (same length already agreed
    by :func:`agree`)."""
    if world == 1:
        return
    table = _gather(values.detach().to("cpu", torch.int64).flatten(), group, world, dev)
    if bool((table != table[0]).any()):
        raise ValueError(f"{op}: ranks disagree on {name}: {table.tolist()} (rank order)")


def agree_partition(
    op: str,
    name: str,
    offsets: torch.Tensor,
    total: int,
    group: Any,
    world: int,
    dev: torch.device,
    hint: str,
) -> None:
    """Raise on every rank unless the ranks' 1-D integer ``offsets`` (equal lengths, already agreed by
    :func:`agree`; each rank's in [0, ``total``), checked by the caller), taken together, hold every offset in
    [0, ``total``) exactly once (``world * len(offsets) == total``).

    ``hint`` ends the message (what the caller's argument should have been). Single process: ``offsets`` alone
    must be a permutation of [0, ``total``).
    """
    mine = offsets.detach().to("cpu", torch.int64).flatten()
    table = mine[None] if world == 1 else _gather(mine, group, world, dev)  # [world, s]
    counts = torch.bincount(table.flatten(), minlength=total)  # callers checked each rank's range already
    if bool((counts == 1).all()):
        return
    twice = (counts > 1).nonzero().flatten()[:3].tolist()
    held = [
        f"offset {o} on ranks {[r for r in range(table.shape[0]) if bool((table[r] == o).any())]}"
        for o in twice
    ]
    raise ValueError(
        f"{op}: {name} must hold each offset in [0, {total}) once across the ranks, but some repeat "
        f"({'; '.join(held)}{', ...' if int((counts > 1).sum()) > 3 else ''}); {hint}"
    )

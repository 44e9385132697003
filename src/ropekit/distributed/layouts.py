# SPDX-License-Identifier: MIT
"""Context-parallel sequence layouts: which tokens each rank holds, and their global positions.

Pure torch, no ``torch.distributed``: these functions are the same on every rank and need no process group.

Layouts (``S`` sequence length, ``W`` world size, ``r`` rank, ``c = S / (2W)``):
    "contiguous": rank r holds tokens [r*S/W, (r+1)*S/W)                       (DeepSpeed-Ulysses, Llama 3 varlen)
    "zigzag":     S cut into 2W chunks; rank r holds chunk r then chunk 2W-1-r (TransformerEngine, Megatron,
                  torch ``_HeadTailLoadBalancer``): balanced causal work (Striped Attention paper's motivation)
    "stripe":     token t on rank t mod W, in order                            (Brandon et al. 2023, arXiv 2311.09431)

Packed documents (``cu_seqlens = [0, l0, l0 + l1, ..., S]``, global offsets in the packed row):
    "zigzag":     applied per document (TransformerEngine THD): rank r holds chunks r and 2W-1-r of every document,
                  documents in order; every document length must divide by 2W.
    "contiguous" / "stripe": the packed row is split as without documents (ring-flash-attention's llama3 varlen
                  convention); documents may straddle ranks.
    In every layout the positions restart at 0 in each document (:func:`ropekit.positions_from_cu_seqlens`).

With one rank (W = 1) every layout is the identity, for any length and any documents: no divisibility rule applies.

Two index kinds, never to be confused (Megatron PR #5243):
    :func:`shard_indices`   rows of the full tensor the rank holds (for per-token tables, M-RoPE ids, ring masks)
    :func:`shard_positions` the RoPE position of each of those rows (document-relative with ``cu_seqlens``)

Shapes: S sequence, W world size, L = S / W local length, n documents.
"""

from __future__ import annotations

from typing import Literal

import torch

from ropekit.positions.ids import check_int

__all__ = ["LAYOUTS", "Layout", "shard", "shard_indices", "shard_positions", "unshard"]

Layout = Literal["contiguous", "zigzag", "stripe"]
LAYOUTS: tuple[str, ...] = ("contiguous", "zigzag", "stripe")
_CU_DTYPES = (torch.int32, torch.int64)


def _check_layout(layout: object) -> str:
    if not isinstance(layout, str) or layout not in LAYOUTS:
        raise ValueError(f"unknown layout {layout!r}; expected one of {', '.join(map(repr, LAYOUTS))}")
    return layout


def _check_world(world_size: object, rank: object) -> tuple[int, int]:
    w = check_int("world_size", world_size, 1)
    r = check_int("rank", rank, 0)
    if r >= w:
        raise ValueError(f"rank must be in [0, world_size) = [0, {w}), got rank={r}")
    return w, r


def check_cu_seqlens(cu_seqlens: object, seq_len: int) -> torch.Tensor:
    """Validate packed-document offsets and return them as int64 on the CPU.

    Raises:
        ValueError: not a 1-D int32/int64 tensor, not starting at 0, decreasing, or last value != seq_len.
    """
    cu = cu_seqlens
    if not isinstance(cu, torch.Tensor) or cu.dim() != 1 or cu.numel() < 2 or cu.dtype not in _CU_DTYPES:
        desc = f"{cu.dtype} of shape {tuple(cu.shape)}" if isinstance(cu, torch.Tensor) else type(cu).__name__
        raise ValueError(
            f"cu_seqlens must be a 1-D int32 or int64 tensor [0, l0, l0 + l1, ..., S], got {desc}"
        )
    c = cu.detach().to("cpu", torch.int64)
    if int(c[0]) != 0:
        raise ValueError(f"cu_seqlens must start at 0, got {c.tolist()[:8]}")
    if bool((c[1:] < c[:-1]).any()):
        raise ValueError(f"cu_seqlens must be non-decreasing, got {c.tolist()[:16]}")
    if int(c[-1]) != seq_len:
        raise ValueError(f"cu_seqlens must end at the sequence length {seq_len}, got last value {int(c[-1])}")
    return c


def _divisibility(seq_len: int, world_size: int, layout: str, cu: torch.Tensor | None) -> None:
    if world_size == 1:  # one rank holds everything, in order: any length splits
        return
    if layout == "zigzag" and cu is not None:
        lengths = (cu[1:] - cu[:-1]).tolist()
        for d, n in enumerate(lengths):
            if n % (2 * world_size):
                raise ValueError(
                    f"layout 'zigzag' with cu_seqlens needs every document length divisible by "
                    f"2 * world_size = {2 * world_size}; document {d} has length {n} (pad documents first)"
                )
        return
    need = 2 * world_size if layout == "zigzag" else world_size
    if seq_len % need:
        what = "2 * world_size" if layout == "zigzag" else "world_size"
        raise ValueError(
            f"layout {layout!r} needs seq_len divisible by {what} = {need}; got seq_len={seq_len} "
            f"(seq_len % {need} = {seq_len % need}; pad the sequence first)"
        )


def _rows(seq_len: int, world_size: int, rank: int, layout: str, cu: torch.Tensor | None) -> torch.Tensor:
    w, r = world_size, rank
    if layout == "contiguous" or w == 1:  # W = 1: the identity in every layout, for any length
        n = seq_len // w
        return torch.arange(r * n, (r + 1) * n, dtype=torch.int64)
    if layout == "stripe":
        return torch.arange(r, seq_len, w, dtype=torch.int64)
    starts = [0] if cu is None else cu[:-1].tolist()
    ends = [seq_len] if cu is None else cu[1:].tolist()
    parts = []
    for a, b in zip(starts, ends):
        c = (b - a) // (2 * w)
        parts.append(torch.arange(a + r * c, a + (r + 1) * c, dtype=torch.int64))
        parts.append(torch.arange(a + (2 * w - 1 - r) * c, a + (2 * w - r) * c, dtype=torch.int64))
    return torch.cat(parts)


def _prepare(
    seq_len: object, world_size: object, rank: object, layout: object, cu_seqlens: object
) -> tuple[int, int, int, str, torch.Tensor | None]:
    s = check_int("seq_len", seq_len, 0)
    w, r = _check_world(world_size, rank)
    lay = _check_layout(layout)
    cu = None if cu_seqlens is None else check_cu_seqlens(cu_seqlens, s)
    _divisibility(s, w, lay, cu)
    return s, w, r, lay, cu


def shard_indices(
    seq_len: int,
    world_size: int,
    rank: int,
    layout: Layout = "zigzag",
    *,
    cu_seqlens: torch.Tensor | None = None,
) -> torch.Tensor:
    """Rows of the full (packed) sequence that ``rank`` holds, in the order it holds them.

    Without ``cu_seqlens`` these equal :func:`shard_positions`. With it, they are offsets into the packed row:
    index a per-token table (M-RoPE ids, a per-token cos/sin table) with them, and pass them as ``positions``
    to :func:`ropekit.distributed.ring_attention` together with ``cu_seqlens``.

    Returns:
        int64 [L] on the CPU (L = seq_len / world_size).

    Example:
        >>> shard_indices(8, 2, 0, cu_seqlens=torch.tensor([0, 4, 8])).tolist()
        [0, 3, 4, 7]
    """
    s, w, r, lay, cu = _prepare(seq_len, world_size, rank, layout, cu_seqlens)
    return _rows(s, w, r, lay, cu)


def shard_positions(
    seq_len: int,
    world_size: int,
    rank: int,
    layout: Layout = "zigzag",
    *,
    cu_seqlens: torch.Tensor | None = None,
) -> torch.Tensor:
    """Global RoPE position ids of the tokens ``rank`` holds, in the order it holds them.

    Args:
        seq_len: S, the full (packed) sequence length.
        world_size: W >= 1.
        rank: r in [0, W).
        layout: "contiguous", "zigzag" or "stripe" (module docstring).
        cu_seqlens: optional [n + 1] int32/int64 offsets of packed documents (last value == seq_len); positions
            then restart at 0 in each document.

    Returns:
        int64 [L] on the CPU. Add a constant to continue after a KV-cache or chunk offset.

    Raises:
        TypeError: seq_len, world_size or rank not an int (numpy ints and 0-d integer tensors are ints).
        ValueError: world_size < 1, rank outside [0, W), unknown layout, bad cu_seqlens, or (W > 1 only; at
            W = 1 every layout is the identity) seq_len % W (contiguous, stripe), seq_len % 2W (zigzag) or a
            document length % 2W (zigzag with cu_seqlens) non-zero.

    Example:
        >>> shard_positions(16, 4, 0).tolist()
        [0, 1, 14, 15]
    """
    s, w, r, lay, cu = _prepare(seq_len, world_size, rank, layout, cu_seqlens)
    rows = _rows(s, w, r, lay, cu)
    if cu is None:
        return rows
    doc = torch.searchsorted(cu[1:], rows, right=True)  # document of each row
    return rows - cu[doc]


def _check_dim(x: torch.Tensor, dim: object, name: str) -> int:
    dim = check_int("dim", dim)
    if not -x.dim() <= dim < x.dim():
        raise ValueError(f"dim={dim} is out of range for {name} of shape {tuple(x.shape)}")
    return dim % x.dim()


def shard(
    x: torch.Tensor,
    world_size: int,
    rank: int,
    layout: Layout = "zigzag",
    *,
    dim: int = 1,
    cu_seqlens: torch.Tensor | None = None,
) -> torch.Tensor:
    """The part of the full tensor ``x`` that ``rank`` holds along ``dim``, matching :func:`shard_positions`.

    Args:
        x: any tensor; its size along ``dim`` is the sequence length S (dim 1 for "bshd" q/k/v, 0 for tables).
        dim: sequence dimension (negative counts from the end).

    Returns:
        a new tensor with S / W entries along ``dim`` (``x`` itself is never modified).
    """
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
    d = _check_dim(x, dim, "x")
    rows = shard_indices(x.shape[d], world_size, rank, layout, cu_seqlens=cu_seqlens)
    return x.index_select(d, rows.to(x.device))


def unshard(
    parts: list[torch.Tensor] | tuple[torch.Tensor, ...],
    layout: Layout = "zigzag",
    *,
    dim: int = 1,
    cu_seqlens: torch.Tensor | None = None,
) -> torch.Tensor:
    """Inverse of :func:`shard`: the full tensor from every rank's part, ``parts[r]`` from rank r.

    With ``torch.distributed`` gather the parts first (e.g. ``all_gather``), then call this.

    Raises:
        ValueError: no parts, parts of different shapes/dtypes/devices, or a length that the layout cannot
            produce (the same divisibility rules as :func:`shard_positions`).
    """
    if not isinstance(parts, (list, tuple)) or not parts:
        raise ValueError(f"parts must be a non-empty list of every rank's tensor, got {parts!r}")
    for i, p in enumerate(parts):
        if not isinstance(p, torch.Tensor):
            raise TypeError(f"parts[{i}] must be a torch.Tensor, got {type(p).__name__}")
    first = parts[0]
    d = _check_dim(first, dim, "parts[0]")
    for i, p in enumerate(parts):
        if p.shape != first.shape or p.dtype != first.dtype or p.device != first.device:
            raise ValueError(
                f"every part must match parts[0] ({tuple(first.shape)}, {first.dtype}, {first.device}); "
                f"parts[{i}] is ({tuple(p.shape)}, {p.dtype}, {p.device})"
            )
    w = len(parts)
    s = first.shape[d] * w
    rows = torch.cat([shard_indices(s, w, r, layout, cu_seqlens=cu_seqlens) for r in range(w)])
    inverse = torch.argsort(rows)
    return torch.cat(list(parts), dim=d).index_select(d, inverse.to(first.device))

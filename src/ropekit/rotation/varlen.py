# SPDX-License-Identifier: MIT
"""Packed variable-length batches ("thd"): documents concatenated along the token axis, flash-attn's varlen layout.

``apply_rope_varlen(q, k, cu_seqlens, spec)`` rotates every document from position 0 (plus an optional per-document
offset, e.g. each document's cache length), which is :func:`ropekit.apply_rope` with
:func:`ropekit.positions_from_cu_seqlens` positions -- per-document positions, never global ones (pitfalls item 38).

Shapes: t total tokens, h heads, d head dim, n documents; cu_seqlens [n + 1].
"""

from __future__ import annotations

import torch

from ropekit.phases import INT_DTYPES
from ropekit.positions.ids import packed_documents
from ropekit.rotation.apply import apply_rope
from ropekit.spec import RopeSpec

__all__ = ["apply_rope_varlen"]


def apply_rope_varlen(
    q: torch.Tensor,
    k: torch.Tensor | None,
    cu_seqlens: torch.Tensor,
    spec: RopeSpec,
    *,
    offsets: torch.Tensor | None = None,
    inplace: bool = False,
    backend: str = "auto",
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Rotate packed documents [t, h, d]; document j's tokens get positions offsets[j] + 0, 1, ...

    Raises:
        ValueError: if cu_seqlens does not end at t (= q.shape[0]) or offsets is not [n] integers, or either is on
            the meta device (no values) while q is not (with q on meta, shapes only: meta is fine everywhere).
    """
    if not isinstance(q, torch.Tensor) or q.dim() != 3:
        shape = tuple(q.shape) if isinstance(q, torch.Tensor) else type(q).__name__
        raise ValueError(f"q must be [tokens, heads, head_dim], got {shape}")
    q_meta = q.device.type == "meta"
    if isinstance(cu_seqlens, torch.Tensor) and cu_seqlens.device.type == "meta" and not q_meta:
        raise ValueError(f"cu_seqlens is on the meta device (no values) but q is on {q.device}")
    # checks cu_seqlens and that it ends at q's token count (on the device when traced)
    tok, doc, cu = packed_documents(cu_seqlens, q.shape[0])
    pos = tok - cu[doc]
    if offsets is not None:
        n = cu.numel() - 1
        if (
            not isinstance(offsets, torch.Tensor)
            or offsets.shape != (n,)
            or offsets.dtype not in INT_DTYPES  # bool would read as 1 / 0; uint64 >= 2^63 would wrap
        ):
            raise ValueError(
                f"offsets must be an integer tensor ({', '.join(str(d) for d in INT_DTYPES)}) of shape ({n},), "
                f"got {offsets!r}"
            )
        if offsets.device.type == "meta":
            if not q_meta:
                raise ValueError(f"offsets is on the meta device (no values) but q is on {q.device}")
            pos, doc = pos.to("meta"), doc.to("meta")  # q on meta: shapes only
        off = offsets.to(pos.device, torch.int64)
        _check_offsets_fit(off, cu)
        pos = pos + off[doc]
    return apply_rope(q, k, pos.to(q.device), spec, format="thd", inplace=inplace, backend=backend)


_I64_MAX = 2**63 - 1


def _check_offsets_fit(off: torch.Tensor, cu: torch.Tensor) -> None:
    """offsets[j] + len_j - 1 must fit int64 (a wrapped position would be silently wrong); on the CPU a ValueError,
    elsewhere (or traced) a device assert, so no host sync."""
    if off.numel() == 0 or off.device.type == "meta":
        return
    span = (cu[1:] - cu[:-1]).to(off.device, torch.int64).sub(1).clamp(min=0)
    ok = (off <= _I64_MAX - span).all()
    if off.device.type == "cpu" and not torch.compiler.is_compiling():
        if not bool(ok):
            j = int(torch.nonzero(off > _I64_MAX - span)[0, 0])
            raise ValueError(
                f"offsets[{j}] + document length - 1 must fit int64 (<= {_I64_MAX}), got offset {int(off[j])} "
                f"for a document of {int(span[j]) + 1} tokens"
            )
    else:
        torch._assert_async(ok, "offsets + document length - 1 must fit int64")

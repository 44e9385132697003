# SPDX-License-Identifier: MIT
"""Does a tensor written in place have elements that share memory? (an expanded view, an ``as_strided`` view whose
heads overlap): rotating such a tensor in place rotates shared elements several times, silently wrong.

Shapes: any. Exact: the strides are first checked for the usual case (each dimension's stride clears everything
the smaller strides reach, so no two elements meet); otherwise every element's offset is enumerated (up to
``EXACT_LIMIT`` elements) and compared; a larger tensor of such a layout is reported as overlapping (refused as
"may overlap": no ordinary layout reaches that branch).
"""

from __future__ import annotations

import torch

__all__ = ["EXACT_LIMIT", "internal_overlap"]

#: the most elements whose offsets are enumerated for an unusual layout
EXACT_LIMIT = 1 << 22


def internal_overlap(x: torch.Tensor) -> bool:
    """True when two elements of ``x`` share memory (or may, for an unusual layout past ``EXACT_LIMIT`` elements)."""
    quick = torch._debug_has_internal_overlap(x)  # 0: none (dense layouts), 1: certainly, 2: "too hard" to say
    if quick != 2:
        return bool(quick)
    dims = sorted((abs(st), sz) for sz, st in zip(x.shape, x.stride(), strict=True) if sz > 1)
    reach = 0
    for st, sz in dims:
        if st <= reach:  # this dimension's first step lands inside what the smaller strides cover
            return _enumerated_overlap(x)
        reach += (sz - 1) * st
    return False


def _enumerated_overlap(x: torch.Tensor) -> bool:
    if x.numel() > EXACT_LIMIT:
        return True
    offs = torch.zeros(1, dtype=torch.int64)
    for sz, st in zip(x.shape, x.stride(), strict=True):
        offs = (offs.unsqueeze(-1) + torch.arange(sz, dtype=torch.int64) * st).flatten()
    return int(torch.unique(offs).numel()) < offs.numel()

# SPDX-License-Identifier: MIT
"""A cache of exact cos/sin rows for integer positions 0 .. L-1, and the two ways of reading it.

Exact tables cost ~25 float64 operations per (position, band) (:mod:`ropekit.reduction`), more than rotating q
and k when the tables are rebuilt per call. The rows depend only on the spec, so they are built once (same
function as every other exact table, so values are bit-identical) and read:

- eagerly (:meth:`TableCache.lookup`): a consecutive run of positions is a zero-copy slice; anything else one
  ``index_select`` of the rows (on the CPU its bounds check runs in C++, no Python-side scan of the
  positions). Positions past the cache grow it (next power of two, up to ``limit``); negative ones or ones past
  the limit return None and the caller computes exact tables directly -- never an identity rotation.
- traced (:meth:`TableCache.select`): under ``torch.compile`` no data-dependent branch and no host sync: a
  device-side select between the cached row (index clamped into range) and the directly computed exact row.

Shapes: P any position shape, L cached rows, n bands; rows [L, 2, n] float32: a position's cos row, then its sin
row, side by side. One ``narrow``/``index_select`` along dim 0 reads both, and the kernels stream a single table
array (position p's cos at ``2 n p``, its sin ``n`` floats later) instead of two (faster in prefill: measured in
docs/kernels.md, "The packed cache and the in-kernel gather"). The (cos, sin) handed out are [*P, n] views with
row stride 2n ("row views", :func:`is_row_view`); :func:`ropekit.rope_tables` and :meth:`ropekit.Rotary.tables`
copy them into plain contiguous tables for users.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ropekit.phases import INT_DTYPES, _rope_tables, _tables_from_positions, band_constant_tensor
from ropekit.spec import RopeSpec

__all__ = ["SHARED_LIMIT", "TableCache", "is_row_view", "shared_cache", "shared_tables"]

_SLICE_MIN = 64  # below this many positions a gather is as cheap as checking for a consecutive run
#: the largest value of each integer positions dtype: a run first .. first + N - 1 past it is not a run of values
#: (uint8 200..255, 0..7 wraps exactly as an arange in that dtype would, so comparing with one proves nothing)
_INT_MAX = {dt: int(torch.iinfo(dt).max) for dt in INT_DTYPES}


class TableCache:
    """Exact float32 cos/sin rows of ``spec`` for positions 0 .. length-1 on ``device`` (static specs only)."""

    __slots__ = ("device", "limit", "rows", "spec")

    def __init__(self, spec: RopeSpec, device: torch.device, length: int, limit: int) -> None:
        if spec.dynamic:
            raise ValueError(f"TableCache needs a static spec, got dynamic scaling {spec.scaling!r}")
        self.spec, self.device, self.limit = spec, device, limit
        self.rows = self._build(min(length, limit))

    def _build(self, length: int, start: int = 0) -> torch.Tensor:
        pos = torch.arange(start, length, dtype=torch.int64, device=self.device)
        cos, sin = _rope_tables(pos, self.spec)
        return torch.stack((cos, sin), dim=1)  # [length - start, 2, n]

    @property
    def length(self) -> int:
        return int(self.rows.shape[0])

    def grow(self, length: int) -> None:
        """Extend to ``length`` rows (capped at the limit); the old tensor is replaced, never written."""
        length, old = min(length, self.limit), self.rows
        if old.device.type == "meta" or length <= old.shape[0]:
            self.rows = self._build(length)
        else:  # only the new rows are computed (row values do not depend on the cache length)
            self.rows = torch.cat((old, self._build(length, start=old.shape[0])), dim=0)

    def grown_call(self, call: Callable[[torch.Tensor], int]) -> int:
        """Run ``call(rows)``, a kernel that reads these rows at positions and, when one is past them, writes
        nothing and returns the largest: then grow the cache to cover it (up to the limit) and call once more.
        Returns the last call's code (what it means otherwise is the kernel's: 0 done, negative refused, ...)."""
        rc = call(self.rows)
        if self.rows.shape[0] <= rc < self.limit:
            self.grow(1 << rc.bit_length())
            rc = call(self.rows)
        return rc

    def move(self, device: torch.device) -> None:
        length, was_meta = self.length, self.rows.device.type == "meta"
        self.device = device
        self.rows = self._build(length) if was_meta or device.type == "meta" else self.rows.to(device)

    def lookup(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
        """Eager read: (cos, sin) [*P, n] row views (row stride 2n), or None when a position is outside [0, limit).

        positions: integer tensor on the cache's device (checked by the caller).
        """
        hit = self.lookup_flat(positions.reshape(-1) if positions.dim() != 1 else positions)
        if hit is None or positions.dim() == 1:
            return hit
        shape = (*positions.shape, self.rows.shape[-1])
        return hit[0].view(shape), hit[1].view(shape)

    def lookup_flat(self, flat: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
        """:meth:`lookup` for 1-D positions [N]: (cos, sin) [N, n] row views (strides (2n, 1), sin n floats after
        cos), or None. Slices of the cache for a consecutive run, else of a fresh gather."""
        out = self.packed_rows(flat)
        if out is None:
            return None
        cos, sin = out.unbind(1)
        return cos, sin

    def packed_rows(self, flat: torch.Tensor) -> torch.Tensor | None:
        """The rows of 1-D positions [N] as one [N, 2, n] tensor (a slice of the cache for a consecutive run, else
        a fresh gather), or None when a position is outside [0, limit). The decode fast paths hand its data pointer
        to a prepared kernel plan (cos at row offset 0, sin at n) without making two views of it."""
        if torch._C._are_functorch_transforms_active() and torch._C._functorch.is_batchedtensor(flat):
            return None  # vmap over the positions: no data-dependent read; the caller's exact path serves them
        rows = self.rows
        out = None
        if flat.numel() >= _SLICE_MIN:
            first = int(flat[0])
            end = first + flat.numel()
            # end - 1 must fit the positions' dtype: else the arange below wraps like the positions do and a
            # wrapped run (uint8 200..255, 0..7) would pass as first .. end - 1 (it is gathered instead)
            if 0 <= first and end <= rows.shape[0] and end - 1 <= _INT_MAX.get(flat.dtype, -1):
                run = torch.arange(first, end, dtype=flat.dtype, device=flat.device)
                if torch.equal(flat, run):
                    out = rows.narrow(0, first, end - first)
        if out is None:
            idx = flat if flat.dtype in (torch.int64, torch.int32) else flat.to(torch.int64)
            if rows.is_cpu:
                try:
                    out = rows.index_select(0, idx)  # bounds-checked in C++: raises on any idx < 0 or >= L
                except (IndexError, RuntimeError):  # the message differs between index_select kernels
                    out = self._grow_for(idx)
            else:  # a device-side bounds failure would be fatal: check first (one sync)
                out = self._grow_for(idx)
        return out

    def _grow_for(self, idx: torch.Tensor) -> torch.Tensor | None:
        if idx.numel() == 0:
            return self.rows.index_select(0, idx)
        lo, hi = (int(v) for v in torch.aminmax(idx))
        if lo < 0 or hi >= self.limit:
            return None
        if hi >= self.length:
            self.grow(1 << hi.bit_length())
        return self.rows.index_select(0, idx)

    def select(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Traceable read: cached rows where 0 <= p < L, directly computed exact rows elsewhere (no sync).

        Both branches are exact and equal where both apply; the select only decides which one is read.
        """
        rows = self.rows
        p = positions.to(torch.int64)
        inside = (p >= 0) & (p < rows.shape[0])
        cached = rows.index_select(0, torch.where(inside, p, 0).reshape(-1)).view(*p.shape, 2, rows.shape[-1])
        consts = band_constant_tensor(self.spec, None, rows.device)
        dcos, dsin = _tables_from_positions(p, consts, self.spec.attention_factor, torch.float32)
        keep = inside.unsqueeze(-1)
        return torch.where(keep, cached[..., 0, :], dcos), torch.where(keep, cached[..., 1, :], dsin)


def is_row_view(t: torch.Tensor) -> bool:
    """True when ``t`` [*P, n] is laid out as the cache hands tables out: unit last stride and rows 2n floats
    apart in row-major order of P (what a plan built on a cache read expects of every later read)."""
    if t.dim() == 0 or t.stride(-1) != 1:
        return False
    step = 2 * t.shape[-1]
    for size, stride in zip(reversed(t.shape[:-1]), reversed(t.stride()[:-1])):
        if size != 1 and stride != step:
            return False
        step *= size
    return True


# ---------------------------------------------------------------- one shared cache per (spec, device)
_SHARED: dict[tuple[int, torch.device], tuple[RopeSpec, TableCache]] = {}
_SHARED_MAX_SPECS = 8
#: rows of the shared cache per (spec, device), grown on demand like Rotary's: 2^18 positions at most
#: (128 MiB of float32 cos + sin at 64 bands)
SHARED_LIMIT = 1 << 18


def shared_cache(spec: RopeSpec, device: torch.device) -> TableCache | None:
    """The cache :func:`ropekit.apply_rope` and :func:`ropekit.rope_tables` share for ``spec`` on ``device``
    (None for dynamic specs and devices that cannot hold it)."""
    if spec.dynamic or device.type in ("meta", "mps"):
        return None
    ck = (id(spec), device)
    hit = _SHARED.get(ck)
    if hit is None or hit[0] is not spec:  # the spec is kept alive, so its id cannot be reused meanwhile
        if len(_SHARED) >= _SHARED_MAX_SPECS:
            _SHARED.clear()
        hit = _SHARED[ck] = (spec, TableCache(spec, device, 4096, SHARED_LIMIT))
    return hit[1]


def shared_tables(positions: torch.Tensor, spec: RopeSpec) -> tuple[torch.Tensor, torch.Tensor] | None:
    """Exact float32 (cos, sin) [*P, n] of integer positions from the spec's shared cache (read-only: may be views
    of it), or None when a position is negative or past :data:`SHARED_LIMIT` (the caller computes those)."""
    cache = shared_cache(spec, positions.device)
    if cache is None:
        return None
    return cache.lookup_flat(positions) if positions.dim() == 1 else cache.lookup(positions)

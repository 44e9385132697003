# SPDX-License-Identifier: MIT
"""A cache of exact cos/sin rows for integer positions 0 .. L-1, and the two ways of reading it.

Exact tables cost ~25 float64 operations per (position, band) (:mod:`ropekit.reduction`), more than rotating q
and k when the tables are rebuilt per call. The rows depend only on the spec, so they are built once (same
function as every other exact table, so values are bit-identical) and read:

- eagerly (:meth:`TableCache.lookup`): one position or a consecutive run of them is a zero-copy slice; anything
  else one ``index_select`` of the rows (on the CPU its bounds check runs in C++, no Python-side scan of the
  positions). Positions past the cache grow it (next power of two, up to ``limit``) when the new rows are
  worth it for the call (:func:`_worth`: a prefill of 0 .. N-1, decode's next position); a far position (a
  time series' second of the day, a resumed offset) never builds every row below it (2^18 rows took seconds
  and ~640 MB peak on the first call): it is read from one window of far positions, built on whole blocks and
  doubled as decode moves on (at most one window, replaced when a call lands elsewhere), or, for positions
  spread too thinly, its rows are computed for that call alone. Negative positions and ones past the limit
  return None and the caller computes exact tables directly -- never an identity rotation.
- traced (:meth:`TableCache.select`): under ``torch.compile`` no data-dependent branch and no host sync: a
  device-side select between the cached row (index clamped into range) and the directly computed exact row.

Shapes: P any position shape, L cached rows, W window rows, n bands; rows [L, 2, n] and the window [W, 2, n]
float32: a position's cos row, then its sin row, side by side (the kernels read ``rows`` only, by position). One ``narrow``/``index_select`` along dim 0 reads both, and the kernels stream a single table
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
#: growth policy (:func:`_worth`): rows always worth adding in one call (~5 ms and 2 MiB at 64 bands, one thread)
_FREE_ROWS = 4096
_ROWS_PER_POSITION = 4  #: past _FREE_ROWS, a call may add this many rows per position it asks for
_BLOCK = 256  #: the far window starts and ends on multiples of this many positions
_CHUNK_ENTRIES = 1 << 16  #: rows are built about this many (position, band) entries at a time
_CHUNK_POSITIONS = 4096  #: and never more positions than rope_tables computes without de-duplicating


class TableCache:
    """Exact float32 cos/sin rows of ``spec`` on ``device`` (static specs only): positions 0 .. length-1 (the
    prefix ``rows``, which the kernels index by position) and at most one window of far positions (``far``)."""

    __slots__ = ("device", "far", "limit", "rows", "spec")

    def __init__(self, spec: RopeSpec, device: torch.device, length: int, limit: int) -> None:
        if spec.dynamic:
            raise ValueError(f"TableCache needs a static spec, got dynamic scaling {spec.scaling!r}")
        self.spec, self.device, self.limit = spec, device, limit
        #: (start, rows [W, 2, n] of positions start .. start + W - 1, past the prefix), or None: no window. One
        #: attribute, replaced whole (never written), so a reader on another thread sees a start with its rows
        self.far: tuple[int, torch.Tensor] | None = None
        self.rows = self._build(min(length, limit))

    def _build(self, length: int, start: int = 0) -> torch.Tensor:
        return self._rows_of(torch.arange(start, length, dtype=torch.int64, device=self.device))

    def _rows_of(self, pos: torch.Tensor) -> torch.Tensor:
        """Exact rows [N, 2, n] of 1-D integer positions [N], built a chunk at a time: the exact reduction's
        float64 intermediates of one chunk stay in the CPU caches (one 2^17-row build: ~14 us a row, in chunks
        ~1.4, one thread). Each row is computed from its own position alone, so chunking changes no value."""
        n = int(self.spec.n_bands)
        out = torch.empty(pos.shape[0], 2, n, dtype=torch.float32, device=self.device)
        step = max(1, min(_CHUNK_POSITIONS, _CHUNK_ENTRIES // n))
        for i in range(0, pos.shape[0], step):
            cos, sin = _rope_tables(pos[i : i + step], self.spec)
            out[i : i + step, 0] = cos
            out[i : i + step, 1] = sin
        return out

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
        far = self.far
        if far is not None and far[0] + far[1].shape[0] <= self.length:
            self.far = None  # the prefix now holds every row of the window

    def _prefix_target(self, hi: int, count: int) -> int | None:
        """The length to grow the prefix to for position ``hi`` (< limit) asked for with ``count`` positions,
        or None when that many new rows are not worth it (:func:`_worth`): a far position is read elsewhere."""
        have = self.length
        new = min(1 << hi.bit_length(), self.limit)
        return new if _worth(new - have, have, count) else None

    def grown_call(self, call: Callable[[torch.Tensor], int]) -> int:
        """Run ``call(rows)``, a kernel that reads these rows at positions and, when one is past them, writes
        nothing and returns the largest: then grow the cache to cover it (when that is worth it for one position,
        :func:`_worth`: decode's next position, a few thousand rows; not a far position) and call once more.
        Returns the last call's code (what it means otherwise is the kernel's: 0 done, negative refused, ...): the
        largest position when it is still past the rows (the caller's exact path then serves the call)."""
        rc = call(self.rows)
        if self.rows.shape[0] <= rc < self.limit:
            new = self._prefix_target(rc, 1)
            if new is not None:
                self.grow(new)
                rc = call(self.rows)
        return rc

    def move(self, device: torch.device) -> None:
        length, was_meta = self.length, self.rows.device.type == "meta"
        self.device, self.far = device, None  # the window is rebuilt where it is needed next
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
            # vmap over the positions: no data-dependent read; the caller's exact path serves them
            return None
        rows = self.rows
        if flat.numel() == 1 and flat.is_cpu:  # decode: a slice of the prefix or of the window, no gather
            p, far = int(flat), self.far
            if 0 <= p < rows.shape[0]:
                return rows.narrow(0, p, 1)
            if far is not None and 0 <= p - far[0] < far[1].shape[0]:
                return far[1].narrow(0, p - far[0], 1)
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
            if rows.is_cpu and self.far is None:  # (a raise costs ~160 us: not once per far decode step)
                try:
                    out = rows.index_select(0, idx)  # bounds-checked in C++: raises on any idx < 0 or >= L
                except (IndexError, RuntimeError):  # the message differs between index_select kernels
                    out = self._cover(idx)
            else:  # a device-side bounds failure would be fatal: check first (one sync); or a window to read
                out = self._cover(idx)
        return out

    def _cover(self, idx: torch.Tensor) -> torch.Tensor | None:
        """Rows [N, 2, n] of positions idx [N] that may lie past the prefix: the prefix grows when that is worth
        it (:func:`_worth`); else positions past it are read from the far window (built or extended when worth
        it) or computed for this call alone. None when a position is outside [0, limit)."""
        if idx.numel() == 0:
            return self.rows.index_select(0, idx)
        if idx.numel() <= _SLICE_MIN and idx.is_cpu:  # decode: reading the values beats two tensor reductions
            vals = idx.tolist()
            lo, hi = min(vals), max(vals)
        else:
            lo, hi = (int(v) for v in torch.aminmax(idx))
        if lo < 0 or hi >= self.limit:
            return None
        if hi >= self.length:
            new = self._prefix_target(hi, idx.numel())
            if new is not None:
                self.grow(new)
        have = self.length
        if hi < have:
            return self.rows.index_select(0, idx)
        if lo >= have:
            return self._far_rows(idx, lo, hi)
        past = idx >= have  # some positions in the prefix, some past it (one sync: an eager CPU read anyway)
        far_idx = idx[past]
        out = self.rows.index_select(0, idx.clamp(max=have - 1))
        out[past] = self._far_rows(far_idx, int(far_idx.min()), hi)
        return out

    def _far_rows(self, idx: torch.Tensor, lo: int, hi: int) -> torch.Tensor:
        """Rows [N, 2, n] of positions idx [N] in [lo, hi], all past the prefix: read from the window when it
        covers them (a slice for a consecutive run), else computed directly (exact rows of these positions only)."""
        n, far = idx.numel(), self._window(lo, hi, idx.numel())
        if far is None:
            return self._rows_of(idx.to(torch.int64))
        start, rows = far
        if hi - lo + 1 == n and (
            n == 1 or torch.equal(idx, torch.arange(lo, hi + 1, dtype=idx.dtype, device=idx.device))
        ):  # one position or a consecutive run: a slice of the window, no gather
            return rows.narrow(0, lo - start, n)
        return rows.index_select(0, idx - start)

    def _window(self, lo: int, hi: int, count: int) -> tuple[int, torch.Tensor] | None:
        """Make the far window cover positions lo .. hi (past the prefix, < limit), asked for with ``count``
        positions: extend it (forward at least to twice its size: decode at far positions) or replace it by a new
        one on whole blocks, when the rows that adds are worth it (:func:`_worth`). Returns the window (start, rows)
        that covers them, or None: not worth it."""
        start, end = lo - lo % _BLOCK, min(-(-(hi + 1) // _BLOCK) * _BLOCK, self.limit)
        far = self.far
        if far is not None:
            s, old = far
            w = int(old.shape[0])
            if s <= lo and hi < s + w:
                return far
            us, ue = min(s, start), max(s + w, end)
            if ue > s + w:
                ue = max(ue, min(s + 2 * w, self.limit))
            if _worth(ue - us - w, w, count):
                parts = [self._build(s, us)] if us < s else []
                parts.append(old)
                if ue > s + w:
                    parts.append(self._build(ue, s + w))
                far = self.far = (us, torch.cat(parts, dim=0))
                return far
        if not _worth(end - start, 0, count):
            return None
        far = self.far = (start, self._build(end, start))  # a window elsewhere is dropped
        return far

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


def _worth(extra: int, have: int, count: int) -> bool:
    """Whether adding ``extra`` rows to a block of ``have`` rows is worth it for a call asking for ``count``
    positions: always up to _FREE_ROWS rows; past that, at most as many as the block holds (doubling: amortized
    over the decode steps that fill it) or _ROWS_PER_POSITION per position asked for (a prefill). A far position
    asked for alone never builds every row up to it (2^18 rows: seconds and ~640 MB peak, was the case)."""
    return extra <= max(have, _ROWS_PER_POSITION * count, _FREE_ROWS)


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

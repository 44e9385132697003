# SPDX-License-Identifier: MIT
"""``Rotary``: the nn.Module an attention layer holds (seed 000: ``rotary_emb(position_ids) -> cos, sin``).

It owns a spec and a float32 cos/sin cache for integer positions ``0 .. L-1`` built with exact phases
(:mod:`ropekit.phases`), and rotates q and k at explicit positions. Design points, each a bug seen elsewhere
(``shared/reference/pitfalls.md``):

- ``model.to(torch.bfloat16)`` / ``.half()`` cannot degrade it: the ``inv_freq`` buffer is re-derived from the
  spec in float32 after every ``_apply``, and the cos/sin cache lives outside the buffer list and only follows the
  device (HF transformers #25681/#29496, rotary-embedding-torch item 51).
- No state-dict entries: buffers are non-persistent, frequencies always come from the spec.
- The cache (:class:`ropekit.table_cache.TableCache`) grows (to the next power of two) when positions exceed
  it, up to ``cache_limit`` rows, if the call asks for enough positions to be worth the new rows (a prefill,
  decode's next position); a far position (e.g. 140000 on the first call) is read from a small window of far
  rows or computed for that call, never by building every row below it. Positions past ``cache_limit``,
  negative or fractional positions, and dynamic phase maps use exact tables computed on the fly -- never an
  identity rotation for out-of-table positions (flash-attn's Triton path, pitfalls item 41). Every int64
  position is exact (:mod:`ropekit.reduction`).
- Under ``torch.compile(fullgraph=True)`` there is no host sync and no data-dependent branch: the cache is read
  with a device-side select between the cached row and the directly computed exact row, and it does not grow.
- It can be built on the meta device; ``to_empty(device=...)`` then rebuilds everything from the spec.

Shapes: as :func:`ropekit.apply_rope` for the module's ``format``; tables [*P, n], n = rotary_dim // 2.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from ropekit.integers import whole
from ropekit.phases import INT_DTYPES as _INT
from ropekit.phases import _rope_tables, check_positions
from ropekit.rotation import fastpath
from ropekit.rotation.apply import apply_rope, apply_rope_tables
from ropekit.rotation.apply_checks import FORMATS, Format, _check_positions_shape, _validate
from ropekit.rotation.autograd import transforms_active
from ropekit.rotation.dispatch import device_tables
from ropekit.spec import RopeSpec
from ropekit.table_cache import TableCache

__all__ = ["Rotary"]


class Rotary(nn.Module):
    """Rotary position embedding for one attention layer (Su et al. 2021, RoFormer; seed 004).

    Args:
        spec: the RoPE configuration.
        max_seq_len: rows of the cos/sin cache built up front (positions 0 .. max_seq_len - 1), at most
            ``cache_limit`` (a larger value is capped there; every position stays exact either way).
        format: tensor format of q and k: "bshd", "bhsd" or "thd".
        cache_limit: the cache never grows beyond this many rows (default 2**18: 128 MiB at head_dim 128);
            larger positions are computed exactly on the fly. A far position below it is read from a window of
            rows around it (the cache does not build every row up to it).
        device: where the buffers live (default: the current default device, so ``with torch.device("meta")``
            works).

    Example:
        >>> rope = Rotary(RopeSpec(head_dim=64, base=500_000.0))
        >>> q, k = torch.randn(2, 16, 8, 64), torch.randn(2, 16, 2, 64)
        >>> q, k = rope(q, k, positions=torch.arange(16))
    """

    inv_freq: torch.Tensor
    _on_meta: bool = False  # set per instance in __init__ and _apply (the class default serves old pickles)

    def __init__(
        self,
        spec: RopeSpec,
        *,
        max_seq_len: int = 4096,
        format: Format = "bshd",
        cache_limit: int = 1 << 18,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__()
        if not isinstance(spec, RopeSpec):
            raise TypeError(f"spec must be a ropekit.RopeSpec, got {type(spec).__name__}")
        max_seq_len = whole(max_seq_len, 1, f"max_seq_len must be a positive int, got {max_seq_len!r}")
        cache_limit = whole(cache_limit, 1, f"cache_limit must be a positive int, got {cache_limit!r}")
        if format not in FORMATS:
            raise ValueError(f"format must be one of {FORMATS}, got {format!r}")
        self.spec = spec
        self.format: Format = format
        self.cache_limit = cache_limit
        dev = torch.empty(0).device if device is None else torch.device(device)
        self.register_buffer("inv_freq", spec.inv_freq(device=dev), persistent=False)
        self._cache: TableCache | None = None
        if not spec.dynamic:
            self._cache = TableCache(spec, dev, min(max_seq_len, cache_limit), cache_limit)
        # on the meta device (its cache has no values): forward's one per-call check (a plain attribute, kept by
        # _apply), so a q with values is refused before a stored plan reads the cache
        self._on_meta = dev.type == "meta"

    # ------------------------------------------------------------------ cache
    @property
    def cached_len(self) -> int:
        """Rows currently in the cos/sin cache (positions 0 .. cached_len - 1)."""
        return 0 if self._cache is None else self._cache.length

    def _apply(self, fn: Callable[[torch.Tensor], torch.Tensor], recurse: bool = True) -> Rotary:
        super()._apply(fn, recurse)  # type: ignore[no-untyped-call]
        dev = self.inv_freq.device
        # Re-derive instead of trusting a cast (e.g. .to(bfloat16) would round theta to 3 significant digits).
        self.inv_freq = self.spec.inv_freq(device=dev)
        if self._cache is not None and self._cache.rows.device != dev:
            self._cache.move(dev)
        self._on_meta = dev.type == "meta"
        return self

    def _check_meta(self, q: object, positions: object) -> None:
        """Refuse tables with no values (meta positions, or this module on meta) for a q that has values; before
        anything is computed or written. A q on meta is shape inference: everything may be on meta then."""
        if not isinstance(q, torch.Tensor) or q.device.type == "meta":
            return
        if isinstance(positions, torch.Tensor) and positions.device.type == "meta":
            raise ValueError(f"positions are on the meta device (no values) but q is on {q.device}")
        if self.inv_freq.device.type == "meta":
            raise ValueError(
                f"this Rotary is on the meta device (its cos/sin cache has no values) but q is on {q.device}; "
                "move the module first with .to_empty(device=...) or .to(device)"
            )

    def _tables(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(cos, sin) [*P, n] for checked positions on the module's device; may be read-only cache views."""
        cache = self._cache
        if positions.device.type == "cuda" and not torch.compiler.is_compiling():
            hit = device_tables(positions, self.spec)  # one launch, no host sync
            if hit is not None:
                return hit
        if cache is not None and positions.dtype in _INT and positions.device.type != "meta":
            if torch.compiler.is_compiling():
                return cache.select(positions)
            hit = cache.lookup(positions)
            if hit is not None:
                return hit
        return _rope_tables(positions, self.spec, device=self.inv_freq.device)

    def tables(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """float32 (cos, sin) of shape [*P, n] for ``positions`` [*P], from the cache when possible.

        Exact for every integer position (and float positions below 2^63); fresh tensors the caller may modify.
        A multi-axis spec (``spec.axes``) takes positions [n_axes, *P], as :meth:`forward` does, and returns the
        per-token tables [*P, n] that :func:`ropekit.axis_tables` gives (each band at its axis' position).
        """
        if isinstance(positions, torch.Tensor) and positions.requires_grad:  # learned / continuous positions
            from ropekit.positions_grad import position_grad_tables

            return position_grad_tables(positions, self.spec, device=self.inv_freq.device)
        if self.spec.axes is not None:
            from ropekit.axis_rotary import cached_axis_tables
            from ropekit.axis_tables import check_axis_positions

            pos = check_axis_positions(positions, self.spec)
            self._check_meta_positions(pos)
            cos, sin = cached_axis_tables(self, pos.to(self.inv_freq.device), self.spec)
            return cos.clone(memory_format=torch.contiguous_format), sin.clone(
                memory_format=torch.contiguous_format
            )
        check_positions(positions)
        self._check_meta_positions(positions)
        cos, sin = self._tables(positions.to(self.inv_freq.device))
        if cos._base is not None or sin._base is not None:  # row views of the packed cache: contiguous copies
            cos = cos.clone(memory_format=torch.contiguous_format)
            sin = sin.clone(memory_format=torch.contiguous_format)
        return cos, sin

    def _check_meta_positions(self, positions: torch.Tensor) -> None:
        """:meth:`tables` go on the module's device: meta positions have no values to put anywhere else."""
        dev = self.inv_freq.device
        if positions.device.type == "meta" and dev.type != "meta":
            raise ValueError(
                f"positions are on the meta device (no values) but this Rotary is on {dev} (its tables go there)"
            )

    # ------------------------------------------------------------------ forward
    def _decode_fast(
        self, q: torch.Tensor, k: torch.Tensor | None, positions: torch.Tensor, inplace: bool
    ) -> tuple[tuple[object, ...] | None, tuple[torch.Tensor, torch.Tensor | None] | None]:
        """(call key, result): the result when this call geometry (q, k, positions' dtype/shape/device) was
        validated before and the cache holds every position -- one gather and one kernel call (decoding)."""
        cache = self._cache
        if cache is None or torch.compiler.is_compiling():
            return None, None
        akey = fastpath.apply_key(q, k, positions, self.spec, self.format, inplace, "auto")
        hit = fastpath.apply_lookup(akey, self.spec)
        # a plan exists only for CPU tensors (the key holds q's and the positions' devices)
        if hit is not None and positions.is_cpu:
            out = fastpath.run_cached(hit[0], q, k, cache, positions)  # the plan's cache rows
            if out is not None:
                return akey, out
        return akey, None

    def _functional(
        self, q: torch.Tensor, k: torch.Tensor | None, positions: torch.Tensor, inplace: bool
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The functional entry point for this spec (:func:`ropekit.apply_rope` / :func:`ropekit.apply_rope_axes`),
        never the module's cache or stored plans: float64 inputs (exact float64 tables, not the float32 cache), and
        dual tensors or a torch.func transform (differentiable PyTorch ops, :mod:`ropekit.rotation.autograd`: a
        stored kernel plan would drop the tangent, the cache gathers read memory a functorch wrapper has not)."""
        fmt = self.format
        if self.spec.axes is not None:
            from ropekit.axis_tables import apply_rope_axes

            return apply_rope_axes(q, k, positions, self.spec, format=fmt, inplace=inplace)
        return apply_rope(q, k, positions, self.spec, format=fmt, inplace=inplace)

    def forward(
        self,
        q: torch.Tensor,
        k: torch.Tensor | None = None,
        *,
        positions: torch.Tensor,
        inplace: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Rotate q (and k) at ``positions``; see :func:`ropekit.apply_rope` for shapes and dtypes.

        Returns:
            (q_rot, k_rot), k_rot None when k is None. float64 q or k are rotated with float64 tables, as by
            :func:`ropekit.apply_rope` (the module's cache holds float32 rows: it serves the other dtypes).
            Forward-mode AD (dual tensors) and torch.func transforms (vmap, grad, jvp, jacrev, ...) are routed, as
            float64 is, to :func:`ropekit.apply_rope` (multi-axis: :func:`ropekit.apply_rope_axes`), which rotates
            them with differentiable PyTorch ops.
        """
        if self._on_meta:  # no values in the cache: refused unless q is on meta too (shape inference)
            self._check_meta(q, positions)
        if (
            # learned / continuous positions; forward-AD or torch.func; float64
            (isinstance(positions, torch.Tensor) and positions.requires_grad)
            or transforms_active()  # forward-AD dual level open or torch.func running: one C call, ~free otherwise
            or (isinstance(q, torch.Tensor) and q.dtype is torch.float64)
            or (isinstance(k, torch.Tensor) and k.dtype is torch.float64)
        ):
            return self._functional(q, k, positions, inplace)
        if self.spec.axes is not None:  # multi-axis spec: positions [n_axes, ...] (ropekit.axis_tables)
            from ropekit.axis_memo import equal_row_memo, memo_hit, remember_equal_row
            from ropekit.axis_rotary import rotary_forward_axes
            from ropekit.axis_tables import apply_rope_axes, check_axes_shape, equal_axes_row

            if isinstance(q, torch.Tensor) and q.device.type == "cuda" and not torch.compiler.is_compiling():
                # one Triton launch reads every band's axis position (no tables, no host sync), as for 1-D below
                return apply_rope_axes(q, k, positions, self.spec, format=self.format, inplace=inplace)

            if memo_hit(self, positions) is not None:  # same positions tensor as the last (multi-axis) call
                return rotary_forward_axes(self, q, k, positions, inplace)
            if isinstance(positions, torch.Tensor) and positions.is_meta:  # never memoised: seen every call
                self._check_meta(q, positions)
            same = equal_row_memo(self, positions)
            if same is None:
                same = equal_axes_row(positions, self.spec)  # all axes equal: exactly the 1-D rotation below
                if same is None:
                    return rotary_forward_axes(self, q, k, positions, inplace)
                remember_equal_row(self, positions, same)
            if isinstance(q, torch.Tensor) and q.dim() == (3 if self.format == "thd" else 4):
                check_axes_shape(positions, q, self.format)  # the message names the multi-axis shapes given
            positions = same
        if isinstance(q, torch.Tensor) and q.device.type == "cuda" and not torch.compiler.is_compiling():
            # one Triton launch reads (or computes) the exact rows itself: no host sync, no module cache
            return apply_rope(q, k, positions, self.spec, format=self.format, inplace=inplace)
        akey, out = self._decode_fast(q, k, positions, inplace)
        if out is not None:
            return out
        check_positions(positions)
        if not isinstance(q, torch.Tensor) or q.dim() != (3 if self.format == "thd" else 4):
            _validate(q, k, positions, self.spec, self.format, inplace, "auto")  # raises the precise error
        _check_positions_shape(positions, q, self.format)
        if positions.is_meta:  # (a module on meta was checked on entry)
            self._check_meta(q, positions)
        pos = positions
        if self.format != "thd" and pos.dim() == 2 and pos.shape[0] == 1:
            pos = pos.reshape(-1)
        if pos.device.type == "meta":  # q on meta too (else refused above): meta tables of the right shape
            cos, sin = _rope_tables(pos, self.spec)
        else:
            dev = self.inv_freq.device
            cos, sin = self._tables(pos if pos.device == dev else pos.to(dev))
        if cos.device != q.device:
            cos, sin = cos.to(q.device), sin.to(q.device)
        out = apply_rope_tables(q, k, cos, sin, self.spec, format=self.format, inplace=inplace)  # validates
        if akey is not None:
            plan = fastpath.lookup(
                fastpath.key(q, k, cos, sin, self.spec, self.format, inplace, "auto"), self.spec
            )
            if plan is not None:
                fastpath.apply_store(akey, self.spec, plan, cos)
        return out

    def extra_repr(self) -> str:
        s = self.spec
        return (
            f"head_dim={s.head_dim}, rotary_dim={s.rotary_dim}, "
            f"{'freqs=explicit' if s.freqs is not None else f'base={s.base:g}'}, layout={s.layout!r}, "
            f"format={self.format!r}, cached_len={self.cached_len}"
        )

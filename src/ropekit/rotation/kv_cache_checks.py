# SPDX-License-Identifier: MIT
"""Argument checks of the fused RoPE + KV-cache write (:mod:`ropekit.rotation.kv_cache`), before any write.

Tensor kinds, dtypes and devices, layout names, index tensors, every slot and offset in range (in C when the
kernel is built), and the memory checks: no written tensor overlapping itself, the other cache or an input.
Each check raises ValueError / TypeError naming the argument (MemoryError when C cannot allocate its scratch).

Shapes: as in :mod:`ropekit.rotation.kv_cache` (B batch, S new tokens per sequence, T tokens, paged).
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable

import torch
import torch.autograd.forward_ad as _fwad

from ropekit.integers import INT64_SPAN, as_int, shown
from ropekit.kernels import cpu_build
from ropekit.phases import INT_DTYPES
from ropekit.rotation.autograd import transforms_active
from ropekit.rotation.overlap import internal_overlap

_FLOATS = (torch.float32, torch.bfloat16, torch.float16, torch.float64)


def _tensor(name: str, x: object, dims: int, what: str) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor {what}, got {type(x).__name__}")
    if x.dim() != dims:
        raise ValueError(f"{name} must be {dims}-D {what}, got shape {tuple(x.shape)}")
    if x.dtype not in _FLOATS:
        raise ValueError(f"{name} must be float32, bfloat16, float16 or float64, got {x.dtype}")
    if x.requires_grad and torch.is_grad_enabled():
        raise ValueError(
            f"{name} requires grad, but the cache write is inference-only (nothing is differentiated through the "
            "cache): call it under torch.no_grad() or detach"
        )
    return x


def _check_untransformed(fn: str, index_name: str, *args: object) -> None:
    """The transforms check of both cache writes (``fn``, whose index argument is ``index_name``): refuse dual
    tensors (forward-mode AD) and torch.func transforms, as the write is inference-only: its kernel and index
    writes cannot carry a tangent into the cache (it would be dropped silently) and functorch's wrapped tensors
    have no memory to write. ``args``: k, v, cache_k, cache_v, the index, q, positions, tables. Nothing is checked
    unless :func:`ropekit.rotation.autograd.transforms_active` (a forward-AD level is open or torch.func is
    running): the eager fast path pays that cheap gate only."""
    if not transforms_active():
        return
    *front, tables = args
    tabs = tables if isinstance(tables, tuple) else (tables,)
    tnames = ("tables[0] (cos)", "tables[1] (sin)") if isinstance(tables, tuple) else ("tables",)
    names = ("k", "v", "cache_k", "cache_v", index_name, "q", "positions", *tnames)
    named = zip(names, (*front, *tabs), strict=False)
    functorch = torch._C._are_functorch_transforms_active()
    for name, x in named:
        if not isinstance(x, torch.Tensor):
            continue
        if functorch and torch._C._functorch.is_functorch_wrapped_tensor(x):
            raise ValueError(
                f"{name} is a tensor of a torch.func transform (vmap, grad, jvp, jacrev, ...; shape "
                f"{tuple(x.shape)}), but {fn} is inference-only: it writes the cache in place and "
                "nothing is differentiated or batched through it; call it outside the transform (rotate with "
                "ropekit.apply_rope where a derivative is needed)"
            )
        if _fwad._current_level >= 0 and _fwad.unpack_dual(x).tangent is not None:  # type: ignore[no-untyped-call]
            raise ValueError(
                f"{name} carries a forward-mode AD tangent (torch.autograd.forward_ad.make_dual; shape "
                f"{tuple(x.shape)}), but {fn} is inference-only: the cache cannot hold the tangent, so it would be "
                "dropped; pass its primal (torch.autograd.forward_ad.unpack_dual(x).primal), or rotate with "
                "ropekit.apply_rope, which differentiates"
            )
    if functorch:
        raise ValueError(
            f"{fn} cannot run under a torch.func transform (vmap, grad, jvp, jacrev, ...): it is inference-only and "
            "writes the cache in place through raw pointers; call it outside the transform"
        )


def _same(names: list[str], xs: list[torch.Tensor]) -> None:
    for n, x in zip(names[1:], xs[1:], strict=True):
        if x.dtype != xs[0].dtype:
            raise ValueError(f"{n} has dtype {x.dtype} but {names[0]} has {xs[0].dtype}; they must match")
        if x.device != xs[0].device:
            raise ValueError(f"{n} is on {x.device} but {names[0]} is on {xs[0].device}; they must match")


def _index(
    name: str, x: object, shape: tuple[int, ...], device: torch.device, expected: Callable[[], str]
) -> torch.Tensor:
    """``x`` (an integer tensor of ``shape``, or one int -- Python, numpy or symbolic -- for every entry) as int64
    on ``device``. An int that int64 cannot hold is refused here, naming ``name``, the value and ``expected()``
    (the valid range, formatted only then: under ``torch.compile`` formatting a symbolic size would specialise
    it); the range of every entry is the caller's next check."""
    # a Python int, or a traced symbolic one (dynamo reports a SymInt's type as int): compared, never converted
    # (operator.index would pin a symbolic int to its value); numpy integers through as_int
    n = x if type(x) is int or isinstance(x, torch.SymInt) else None
    if n is None and not isinstance(x, torch.Tensor):
        n = as_int(x)
    if n is not None:
        if not -INT64_SPAN <= n < INT64_SPAN:  # torch.full would raise a bare OverflowError
            raise ValueError(f"{name} = {shown(n)} is out of range: {expected()}")
        x = torch.full(shape, n, dtype=torch.int64)  # type: ignore[arg-type]  # n may be a SymInt
    if not isinstance(x, torch.Tensor) or x.dtype not in INT_DTYPES:
        got = x.dtype if isinstance(x, torch.Tensor) else type(x).__name__
        raise ValueError(f"{name} must be an int or an integer tensor of shape {shape}, got {got}")
    if tuple(x.shape) != shape:
        raise ValueError(f"{name} must have shape {shape}, got {tuple(x.shape)}")
    return x.to(device=device, dtype=torch.int64)


def offsets_range(S: int | torch.SymInt, rows: int | torch.SymInt) -> str:
    """The valid offsets for S new tokens in a cache of ``rows`` rows per sequence (for error messages)."""
    if S > rows:
        return f"no offset fits {S} new tokens in a cache of {rows} rows per sequence"
    return f"need 0 <= offset <= {rows - S} ({S} new tokens, a cache of {rows} rows per sequence)"


def slots_range(capacity: int | torch.SymInt) -> str:
    """The valid slots of a paged cache of ``capacity`` slots (for error messages)."""
    return f"need 0 <= slot < {capacity} (num_blocks * block_size)"


def _byte_range(x: torch.Tensor) -> tuple[int, int]:
    span = 1
    for size, st in zip(x.shape, x.stride(), strict=True):
        span += (size - 1) * abs(st)
    p = x.data_ptr()
    return p, p + span * x.element_size()


def _broadcasts(shape: tuple[int, ...], target: tuple[int, ...]) -> bool:
    return len(shape) <= len(target) and all(
        a == 1 or a == b for a, b in zip(reversed(shape), reversed(target), strict=False)
    )


def _check_slots(sl: torch.Tensor, capacity: int | torch.SymInt) -> None:
    """Every slot in [0, capacity) and none twice (in C when the kernel is there: no per-call tensor ops)."""
    T = sl.numel()
    if not T:
        return
    if torch.compiler.is_compiling():  # traced: checked on the device when the graph runs, no host sync
        srt = sl.sort().values
        ok = (srt[0] >= 0) & (srt[-1] < capacity) & (srt[1:] != srt[:-1]).all()
        # no sizes in the message: formatting a symbolic size (dynamic shapes) would specialise the graph to it
        torch._assert_async(
            ok, "slots must be distinct and inside the cache (0 <= slot < num_blocks * block_size)"
        )
        return
    lib = cpu_build.load() if sl.device.type == "cpu" else None
    if lib is not None:
        sl = sl.contiguous()
        bad = ctypes.c_int64(0)
        rc = lib.ropekit_check_slots(sl.data_ptr(), T, capacity, ctypes.byref(bad))
    else:
        out = (sl < 0) | (sl >= capacity)
        bad = ctypes.c_int64(int(torch.argmax(out.to(torch.int8))))
        rc = 1 if bool(out.any()) else (2 if torch.unique(sl).numel() != T else 0)
    if rc == 1:
        raise ValueError(
            f"slots[{bad.value}] = {int(sl[bad.value])} is outside the cache (0 <= slot < {capacity})"
        )
    if rc == 3:
        raise MemoryError("ropekit: could not allocate memory to check the slots")
    if rc:  # a repeated slot (the error path: tensor ops are fine here)
        vals, counts = torch.unique(sl, return_counts=True)
        dup = int(vals[counts > 1][0])
        tokens = (sl == dup).nonzero().flatten().tolist()
        raise ValueError(
            f"slots must be distinct: slot {dup} is given to tokens {tokens[:4]}{' ...' if len(tokens) > 4 else ''} "
            "(each would overwrite the other's k and v)"
        )


def _check_offsets(off: torch.Tensor, S: int | torch.SymInt, rows: int | torch.SymInt) -> None:
    """0 <= offsets[b] <= rows - S for every b (``off + S`` could wrap past int64: never computed)."""
    B = off.numel()
    if not B:
        return
    if S > rows:  # no offset can fit: say so, not "need 0 <= offset <= <negative>"
        raise ValueError(f"k has {S} new tokens but the cache holds only {rows} rows per sequence")
    if torch.compiler.is_compiling():  # traced: checked on the device when the graph runs
        ok = ((off >= 0) & (off <= rows - S)).all()
        # no sizes in the message: formatting a symbolic size (a dynamic new-token count) would specialise the
        # graph to it (one graph per length)
        torch._assert_async(
            ok, "offsets must fit the new tokens in the cache (0 <= offset <= rows - new tokens)"
        )
        return
    lib = cpu_build.load() if off.device.type == "cpu" else None
    if lib is not None:
        off = off.contiguous()
        bad = ctypes.c_int64(0)
        rc = lib.ropekit_check_offsets(off.data_ptr(), B, S, rows, ctypes.byref(bad))
        b = bad.value
    else:
        wrong = (off < 0) | (off > rows - S)
        rc = int(bool(wrong.any()))
        b = int(torch.argmax(wrong.to(torch.int8)))
    if rc:
        raise ValueError(
            f"offsets[{b}] = {int(off[b])} does not fit {S} new tokens in a cache of {rows} rows "
            f"(need 0 <= offset <= {rows - S})"
        )


def _self_overlap(names: list[str], xs: list[torch.Tensor]) -> None:
    """Refuse a written tensor (a cache, q) whose elements share memory (an expanded view): every token would
    land in, or be rotated through, the same elements -- a silently wrong cache or a q rotated several times."""
    for name, x in zip(names, xs, strict=True):
        if any(st == 0 and sz > 1 for sz, st in zip(x.shape, x.stride(), strict=True)) or (
            not torch.compiler.is_compiling() and internal_overlap(x)
        ):
            raise ValueError(
                f"{name} has overlapping memory (e.g. an expanded view, strides {x.stride()}); it is written in "
                "place, so every element must be its own memory"
            )


def _q_not_input(q: torch.Tensor | None, ins: list[tuple[str, torch.Tensor]]) -> None:
    """q is rotated in place; k and v are read and must stay unmodified: q must not be one of them."""
    if q is None or torch.compiler.is_compiling():
        return
    for name, x in ins:
        if x.numel() and q.numel() and _may_overlap(q, x):
            raise ValueError(f"q and {name} share memory; q is rotated in place and {name} must not change")


def _no_overlap(outs: list[tuple[str, torch.Tensor]], ins: list[tuple[str, torch.Tensor]]) -> None:
    """Refuse a cache that overlaps the other cache or an input (the result would depend on the write order).

    Inputs may share a buffer (k and v as views of a packed qkv tensor), and the two caches may be halves of one
    tensor (``kv[0]``, ``kv[1]``): only the memory spans of distinct tensors are compared. Traced by
    ``torch.compile`` there are no storage addresses to compare: the check runs in eager calls only.
    """
    if torch.compiler.is_compiling():
        return
    named = [(n, x) for n, x in outs + ins if x.numel()]
    n_out = sum(1 for _, x in outs if x.numel())
    for i, (na, a) in enumerate(named[:n_out]):
        for nb, b in named[i + 1 :]:
            if _may_overlap(a, b):
                raise ValueError(f"{na} and {nb} overlap in memory; the cache write needs separate buffers")


#: most digit combinations _may_overlap tries before it answers "may overlap" (conservative)
_SEARCH_LIMIT = 4096


def _may_overlap(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two strided tensors may share an element. Exact for views with the same strides and element size
    (K and V interleaved per block, FlashInfer's ``[blocks, 2, block, H, D]`` as ``kv[:, 0]`` / ``kv[:, 1]``: their
    byte spans interleave but no element meets); otherwise whether their byte spans meet (conservative)."""
    a0, a1 = _byte_range(a)
    b0, b1 = _byte_range(b)
    if not (a0 < b1 and b0 < a1):
        return False
    es = a.element_size()
    if b.element_size() != es or a.stride() != b.stride() or (b0 - a0) % es:
        return True
    # an element of a at sum s_i x_i meets one of b at delta + sum s_i y_i iff sum s_i (x_i - y_i) = delta, with
    # -(b.shape_i - 1) <= x_i - y_i <= a.shape_i - 1: a bounded search from the largest stride down
    dims = sorted(
        (
            (st, na - 1, nb - 1)
            for st, na, nb in zip(a.stride(), a.shape, b.shape, strict=True)
            if st and na + nb > 2
        ),
        reverse=True,
    )
    hi_in = [sum(st * na for st, na, _ in dims[i + 1 :]) for i in range(len(dims))]
    lo_in = [-sum(st * nb for st, _, nb in dims[i + 1 :]) for i in range(len(dims))]
    budget = [_SEARCH_LIMIT]

    def meets(i: int, rem: int) -> bool:
        if i == len(dims):
            return rem == 0
        st, na, nb = dims[i]
        lo = max(-nb, -((hi_in[i] - rem) // st))  # ceil((rem - hi_in) / st)
        hi = min(na, (rem - lo_in[i]) // st)
        for x in range(lo, hi + 1):
            budget[0] -= 1
            if budget[0] < 0 or meets(i + 1, rem - st * x):
                return True
        return False

    return meets(0, (b0 - a0) // es)


def _check_fmt(name: str, fmt: str) -> None:
    if fmt not in ("bshd", "bhsd"):
        raise ValueError(f'{name} must be "bshd" or "bhsd", got {fmt!r}')

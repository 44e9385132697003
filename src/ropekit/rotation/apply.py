# SPDX-License-Identifier: MIT
"""``apply_rope``: rotate q and k at explicit per-token positions (seed 004 section 2.4, seed 000).

RoPE is applied inside every attention layer, to q and k only (never v), after the projections and before the
scores. Positions are explicit global ids per token, so KV-cache decoding (positions start at the cache length),
left padding, packed documents (positions restart per document, :mod:`ropekit.positions`), context-parallel shards
and continuous timestamps are all the same call.

Shapes (``format``):
    "bshd": [b, s, h, d]  (flash-attn style)     positions [s] or [b, s]
    "bhsd": [b, h, s, d]  (HF transformers)      positions [s] or [b, s]
    "thd":  [t, h, d]     (packed tokens)        positions [t]
q and k may have different head counts h (GQA/MQA); everything else must agree.

Every argument is validated before anything is computed or written: a refused in-place call leaves q and k
untouched.
"""

from __future__ import annotations

from typing import Any, Literal

import torch

from ropekit.phases import INT_DTYPES, _rope_tables, check_positions
from ropekit.rotation import fastpath
from ropekit.rotation.autograd import transforms_active
from ropekit.rotation.dispatch import (
    BACKENDS,
    _check_backend,
    _check_backend_inputs,
    _check_transformed,
    _fused_triton,
    _pick_backend,
    device_tables,
    fused_positions,
)
from ropekit.rotation.overlap import internal_overlap
from ropekit.spec import RopeSpec

__all__ = ["BACKENDS", "FORMATS", "Format", "apply_rope", "apply_rope_tables"]

Format = Literal["bshd", "bhsd", "thd"]
FORMATS: tuple[str, ...] = ("bshd", "bhsd", "thd")
_DTYPES = (torch.float32, torch.float64, torch.bfloat16, torch.float16)


def _layout_str(fmt: str) -> str:
    return {
        "bshd": "(batch, seq, heads, head_dim)",
        "bhsd": "(batch, heads, seq, head_dim)",
        "thd": "(tokens, heads, head_dim)",
    }[fmt]


def _check_qk(name: str, x: object, spec: RopeSpec, fmt: str) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    want = 3 if fmt == "thd" else 4
    if x.dim() != want or x.shape[-1] != spec.head_dim:
        raise ValueError(
            f"{name} must have shape {_layout_str(fmt)} with head_dim={spec.head_dim} for format={fmt!r}, "
            f"got shape {tuple(x.shape)}"
        )
    if x.dtype not in _DTYPES:
        raise ValueError(f"{name} must be float32, float64, bfloat16 or float16, got {x.dtype}")
    return x


def _batch_seq(x: torch.Tensor, fmt: str) -> tuple[int | torch.SymInt, int | torch.SymInt]:
    # SymInt under torch.compile with dynamic shapes: never forced to int here (that would specialise the graph)
    if fmt == "bshd":
        return x.shape[0], x.shape[1]
    if fmt == "bhsd":
        return x.shape[0], x.shape[2]
    return 1, x.shape[0]


def _byte_range(x: torch.Tensor) -> tuple[int | torch.SymInt, int | torch.SymInt]:
    hi = x.storage_offset() + sum((sz - 1) * st for sz, st in zip(x.shape, x.stride()) if sz > 1)
    return x.storage_offset() * x.element_size(), (hi + 1) * x.element_size()


def _blocks(x: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Byte start of every innermost contiguous run of x, and the run length in bytes."""
    shape, strides = list(x.shape), list(x.stride())
    run = 1
    if shape and strides[-1] == 1:
        run = shape.pop()
        strides.pop()
    starts = torch.tensor([x.storage_offset()], dtype=torch.int64)
    for size, stride in zip(shape, strides):
        starts = (starts.unsqueeze(-1) + torch.arange(size, dtype=torch.int64) * stride).flatten()
    return starts * x.element_size(), run * x.element_size()


def _share_elements(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Exact test whether two views of one storage share any byte (q, k of a fused qkv buffer do not)."""
    if a.device.type == "meta" or a.numel() == 0 or b.numel() == 0:
        return False
    if a.untyped_storage().data_ptr() != b.untyped_storage().data_ptr():
        return False
    (al, ah), (bl, bh) = _byte_range(a), _byte_range(b)
    if not (al < bh and bl < ah):
        return False
    a_starts, a_len = _blocks(a)
    b_starts, b_len = _blocks(b)
    a_sorted = torch.sort(a_starts).values  # a's runs are disjoint (internal overlap is refused earlier)
    i = (
        torch.searchsorted(a_sorted, b_starts + b_len, side="left") - 1
    )  # last run of a starting before b's end
    ok = i >= 0
    return bool((ok & (a_sorted[i.clamp(min=0)] + a_len > b_starts)).any())


def _in_memory(x: torch.Tensor) -> torch.Tensor:
    """x, or under a torch.func transform the tensor its wrappers hold (vmap: the batched physical tensor): the
    memory an in-place write reaches, which the overlap checks read (a wrapper has no storage)."""
    while torch._C._functorch.is_functorch_wrapped_tensor(x):
        x = torch._C._functorch.get_unwrapped(x)
    return x


def _check_inplace_target(name: str, x: torch.Tensor) -> None:
    if any(st == 0 and sz > 1 for sz, st in zip(x.shape, x.stride())) or (
        not torch.compiler.is_compiling() and internal_overlap(_in_memory(x))
    ):
        raise ValueError(
            f"inplace=True but {name} has overlapping memory (an expanded or as_strided view whose elements share "
            f"memory, shape {tuple(x.shape)}, strides {x.stride()}); pass a tensor whose elements are distinct"
        )
    if not (torch.is_grad_enabled() and x.requires_grad):
        return
    # what torch's own in-place check refuses (after the kernel wrote, were it left to torch): refused before
    if x.is_leaf:
        raise ValueError(f"inplace=True but {name} is a leaf tensor that requires grad; use inplace=False")
    if not torch.compiler.is_compiling() and x._is_view():  # eager: view metadata is not traced
        base = x._base
        if base is not None and base.is_leaf:
            raise ValueError(
                f"inplace=True but {name} is a view of a leaf tensor that requires grad (shape "
                f"{tuple(x.shape)} of a leaf of shape {tuple(base.shape)}), which torch does not let be "
                "modified in place; use inplace=False"
            )
        if _multi_output_view(x):
            raise ValueError(
                f"inplace=True but {name} is one of several views returned by one call (unbind, split, "
                "chunk) of a tensor that requires grad, which torch does not let be modified in place; use "
                "inplace=False (or slice the tensor instead)"
            )


def _multi_output_view(x: torch.Tensor) -> bool:
    """Whether x is an output of a multi-view call (unbind/split/chunk), which autograd refuses to modify in place.
    Read from torch's private view metadata; False where this torch has no such accessor (then torch's own check,
    after the write, is what reports it)."""
    get = getattr(torch._C._autograd, "_get_creation_meta", None)
    meta = getattr(getattr(torch._C._autograd, "CreationMeta", None), "MULTI_OUTPUT_NODE", None)
    if get is None or meta is None:
        return False
    try:
        return bool(get(x) == meta)
    except RuntimeError:  # not a differentiable view
        return False


def shape_in(shape: torch.Size, candidates: tuple[tuple[int | torch.SymInt, ...], ...]) -> bool:
    """Whether ``shape`` is one of ``candidates``. Eager: one ``in`` test. Traced with symbolic sizes, dynamo does
    not decide an ``in`` between tuples of different symbols for the same length (``(s7, 8) == (s34, 8)`` is
    ``Eq(s7, s34)``, not True), so a failed ``in`` is retried dimension by dimension with ``==``: each comparison
    is then a guard (the two symbols are unified), and one dynamic graph serves every length."""
    return shape in candidates or any(
        len(shape) == len(c) and all(a == b for a, b in zip(shape, c)) for c in candidates
    )


def _check_positions_shape(positions: torch.Tensor, q: torch.Tensor, fmt: str) -> None:
    """positions must be [s] or [b, s] ([t] for "thd") for q of the given format."""
    b, s = _batch_seq(q, fmt)
    if not shape_in(positions.shape, ((s,), (1, s), (b, s)) if fmt != "thd" else ((s,),)):
        want = f"({s},)" if fmt == "thd" else f"({s},) or ({b}, {s})"
        raise ValueError(
            f"positions must have shape {want} for q of shape {tuple(q.shape)}, got {tuple(positions.shape)}"
        )


def _validate(
    q: torch.Tensor,
    k: torch.Tensor | None,
    positions: torch.Tensor | None,
    spec: RopeSpec,
    fmt: str,
    inplace: bool,
    backend: str,
) -> None:
    if backend != "auto" and backend not in BACKENDS:
        raise ValueError(f"backend must be 'auto' or one of {sorted(BACKENDS)}, got {backend!r}")
    if isinstance(q, torch.Tensor):
        _check_backend(backend, q)
    if not isinstance(spec, RopeSpec):
        raise TypeError(f"spec must be a ropekit.RopeSpec, got {type(spec).__name__}")
    if fmt not in FORMATS:
        raise ValueError(f"format must be one of {FORMATS}, got {fmt!r}")
    if not isinstance(inplace, bool):
        raise TypeError(f"inplace must be a bool, got {inplace!r}")
    _check_qk("q", q, spec, fmt)
    b, s = _batch_seq(q, fmt)
    if k is not None:
        _check_qk("k", k, spec, fmt)
        kb, ks = _batch_seq(k, fmt)
        if kb != b or ks != s or k.device != q.device:  # dim by dim: symbolic sizes are compared, not `in`
            if fmt == "thd":  # packed [t, h, d]: tokens, not (batch, seq)
                raise ValueError(
                    f"k must match q in tokens and device: q has {s} tokens on {q.device}, k has {ks} tokens on "
                    f"{k.device}"
                )
            raise ValueError(
                f"k must match q in batch and sequence length and device: q has (batch={b}, seq={s}) on {q.device}, "
                f"k has (batch={kb}, seq={ks}) on {k.device}"
            )
    _check_backend_inputs(backend, q, k)
    if positions is not None:
        check_positions(positions)
        _check_positions_shape(positions, q, fmt)
        if positions.device.type == "meta" and q.device.type != "meta":  # no values to rotate q by
            raise ValueError(f"positions are on the meta device (no values) but q is on {q.device}")
    if inplace:
        _check_inplace_target("q", q)
        if k is not None:
            _check_inplace_target("k", k)
            if not torch.compiler.is_compiling() and _share_elements(_in_memory(q), _in_memory(k)):
                raise ValueError("inplace=True but q and k share memory; they would be rotated twice")


def _broadcast_table(t: torch.Tensor, fmt: str) -> torch.Tensor:
    """[s, n] or [b, s, n] -> a shape that broadcasts against x[..., :n]."""
    if fmt == "thd":
        return t.unsqueeze(-2)  # [t, 1, n]
    if t.dim() == 2:
        t = t.unsqueeze(0)  # [1, s, n]
    return t.unsqueeze(2) if fmt == "bshd" else t.unsqueeze(1)  # [b, s, 1, n] or [b, 1, s, n]


def _rotate_pair(
    q: torch.Tensor,
    k: torch.Tensor | None,
    cos: torch.Tensor,
    sin: torch.Tensor,
    spec: RopeSpec,
    fmt: str,
    inplace: bool,
    backend: str,
    fast_key: tuple[Any, ...] | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    r, layout = 2 * spec.n_bands, spec.layout  # n_bands = rotary_dim // 2 (resolved, never None)
    compiling = torch.compiler.is_compiling()
    if (
        not compiling
        and backend in ("auto", "cpu")
        and cos.dtype == torch.float32
        and q.dtype != torch.float64
    ):
        plan = fastpath.build(
            fast_key, spec, q, k, _broadcast_table(cos, fmt), _broadcast_table(sin, fmt), r, layout, inplace
        )
        if plan is not None:
            return plan(q, k, cos, sin)
    if not compiling and cos.dtype == torch.float32:
        fused = _fused_triton(q, k, cos, sin, spec, fmt, inplace, backend, fast_key)
        if fused is not None:
            return fused

    def rotate_one(x: torch.Tensor) -> torch.Tensor:
        tdt = torch.float64 if x.dtype == torch.float64 else torch.float32
        c, s = _broadcast_table(cos.to(tdt), fmt), _broadcast_table(sin.to(tdt), fmt)
        if compiling:  # registered custom ops: no graph break under torch.compile
            from ropekit.rotation import ops

            # the backend goes with the op (and its backward): backend= is honoured when compiled
            il = layout == "interleaved"
            tables_grad = c.requires_grad or s.requires_grad  # learnable tables: the op saves x for them
            if inplace and not (x.requires_grad or tables_grad):
                ops.rotate_inplace_op(x, c, s, r, il, 1, backend)
                return x
            if inplace:  # the differentiable op, written back (on a copy of x when the op saves it)
                return x.copy_(ops.rotate_op(x.clone() if tables_grad else x, c, s, r, il, 1, backend))
            out: torch.Tensor = ops.rotate_op(x, c, s, r, il, 1, backend)  # a CustomOpDef: typed Any
            return out
        fn = _pick_backend(backend, x)
        return fn(x, c, s, rotary_dim=r, layout=layout, inplace=inplace)

    q_out = rotate_one(q)  # q first, then k: the order the backends always ran in
    return q_out, None if k is None else rotate_one(k)


def _one_d_tables(
    positions: torch.Tensor, spec: RopeSpec, fmt: str, need64: bool, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """The exact tables :func:`apply_rope` rotates validated 1-D positions with: float32 rows of the spec's
    shared cache for integer positions, else computed (float64 when q or k is float64). [*P, n] each."""
    pos = (
        positions.reshape(-1)
        if (fmt != "thd" and positions.dim() == 2 and positions.shape[0] == 1)
        else positions
    )
    tables = None
    if not (torch.compiler.is_compiling() or need64) and pos.dtype in INT_DTYPES:
        pos = pos.to(device)
        if device.type == "cuda":  # one launch, no host sync (the shared cache's range check would sync)
            tables = device_tables(pos, spec)
        if tables is None:
            tables = fastpath.shared_tables(pos, spec)  # exact rows cached by position range
    if tables is None:
        tables = _rope_tables(pos, spec, dtype=torch.float64 if need64 else torch.float32, device=device)
    return tables


def apply_rope(
    q: torch.Tensor,
    k: torch.Tensor | None,
    positions: torch.Tensor,
    spec: RopeSpec,
    *,
    format: Format = "bshd",
    inplace: bool = False,
    backend: str = "auto",
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Rotate q and k by RoPE at the given per-token positions.

    Phases are exact at any position (float64 angle reduced mod 2*pi, see :mod:`ropekit.phases`); the rotation is
    computed in float32 (float64 for float64 inputs) and returned in each input's dtype.

    Args:
        q: queries, [b, s, h_q, d] / [b, h_q, s, d] / [t, h_q, d] per ``format``; float32/64, bfloat16, float16.
        k: keys with the same batch and sequence as q (any head count), or None to rotate q alone.
        positions: integer or float32/float64 positions, [s] (shared by the batch) or [b, s] ([t] for "thd").
            Moved to q's device if needed. A dynamic phase map (DynamicNTK) is evaluated at
            ``seq_len = max(positions) + 1`` of this call alone (stateless; transformers' rotary module instead
            keeps the longest length it has seen, and so do patched models, :mod:`ropekit.hf`); use
            :func:`ropekit.rope_tables` with ``seq_len=`` and :func:`apply_rope_tables` to choose it.
        spec: the RoPE configuration.
        format: "bshd", "bhsd" or "thd".
        inplace: write the result into q's and k's storage (channels past rotary_dim are not touched).
        backend: "auto" (the fused CPU kernel or Triton where they take the tensors, else PyTorch) or a name in
            :data:`BACKENDS`: an explicit backend runs that backend, eagerly and under ``torch.compile``, or raises
            a ValueError when it cannot take q or k (device, float64, a strided last dim, the CPU kernel not built).

    Returns:
        (q_rot, k_rot); k_rot is None when k is None. With ``inplace=True`` these are q and k themselves.

    Raises:
        TypeError, ValueError: naming the argument, before any tensor is modified.

    Autograd: the backward of the rotation is the rotation by the negative angle.

    A multi-axis spec (``spec.axes`` set: M-RoPE, 2-D/3-D vision RoPE) takes positions [n_axes, ...] and is
    rotated by :func:`ropekit.apply_rope_axes`; its positions are never read as per-row 1-D positions.
    """
    if isinstance(spec, RopeSpec) and spec.axes is not None:
        from ropekit.axis_tables import apply_rope_axes

        return apply_rope_axes(q, k, positions, spec, format=format, inplace=inplace, backend=backend)
    compiling = torch.compiler.is_compiling()
    # the stored plans call kernels on raw pointers: never traced, never for dual tensors or under torch.func
    fast = not (compiling or transforms_active())
    akey = fastpath.apply_key(q, k, positions, spec, format, inplace, backend) if fast else None
    hit = fastpath.apply_lookup(akey, spec)
    # a stored Triton launch (CUDA) reads the positions itself; a CPU plan reads rows of the shared cache
    if hit is not None and getattr(hit[0], "from_pos", False):
        planned: tuple[torch.Tensor, torch.Tensor | None] = hit[0](q, k, positions, positions)
        return planned
    if hit is not None:  # validated before with this geometry: integer positions, float32 tables; CPU plan
        pos = positions if positions.is_cpu else positions.to(q.device)
        cache = fastpath.shared_cache(spec, pos.device)  # the cache whose row views the plan was built on
        out = None if cache is None else fastpath.run_cached(hit[0], q, k, cache, pos)
        if out is not None:
            return out
    _validate(q, k, positions, spec, format, inplace, backend)
    if fast and q.device.type == "cuda":  # one launch reads or computes the exact rows: no host sync
        fused = fused_positions(q, k, positions, spec, format, inplace, backend, akey)
        if fused is not None:
            return fused
    need64 = q.dtype == torch.float64 or (k is not None and k.dtype == torch.float64)
    cos, sin = _one_d_tables(positions, spec, format, need64, q.device)
    tkey = fastpath.key(q, k, cos, sin, spec, format, inplace, backend) if fast else None
    out = _rotate_pair(q, k, cos, sin, spec, format, inplace, backend, tkey)
    plan = fastpath.lookup(tkey, spec)
    if plan is not None:
        fastpath.apply_store(akey, spec, plan, cos)
    return out


def apply_rope_tables(
    q: torch.Tensor,
    k: torch.Tensor | None,
    cos: torch.Tensor,
    sin: torch.Tensor,
    spec: RopeSpec,
    *,
    format: Format = "bshd",
    inplace: bool = False,
    backend: str = "auto",
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Like :func:`apply_rope`, with precomputed tables from :func:`ropekit.rope_tables` (or :class:`Rotary`).

    Args:
        cos, sin: float32 or float64 tables of shape [s, n] or [b, s, n] ([t, n] for "thd"), n = rotary_dim // 2.
            Their shapes and dtypes are checked, their values are not (a NaN in a table reaches the output): they
            are meant to come from :func:`ropekit.rope_tables` or :class:`Rotary`, and a scan would cost a pass.
            They may be computed from learnable parameters: tables that require grad are differentiated on every
            backend (``dL/dcos = g_x x + g_y y``, ``dL/dsin = g_y x - g_x y`` per band, summed over the heads and,
            for a table shared by the batch, the batch), eagerly and under ``torch.compile``; x is then saved for
            the backward. Forward-mode AD (dual tensors) and ``torch.func`` transforms differentiate them too.

    Repeated calls with the same geometry (decoding) take a prepared one-call path: see
    :mod:`ropekit.rotation.fastpath`.
    """
    fast_key = (
        None
        if (
            torch.compiler.is_compiling()
            or transforms_active()  # dual tensors, torch.func: no kernel on raw pointers
            or (  # tables in an autograd graph: the autograd rule (a stored plan records nothing)
                (getattr(cos, "requires_grad", False) or getattr(sin, "requires_grad", False))
                and torch.is_grad_enabled()
            )
        )
        else fastpath.key(q, k, cos, sin, spec, format, inplace, backend)
    )
    plan = fastpath.lookup(fast_key, spec)
    if plan is not None:
        planned: tuple[torch.Tensor, torch.Tensor | None] = plan(q, k, cos, sin)
        return planned
    _validate(q, k, None, spec, format, inplace, backend)
    b, s = _batch_seq(q, format)
    n = spec.n_bands
    shapes: tuple[tuple[int | torch.SymInt, ...], ...] = (
        ((s, n),) if format == "thd" else ((s, n), (1, s, n), (b, s, n))
    )
    for name, t in (("cos", cos), ("sin", sin)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if not shape_in(t.shape, shapes):  # dim by dim under torch.compile: symbolic sizes (shape_in)
            want = " or ".join(map(str, dict.fromkeys(shapes)))  # b = 1: once
            raise ValueError(f"{name} must have shape {want}, got {tuple(t.shape)}")
        if t.dtype not in (torch.float32, torch.float64):
            raise ValueError(
                f"{name} must be float32 or float64 (tables are never low precision), got {t.dtype}"
            )
        if t.device != q.device:
            raise ValueError(f"{name} is on {t.device} but q is on {q.device}")
    _check_transformed(backend, ("cos", cos), ("sin", sin))  # an explicit kernel cannot follow their tangents
    return _rotate_pair(q, k, cos, sin, spec, format, inplace, backend, fast_key)

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

from typing import Any

import torch

from ropekit.phases import INT_DTYPES, _rope_tables
from ropekit.rotation import fastpath, ops
from ropekit.rotation.apply_checks import FORMATS, Format, _batch_seq, _validate, shape_in
from ropekit.rotation.autograd import transforms_active
from ropekit.rotation.dispatch import (
    BACKENDS,
    _check_transformed,
    _fused_triton,
    _pick_backend,
    device_tables,
    fused_positions,
)
from ropekit.spec import RopeSpec

__all__ = ["BACKENDS", "FORMATS", "Format", "apply_rope", "apply_rope_tables"]


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

    tabs: dict[torch.dtype, tuple[torch.Tensor, torch.Tensor]] = {}  # q's and k's, made once when they agree

    def tables_for(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        tdt = torch.float64 if x.dtype == torch.float64 else torch.float32
        if tdt not in tabs:
            tabs[tdt] = _broadcast_table(cos.to(tdt), fmt), _broadcast_table(sin.to(tdt), fmt)
        return tabs[tdt]

    def rotate_one(x: torch.Tensor) -> torch.Tensor:
        c, s = tables_for(x)
        if compiling:  # registered ops (ropekit.rotation.ops): no graph break under torch.compile
            # the backend goes with the op (and its backward): backend= is honoured when compiled
            il = layout == "interleaved"
            tables_grad = c.requires_grad or s.requires_grad  # learnable tables: the op saves x for them
            if inplace and not (x.requires_grad or tables_grad):
                ops.rotate_inplace_op(x, c, s, r, il, 1, backend)
                return x
            if inplace:  # the differentiable op, written back (on a copy of x when the op saves it)
                return x.copy_(ops.rotate_op(x.clone() if tables_grad else x, c, s, r, il, 1, backend))
            return ops.rotate_op(x, c, s, r, il, 1, backend)
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
    if isinstance(positions, torch.Tensor) and positions.requires_grad:  # learned / continuous positions
        from ropekit.positions_grad import apply_rope_position_grad

        return apply_rope_position_grad(
            q, k, positions, spec, format=format, inplace=inplace, backend=backend
        )
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
    # the plan stored for this geometry (validated above, tables computed), if any: float positions and the slow
    # integer calls reuse it instead of building one per call
    plan = fastpath.lookup(tkey, spec)
    if plan is not None:
        rotated: tuple[torch.Tensor, torch.Tensor | None] = plan(q, k, cos, sin)
    else:
        rotated = _rotate_pair(q, k, cos, sin, spec, format, inplace, backend, tkey)
        plan = fastpath.lookup(tkey, spec)
    if plan is not None:  # integer positions: the next such call reads the shared cache directly (apply_key)
        fastpath.apply_store(akey, spec, plan, cos)
    return rotated


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

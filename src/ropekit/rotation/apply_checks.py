# SPDX-License-Identifier: MIT
"""Argument checks of :func:`ropekit.apply_rope` / :func:`ropekit.apply_rope_tables`, shared with the other entry points.

Everything is checked before anything is computed or written (a refused in-place call leaves q and k untouched):
q / k type, rank, head_dim and dtype; batch and sequence agreement between q and k; positions' dtype and shape;
in-place targets (leaves that need grad, views autograd cannot rewrite, internal overlap, q and k sharing memory).
Under ``torch.compile`` sizes are symbolic: they are compared dimension by dimension, never with ``in``.

Shapes (``format``):
    "bshd": [b, s, h, d]     positions [s] or [b, s]
    "bhsd": [b, h, s, d]     positions [s] or [b, s]
    "thd":  [t, h, d]        positions [t]
"""

from __future__ import annotations

from typing import Literal

import torch

from ropekit.phases import check_positions
from ropekit.rotation.dispatch import BACKENDS, _check_backend, _check_backend_inputs
from ropekit.rotation.overlap import internal_overlap
from ropekit.spec import RopeSpec

__all__ = ["FORMATS", "Format", "shape_hint", "shape_in"]

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
            + shape_hint(tuple(positions.shape), q, None, fmt)
        )


def _shape_of(positions: object) -> tuple[int | torch.SymInt, ...] | None:
    """The shape of a positions argument for :func:`shape_hint` (None: not a tensor, not checked yet)."""
    return tuple(positions.shape) if isinstance(positions, torch.Tensor) else None


def shape_hint(
    positions: tuple[int | torch.SymInt, ...] | None,
    q: torch.Tensor,
    k: torch.Tensor | None,
    fmt: str,
    n_lead: int = 0,
) -> str:
    """The fix for a refused shape, where exactly one explanation fits (else ""): positions given as [s, b]
    (``positions.T``; for multi-axis positions [A, s, b], ``positions.transpose(1, 2)``), or q (and k) in the other
    4-D format (``format='bhsd'`` / ``format='bshd'``: every shape then agrees). ``positions`` is the shape of the
    positions argument (None: not given), ``n_lead`` the leading axes dimensions it has (1 for multi-axis)."""
    if fmt not in ("bshd", "bhsd"):
        return ""
    lead = tuple(positions[:n_lead]) if positions is not None else ()

    def fits(pshape: tuple[int | torch.SymInt, ...] | None, f: str) -> bool:
        b, s = _batch_seq(q, f)
        if k is not None and (k.dim() != 4 or _batch_seq(k, f) != (b, s)):
            return False
        return pshape is None or pshape in (lead + (s,), lead + (1, s), lead + (b, s))

    other = "bhsd" if fmt == "bshd" else "bshd"
    swapped = None
    if positions is not None and len(positions) == n_lead + 2:
        swapped = lead + (positions[-1], positions[-2])
    transposed = swapped is not None and positions != swapped and fits(swapped, fmt)
    reformatted = fits(positions, other)
    if transposed and not reformatted:
        fix = "positions.T" if n_lead == 0 else "positions.transpose(1, 2)"
        return f" (positions look transposed, [seq, batch] instead of [batch, seq]: pass {fix})"
    if reformatted and not transposed:
        layout = "[b, h, s, d]" if other == "bhsd" else "[b, s, h, d]"
        return f" (q looks like {other} {layout}: pass format={other!r})"
    return ""


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
                + (shape_hint(_shape_of(positions), q, k, fmt) if k.device == q.device else "")
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

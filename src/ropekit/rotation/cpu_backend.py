# SPDX-License-Identifier: MIT
"""Fused CPU backend: ropekit's C kernel (``ropekit/kernels/rope_cpu.c``), with its own small thread pool.

Threads: :func:`threads_for` picks one thread per :func:`grain` elements of work, never more than
``torch.get_num_threads()`` (so ``torch.set_num_threads`` governs ropekit too) and one thread for small work
(decoding; 16-bit storage on torch's OpenMP team splits from 2^17 elements on). Threads claim chunks of rows; they are torch's own OpenMP threads where torch runs on GNU OpenMP, else
the kernel's own pool, whose caller never waits for a thread that has not started (``ropekit.kernels.cpu_build``,
``docs/kernels.md`` "Threads").

Each element of q and k is read and written once; in place, the pass-through channels of partial rotary are not
touched; out of place they are copied in the same pass. Any strides on the leading dims are accepted as they are
(bshd, bhsd, thd, views into a fused qkv buffer, transposed views): no hidden ``.contiguous()``. A tensor whose
last dim is not contiguous (stride != 1), float64 tensors and non-CPU tensors go to the pure-PyTorch backend under
``backend="auto"`` (never a silent copy) and are refused by an explicit ``backend="cpu"`` (:func:`unsupported`).
Math in float32 from float32 tables; storage float32, bfloat16 or float16.

Autograd: the kernel writes through raw pointers, which torch does not see, so every in-place write bumps the
version counters of the tensors written (:data:`bump_versions`), as a torch in-place op does: a tensor saved by
another autograd node and then rotated in place makes that node's backward raise torch's usual "modified by an
inplace operation" error instead of giving a silently wrong gradient.
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable, Iterable

import torch
from torch.autograd.graph import increment_version

from ropekit.kernels import cpu_build
from ropekit.rotation.autograd import make_rotate

__all__ = [
    "ACCEPTS",
    "GRAIN",
    "GRAIN_16BIT_OPENMP",
    "Plan",
    "bump_versions",
    "grain",
    "plannable",
    "raw_rotate",
    "refusal",
    "rotate",
    "supports",
    "threads_for",
    "unsupported",
]

#: elements per thread: below ~1 MB of float32 a second thread costs more than it saves
GRAIN = 1 << 18
#: elements per thread for bfloat16/float16 storage on torch's OpenMP team: their rotation is bound by the
#: conversions, not memory, so decode-sized work gains from a second thread already (32 x 40 heads x 128, bf16:
#: 21.2-21.9 -> 15.9-16.0 us in three of five bench runs, 22.3-22.9 in the other two). Not for float32 (12.1-12.8
#: against 13.6-14.5 us, but 22.8 in one run of five: a worker that had gone to sleep) and not with the kernel's own
#: pool (waking its thread: 20.7 -> 22.9 us). Eleventh session, docs/kernels.md "Decode threads".
GRAIN_16BIT_OPENMP = 1 << 16


@functools.cache
def _on_openmp() -> bool:
    return cpu_build.build_info().threads == "openmp"  # the build is chosen once per process (cpu_build.load)


#: Bump the version counters of tensors a kernel wrote through raw pointers (a tuple of them), as torch's in-place
#: ops do: ``torch.autograd.graph.increment_version``, through its C entry where this torch has it (it takes an
#: iterable since torch 2.5): 0.25 us a call against 0.5 us through the Python wrapper, on the decode path.
bump_versions: Callable[[Iterable[torch.Tensor]], None] = getattr(
    torch._C, "_increment_version", increment_version
)


def grain(dtype: torch.dtype = torch.float32) -> int:
    """Elements of work per thread for storage ``dtype`` with the build in use."""
    return GRAIN_16BIT_OPENMP if dtype in (torch.bfloat16, torch.float16) and _on_openmp() else GRAIN


def threads_for(elements: int, dtype: torch.dtype = torch.float32) -> int:
    """Threads for a call touching this many elements of ``dtype``: one per :func:`grain`, at most
    ``torch.get_num_threads()``."""
    n = torch.get_num_threads()
    return 1 if n <= 1 else max(1, min(n, elements // grain(dtype)))


_FN = {
    torch.float32: "ropekit_rope_f32",
    torch.bfloat16: "ropekit_rope_bf16",
    torch.float16: "ropekit_rope_f16",
}
_PLAN_FN = {
    torch.float32: "ropekit_plan_f32",
    torch.bfloat16: "ropekit_plan_bf16",
    torch.float16: "ropekit_plan_f16",
}
_PLAN_GATHER_FN = {
    torch.float32: "ropekit_plan_gather_f32",
    torch.bfloat16: "ropekit_plan_gather_bf16",
    torch.float16: "ropekit_plan_gather_f16",
}
_PLAN_AXES_FN = {
    torch.float32: "ropekit_plan_axes_f32",
    torch.bfloat16: "ropekit_plan_axes_bf16",
    torch.float16: "ropekit_plan_axes_f16",
}


def supports(x: torch.Tensor) -> bool:
    """Whether the fused kernel handles x (``backend="auto"`` uses the PyTorch backend for the others; an explicit
    ``backend="cpu"`` refuses them: :func:`unsupported` says why)."""
    return (
        x.device.type == "cpu"
        and x.dtype in _FN
        and x.dim() in (3, 4)
        and x.stride(-1) == 1
        and not x.is_conj()
        and cpu_build.load() is not None
    )


#: what an explicit backend="cpu" takes (in its refusals)
ACCEPTS = (
    "CPU tensors of float32, bfloat16 or float16 with 3 or 4 dims whose last dim is contiguous (stride 1), and "
    "the fused C kernel built (ropekit.kernels.cpu_build.build_info())"
)


@torch.compiler.assume_constant_result  # type: ignore[untyped-decorator]  # untyped in torch
def _kernel_problem() -> str:
    """Why the fused kernel is not loaded (empty when it is): one answer per process, which torch.compile bakes
    in instead of tracing the build."""
    if cpu_build.load() is not None:
        return ""
    return f"the fused CPU kernel is unavailable ({cpu_build.build_info().reason})"


def unsupported(x: torch.Tensor) -> str | None:
    """Why the fused kernel cannot rotate x (None: it can, as :func:`supports` says); traceable by torch.compile
    (a conjugate view, the one case :func:`supports` adds, is complex: the dtype check refuses it)."""
    if x.device.type != "cpu":
        return f"it is on {x.device}"
    if x.dtype not in _FN:
        return f"its dtype is {x.dtype}"
    if x.dim() not in (3, 4):
        return f"it has {x.dim()} dims"
    if x.stride(-1) != 1:
        return f"its last dim has stride {x.stride(-1)} (shape {tuple(x.shape)}, strides {x.stride()})"
    problem = _kernel_problem()
    return problem or None


def refusal(name: str, x: torch.Tensor, reason: str) -> str:
    """The error an explicit backend="cpu" raises for an input it cannot rotate."""
    return (
        f"backend='cpu' cannot rotate {name}: {reason}. backend='cpu' takes {ACCEPTS}; use backend='auto' to let "
        "ropekit pick (the PyTorch backend where the kernel cannot run) or backend='torch'"
    )


def _lead(t: torch.Tensor, like: torch.Tensor) -> tuple[list[int], list[int]]:
    """Sizes and element strides of the leading dims of t broadcast to like (stride 0 where broadcast)."""
    pad = like.dim() - t.dim()
    sizes, strides = [], []
    for j in range(like.dim() - 1):
        tj = j - pad
        size = 1 if tj < 0 else t.shape[tj]
        strides.append(0 if tj < 0 or size == 1 else t.stride(tj))
        sizes.append(like.shape[j])
    return sizes, strides


def _geometry(x: torch.Tensor, out: torch.Tensor, cos: torch.Tensor) -> list[int]:
    """[d0, d1, d2, xs0, xs1, xs2, os0, os1, os2, ts0, ts1, ts2] in memory order (outermost stride first)."""
    dims, ts = _lead(cos, x)
    xs, os_ = list(x.stride()[:-1]), list(out.stride()[:-1])
    if x.dim() == 3:  # thd: a leading dim of 1
        dims, xs, os_, ts = [1, *dims], [0, *xs], [0, *os_], [0, *ts]
    order = sorted(range(3), key=lambda j: -xs[j])
    return (
        [dims[j] for j in order] + [xs[j] for j in order] + [os_[j] for j in order] + [ts[j] for j in order]
    )


def kernel_tables(cos: torch.Tensor, sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """float32 tables with a unit last stride and equal strides, as the kernels read them (one set of table
    strides for both): returned as they are when they already are (row views of the packed cache, broadcast
    views), else copied."""
    cos = cos if cos.dtype == torch.float32 and cos.stride(-1) == 1 else cos.float().contiguous()
    sin = sin if sin.dtype == torch.float32 and sin.stride(-1) == 1 else sin.float().contiguous()
    if cos.stride() != sin.stride():
        cos, sin = cos.contiguous(), sin.contiguous()
    return cos, sin


def raw_rotate(
    x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, r: int, layout: str, inplace: bool, sign: int = 1
) -> torch.Tensor:
    if not supports(x):  # the dispatch refuses these before anything is written: never run another backend
        raise ValueError(refusal("x", x, unsupported(x) or "unsupported"))
    lib = cpu_build.load()
    cos, sin = kernel_tables(cos, sin)
    out = x if inplace else torch.empty_like(x)
    g = _geometry(x, out, cos)
    getattr(lib, _FN[x.dtype])(
        out.data_ptr(),
        x.data_ptr(),
        *g[:3],
        x.shape[-1],
        *g[3:9],
        cos.data_ptr(),
        sin.data_ptr(),
        *g[9:],
        r,
        int(layout == "interleaved"),
        int(sign),
        threads_for(x.numel() if inplace else 2 * x.numel(), x.dtype),
    )
    if inplace:  # written through a raw pointer: tell autograd, as a torch in-place op would
        bump_versions((x,))
    return out


class Plan:
    """A prepared call rotating q (and k) in one C call: the low-latency path for repeated shapes (decoding)."""

    __slots__ = ("args", "axes_fn", "dtype", "fn", "gather_fn", "grain", "inplace", "two", "work")

    def __init__(
        self,
        q: torch.Tensor,
        k: torch.Tensor | None,
        cos: torch.Tensor,
        r: int,
        layout: str,
        inplace: bool,
        sign: int = 1,
    ) -> None:
        lib = cpu_build.load()
        self.fn = getattr(lib, _PLAN_FN[q.dtype])
        self.gather_fn = getattr(lib, _PLAN_GATHER_FN[q.dtype])
        self.axes_fn = getattr(lib, _PLAN_AXES_FN[q.dtype])
        self.inplace, self.two, self.dtype, self.grain = inplace, k is not None, q.dtype, grain(q.dtype)
        self.work = q.numel() + (k.numel() if k is not None else 0)
        vals = [
            2 if k is not None else 1,
            q.shape[-1],
            r,
            int(layout == "interleaved"),
            -1 if sign < 0 else 1,
            threads_for(self.work, q.dtype),
        ]
        for x in (q, k) if k is not None else (q,):
            vals += _geometry(x, x if inplace else torch.empty_like(x), cos)
        self.args = (ctypes.c_int64 * len(vals))(*vals)

    def __call__(
        self, q: torch.Tensor, k: torch.Tensor | None, cos: torch.Tensor, sin: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        return self.run(q, k, cos.data_ptr(), sin.data_ptr())

    def _outputs(self, q: torch.Tensor, k: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Where the call writes (q and k themselves in place), and the thread count set for this call."""
        if self.work >= 2 * self.grain:  # below, threads_for is 1 whatever torch's setting: nothing to redo
            self.args[5] = threads_for(self.work, self.dtype)  # follows torch.set_num_threads between calls
        qo = q if self.inplace else torch.empty_like(q)
        return qo, k if (self.inplace or k is None) else torch.empty_like(k)

    def call_packed(
        self, q: torch.Tensor, k: torch.Tensor | None, rows: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The call with the tables as packed rows [N, 2, n] float32 (a read of the table cache, whose row views
        the plan was built for): cos at each row's offset 0, sin n floats later; no views are made."""
        ptr = rows.data_ptr()
        return self.run(q, k, ptr, ptr + rows.element_size() * rows.shape[-1])

    def call_gather(
        self, q: torch.Tensor, k: torch.Tensor | None, rows: torch.Tensor, positions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor | None] | None:
        """The call with the kernel reading each token's rows straight from the packed table cache ``rows``
        [L, 2, n] (float32, contiguous) at ``positions`` [*P] (int64, contiguous: read flat, in the order the
        plan's row views had them). None, with nothing written, when a position is outside [0, L)."""
        qo, ko = self._outputs(q, k)
        rc = self.gather_fn(
            *_io(qo, q, ko, k),
            rows.data_ptr(),
            rows.shape[0],
            positions.data_ptr(),
            positions.numel(),
            self.args,
        )
        if rc != 0:
            return None
        if self.inplace:
            bump_versions((qo,) if ko is None else (qo, ko))
        return qo, ko

    def call_axes(
        self,
        q: torch.Tensor,
        k: torch.Tensor | None,
        rows: torch.Tensor,
        positions: torch.Tensor,
        slots: torch.Tensor,
        scratch: torch.Tensor | None,
    ) -> tuple[torch.Tensor, torch.Tensor | None] | int:
        """The multi-axis call: like :meth:`call_gather` with positions [A, N] (int64, contiguous; axis a of flat
        token t at [a, t]) and ``slots`` [n] (int64: the axis each band reads); the row of a token whose axes differ
        is blended from its axes' cache rows into row t of ``scratch`` [N, 2n] (float32, contiguous; None: on the
        kernel's stack, for N * 2n <= 8192). The outputs, or the kernel's code with nothing written: -1 for a negative
        position, -2 past the kernel's limits (axes, bands), else the largest position (>= L: grow the cache)."""
        qo, ko = self._outputs(q, k)
        rc = int(
            self.axes_fn(
                *_io(qo, q, ko, k),
                rows.data_ptr(),
                rows.shape[0],
                positions.data_ptr(),
                positions.shape[0],
                positions.shape[1],
                slots.data_ptr(),
                0 if scratch is None else scratch.data_ptr(),
                self.args,
            )
        )
        if rc != 0:
            return rc
        if self.inplace:
            bump_versions((qo,) if ko is None else (qo, ko))
        return qo, ko

    def run(
        self, q: torch.Tensor, k: torch.Tensor | None, cos_ptr: int, sin_ptr: int
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The C call on table addresses; the caller guarantees the tables' layout is the one planned for."""
        qo, ko = self._outputs(q, k)
        self.fn(
            *_io(qo, q, ko, k),
            cos_ptr,
            sin_ptr,
            self.args,
        )
        if self.inplace:  # raw-pointer writes: bump the version counters, as a torch in-place op does
            bump_versions((qo,) if ko is None else (qo, ko))
        return qo, ko


def _io(
    qo: torch.Tensor, q: torch.Tensor, ko: torch.Tensor | None, k: torch.Tensor | None
) -> tuple[int, ...]:
    """The addresses every plan call starts with: q's output and input, k's output and input (0 without k)."""
    return qo.data_ptr(), q.data_ptr(), 0 if ko is None else ko.data_ptr(), 0 if k is None else k.data_ptr()


def plannable(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> bool:
    return (
        supports(x)
        and cos.dtype == torch.float32
        and sin.dtype == torch.float32
        and cos.stride(-1) == 1
        and cos.stride() == sin.stride()
    )


rotate = make_rotate(raw_rotate, "cpu")

# SPDX-License-Identifier: MIT
"""Triton backend for GPUs: one launch rotates q and k, in place or out of place, forward and backward.

Kernels: :mod:`ropekit.rotation.triton_kernels`. Grid: token blocks (token-linear, so packed "thd" batches launch
one program row per real token; TransformerEngine #2866 launched max_seqlen x n_seqs) times head blocks, or one
program per token block for all heads (HEAD_LOOP). Each program reads its token's float32 cos/sin row once --
from the tables given, or from the token's integer position (:mod:`ropekit.rotation.triton_positions`: a row of the spec's
immutable exact table, or computed exactly in float64 on the fly past its end; no host sync, so the launch can be
captured in a CUDA graph) -- rotates in float32 and stores in the input dtype. All offsets are int64 (tensors over
2^31 elements: Liger-Kernel #804). Any strides on batch/seq/head; unit stride on the last dim. An in-place launch
bumps the version counters of q and k (torch does not see a kernel's writes), so autograd's saved-tensor check
sees them as it sees a torch in-place op.

Correctness is tested on the CPU with ``TRITON_INTERPRET=1`` against the float64 reference, and on CUDA devices
when one is present (tests/ropekit/rotation/test_triton_cuda_paths.py). The auto backend picks this one for CUDA
tensors when Triton is importable. Launch configurations were tuned on an H200 (docs/kernels.md, bench/gpu.py).

Shapes: x as [b, s, h, d] strides (bshd / bhsd / thd all map onto it), tables [b or 1, s, n], positions
[b or 1, s].
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, cast

import torch

from ropekit.rotation.autograd import make_rotate
from ropekit.rotation.cpu_backend import bump_versions, kernel_tables

__all__ = [
    "ACCEPTS",
    "Plan",
    "available",
    "launch_config",
    "raw_rotate",
    "refusal",
    "rotate",
    "rotate_qk",
    "rotate_qk_autograd",
    "supports",
    "tables_plan",
    "unsupported",
]

try:  # Triton is optional (the `triton` extra)
    from ropekit.rotation import triton_kernels as _k

    _HAVE_TRITON = True
except ImportError:  # pragma: no cover - exercised where triton is absent
    _HAVE_TRITON = False


def available() -> bool:
    return _HAVE_TRITON


def _interpret() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def supports(x: torch.Tensor) -> bool:
    """Triton handles x: CUDA tensors (or CPU tensors under TRITON_INTERPRET=1), float32/bf16/fp16, last stride 1."""
    if not _HAVE_TRITON or x.dtype not in _DTYPES or x.stride(-1) != 1:
        return False
    t = x.device.type
    return t == "cuda" or (t == "cpu" and _interpret())


#: what an explicit backend="triton" takes (in its refusals)
ACCEPTS = (
    "CUDA tensors (or CPU tensors under TRITON_INTERPRET=1) of float32, bfloat16 or float16 whose last dim is "
    "contiguous (stride 1), with the triton package installed"
)


def unsupported(x: torch.Tensor) -> str | None:
    """Why Triton cannot rotate x (None: it can, as :func:`supports` says)."""
    if not _HAVE_TRITON:
        return "the triton package is not installed (pip install 'ropekit[triton]')"
    t = x.device.type
    if not (t == "cuda" or (t == "cpu" and _interpret())):
        return f"it is on {x.device}"
    if x.dtype not in _DTYPES:
        return f"its dtype is {x.dtype}"
    if x.stride(-1) != 1:
        return f"its last dim has stride {x.stride(-1)} (shape {tuple(x.shape)}, strides {x.stride()})"
    return None


def refusal(name: str, x: torch.Tensor, reason: str) -> str:
    """The error an explicit backend="triton" raises for an input it cannot rotate."""
    return (
        f"backend='triton' cannot rotate {name}: {reason}. backend='triton' takes {ACCEPTS}; use backend='auto' to "
        "let ropekit pick (the PyTorch backend where Triton cannot run) or backend='torch'"
    )


def _pow2(n: int) -> int:
    return 1 << (max(n, 1) - 1).bit_length()


#: launch configuration override for tuning runs (bench/gpu.py --sweep): keys block_h, block_t, num_warps, split,
#: head_loop
_TUNE: dict[str, int] | None = None


def launch_config(
    hq: int, hk: int, n: int, tokens: int, layout: str, from_pos: bool = False
) -> dict[str, int]:
    """Heads per program, tokens per program, warps, the interleaved load style and whether one program takes
    every head of its tokens, for one launch."""
    # Measured on an H200 (bench/gpu.py, docs/kernels.md "GPU"). Prefill (>= 1024 tokens): one program per token
    # for all heads, 8 warps with tables given and 2 with positions (4 or 8 warps made the position kernel 2-3.4x
    # slower at 4k-32k tokens). Decode (< 1024 tokens): with tables, one program per 16 heads of a token and 4
    # warps (graph replay 1.6-2.6 us per call at batch 1-256; all heads per program was 1.2-1.3x slower); with
    # positions, all heads per program and 4 warps. Sizes between 256 and 4096 tokens were not measured: the
    # switch at 1024 is a choice between the two measured regimes. Interleaved pairs are always split in
    # registers from one contiguous load (the strided loads were 3.5-8x slower).
    prefill = tokens >= 1024
    cfg = {
        "block_h": min(16, _pow2(max(hq, hk))),
        "block_t": 1,
        "num_warps": (2 if from_pos else 8) if prefill else 4,
        "split": int(layout == "interleaved"),
        "head_loop": int(prefill or from_pos),
    }
    if _TUNE is not None:
        cfg.update(_TUNE)
    return cfg


def _bshd(x: torch.Tensor) -> tuple[int, int, int, int, int, int]:
    """(B, S, H, sb, ss, sh) of a [b, s, h, d] or [t, h, d] tensor."""
    st = x.stride()
    if len(st) == 3:
        return 1, x.shape[0], x.shape[1], 0, st[0], st[1]
    sh = x.shape
    return sh[0], sh[1], sh[2], st[0], st[1], st[2]


def _outputs(
    q: torch.Tensor, k: torch.Tensor | None, r: int, inplace: bool
) -> tuple[torch.Tensor, torch.Tensor | None]:
    qo = q if inplace else torch.empty_like(q)
    ko = None if k is None else (k if inplace else torch.empty_like(k))
    if not inplace and q.shape[-1] > r:  # the pass-through channels of a fresh output
        qo[..., r:].copy_(q[..., r:])
        if k is not None and ko is not None:
            ko[..., r:].copy_(k[..., r:])
    return qo, ko


class Plan:
    """One validated launch geometry of :func:`rope_kernel`: grid, integer arguments and constexprs, so a repeated
    call (every layer of every decoding step) makes the launch with no Python checks. Built from the [b, s, h, d]
    views; called with the caller's tensors (the same storage, so the same data pointers). Out of place only when
    every channel is rotated (the outputs are fresh ``empty_like`` tensors of the same geometry)."""

    __slots__ = ("_consts", "_rows", "_slots", "args", "from_pos", "grid", "has_k", "inplace", "meta")

    def __init__(
        self,
        q: torch.Tensor,
        k: torch.Tensor | None,
        qo: torch.Tensor,
        ko: torch.Tensor | None,
        t_sb: int,
        t_ss: int,
        n: int,
        layout: str,
        sign: int,
        from_pos: bool,
        rows: torch.Tensor | None,
        consts: torch.Tensor | None,
        inplace: bool,
        slots: torch.Tensor | None = None,
        t_sa: int = 0,
    ) -> None:
        # slots: int32 [n] axis of each band for multi-axis positions (t_sa apart), None for 1-D
        self._rows, self._consts, self._slots = rows, consts, slots
        rows_len = 0 if rows is None else rows.shape[0]
        B, S, HQ, q_sb, q_ss, q_sh = _bshd(q)
        _, _, _, qo_sb, qo_ss, qo_sh = _bshd(qo)
        HK, k_sb, k_ss, k_sh, ko_sb, ko_ss, ko_sh = 0, 0, 0, 0, 0, 0, 0
        if k is not None and ko is not None:
            _, _, HK, k_sb, k_ss, k_sh = _bshd(k)
            _, _, _, ko_sb, ko_ss, ko_sh = _bshd(ko)
        T = B * S
        cfg = launch_config(HQ, HK, n, T, layout, from_pos)
        bh, bt = cfg["block_h"], cfg["block_t"]
        nqb = -(-HQ // bh)
        self.grid = (-(-T // bt), 1 if cfg["head_loop"] else nqb + (-(-HK // bh) if k is not None else 0))
        self.args: tuple[int, ...] = (rows_len, T, S, HQ, HK, nqb, q_sb, q_ss, q_sh, qo_sb, qo_ss, qo_sh)
        self.args = (*self.args, k_sb, k_ss, k_sh, ko_sb, ko_ss, ko_sh, t_sb, t_ss, t_sa)
        self.meta = {
            "N": n,
            "BLOCK_N": _pow2(n),
            "BLOCK_H": bh,
            "BLOCK_T": bt,
            "INTERLEAVED": layout == "interleaved",
            "SPLIT": bool(cfg["split"]),
            "SIGN": float(sign),
            "HAS_K": k is not None,
            "FROM_POS": from_pos,
            "HEAD_LOOP": bool(cfg["head_loop"]),
            "AXES": slots is not None,
            "num_warps": cfg["num_warps"],
        }
        self.from_pos, self.has_k, self.inplace = from_pos, k is not None, inplace

    def launch(
        self,
        q: torch.Tensor,
        k: torch.Tensor | None,
        qo: torch.Tensor,
        ko: torch.Tensor | None,
        t0: torch.Tensor,
        t1: torch.Tensor,
        rows: torch.Tensor,
        consts: torch.Tensor,
    ) -> None:
        if self.grid[0] == 0:
            return
        if (
            q.is_cuda and q.device.index != torch.cuda.current_device()
        ):  # Triton launches on the current device
            with torch.cuda.device(q.device):
                return self.launch(q, k, qo, ko, t0, t1, rows, consts)
        kk = q if k is None else k
        slots = consts if self._slots is None else self._slots  # not read without AXES
        _k.rope_kernel[self.grid](
            q, qo, kk, kk if ko is None else ko, t0, t1, rows, consts, slots, *self.args, **self.meta
        )  # fmt: skip
        if self.inplace:  # raw-pointer writes: bump the version counters, as a torch in-place op does
            bump_versions((qo,) if ko is None else (qo, ko))

    def __call__(
        self, q: torch.Tensor, k: torch.Tensor | None, t0: torch.Tensor, t1: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Rotate q and k (the caller's tensors, in the geometry the plan was built for) with tables t0/t1, or
        at positions t0 (``from_pos``; rows and constants of the plan's spec)."""
        qo = q if self.inplace else torch.empty_like(q)
        ko = None if k is None else (k if self.inplace else torch.empty_like(k))
        rows = t0 if self._rows is None else self._rows
        consts = t0 if self._consts is None else self._consts
        self.launch(q, k, qo, ko, t0, t1, rows, consts)
        return qo, ko


def rotate_qk(
    q: torch.Tensor,
    k: torch.Tensor | None,
    cos: torch.Tensor,
    sin: torch.Tensor,
    r: int,
    layout: str,
    inplace: bool,
    sign: int = 1,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """One launch for q and k, both laid out as [b, s, h, d] (or [t, h, d]); cos/sin [b or 1, s, n] float32."""
    return tables_plan(q, k, cos, sin, r, layout, inplace, sign)[0]


#: launches by geometry (the autograd path and callers without a fast-path key build no Plan per call)
_LAUNCHES: dict[tuple[object, ...], Plan] = {}


def _repeatable(
    q: torch.Tensor, k: torch.Tensor | None, qo: torch.Tensor, ko: torch.Tensor | None, r: int, inplace: bool
) -> bool:
    """Whether a plan's repeat (``empty_like`` outputs of the caller's tensors, no pass-through copy) writes where
    this call wrote: in place, or every channel rotated and ``empty_like`` kept the strides (dense inputs; for a
    sliced, non-dense q it returns a contiguous tensor whose strides depend on the caller's format)."""
    if inplace:
        return True
    return (
        q.shape[-1] == r
        and qo.stride() == q.stride()
        and (k is None or ko is None or ko.stride() == k.stride())
    )


def tables_plan(
    q: torch.Tensor,
    k: torch.Tensor | None,
    cos: torch.Tensor,
    sin: torch.Tensor,
    r: int,
    layout: str,
    inplace: bool,
    sign: int = 1,
) -> tuple[tuple[torch.Tensor, torch.Tensor | None], Plan | None]:
    """:func:`rotate_qk`, and the :class:`Plan` that repeats it for the same geometry (None when a repeat could
    not reuse it: tables that needed a copy, out of place with pass-through channels)."""
    qo, ko = _outputs(q, k, r, inplace)
    c, s = kernel_tables(cos, sin)  # one set of strides for both; row views of the packed cache: no copy
    # the launch depends on the tensors only through their geometry (outputs: empty_like, a function of it)
    kg = None if k is None else (k.shape, k.stride())
    key = (q.shape, q.stride(), q.dtype, q.device, kg, c.shape, c.stride(), r, layout, sign, inplace)
    plan = _LAUNCHES.get(key) if _TUNE is None else None
    if plan is None:
        t_sb = 0 if c.dim() == 2 or c.shape[0] == 1 else c.stride(0)
        plan = Plan(q, k, qo, ko, t_sb, c.stride(-2), r // 2, layout, sign, False, None, None, inplace)
        if _TUNE is None:
            if len(_LAUNCHES) >= 256:
                _LAUNCHES.clear()
            _LAUNCHES[key] = plan
    plan.launch(q, k, qo, ko, c, s, c, c)
    reusable = c is cos and s is sin and _repeatable(q, k, qo, ko, r, inplace)
    return (qo, ko), plan if reusable else None


class _RotateQK(torch.autograd.Function):
    """q and k in one launch forward, their gradients in one launch backward (the rotation by -phi); the
    backward is this function again, so double backward works."""

    @staticmethod
    def forward(
        ctx: Any, q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, r: int, layout: str,
        sign: int,
    ) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
        ctx.save_for_backward(cos, sin)
        ctx.r, ctx.layout, ctx.sign = r, layout, sign
        qo, ko = rotate_qk(q, k, cos, sin, r, layout, False, sign)
        assert ko is not None
        return qo, ko

    @staticmethod
    def backward(ctx: Any, gq: torch.Tensor | None, gk: torch.Tensor | None) -> tuple[Any, ...]:
        cos, sin = ctx.saved_tensors
        none = (None, None, None, None, None)
        if gq is None or gk is None:  # one of the two outputs unused: rotate the other alone
            g = gq if gq is not None else gk
            assert g is not None
            g = g if g.stride(-1) == 1 else g.contiguous()
            dg = rotate_qk_autograd_one(g, cos, sin, ctx.r, ctx.layout, -ctx.sign)
            return (dg, None, *none) if gq is not None else (None, dg, *none)
        gq = gq if gq.stride(-1) == 1 else gq.contiguous()
        gk = gk if gk.stride(-1) == 1 else gk.contiguous()
        if torch.is_grad_enabled():  # create_graph=True: record this rotation too (double backward)
            dq, dk = _apply_qk(gq, gk, cos, sin, ctx.r, ctx.layout, -ctx.sign)
        else:  # a plain backward: the launch alone
            dq, dk2 = rotate_qk(gq, gk, cos, sin, ctx.r, ctx.layout, False, -ctx.sign)
            assert dk2 is not None
            dk = dk2
        return (dq, dk, *none)


# torch.autograd.Function.apply is an untyped classmethod in torch's stubs; this is its real signature here.
_apply_qk = cast(Callable[..., tuple[torch.Tensor, torch.Tensor]], _RotateQK.apply)


def rotate_qk_autograd_one(
    x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, r: int, layout: str, sign: int
) -> torch.Tensor:
    """One tensor ([b, s, h, d] or [t, h, d]), recorded for autograd."""
    bt = cos.unsqueeze(-2)  # [b|1, s, 1, n] ([t, 1, n]): the broadcast table raw_rotate's callers pass
    out: torch.Tensor = rotate(
        x, bt, sin.unsqueeze(-2), rotary_dim=r, layout=layout, inplace=False, sign=sign
    )
    return out


def rotate_qk_autograd(
    q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, r: int, layout: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`rotate_qk` out of place, recorded for autograd: one launch forward, one backward."""
    qo, ko = _apply_qk(q, k, cos, sin, r, layout, 1)
    return qo, ko


def _as_bshd(x: torch.Tensor, cos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """View x (any of bshd/bhsd/thd, as the dispatcher passes it) and its broadcast table as [b, s, h, d]/[b, s, n]."""
    if x.dim() == 3:  # thd: table [t, 1, n]
        return x, cos.reshape(cos.shape[0], cos.shape[-1])
    if cos.shape[2] == 1 and cos.shape[1] == x.shape[1]:  # bshd: table [b|1, s, 1, n]
        return x, cos[:, :, 0]
    return x.transpose(1, 2), cos[:, 0]  # bhsd: table [b|1, 1, s, n]


def raw_rotate(
    x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, r: int, layout: str, inplace: bool, sign: int = 1
) -> torch.Tensor:
    if not supports(x):  # the dispatch refuses these before anything is written: never run another backend
        raise ValueError(refusal("x", x, unsupported(x) or "unsupported"))
    xv, c = _as_bshd(x, cos)
    _, s = _as_bshd(x, sin)
    out, _ = rotate_qk(xv, None, c, s, r, layout, inplace, sign)
    if out is xv:
        return x
    return out if x.dim() == 3 or xv is x else out.transpose(1, 2)


rotate = make_rotate(raw_rotate, "triton")

# SPDX-License-Identifier: MIT
"""Triton backend for GPUs: one launch rotates q and k, in place or out of place, forward and backward.

Grid: (tokens, head blocks of q followed by head blocks of k) -- token-linear, so packed "thd" batches launch
exactly one program row per real token (TransformerEngine #2866 launched max_seqlen x n_seqs). Each program loads
its token's float32 cos/sin row once (the exact tables built on the host from float64 phases, so the phases are as
exact as everywhere in ropekit), rotates BLOCK_H heads in float32 and stores in the input dtype. All offsets are
int64 (tensors over 2^31 elements: Liger-Kernel #804). Any strides on batch/seq/head; unit stride on the last dim.

Correctness is tested on the CPU with ``TRITON_INTERPRET=1`` against the float64 reference. On CUDA devices the
auto backend picks this one when Triton is importable.

Shapes: x as [b, s, h, d] strides (bshd / bhsd / thd all map onto it), tables [b or 1, s, n].
"""

from __future__ import annotations

import os

import torch

from ropekit.rotation import torch_backend
from ropekit.rotation.autograd import make_rotate
from ropekit.rotation.cpu_backend import kernel_tables

__all__ = ["available", "raw_rotate", "rotate", "rotate_qk", "supports"]

try:  # Triton is optional (the `triton` extra)
    import triton
    import triton.language as tl

    _HAVE_TRITON = True
except ImportError:  # pragma: no cover - exercised where triton is absent
    _HAVE_TRITON = False


def available() -> bool:
    return _HAVE_TRITON


def _interpret() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def supports(x: torch.Tensor) -> bool:
    """Triton handles x: CUDA tensors (or CPU tensors under TRITON_INTERPRET=1), float32/bf16/fp16, last stride 1."""
    if not _HAVE_TRITON or x.dtype not in (torch.float32, torch.bfloat16, torch.float16) or x.stride(-1) != 1:
        return False
    return x.device.type == "cuda" or (x.device.type == "cpu" and _interpret())


if _HAVE_TRITON:

    @triton.jit
    def _rotate_heads(
        X,
        O,
        x_off,
        o_off,
        h,
        H,
        x_sh,
        o_sh,
        c,
        s,
        N: tl.constexpr,
        BLOCK_N: tl.constexpr,
        INTERLEAVED: tl.constexpr,
    ):
        i = tl.arange(0, BLOCK_N)
        hm = h < H
        m = hm[:, None] & (i < N)[None, :]
        xrow = X + x_off + h.to(tl.int64)[:, None] * x_sh
        orow = O + o_off + h.to(tl.int64)[:, None] * o_sh
        if INTERLEAVED:
            ia, ib = 2 * i, 2 * i + 1
        else:
            ia, ib = i, i + N
        a = tl.load(xrow + ia[None, :], mask=m, other=0.0).to(tl.float32)
        b = tl.load(xrow + ib[None, :], mask=m, other=0.0).to(tl.float32)
        ra = a * c[None, :] - b * s[None, :]
        rb = b * c[None, :] + a * s[None, :]
        tl.store(orow + ia[None, :], ra.to(O.dtype.element_ty), mask=m)
        tl.store(orow + ib[None, :], rb.to(O.dtype.element_ty), mask=m)

    @triton.jit
    def _rope_kernel(
        Q,
        QO,
        K,
        KO,
        COS,
        SIN,
        S,
        HQ,
        HK,
        NQB,
        q_sb,
        q_ss,
        q_sh,
        qo_sb,
        qo_ss,
        qo_sh,
        k_sb,
        k_ss,
        k_sh,
        ko_sb,
        ko_ss,
        ko_sh,
        t_sb,
        t_ss,
        N: tl.constexpr,
        BLOCK_N: tl.constexpr,
        BLOCK_H: tl.constexpr,
        INTERLEAVED: tl.constexpr,
        SIGN: tl.constexpr,
        HAS_K: tl.constexpr,
    ):
        tok = tl.program_id(0).to(tl.int64)  # b * S + s, int64 from the start
        hb = tl.program_id(1)
        b = tok // S
        si = tok % S
        i = tl.arange(0, BLOCK_N)
        t_off = b * t_sb + si * t_ss
        c = tl.load(COS + t_off + i, mask=i < N, other=1.0).to(tl.float32)
        s = tl.load(SIN + t_off + i, mask=i < N, other=0.0).to(tl.float32) * SIGN
        if hb < NQB:
            h = hb * BLOCK_H + tl.arange(0, BLOCK_H)
            _rotate_heads(
                Q,
                QO,
                b * q_sb + si * q_ss,
                b * qo_sb + si * qo_ss,
                h,
                HQ,
                q_sh,
                qo_sh,
                c,
                s,
                N,
                BLOCK_N,
                INTERLEAVED,
            )
        elif HAS_K:
            h = (hb - NQB) * BLOCK_H + tl.arange(0, BLOCK_H)
            _rotate_heads(
                K,
                KO,
                b * k_sb + si * k_ss,
                b * ko_sb + si * ko_ss,
                h,
                HK,
                k_sh,
                ko_sh,
                c,
                s,
                N,
                BLOCK_N,
                INTERLEAVED,
            )


def _bshd(x: torch.Tensor) -> tuple[int, int, int, int, int, int]:
    """(B, S, H, sb, ss, sh) of a [b, s, h, d] or [t, h, d] tensor."""
    if x.dim() == 3:
        return 1, x.shape[0], x.shape[1], 0, x.stride(0), x.stride(1)
    return x.shape[0], x.shape[1], x.shape[2], x.stride(0), x.stride(1), x.stride(2)


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
    n = r // 2
    qo = q if inplace else torch.empty_like(q)
    ko = None if k is None else (k if inplace else torch.empty_like(k))
    if not inplace and q.shape[-1] > r:
        qo[..., r:].copy_(q[..., r:])
        if k is not None:
            ko[..., r:].copy_(k[..., r:])  # type: ignore[index]
    B, S, HQ, q_sb, q_ss, q_sh = _bshd(q)
    _, _, _, qo_sb, qo_ss, qo_sh = _bshd(qo)
    HK, k_sb, k_ss, k_sh, ko_sb, ko_ss, ko_sh = 0, 0, 0, 0, 0, 0, 0
    if k is not None:
        _, _, HK, k_sb, k_ss, k_sh = _bshd(k)
        _, _, _, ko_sb, ko_ss, ko_sh = _bshd(ko)  # type: ignore[arg-type]
    cos, sin = kernel_tables(cos, sin)  # one set of strides for both; row views of the packed cache: no copy
    t_sb = 0 if cos.dim() == 2 or cos.shape[0] == 1 else cos.stride(0)
    t_ss = cos.stride(-2)
    BLOCK_H = min(8, triton.next_power_of_2(max(HQ, HK, 1)))
    NQB = triton.cdiv(HQ, BLOCK_H)
    NKB = triton.cdiv(HK, BLOCK_H) if k is not None else 0
    grid = (B * S, NQB + NKB)
    if B * S > 0:
        _rope_kernel[grid](
            q,
            qo,
            q if k is None else k,
            qo if ko is None else ko,
            cos,
            sin,
            S,
            HQ,
            HK,
            NQB,
            q_sb,
            q_ss,
            q_sh,
            qo_sb,
            qo_ss,
            qo_sh,
            k_sb,
            k_ss,
            k_sh,
            ko_sb,
            ko_ss,
            ko_sh,
            t_sb,
            t_ss,
            N=n,
            BLOCK_N=triton.next_power_of_2(n),
            BLOCK_H=BLOCK_H,
            INTERLEAVED=layout == "interleaved",
            SIGN=float(sign),
            HAS_K=k is not None,
        )
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
    if not supports(x):
        return torch_backend.raw_rotate(x, cos, sin, r, layout, inplace, sign)
    xv, c = _as_bshd(x, cos)
    _, s = _as_bshd(x, sin)
    out, _ = rotate_qk(xv, None, c, s, r, layout, inplace, sign)
    if out is xv:
        return x
    return out if x.dim() == 3 or xv is x else out.transpose(1, 2)


rotate = make_rotate(raw_rotate, "triton")

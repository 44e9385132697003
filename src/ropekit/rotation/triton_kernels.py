# SPDX-License-Identifier: MIT
"""Triton kernels (imported only where Triton is installed): the rotation of q and k, and exact cos/sin rows.

``rope_kernel`` rotates the heads of BLOCK_T tokens per program. The table row of a token comes either from
float32 tables (COS/SIN with token strides) or, with FROM_POS, from the token's integer position: a row of the
spec's immutable exact table when 0 <= p < L, else computed exactly on the fly (below). With HEAD_LOOP one program
takes every q and k head of its tokens (the row is read or computed once per token); without it, program_id(1)
picks a block of BLOCK_H heads.

``tables_kernel`` writes exact float32 cos/sin rows for integer positions the same way (rope_tables on CUDA).

With AXES (multi-axis RoPE: M-RoPE, Wang et al. 2024, "Qwen2-VL"; axial 2-D RoPE, Heo et al. 2024) the positions
hold one row per axis (stride t_sa between rows) and band j reads the position of its own axis SLOTS[j] (int32
[n]): the same kernels, each band's row taken at its axis's position (``_row_axes``), no per-token tables.

Exact rows on the fly are :func:`ropekit.reduction.reduced_turns` in float64: p = hi * 2^32 + lo, the six exact
pieces of frac(2^(32 j) theta / 2 pi) (CONSTS rows 0-5, 21 significant bits each, so every product and floor is
exact), the float64 rest, one final reduction to [-1/2, 1/2] turn; cos and sin in float64, times the attention
factor (row 7), rounded once to float32 -- the recipe of the float64 host path, so rows agree with it to within
one float32 rounding. CONSTS: [9, n] float64 = band_constants' 7 rows, the attention factor, 2 pi (as float64
data: a Python float literal would reach the kernel as float32).

Shapes: x strides as [b, s, h, d] (bshd / bhsd / thd all map onto it); tables [b or 1, s, n]; positions
[b or 1, s]; ROWS [L, 2, n] float32 (cos row, then sin row).
"""

from __future__ import annotations

import triton
import triton.language as tl

__all__ = ["rope_kernel", "tables_kernel"]


@triton.jit
def _exact_row(p, CONSTS, i, N: tl.constexpr):
    """float32 (cos, sin) [BLOCK_N] of integer position p (int64 scalar), exact reduction in float64."""
    m = i < N
    lo = (p & 0xFFFFFFFF).to(tl.float64)
    hi = (p >> 32).to(tl.float64)  # arithmetic shift: hi in [-2^31, 2^31)
    a0 = tl.load(CONSTS + i, mask=m, other=0.0)
    b0 = tl.load(CONSTS + N + i, mask=m, other=0.0)
    r0 = tl.load(CONSTS + 2 * N + i, mask=m, other=0.0)
    a1 = tl.load(CONSTS + 3 * N + i, mask=m, other=0.0)
    b1 = tl.load(CONSTS + 4 * N + i, mask=m, other=0.0)
    r1 = tl.load(CONSTS + 5 * N + i, mask=m, other=0.0)
    f = tl.load(CONSTS + 7 * N + i, mask=m, other=1.0)
    two_pi = tl.load(CONSTS + 8 * N + i, mask=m, other=0.0)
    x0 = lo * a0
    y0 = lo * b0
    x1 = hi * a1
    y1 = hi * b1
    big = ((x0 - tl.floor(x0)) + (y0 - tl.floor(y0))) + ((x1 - tl.floor(x1)) + (y1 - tl.floor(y1)))
    t = big + (lo * r0 + hi * r1)
    t = t - tl.floor(t + 0.5)
    ang = t * two_pi
    return (tl.cos(ang) * f).to(tl.float32), (tl.sin(ang) * f).to(tl.float32)


@triton.jit
def _row(COS, SIN, t_off, p, ROWS, CONSTS, L, i, N: tl.constexpr, FROM_POS: tl.constexpr):
    m = i < N
    if FROM_POS:
        if (p >= 0) & (p < L):
            base = ROWS + p * (2 * N)
            c = tl.load(base + i, mask=m, other=1.0)
            s = tl.load(base + N + i, mask=m, other=0.0)
        else:
            c, s = _exact_row(p, CONSTS, i, N)
    else:
        c = tl.load(COS + t_off + i, mask=m, other=1.0).to(tl.float32)
        s = tl.load(SIN + t_off + i, mask=m, other=0.0).to(tl.float32)
    return c, s


@triton.jit
def _row_axes(POS, t_off, t_sa, SLOTS, ROWS, CONSTS, L, i, N: tl.constexpr):
    """Multi-axis: band j turned at the position of axis SLOTS[j] (POS + t_off + SLOTS[j] * t_sa); rows from the
    exact table where 0 <= p < L, else exact in float64 (computed only when some band needs it)."""
    m = i < N
    a = tl.load(SLOTS + i, mask=m, other=0).to(tl.int64)
    p = tl.load(POS + t_off + a * t_sa, mask=m, other=0).to(tl.int64)
    inside = (p >= 0) & (p < L)
    row = ROWS + tl.where(inside, p, 0) * (2 * N) + i
    c = tl.load(row, mask=m & inside, other=1.0)
    s = tl.load(row + N, mask=m & inside, other=0.0)
    outside = (m & ~inside).to(tl.int32)
    if tl.max(outside, axis=0) > 0:
        ce, se = _exact_row(p, CONSTS, i, N)
        c = tl.where(inside, c, ce)
        s = tl.where(inside, s, se)
    return c, s


@triton.jit
def _rotate_heads(
    X,
    O,
    x_off,
    o_off,
    h,
    hm,
    x_sh,
    o_sh,
    c,
    s,
    N: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_H: tl.constexpr,
    INTERLEAVED: tl.constexpr,
    SPLIT: tl.constexpr,
):
    xrow = X + x_off + h.to(tl.int64)[:, None] * x_sh
    orow = O + o_off + h.to(tl.int64)[:, None] * o_sh
    if INTERLEAVED and SPLIT:  # one contiguous load of the 2N rotated channels, pairs split in registers
        j = tl.arange(0, 2 * BLOCK_N)
        mj = hm[:, None] & (j < 2 * N)[None, :]
        x = tl.load(xrow + j[None, :], mask=mj, other=0.0).to(tl.float32)
        a, b = tl.split(tl.reshape(x, (BLOCK_H, BLOCK_N, 2)))
        ra = a * c[None, :] - b * s[None, :]
        rb = b * c[None, :] + a * s[None, :]
        y = tl.reshape(tl.join(ra, rb), (BLOCK_H, 2 * BLOCK_N))
        tl.store(orow + j[None, :], y.to(O.dtype.element_ty), mask=mj)
    else:
        i = tl.arange(0, BLOCK_N)
        m = hm[:, None] & (i < N)[None, :]
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
def _rotate_block(
    X, O, x_off, o_off, hb, H, x_sh, o_sh, hv, c, s, N: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_H: tl.constexpr,
    INTERLEAVED: tl.constexpr, SPLIT: tl.constexpr,
):  # fmt: skip
    """Heads hb * BLOCK_H ... of one token (masked past H, and for a ragged token block's padding)."""
    h = hb * BLOCK_H + tl.arange(0, BLOCK_H)
    _rotate_heads(
        X, O, x_off, o_off, h, (h < H) & hv, x_sh, o_sh, c, s, N, BLOCK_N, BLOCK_H, INTERLEAVED, SPLIT
    )


@triton.jit
def rope_kernel(
    Q,
    QO,
    K,
    KO,
    COS,
    SIN,
    ROWS,
    CONSTS,
    SLOTS,
    L,
    T,
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
    t_sa,
    N: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_H: tl.constexpr,
    BLOCK_T: tl.constexpr,
    INTERLEAVED: tl.constexpr,
    SPLIT: tl.constexpr,
    SIGN: tl.constexpr,
    HAS_K: tl.constexpr,
    FROM_POS: tl.constexpr,
    HEAD_LOOP: tl.constexpr,
    AXES: tl.constexpr,
):
    """COS/SIN are the tables (FROM_POS=False) or COS the int positions (FROM_POS=True), strides t_sb, t_ss; with
    AXES (and FROM_POS) one row of positions per axis, t_sa apart, band j reading axis SLOTS[j]."""
    pid = tl.program_id(0).to(tl.int64)  # token block; token = b * S + s, int64 from the start
    hb0 = tl.program_id(1)
    i = tl.arange(0, BLOCK_N)
    for t in tl.static_range(BLOCK_T):
        tok = pid * BLOCK_T + t
        tv = tl.minimum(tok, T - 1)  # a ragged last block re-reads the last token and stores nothing
        b = tv // S
        si = tv % S
        t_off = b * t_sb + si * t_ss
        if AXES:
            c, s = _row_axes(COS, t_off, t_sa, SLOTS, ROWS, CONSTS, L, i, N)
        else:
            p = 0
            if FROM_POS:
                p = tl.load(COS + t_off).to(tl.int64)
            c, s = _row(COS, SIN, t_off, p, ROWS, CONSTS, L, i, N, FROM_POS)
        s = s * SIGN
        hv = tl.zeros([BLOCK_H], tl.int64) + tok < T  # vector form (the interpreter wants it)
        q_off = b * q_sb + si * q_ss
        qo_off = b * qo_sb + si * qo_ss
        k_off = b * k_sb + si * k_ss
        ko_off = b * ko_sb + si * ko_ss
        # fmt: off
        if HEAD_LOOP:  # one program, every head of the token: the row is read (or computed) once
            for hb in range(NQB):
                _rotate_block(Q, QO, q_off, qo_off, hb, HQ, q_sh, qo_sh, hv, c, s,
                              N, BLOCK_N, BLOCK_H, INTERLEAVED, SPLIT)
            if HAS_K:
                for hb in range(tl.cdiv(HK, BLOCK_H)):
                    _rotate_block(K, KO, k_off, ko_off, hb, HK, k_sh, ko_sh, hv, c, s,
                                  N, BLOCK_N, BLOCK_H, INTERLEAVED, SPLIT)
        elif hb0 < NQB:  # one program per block of BLOCK_H heads: q blocks first, then k blocks
            _rotate_block(Q, QO, q_off, qo_off, hb0, HQ, q_sh, qo_sh, hv, c, s,
                          N, BLOCK_N, BLOCK_H, INTERLEAVED, SPLIT)
        elif HAS_K:
            _rotate_block(K, KO, k_off, ko_off, hb0 - NQB, HK, k_sh, ko_sh, hv, c, s,
                          N, BLOCK_N, BLOCK_H, INTERLEAVED, SPLIT)
        # fmt: on


@triton.jit
def tables_kernel(
    POS, COS, SIN, ROWS, CONSTS, SLOTS, L, P, N: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_T: tl.constexpr,
    AXES: tl.constexpr,
):  # fmt: skip
    """cos/sin [P, N] float32 (contiguous) of int positions [P] (contiguous); with AXES positions [A, P]
    (contiguous) and band j at axis SLOTS[j]."""
    pid = tl.program_id(0).to(tl.int64)
    i = tl.arange(0, BLOCK_N)
    for t in tl.static_range(BLOCK_T):
        tok = pid * BLOCK_T + t
        tv = tl.minimum(tok, P - 1)
        if AXES:
            c, s = _row_axes(POS, tv, P, SLOTS, ROWS, CONSTS, L, i, N)
        else:
            p = tl.load(POS + tv).to(tl.int64)
            c, s = _row(POS, POS, 0, p, ROWS, CONSTS, L, i, N, True)
        m = (i < N) & (tl.zeros([BLOCK_N], tl.int64) + tok < P)
        tl.store(COS + tv * N + i, c, mask=m)
        tl.store(SIN + tv * N + i, s, mask=m)

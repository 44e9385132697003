// SPDX-License-Identifier: MIT
// RoPE fused with the KV-cache write; included at the end of rope_cpu.c (one translation unit, one library).
//
// Token t = (b, s) of k [B, S, Hk, D], v [B, S, Hk, Dv] and q [B, S, Hq, D] (element strides per dim, unit
// stride on the last). The destination row of token t, head h in a cache with strides (c0, c1, c2, 1):
//   mode 0, contiguous per-sequence cache: cache + b * c0 + (index[b] + s) * c1 + h * c2  (index = offsets [B])
//   mode 1, paged (vLLM-style blocks):     slot = index[t]; cache + (slot / bs) * c0 + (slot % bs) * c1 + h * c2
// k is rotated into the k cache (k itself is not modified; the pass-through channels of partial rotary are
// copied), v is copied into the v cache, and q (when given) is rotated in place. One pass: every element of k, v
// and q is read once and written once, and the table row of a token is read once for all its heads.
// The caller (ropekit/rotation/kv_cache.py) has validated shapes, dtypes and every index before this runs.

// Copy-rotate and in-place-rotate of one row, positive angle, per storage type.
static inline void cw_copy_f32(f32 *o, const f32 *x, const f32 *c, const f32 *s, int64_t n, int il) {
    if (il) inter_row_f32(o, x, c, s, n, 1.0f); else half_copy_f32(o, x, c, s, n, 1.0f);
}
static inline void cw_inplace_f32(f32 *x, const f32 *c, const f32 *s, int64_t n, int il) {
    if (il) inter_row_f32(x, x, c, s, n, 1.0f); else half_inplace_f32(x, c, s, n, 1.0f);
}
static inline void cw_copy_bf16(bf16 *o, const bf16 *x, const f32 *c, const f32 *s, int64_t n, int il) {
#ifdef ROPEKIT_BF16_VEC
    if (il) inter_bf16_vec(o, x, c, s, n, 1.0f); else half_bf16_vec(o, x, c, s, n, 1.0f);
#else
    if (il) inter_words_bf16(o, x, c, s, n, 1.0f); else half_copy_bf16(o, x, c, s, n, 1.0f);
#endif
}
static inline void cw_inplace_bf16(bf16 *x, const f32 *c, const f32 *s, int64_t n, int il) {
#ifdef ROPEKIT_BF16_VEC
    if (il) inter_bf16_vec(x, x, c, s, n, 1.0f); else half_bf16_vec(x, x, c, s, n, 1.0f);
#else
    if (il) inter_words_bf16(x, x, c, s, n, 1.0f); else half_inplace_bf16(x, c, s, n, 1.0f);
#endif
}
static inline void cw_copy_f16(f16 *o, const f16 *x, const f32 *c, const f32 *s, int64_t n, int il) {
#ifdef ROPEKIT_F16C
    if (il) inter_row_f16(o, x, c, s, n, 1.0f); else half_f16c(o, x, c, s, n, 1.0f);
#else
    if (il) inter_row_f16(o, x, c, s, n, 1.0f); else half_copy_f16(o, x, c, s, n, 1.0f);
#endif
}
static inline void cw_inplace_f16(f16 *x, const f32 *c, const f32 *s, int64_t n, int il) {
#ifdef ROPEKIT_F16C
    if (il) inter_row_f16(x, x, c, s, n, 1.0f); else half_f16c(x, x, c, s, n, 1.0f);
#else
    if (il) inter_row_f16(x, x, c, s, n, 1.0f); else half_inplace_f16(x, c, s, n, 1.0f);
#endif
}

typedef struct {
    const void *k, *v;
    void *ck, *cv, *q;
    const f32 *cosp, *sinp;
    const int64_t *index, *p;  // p: the parameter block (see ropekit_cache_write_*)
    const int64_t *tpos;       // table mode 2: the rotation positions (rows of the packed cache)
} cw_args;

// The table offset of token (b, s), by the table mode p[28]: 0, tables with strides (p[21], p[22]) over (b, s);
// 1, the packed cache row at the default position index[b] + s (contiguous caches); 2, the packed cache row at
// tpos[b p[29] + s p[30]]. In modes 1 and 2 cosp is the packed rows [L, 2, n] and sinp = cosp + n.
#define CW_TB(b, s)                                                                                             \
    (p[28] == 0   ? (b) * p[21] + (s) * p[22]                                                                   \
     : p[28] == 1 ? (a->index[(b)] + (s)) * r                                                                   \
                  : a->tpos[(b) * p[29] + (s) * p[30]] * r)

// One token's work; N is a compile-time constant in the common cases (the row loops unroll).
#define CW_TOKEN(T, N)                                                                                          \
    do {                                                                                                        \
        const T *kt = (const T *)a->k + b * p[6] + s * p[7];                                                    \
        T *ckt = (T *)a->ck + blk * p[15] + off * p[16];                                                        \
        for (int64_t h = 0; h < Hk; ++h) {                                                                      \
            const T *kr = kt + h * p[8];                                                                        \
            T *dst = ckt + h * p[17];                                                                           \
            cw_copy_##T(dst, kr, c, sn, N, il);                                                                 \
            if (D > r) memcpy(dst + r, kr + r, (size_t)(D - r) * sizeof(T));                                    \
        }                                                                                                       \
        const T *vt = (const T *)a->v + b * p[9] + s * p[10];                                                   \
        T *cvt = (T *)a->cv + blk * p[18] + off * p[19];                                                        \
        for (int64_t h = 0; h < Hk; ++h) memcpy(cvt + h * p[20], vt + h * p[11], (size_t)Dv * sizeof(T));      \
        if (a->q) {                                                                                             \
            T *qt = (T *)a->q + b * p[12] + s * p[13];                                                          \
            for (int64_t h = 0; h < Hq; ++h) cw_inplace_##T(qt + h * p[14], c, sn, N, il);                      \
        }                                                                                                       \
    } while (0)

// Contiguous cache with k and the cache both head-major (bhsd, HF's layout): head groups outside, the chunk's
// tokens inside, so that every head's rows are read and written as a few contiguous runs advancing together
// (token-major order touches 2 Hk + Hq far-apart rows per token, which costs about 2x a plain copy of the same
// bytes). Each table row is read once per group of heads (rope_cpu.c: GROUPED), not once per head: groups of
// STREAMS q heads (rotated in place: one stream per head), of CW_GROUP k heads (a read and a write stream each).
#define CW_GROUP (STREAMS / 2)
#define CW_HEADS_OUTER(T, N)                                                                                    \
    do {                                                                                                        \
        const int64_t b0 = begin / S, s0 = begin % S;                                                           \
        for (int64_t h0 = 0; h0 < Hk; h0 += CW_GROUP) {                                                         \
            const int64_t h1 = h0 + CW_GROUP < Hk ? h0 + CW_GROUP : Hk;                                         \
            int64_t b = b0, s = s0;                                                                             \
            for (int64_t t = begin; t < end; ++t) {                                                             \
                const int64_t tb = CW_TB(b, s);                                                                 \
                for (int64_t h = h0; h < h1; ++h) {                                                             \
                    const T *kr = (const T *)a->k + b * p[6] + s * p[7] + h * p[8];                             \
                    T *dst = (T *)a->ck + b * p[15] + (a->index[b] + s) * p[16] + h * p[17];                    \
                    cw_copy_##T(dst, kr, a->cosp + tb, a->sinp + tb, N, il);                                    \
                    if (D > r) memcpy(dst + r, kr + r, (size_t)(D - r) * sizeof(T));                            \
                }                                                                                               \
                if (++s == S) { s = 0; ++b; }                                                                   \
            }                                                                                                   \
        }                                                                                                       \
        /* v: a head's rows of one sequence are one block on both sides when rows are Dv apart (bhsd, HF's layout) */ \
        const int vrun = p[10] == Dv && p[19] == Dv;                                                            \
        for (int64_t h = 0; h < Hk; ++h) {                                                                      \
            int64_t b = b0, s = s0;                                                                             \
            for (int64_t t = begin; t < end;) {                                                                 \
                const int64_t run = vrun ? (end - t < S - s ? end - t : S - s) : 1;                              \
                memcpy((T *)a->cv + b * p[18] + (a->index[b] + s) * p[19] + h * p[20],                          \
                       (const T *)a->v + b * p[9] + s * p[10] + h * p[11], (size_t)(run * Dv) * sizeof(T));     \
                t += run; s += run;                                                                             \
                if (s == S) { s = 0; ++b; }                                                                     \
            }                                                                                                   \
        }                                                                                                       \
        for (int64_t h0 = 0; a->q && h0 < Hq; h0 += STREAMS) {                                                  \
            const int64_t h1 = h0 + STREAMS < Hq ? h0 + STREAMS : Hq;                                           \
            int64_t b = b0, s = s0;                                                                             \
            for (int64_t t = begin; t < end; ++t) {                                                             \
                const int64_t tb = CW_TB(b, s);                                                                 \
                for (int64_t h = h0; h < h1; ++h)                                                               \
                    cw_inplace_##T((T *)a->q + b * p[12] + s * p[13] + h * p[14], a->cosp + tb, a->sinp + tb,   \
                                   N, il);                                                                      \
                if (++s == S) { s = 0; ++b; }                                                                   \
            }                                                                                                   \
        }                                                                                                       \
    } while (0)

// p = [B, S, Hk, Hq, D, Dv, ks0, ks1, ks2, vs0, vs1, vs2, qs0, qs1, qs2, cks0, cks1, cks2, cvs0, cvs1, cvs2,
//      ts0, ts1, mode, block_size, r, interleaved, nthreads, table mode, ps0, ps1]; strides in elements; ts* are
//      the table strides of (b, s) (0 where broadcast), ps* the strides of tpos over (b, s) (0 where broadcast).
// L: the packed cache's rows (table modes 1 and 2; see CW_TB) -- an argument, not in p, which a plan shares
// between calls that may run at once.
// Returns 0 after writing; in table modes 1 and 2, before writing anything: -1 if a position is negative, the
// largest position if one is >= L (the caller grows the cache and calls again).
#define CACHE_WRITE_KERNEL(NAME, T)                                                                             \
static void NAME##_range(const void *vctx, int64_t begin, int64_t end) {                                        \
    const cw_args *a = (const cw_args *)vctx;                                                                  \
    const int64_t *p = a->p;                                                                                   \
    const int64_t S = p[1], Hk = p[2], Hq = p[3], D = p[4], Dv = p[5], r = p[25], n = r / 2;                   \
    const int il = (int)p[26];                                                                                 \
    if (begin >= end) return; /* nothing to do (and S may be 0: no division below) */                       \
    if (p[23] == 0 && p[8] > p[7] && p[17] > p[16] && (!a->q || p[14] > p[13])) {                             \
        switch (n) {                                                                                           \
            case 32: CW_HEADS_OUTER(T, 32); break;                                                             \
            case 64: CW_HEADS_OUTER(T, 64); break;                                                             \
            default: CW_HEADS_OUTER(T, n); break;                                                              \
        }                                                                                                      \
        return;                                                                                                \
    }                                                                                                          \
    for (int64_t t = begin; t < end; ++t) {                                                                    \
        const int64_t b = t / S, s = t % S;                                                                    \
        int64_t blk, off;                                                                                      \
        if (p[23] == 0) { blk = b; off = a->index[b] + s; }                                                    \
        else { const int64_t slot = a->index[t]; blk = slot / p[24]; off = slot % p[24]; }                     \
        const int64_t tb = CW_TB(b, s);                                                                        \
        const f32 *c = a->cosp + tb, *sn = a->sinp + tb;                                                       \
        switch (n) {                                                                                           \
            case 32: CW_TOKEN(T, 32); break;                                                                   \
            case 64: CW_TOKEN(T, 64); break;                                                                   \
            default: CW_TOKEN(T, n); break;                                                                    \
        }                                                                                                      \
    }                                                                                                          \
}                                                                                                              \
int64_t NAME(const T *k, const T *v, T *ck, T *cv, T *q, const f32 *cosp, const f32 *sinp, const int64_t *index, \
             const int64_t *tpos, int64_t L, const int64_t *p) {                                               \
    if (p[28]) { /* rows read at positions: every position in [0, L) before anything is written */             \
        int64_t hi = -1;                                                                                       \
        for (int64_t b = 0; b < p[0]; ++b)                                                                     \
            for (int64_t s = 0; s < p[1]; ++s) {                                                               \
                const int64_t x = p[28] == 1 ? index[b] + s : tpos[b * p[29] + s * p[30]];                     \
                if (x < 0) return -1;                                                                          \
                if (x > hi) hi = x;                                                                            \
            }                                                                                                  \
        if (hi >= L) return hi;                                                                                \
    }                                                                                                          \
    const cw_args a = {k, v, ck, cv, q, cosp, sinp, index, p, tpos};                                          \
    const int64_t per_token = (p[2] * (p[4] + p[5]) + (q ? p[3] * p[4] : 0));                                   \
    parallel_range(NAME##_range, &a, p[0] * p[1], rows_per_chunk(per_token > 0 ? per_token : 1), (int)p[27]);  \
    return 0;                                                                                                  \
}

CACHE_WRITE_KERNEL(ropekit_cache_write_f32, f32)
CACHE_WRITE_KERNEL(ropekit_cache_write_bf16, bf16)
CACHE_WRITE_KERNEL(ropekit_cache_write_f16, f16)

// Validation before any write (the fast path of ropekit/rotation/kv_cache.py; the PyTorch path checks the same).
// Returns 0 when every slot is in [0, capacity) and no slot repeats; else 1 (out of range) or 2 (a repeat), with
// the offending token index in *bad.
static int cmp_i64(const void *a, const void *b) {
    const int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}
int ropekit_check_slots(const int64_t *slots, int64_t T, int64_t capacity, int64_t *bad) {
    for (int64_t t = 0; t < T; ++t) {
        if (slots[t] < 0 || slots[t] >= capacity) { *bad = t; return 1; }
    }
    if (T <= 64) {
        for (int64_t t = 1; t < T; ++t)
            for (int64_t u = 0; u < t; ++u)
                if (slots[t] == slots[u]) { *bad = t; return 2; }
        return 0;
    }
    int64_t *sorted = (int64_t *)malloc((size_t)T * sizeof(int64_t));
    if (!sorted) { *bad = -1; return 3; }
    memcpy(sorted, slots, (size_t)T * sizeof(int64_t));
    qsort(sorted, (size_t)T, sizeof(int64_t), cmp_i64);
    int rc = 0;
    for (int64_t t = 1; t < T && !rc; ++t) {
        if (sorted[t] == sorted[t - 1]) {
            rc = 2;
            for (int64_t u = 0; u < T; ++u)  // report a token that holds the repeated slot
                if (slots[u] == sorted[t]) *bad = u;
        }
    }
    free(sorted);
    return rc;
}

// Offsets of the contiguous layout: 0 <= offsets[b] and offsets[b] + S <= rows. Returns 0, or 1 with *bad = b.
int ropekit_check_offsets(const int64_t *offsets, int64_t B, int64_t S, int64_t rows, int64_t *bad) {
    for (int64_t b = 0; b < B; ++b) {
        if (offsets[b] < 0 || offsets[b] > rows - S) { *bad = b; return 1; }
    }
    return 0;
}

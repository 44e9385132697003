// SPDX-License-Identifier: MIT
// ropekit's fused CPU RoPE kernels: each element of x is read once and written once (in place: only the first
// rotary_dim channels of each row are touched). Storage float32 / bfloat16 / float16, math in float32,
// float32 cos/sin tables. x is seen as [d0, d1, d2, D] with arbitrary element strides for the three leading dims
// and unit stride on the last; the table as [d0, d1, d2, n] with stride 0 on broadcast dims.
// Band i rotates the pair (x_i, y_i): x' = x c - y s, y' = y c + x s, where (x_i, y_i) = (i, i + n) in the half
// layout and (2i, 2i + 1) in the interleaved one. sign = -1 rotates by the negative angle (the backward).
// ropekit_cache_write_*: RoPE fused with the KV-cache write (rotate k into the cache, copy v, rotate q in place).
//
// Threads: a small pool of its own (pthreads), sized by the caller (never more than torch.get_num_threads()).
// Work is split into chunks of rows that threads *claim*; the caller works too and, at the end, waits only for
// chunks already claimed. A worker that is descheduled (a busy machine) therefore never holds the call up: its
// share is done by whoever runs. Idle workers sleep on a condition variable (no spinning).
#include <stdint.h>
#include <stdlib.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <string.h>
#if defined(__F16C__) && defined(__AVX__)
#include <immintrin.h>
#define ROPEKIT_F16C 1
#endif
#if defined(__AVX512BF16__) && defined(__AVX512BW__) && defined(__AVX512DQ__) && defined(__AVX512F__)
#include <immintrin.h>
#define ROPEKIT_BF16_VEC 1
#endif

#define R __restrict__
typedef float f32;
typedef uint16_t bf16;
typedef uint16_t f16;  // IEEE half stored as bits

static inline f32 load_f32(const f32 *p) { return *p; }
static inline void store_f32(f32 *p, f32 v) { *p = v; }
static inline f32 load_bf16(const bf16 *p) { uint32_t u = ((uint32_t)*p) << 16; f32 f; memcpy(&f, &u, 4); return f; }
static inline void store_bf16(bf16 *p, f32 f) {
    uint32_t u; memcpy(&u, &f, 4);
    const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;  // round to nearest even
    const uint32_t qnan = (u >> 16) | 0x40u;
    *p = (bf16)(((u & 0x7fffffffu) > 0x7f800000u) ? qnan : rounded);  // branch-free select: vectorizes
}
// One float16 value to and from float32, rounding to nearest even: with _Float16 where the compiler has it (GCC >= 12
// and clang >= 15 on x86-64, Arm), else with the F16C instructions (clang 14 on x86-64 has no _Float16), else with
// exact integer code. All three give the same bits (NaN payloads aside, which no backend promises).
// ROPEKIT_F16_SOFT forces the integer code (its test builds with it).
#if defined(__FLT16_MANT_DIG__) && !defined(ROPEKIT_F16_SOFT)
static inline f32 load_f16(const f16 *p) { _Float16 h; memcpy(&h, p, 2); return (f32)h; }
static inline void store_f16(f16 *p, f32 v) { _Float16 h = (_Float16)v; memcpy(p, &h, 2); }
#elif defined(ROPEKIT_F16C) && !defined(ROPEKIT_F16_SOFT)
static inline f32 load_f16(const f16 *p) { return _cvtsh_ss(*p); }
static inline void store_f16(f16 *p, f32 v) { *p = (f16)_cvtss_sh(v, _MM_FROUND_TO_NEAREST_INT); }
#else
static inline f32 load_f16(const f16 *p) {
    const uint32_t h = *p, sign = (h & 0x8000u) << 16, e = (h >> 10) & 0x1fu;
    uint32_t m = h & 0x3ffu, u;
    if (e == 0x1fu) {
        u = sign | 0x7f800000u | (m << 13);  // inf, NaN (payload kept)
    } else if (e != 0) {
        u = sign | ((e + 112u) << 23) | (m << 13);  // rebias 15 -> 127
    } else if (m == 0) {
        u = sign;
    } else {  // subnormal half: normalise (a normal float32)
        uint32_t shift = 0;
        while (!(m & 0x400u)) { m <<= 1; ++shift; }
        u = sign | ((113u - shift) << 23) | ((m & 0x3ffu) << 13);
    }
    f32 f; memcpy(&f, &u, 4); return f;
}
static inline void store_f16(f16 *p, f32 v) {
    uint32_t x; memcpy(&x, &v, 4);
    const uint32_t sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
    uint32_t h;
    if (ax > 0x7f800000u) {
        h = 0x7e00u | ((ax >> 13) & 0x3ffu);  // NaN, quieted
    } else if (ax >= 0x477ff000u) {
        h = 0x7c00u;  // inf, and everything from 65520 on (rounds up past 65504)
    } else if (ax >= 0x38800000u) {  // normal half (>= 2^-14): rebias, round 23 -> 10 mantissa bits
        const uint32_t r = ax - 0x38000000u;
        h = (r + 0xfffu + ((r >> 13) & 1u)) >> 13;
    } else if (ax >= 0x33000000u) {  // subnormal half (units of 2^-24), from 2^-25 (a tie, to even: 0)
        const uint32_t e = ax >> 23, m = (ax & 0x7fffffu) | 0x800000u, shift = 126u - e;
        const uint32_t rem = m & ((1u << shift) - 1u), halfway = 1u << (shift - 1u);
        h = m >> shift;
        h += (rem > halfway || (rem == halfway && (h & 1u))) ? 1u : 0u;
    } else {
        h = 0;
    }
    *p = (f16)(sign | h);
}
#endif

// One row, half layout. In place: a single pointer (no aliasing question); copy: restrict in/out.
#define ROW_FUNCS(T, LOAD, STORE)                                                                              \
static inline void half_inplace_##T(T *x, const f32 *R c, const f32 *R s, int64_t n, f32 sg) {                 \
    for (int64_t i = 0; i < n; ++i) {                                                                          \
        const f32 a = LOAD(x + i), b = LOAD(x + n + i), si = sg * s[i];                                        \
        STORE(x + i, a * c[i] - b * si);                                                                       \
        STORE(x + n + i, b * c[i] + a * si);                                                                   \
    }                                                                                                          \
}                                                                                                              \
static inline void half_copy_##T(T *R o, const T *R x, const f32 *R c, const f32 *R s, int64_t n, f32 sg) {    \
    for (int64_t i = 0; i < n; ++i) {                                                                          \
        const f32 a = LOAD(x + i), b = LOAD(x + n + i), si = sg * s[i];                                        \
        STORE(o + i, a * c[i] - b * si);                                                                       \
        STORE(o + n + i, b * c[i] + a * si);                                                                   \
    }                                                                                                          \
}                                                                                                              \
static inline void inter_row_##T(T *o, const T *x, const f32 *R c, const f32 *R s, int64_t n, f32 sg) {        \
    for (int64_t i = 0; i < n; ++i) {                                                                          \
        const f32 a = LOAD(x + 2 * i), b = LOAD(x + 2 * i + 1), si = sg * s[i];                                \
        STORE(o + 2 * i, a * c[i] - b * si);                                                                   \
        STORE(o + 2 * i + 1, b * c[i] + a * si);                                                               \
    }                                                                                                          \
}

ROW_FUNCS(f32, load_f32, store_f32)
ROW_FUNCS(bf16, load_bf16, store_bf16)
ROW_FUNCS(f16, load_f16, store_f16)

// bfloat16 interleaved: a pair (x_2i, x_2i+1) is one little-endian 32-bit word (x_2i in the low half), so the
// deinterleave is two shifts and the loop stays contiguous (it vectorizes; stride-2 16-bit accesses do not).
static inline uint32_t bf16_bits(f32 f) {
    uint32_t u; memcpy(&u, &f, 4);
    const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    const uint32_t qnan = (u >> 16) | 0x40u;
    return ((u & 0x7fffffffu) > 0x7f800000u) ? qnan : rounded;
}
static inline void inter_words_bf16(bf16 *o, const bf16 *x, const f32 *R c, const f32 *R s, int64_t n, f32 sg) {
    for (int64_t i = 0; i < n; ++i) {
        uint32_t w; memcpy(&w, x + 2 * i, 4);
        const uint32_t ua = w << 16, ub = w & 0xffff0000u;
        f32 a, b; memcpy(&a, &ua, 4); memcpy(&b, &ub, 4);
        const f32 si = sg * s[i];
        const uint32_t out = (bf16_bits(b * c[i] + a * si) << 16) | bf16_bits(a * c[i] - b * si);
        memcpy(o + 2 * i, &out, 4);
    }
}

#ifdef ROPEKIT_F16C
// float16 half layout with F16C conversions, 8 lanes at a time (o may equal x).
static inline void half_f16c(f16 *o, const f16 *x, const f32 *R c, const f32 *R s, int64_t n, f32 sg) {
    const __m256 vsg = _mm256_set1_ps(sg);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 a = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i)));
        const __m256 b = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + n + i)));
        const __m256 ci = _mm256_loadu_ps(c + i), si = _mm256_mul_ps(vsg, _mm256_loadu_ps(s + i));
        const __m256 lo = _mm256_sub_ps(_mm256_mul_ps(a, ci), _mm256_mul_ps(b, si));
        const __m256 hi = _mm256_add_ps(_mm256_mul_ps(b, ci), _mm256_mul_ps(a, si));
        _mm_storeu_si128((__m128i *)(o + i), _mm256_cvtps_ph(lo, _MM_FROUND_TO_NEAREST_INT));
        _mm_storeu_si128((__m128i *)(o + n + i), _mm256_cvtps_ph(hi, _MM_FROUND_TO_NEAREST_INT));
    }
    for (; i < n; ++i) {
        const f32 a = load_f16(x + i), b = load_f16(x + n + i), si = sg * s[i];
        store_f16(o + i, a * c[i] - b * si);
        store_f16(o + n + i, b * c[i] + a * si);
    }
}
#endif

#ifdef ROPEKIT_BF16_VEC
// bfloat16 rows, 16 lanes at a time, with the AVX512-BF16 conversion (vcvtneps2bf16). The instruction rounds
// to nearest even and quiets NaNs exactly like store_bf16, but flushes float32 denormals to zero; the lanes that
// hold a denormal (rare: |x| < 2^-126) are therefore rounded with store_bf16's integer formula instead, so every
// result is the same bits as the scalar loop's (NaN payloads aside, which no backend promises). The arithmetic is
// the scalar loop's, in the same order, without FMA. In the kernel's bf16 prefill this loop is ~1.6x faster: the
// conversions, not memory, bounded it (docs/kernels.md).
static inline __m512 bf16x16_load(const bf16 *p) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p)), 16));
}
// store_bf16's integer rounding, (u + 0x7fff + lsb) >> 16, on the lanes of den.
static inline __m256i bf16x16_fix(__m512 f, __m256i r, __mmask16 den) {
    const __m512i u = _mm512_castps_si512(f);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    const __m512i biased = _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb);
    const __m512i rounded = _mm512_srli_epi32(biased, 16);
    return _mm256_mask_blend_epi16(den, r, _mm512_cvtepi32_epi16(rounded));
}
// Rounds the two results of 16 pairs. The denormal test is one vfpclassps per vector (category 0x20), and one
// branch covers both (three mask instructions per vector and a branch each cost ~25% of an L2-resident row).
static inline void bf16x16_round2(__m512 lo, __m512 hi, __m256i *rlo, __m256i *rhi) {
    __m256i rl = (__m256i)_mm512_cvtneps_pbh(lo), rh = (__m256i)_mm512_cvtneps_pbh(hi);
    const __mmask16 dl = _mm512_fpclass_ps_mask(lo, 0x20), dh = _mm512_fpclass_ps_mask(hi, 0x20);
    if (__builtin_expect((dl | dh) != 0, 0)) {
        rl = bf16x16_fix(lo, rl, dl);
        rh = bf16x16_fix(hi, rh, dh);
    }
    *rlo = rl;
    *rhi = rh;
}
// sg * s for sg = +-1 as a sign flip (an xor, off the multiply ports; exact, as the multiply is).
static inline __m512 signed_s(__m512i neg, const f32 *s) {
    return _mm512_castsi512_ps(_mm512_xor_si512(neg, _mm512_castps_si512(_mm512_loadu_ps(s))));
}
static inline __m512i sign_mask(f32 sg) { return _mm512_set1_epi32(sg < 0.0f ? (int)0x80000000u : 0); }
static inline void half_bf16_vec(bf16 *o, const bf16 *x, const f32 *R c, const f32 *R s, int64_t n, f32 sg) {
    const __m512i neg = sign_mask(sg);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512 a = bf16x16_load(x + i), b = bf16x16_load(x + n + i);
        const __m512 ci = _mm512_loadu_ps(c + i), si = signed_s(neg, s + i);
        const __m512 lo = _mm512_sub_ps(_mm512_mul_ps(a, ci), _mm512_mul_ps(b, si));
        const __m512 hi = _mm512_add_ps(_mm512_mul_ps(b, ci), _mm512_mul_ps(a, si));
        __m256i rl, rh;
        bf16x16_round2(lo, hi, &rl, &rh);
        _mm256_storeu_si256((__m256i *)(o + i), rl);
        _mm256_storeu_si256((__m256i *)(o + n + i), rh);
    }
    for (; i < n; ++i) {
        const f32 a = load_bf16(x + i), b = load_bf16(x + n + i), si = sg * s[i];
        store_bf16(o + i, a * c[i] - b * si);
        store_bf16(o + n + i, b * c[i] + a * si);
    }
}
// The interleaved layout: a pair (x_2i, x_2i+1) is one 32-bit word (see inter_words_bf16), 16 pairs at a time.
static inline void inter_bf16_vec(bf16 *o, const bf16 *x, const f32 *R c, const f32 *R s, int64_t n, f32 sg) {
    const __m512i neg = sign_mask(sg);
    const __m512i hi16 = _mm512_set1_epi32((int)0xffff0000u);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512i w = _mm512_loadu_si512((const void *)(x + 2 * i));
        const __m512 a = _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
        const __m512 b = _mm512_castsi512_ps(_mm512_and_si512(w, hi16));
        const __m512 ci = _mm512_loadu_ps(c + i), si = signed_s(neg, s + i);
        const __m512 lo = _mm512_sub_ps(_mm512_mul_ps(a, ci), _mm512_mul_ps(b, si));
        const __m512 hi = _mm512_add_ps(_mm512_mul_ps(b, ci), _mm512_mul_ps(a, si));
        __m256i rl, rh;
        bf16x16_round2(lo, hi, &rl, &rh);
        const __m512i out =
            _mm512_or_si512(_mm512_cvtepu16_epi32(rl), _mm512_slli_epi32(_mm512_cvtepu16_epi32(rh), 16));
        _mm512_storeu_si512((void *)(o + 2 * i), out);
    }
    if (i < n) inter_words_bf16(o + 2 * i, x + 2 * i, c + i, s + i, n - i, sg);
}
#endif

// ---------------------------------------------------------------------------------------------------------
// The thread pool.
typedef void (*range_fn)(const void *ctx, int64_t begin, int64_t end);
#define CHUNKS_PER_THREAD 8

// Chunking shared by both pools. Large work: at most CHUNKS_PER_THREAD chunks per thread, so that each chunk is a
// long contiguous run that the hardware prefetchers can follow (16K-element chunks handed out alternately to two
// threads cost about a third of the bandwidth); a stalled thread still costs at most one chunk of work.
static int64_t chunk_for(int64_t n, int64_t chunk, int nthreads) {
    if (chunk < 1) chunk = 1;
    if (nthreads > 1) {
        const int64_t big = (n + (int64_t)nthreads * CHUNKS_PER_THREAD - 1) / ((int64_t)nthreads * CHUNKS_PER_THREAD);
        if (big > chunk) chunk = big;
    }
    return chunk;
}
#ifndef ROPEKIT_OMP
#define MAX_WORKERS 63
static pthread_mutex_t pool_mu = PTHREAD_MUTEX_INITIALIZER;   // guards the job description and gen
static pthread_cond_t pool_cv = PTHREAD_COND_INITIALIZER;
static pthread_mutex_t run_mu = PTHREAD_MUTEX_INITIALIZER;    // one parallel job at a time
static int n_workers = 0, want = 0;
static uint32_t gen = 1;
static range_fn job_fn;
static const void *job_ctx;
static int64_t job_n, job_chunk, job_nchunks;
static _Atomic uint64_t ticket;  // (generation << 32) | next unclaimed chunk
static _Atomic int64_t done;     // chunks finished in the current generation

static void claim_and_run(uint32_t g, range_fn fn, const void *ctx, int64_t n, int64_t chunk, int64_t nchunks) {
    for (;;) {
        uint64_t t = atomic_load_explicit(&ticket, memory_order_acquire);
        if ((uint32_t)(t >> 32) != g || (int64_t)(t & 0xffffffffu) >= nchunks) return;
        if (!atomic_compare_exchange_weak(&ticket, &t, t + 1)) continue;
        const int64_t b = (int64_t)(t & 0xffffffffu) * chunk, e = b + chunk < n ? b + chunk : n;
        fn(ctx, b, e);
        atomic_fetch_add_explicit(&done, 1, memory_order_release);
    }
}

static void *worker_main(void *arg) {
    const int id = (int)(intptr_t)arg;
    uint32_t seen = 0;
    pthread_mutex_lock(&pool_mu);
    for (;;) {
        while (gen == seen) pthread_cond_wait(&pool_cv, &pool_mu);
        seen = gen;
        if (id >= want) continue;
        const range_fn fn = job_fn;
        const void *ctx = job_ctx;
        const int64_t n = job_n, chunk = job_chunk, nchunks = job_nchunks;
        pthread_mutex_unlock(&pool_mu);
        claim_and_run(seen, fn, ctx, n, chunk, nchunks);  // a stale generation claims nothing
        pthread_mutex_lock(&pool_mu);
    }
    return NULL;
}

// A forked child has none of the parent's threads (and may have forked while one of them held a lock): it starts
// with fresh locks and no workers, and its next parallel call starts workers of its own.
static void after_fork_child(void) {
    pthread_mutex_init(&pool_mu, NULL);
    pthread_cond_init(&pool_cv, NULL);
    pthread_mutex_init(&run_mu, NULL);
    n_workers = 0;
}
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;
static void register_atfork(void) { pthread_atfork(NULL, NULL, after_fork_child); }


// Run fn over [0, n) in chunks with up to nthreads threads (the caller included).
static void parallel_range(range_fn fn, const void *ctx, int64_t n, int64_t chunk, int nthreads) {
    chunk = chunk_for(n, chunk, nthreads);
    const int64_t nchunks = (n + chunk - 1) / chunk;
    if (nthreads <= 1 || nchunks <= 1 || nchunks > 0xffffffffLL) { fn(ctx, 0, n); return; }
    if (nthreads > MAX_WORKERS + 1) nthreads = MAX_WORKERS + 1;
    if (nthreads > nchunks) nthreads = (int)nchunks;
    pthread_once(&atfork_once, register_atfork);
    pthread_mutex_lock(&run_mu);
    pthread_mutex_lock(&pool_mu);
    while (n_workers < nthreads - 1) {
        pthread_t th;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        const int rc = pthread_create(&th, &attr, worker_main, (void *)(intptr_t)n_workers);
        pthread_attr_destroy(&attr);
        if (rc != 0) break;  // fewer workers: the caller does more itself
        ++n_workers;
    }
    const uint32_t g = ++gen == 0 ? ++gen : gen;
    want = nthreads - 1;
    job_fn = fn; job_ctx = ctx; job_n = n; job_chunk = chunk; job_nchunks = nchunks;
    atomic_store(&done, 0);
    atomic_store_explicit(&ticket, (uint64_t)g << 32, memory_order_release);
    pthread_cond_broadcast(&pool_cv);
    pthread_mutex_unlock(&pool_mu);
    claim_and_run(g, fn, ctx, n, chunk, nchunks);
    for (int spins = 0; atomic_load_explicit(&done, memory_order_acquire) < nchunks; ++spins) {
        if (spins > 64) sched_yield();  // only claimed chunks are left: they finish soon
    }
    pthread_mutex_unlock(&run_mu);
}
#else
// ROPEKIT_OMP: the chunks run on the OpenMP runtime torch's own intra-op pool runs on (the build links libgomp.so.1,
// which the dynamic loader resolves to the copy torch already loaded: cpu_build.py checks that before choosing this
// build). torch's workers spin for a while after each torch op; a pool of our own would then share the cores with
// them, where this team *is* them. Threads claim chunks with one atomic, as in the pool.
// A forked child runs everything on its calling thread (unlike the pool build, whose child starts workers of its
// own): GNU OpenMP hangs in a child's parallel region once the parent has run one (torch's own ops do). The handler
// is registered when the library loads.
static volatile int omp_forked_child = 0;
static void omp_after_fork_child(void) { omp_forked_child = 1; }
__attribute__((constructor)) static void omp_register_atfork(void) { pthread_atfork(NULL, NULL, omp_after_fork_child); }

static void parallel_range(range_fn fn, const void *ctx, int64_t n, int64_t chunk, int nthreads) {
    chunk = chunk_for(n, chunk, nthreads);
    const int64_t nchunks = (n + chunk - 1) / chunk;
    if (nthreads <= 1 || nchunks <= 1 || omp_forked_child) { fn(ctx, 0, n); return; }
    if (nthreads > nchunks) nthreads = (int)nchunks;
    _Atomic int64_t next = 0;
#pragma omp parallel num_threads(nthreads)
    for (;;) {
        const int64_t c = atomic_fetch_add_explicit(&next, 1, memory_order_relaxed);
        if (c >= nchunks) break;
        const int64_t b = c * chunk, e = b + chunk < n ? b + chunk : n;
        fn(ctx, b, e);
    }
}
#endif

// Chunks of about 16K elements: small enough that a stalled thread's share is taken over, large enough that
// claiming (one atomic) costs nothing.
static inline int64_t rows_per_chunk(int64_t D) { return D >= 16384 ? 1 : 16384 / (D > 0 ? D : 1); }

// ---------------------------------------------------------------------------------------------------------
// Rotation: a loop over the flattened rows [begin, end) of [d0, d1, d2]; BODY sees orow, xr, c, s.
typedef struct {
    void *out;
    const void *x;
    int64_t d1, d2, D, xs0, xs1, xs2, os0, os1, os2, ts0, ts1, ts2, r;
    const f32 *cosp, *sinp;
    int interleaved, sign;
    const int64_t *pidx;  // NULL, or positions: the row's table offset is pidx[i0 ts0 + i1 ts1 + i2 ts2] * prow
    int64_t prow;
    int64_t group;  // 0: the range is rows; G > 0: the range is units of up to G rows sharing a table row (below)
    const struct axis_map_c *ax;  // NULL (1-D), or the multi-axis positions of a gathering call (below)
} rope_args;

// Multi-axis RoPE read straight from the exact 1-D cache (M-RoPE, Wang et al. 2024, "Qwen2-VL"; axial 2-D RoPE):
// the positions are [A, N] (axis a of flat token t at pidx[a N + t]) and band j of a token turns at the position of
// axis slots[j]. A token whose axes all hold one position (text) reads that cache row like the 1-D path; any other
// token's packed row (cos then sin, 2n floats) is blended from its axes' rows once per call, before the rotation,
// into row t of a scratch [N, 2n] (axis_blend_range), which the rotation then reads (table_row).
#define GATHER_MAX_AXES 8
#define GATHER_MAX_N 256
typedef struct axis_map_c {
    int64_t A, N;
    const int32_t *sl2;  // [2n]: the axis each float of a packed row reads (the band map, for cos and for sin)
    f32 *scratch;        // [N, 2n]: the blended rows (only the rows of tokens whose axes differ are written)
} axis_map_c;

// Whether flat token tj has an axis at another position than axis 0.
static inline int axis_mixed(const int64_t *R pidx, const axis_map_c *m, int64_t tj) {
    int mixed = 0;
    for (int64_t x = 1; x < m->A; ++x) mixed |= pidx[x * m->N + tj] != pidx[tj];
    return mixed;
}

// o[j] = src[sl[j]][j] for j < w: one pass with A - 1 compare-and-select steps per float (vectorizes: 32-bit
// compares on the int32 map, masked moves; the common axis counts unrolled).
static inline void blend_row(f32 *R o, const f32 *const *src, const int32_t *R sl, int64_t w, int64_t A) {
    if (A == 2) {
        for (int64_t j = 0; j < w; ++j) o[j] = sl[j] == 1 ? src[1][j] : src[0][j];
    } else if (A == 3) {
        for (int64_t j = 0; j < w; ++j) o[j] = sl[j] == 2 ? src[2][j] : (sl[j] == 1 ? src[1][j] : src[0][j]);
    } else {
        for (int64_t j = 0; j < w; ++j) {
            f32 v = src[0][j];
            for (int32_t x = 1; x < (int32_t)A; ++x) v = sl[j] == x ? src[x][j] : v;
            o[j] = v;
        }
    }
}

// The packed table row of flat token tj in a gathering call: its cache row, or its blended row.
static inline const f32 *table_row(const rope_args *a, int64_t tj) {
    const axis_map_c *m = a->ax;
    if (m && axis_mixed(a->pidx, m, tj)) return m->scratch + tj * a->prow;
    return a->cosp + a->pidx[tj] * a->prow;
}

// The row index is split into (i0, i1, i2) once per chunk and then stepped (no divisions per row: two 64-bit
// divisions per row cost about a third of the time when the data is in cache).
// Head groups (the table is broadcast over dim 1, ts1 == 0: bhsd, thd, and bshd after NAME##_ex moves its heads to
// dim 1). Row by row, in prefill every head re-reads the whole [S, n] table: one table stream beside each head's q
// stream, ~1.4-1.8x the time of streaming q alone (docs/kernels.md, "The inner loop"); in decode the row reloads
// its table row for every head (~2x an in-cache row). Instead the range is split into units (i0, g, i2): the rows
// of a group of consecutive heads at token i2, which share one table row, loaded once and kept in registers --
// the group's q streams advance together and the table is read once per group.
// Group size: at most STREAMS memory streams (in place a head is one stream, out of place two: read and write).
// Measured with the probe (src/ropekit/bench/probe/floor_probe.c, one thread, in place): groups of 4 and 8 run at
// 0.8-1.0x the time of streaming q alone, 16 at 1.7-2.1x (more streams than the prefetchers and L1's 8 ways hold);
// out of place, groups of 8 (16 streams) took 1.6x the time of groups of 4.
#define STREAMS 8
// One row (i0, i1, i2) of the rotation: BODY on its pointers, then the pass-through channels out of place.
#define ROW(T, BODY)                                                                                           \
    {                                                                                                          \
        const T *xr = x + i0 * xs0 + i1 * xs1 + i2 * xs2;                                                      \
        T *orow = out + i0 * os0 + i1 * os1 + i2 * os2;                                                        \
        (void)xr;                                                                                              \
        BODY;                                                                                                  \
        if (!inplace && D > r) memcpy(orow + r, xr + r, (size_t)(D - r) * sizeof(T));                          \
    }
#define GROUPED(T, BODY, TBEXPR)                                                                               \
    {                                                                                                          \
        const int64_t ng = (d1 + group - 1) / group;                                                           \
        int64_t i2 = begin % d2, g = (begin / d2) % ng, i0 = (begin / d2) / ng;                                \
        for (int64_t u = begin; u < end; ++u) {                                                                \
            const int64_t tj = i0 * ts0 + i2 * ts2;                                                            \
            const f32 *c, *s;                                                                                  \
            TBEXPR(c, s, tj);                                                                                  \
            const int64_t h_end = (g + 1) * group < d1 ? (g + 1) * group : d1;                                 \
            (void)c; (void)s;                                                                                  \
            for (int64_t i1 = g * group; i1 < h_end; ++i1) ROW(T, BODY)                                        \
            if (++i2 == d2) {                                                                                  \
                i2 = 0;                                                                                        \
                if (++g == ng) { g = 0; ++i0; }                                                                \
            }                                                                                                  \
        }                                                                                                      \
    }

// TB names the loop: LOOPS_PLAIN (the row's table offset is its index by the table strides) or LOOPS_GATHER (the
// plan that reads the packed cache at the call's positions; a separate instantiation: the plain loop is unchanged).
#define LOOPS(T, BODY, TB) if (begin < end) { /* an empty range may come with a zero dim: divide only if rows */ \
        TB(T, BODY)                                                                                            \
    }
#define GLOOPS(T, BODY, TB) if (begin < end) GROUPED(T, BODY, TB##_ROWS)
#define LOOPS_PLAIN_ROWS(C, S, TJ) (C) = cosp + (TJ), (S) = sinp + (TJ)
#define LOOPS_GATHER_ROWS(C, S, TJ) (C) = table_row(a, (TJ)), (S) = (C) + hn
#define LOOPS_PLAIN(T, BODY)                                                                                   \
    {                                                                                                          \
        int64_t i2 = begin % d2, i1 = (begin / d2) % d1, i0 = (begin / d2) / d1;                               \
        for (int64_t idx = begin; idx < end; ++idx) {                                                          \
            const int64_t tb = i0 * ts0 + i1 * ts1 + i2 * ts2;                                                 \
            const f32 *c = cosp + tb, *s = sinp + tb;                                                          \
            (void)c; (void)s;                                                                                  \
            ROW(T, BODY)                                                                                       \
            if (++i2 == d2) {                                                                                  \
                i2 = 0;                                                                                        \
                if (++i1 == d1) { i1 = 0; ++i0; }                                                              \
            }                                                                                                  \
        }                                                                                                      \
    }
/* The gathering loop reads the row's table offset from the positions (pidx[tj] * prow). That load and the
   multiply sit on the path to every table read of the row; loaded at the row's start they stalled the row's
   rotation (~2.3 ns per row, decode). So the next row's offset is loaded one row ahead, before this row's
   rotation is issued, and its latency overlaps the rotation (the row's pointers are therefore taken before the
   counters step, not through ROW). */
#define LOOPS_GATHER(T, BODY)                                                                                  \
    {                                                                                                          \
        int64_t i2 = begin % d2, i1 = (begin / d2) % d1, i0 = (begin / d2) / d1;                               \
        const f32 *cb = table_row(a, i0 * ts0 + i1 * ts1 + i2 * ts2);                                          \
        for (int64_t idx = begin; idx < end; ++idx) {                                                          \
            const T *xr = x + i0 * xs0 + i1 * xs1 + i2 * xs2;                                                  \
            T *orow = out + i0 * os0 + i1 * os1 + i2 * os2;                                                    \
            const f32 *c = cb, *s = cb + hn;                                                                   \
            (void)xr; (void)c; (void)s;                                                                        \
            if (++i2 == d2) {                                                                                  \
                i2 = 0;                                                                                        \
                if (++i1 == d1) { i1 = 0; ++i0; }                                                              \
            }                                                                                                  \
            if (idx + 1 < end) cb = table_row(a, i0 * ts0 + i1 * ts1 + i2 * ts2);                              \
            BODY;                                                                                              \
            if (!inplace && D > r) memcpy(orow + r, xr + r, (size_t)(D - r) * sizeof(T));                      \
        }                                                                                                      \
    }

// Every case gets its own loop, with the band count and the sign as compile-time constants where common,
// so that the row is fully unrolled and nothing is decided per row.
// Head groups are specialised for the common head dims 64 and 128 only (each specialisation adds ~0.7 s
// to the kernel's first-use build, docs/kernels.md); other head dims take the band count at run time.
#define CASES_N(T, CALL, SG, TB)                                                                               \
    if (group) switch (n) {                                                                                    \
        case 32: GLOOPS(T, CALL(32, SG), TB); break;                                                           \
        case 64: GLOOPS(T, CALL(64, SG), TB); break;                                                           \
        default: GLOOPS(T, CALL(n, SG), TB); break;                                                            \
    } else switch (n) {                                                                                        \
        case 16: LOOPS(T, CALL(16, SG), TB); break;                                                            \
        case 32: LOOPS(T, CALL(32, SG), TB); break;                                                            \
        case 64: LOOPS(T, CALL(64, SG), TB); break;                                                            \
        case 128: LOOPS(T, CALL(128, SG), TB); break;                                                          \
        default: LOOPS(T, CALL(n, SG), TB); break;                                                             \
    }

#define ROPE_RANGE(FN, T, HALF_INPLACE, HALF_COPY, TB)                                                          \
static void FN(const void *vctx, int64_t begin, int64_t end) {                                                  \
    const rope_args *a = (const rope_args *)vctx;                                                              \
    T *out = (T *)a->out;                                                                                      \
    const T *x = (const T *)a->x;                                                                              \
    const int64_t d1 = a->d1, d2 = a->d2, D = a->D, xs0 = a->xs0, xs1 = a->xs1, xs2 = a->xs2;                  \
    const int64_t os0 = a->os0, os1 = a->os1, os2 = a->os2, ts0 = a->ts0, ts1 = a->ts1, ts2 = a->ts2;          \
    const int64_t r = a->r, n = r / 2;                                                                         \
    const f32 *cosp = a->cosp, *sinp = a->sinp;                                                                \
    const int64_t group = a->group, hn = a->prow / 2;                                                          \
    (void)hn; (void)cosp; (void)sinp; /* the gathering loops read the rows through table_row */                 \
    const int inplace = ((const void *)out == (const void *)x);                                                \
    if (a->interleaved) {                                                                                      \
        if (a->sign > 0) { CASES_N(T, INTER_##T, 1.0f, TB) } else { CASES_N(T, INTER_##T, -1.0f, TB) }         \
    } else if (inplace) {                                                                                      \
        if (a->sign > 0) { CASES_N(T, HALF_INPLACE, 1.0f, TB) } else { CASES_N(T, HALF_INPLACE, -1.0f, TB) }   \
    } else {                                                                                                   \
        if (a->sign > 0) { CASES_N(T, HALF_COPY, 1.0f, TB) } else { CASES_N(T, HALF_COPY, -1.0f, TB) }         \
    }                                                                                                          \
}

#define ROPE_KERNEL(NAME, T, HALF_INPLACE, HALF_COPY)                                                           \
ROPE_RANGE(NAME##_range, T, HALF_INPLACE, HALF_COPY, LOOPS_PLAIN)                                               \
ROPE_RANGE(NAME##_grange, T, HALF_INPLACE, HALF_COPY, LOOPS_GATHER)                                             \
static void NAME##_ex(T *out, const T *x, int64_t d0, int64_t d1, int64_t d2, int64_t D,                      \
          int64_t xs0, int64_t xs1, int64_t xs2, int64_t os0, int64_t os1, int64_t os2,                         \
          const f32 *cosp, const f32 *sinp, int64_t ts0, int64_t ts1, int64_t ts2,                               \
          int64_t r, int interleaved, int sign, int nthreads, const int64_t *pidx, int64_t prow,                \
          const axis_map_c *ax) {                                                                               \
    /* Heads in dim 2 with the table broadcast over them (bshd): make them dim 1, so that they run as head     \
       groups sharing one table row (below). One token (d1 == 1): swap dims 1 and 2. Several: merge dims 0 and 1 \
       into one token dim when their strides allow it (dense batch and sequence), the heads then dim 1. */     \
    if (d2 > 1 && ts2 == 0 && (d1 == 1 || (xs0 == d1 * xs1 && os0 == d1 * os1 && ts0 == d1 * ts1))) {          \
        if (d1 > 1) { d0 *= d1; xs0 = xs1; os0 = os1; ts0 = ts1; }                                             \
        d1 = d2; xs1 = xs2; os1 = os2; ts1 = 0;                                                                \
        d2 = 1; xs2 = 0; os2 = 0; ts2 = 0;                                                                     \
    }                                                                                                          \
    /* head groups whenever the table is broadcast over dim 1 (see GROUPED): in prefill the group's streams    \
       advance together; in decode (d2 == 1) the group's rows share one table row, which the compiler then     \
       keeps in registers across the heads (per-row loads of it made an in-cache decode row ~2x slower). */    \
    const int64_t gmax = (const void *)out == (const void *)x ? STREAMS : STREAMS / 2;                         \
    const int64_t group = (ts1 == 0 && d1 > 1) ? (d1 < gmax ? d1 : gmax) : 0;                                  \
    const int64_t units = group ? d0 * ((d1 + group - 1) / group) * d2 : d0 * d1 * d2;                         \
    const int64_t chunk = group ? (rows_per_chunk(D) + group - 1) / group : rows_per_chunk(D);                 \
    const rope_args a = {out, x, d1, d2, D, xs0, xs1, xs2, os0, os1, os2, ts0, ts1, ts2, r, cosp, sinp,         \
                         interleaved, sign, pidx, prow, group, ax};                                            \
    parallel_range(pidx ? NAME##_grange : NAME##_range, &a, units, chunk, nthreads);                           \
}                                                                                                              \
void NAME(T *out, const T *x, int64_t d0, int64_t d1, int64_t d2, int64_t D,                                    \
          int64_t xs0, int64_t xs1, int64_t xs2, int64_t os0, int64_t os1, int64_t os2,                         \
          const f32 *cosp, const f32 *sinp, int64_t ts0, int64_t ts1, int64_t ts2,                               \
          int64_t r, int interleaved, int sign, int nthreads) {                                                 \
    NAME##_ex(out, x, d0, d1, d2, D, xs0, xs1, xs2, os0, os1, os2, cosp, sinp, ts0, ts1, ts2, r, interleaved,    \
              sign, nthreads, NULL, 0, NULL);                                                                  \
}

#define INTER_f32(N, SG) inter_row_f32(orow, inplace ? orow : xr, c, s, N, SG)
#ifdef ROPEKIT_BF16_VEC
#define INTER_bf16(N, SG) inter_bf16_vec(orow, inplace ? orow : xr, c, s, N, SG)
#else
#define INTER_bf16(N, SG) inter_words_bf16(orow, inplace ? orow : xr, c, s, N, SG)
#endif
#define INTER_f16(N, SG) inter_row_f16(orow, inplace ? orow : xr, c, s, N, SG)
#define F32_IN(N, SG) half_inplace_f32(orow, c, s, N, SG)
#define F32_CP(N, SG) half_copy_f32(orow, xr, c, s, N, SG)
#ifdef ROPEKIT_BF16_VEC
#define BF16_IN(N, SG) half_bf16_vec(orow, orow, c, s, N, SG)
#define BF16_CP(N, SG) half_bf16_vec(orow, xr, c, s, N, SG)
#else
#define BF16_IN(N, SG) half_inplace_bf16(orow, c, s, N, SG)
#define BF16_CP(N, SG) half_copy_bf16(orow, xr, c, s, N, SG)
#endif
#ifdef ROPEKIT_F16C
#define F16_IN(N, SG) half_f16c(orow, orow, c, s, N, SG)
#define F16_CP(N, SG) half_f16c(orow, xr, c, s, N, SG)
#else
#define F16_IN(N, SG) half_inplace_f16(orow, c, s, N, SG)
#define F16_CP(N, SG) half_copy_f16(orow, xr, c, s, N, SG)
#endif

ROPE_KERNEL(ropekit_rope_f32, f32, F32_IN, F32_CP)
ROPE_KERNEL(ropekit_rope_bf16, bf16, BF16_IN, BF16_CP)
ROPE_KERNEL(ropekit_rope_f16, f16, F16_IN, F16_CP)

// The multi-axis pre-pass: row t of the scratch for every token t whose axes differ, band j of its packed row (cos
// then sin) read from the cache row of axis sl2[j] (one pass over 2n floats, A - 1 compare-and-select steps each:
// vectorizes on the int32 map). The rows of the A axes of a token are L1/L2-resident in practice.
typedef struct {
    const f32 *rows;
    const int64_t *pos;
    const axis_map_c *m;
    int64_t w;  // 2n
} blend_args;

static void axis_blend_range(const void *vctx, int64_t begin, int64_t end) {
    const blend_args *g = (const blend_args *)vctx;
    const axis_map_c *m = g->m;
    const int64_t w = g->w, A = m->A, N = m->N;
    const f32 *src[GATHER_MAX_AXES];
    for (int64_t t = begin; t < end; ++t) {
        if (!axis_mixed(g->pos, m, t)) continue;
        for (int64_t x = 0; x < A; ++x) src[x] = g->rows + g->pos[x * N + t] * w;
        blend_row(m->scratch + t * w, src, m->sl2, w, A);
    }
}

static void axis_blend(const f32 *rows, const int64_t *pos, const axis_map_c *m, int64_t w, int nthreads) {
    const blend_args g = {rows, pos, m, w};
    parallel_range(axis_blend_range, &g, m->N, 256, nthreads);  // chunks of 256 tokens
}

// One call for q and k with a prepared plan (the low-latency decode path): plan = [count, D, r, interleaved,
// sign, nthreads, then per tensor: d0, d1, d2, xs0, xs1, xs2, os0, os1, os2, ts0, ts1, ts2].
#define ROPE_PLAN(NAME, T, KERNEL)                                                                              \
void NAME(T *q_out, const T *q, T *k_out, const T *k, const f32 *cosp, const f32 *sinp, const int64_t *p) {    \
    T *outs[2] = {q_out, k_out};                                                                               \
    const T *ins[2] = {q, k};                                                                                  \
    for (int64_t j = 0; j < p[0]; ++j) {                                                                       \
        const int64_t *t = p + 6 + 12 * j;                                                                     \
        KERNEL(outs[j], ins[j], t[0], t[1], t[2], p[1], t[3], t[4], t[5], t[6], t[7], t[8], cosp, sinp,        \
               t[9], t[10], t[11], p[2], (int)p[3], (int)p[4], (int)p[5]);                                     \
    }                                                                                                          \
}

ROPE_PLAN(ropekit_plan_f32, f32, ropekit_rope_f32)
ROPE_PLAN(ropekit_plan_bf16, bf16, ropekit_rope_bf16)
ROPE_PLAN(ropekit_plan_f16, f16, ropekit_rope_f16)

// The same plan with the table rows read straight from the packed cache (ropekit/table_cache.py): rows [L, 2, n]
// float32 contiguous (position p's cos row at 2 n p, its sin row n floats later), pos [N] int64 contiguous, the
// flat positions of the call. The plan was built on row views of that cache (its table strides are multiples of
// 2n, the row of flat position j at 2 n j), so the table offset 2 n j becomes 2 n pos[j]: no gathered copy of the
// rows (decoding: ~2.5 us of index_select per call). Returns -1 if a position is negative, the largest position
// if one is >= L -- in both cases before anything is written -- else 0 after rotating.
#define ROPE_PLAN_GATHER(NAME, T, KERNEL)                                                                       \
int64_t NAME(T *q_out, const T *q, T *k_out, const T *k, const f32 *rows, int64_t L, const int64_t *pos,        \
             int64_t N, const int64_t *p) {                                                                    \
    const axis_map_c *AX = NULL;                                                                               \
    PLAN_GATHER_BODY(T, KERNEL, N, (void)0)                                                                    \
}

// The body shared by the 1-D and the multi-axis gathering plans: bounds of the npos positions, then the call.
#define PLAN_GATHER_BODY(T, KERNEL, NPOS, BEFORE)                                                               \
    int64_t hi = -1;                                                                                           \
    for (int64_t i = 0; i < (NPOS); ++i) {                                                                     \
        if (pos[i] < 0) return -1;                                                                             \
        if (pos[i] > hi) hi = pos[i];                                                                          \
    }                                                                                                          \
    if (hi >= L) return hi;                                                                                    \
    BEFORE;                                                                                                    \
    const int64_t n = p[2] / 2, prow = 2 * n;                                                                  \
    T *outs[2] = {q_out, k_out};                                                                               \
    const T *ins[2] = {q, k};                                                                                  \
    for (int64_t j = 0; j < p[0]; ++j) {                                                                       \
        const int64_t *t = p + 6 + 12 * j;                                                                     \
        KERNEL##_ex(outs[j], ins[j], t[0], t[1], t[2], p[1], t[3], t[4], t[5], t[6], t[7], t[8], rows,          \
                    rows + n, t[9] / prow, t[10] / prow, t[11] / prow, p[2], (int)p[3], (int)p[4], (int)p[5],  \
                    pos, prow, AX);                                                                            \
    }                                                                                                          \
    return 0;

// The multi-axis plan (table_row): positions [A, N] int64 contiguous, slots [n] int64 (the axis of each band),
// scratch [N, 2n] float32 or NULL when N * 2n <= AXIS_STACK_FLOATS (then a buffer on this thread's stack).
#define AXIS_STACK_FLOATS 8192
// Returns -2 (nothing written) if A or n is past the kernel's limits or a slot is not an axis, else as the 1-D
// gathering plan (-1 for a negative position, the largest if one is >= L, 0 after rotating).
#define ROPE_PLAN_AXES(NAME, T, KERNEL)                                                                         \
int64_t NAME(T *q_out, const T *q, T *k_out, const T *k, const f32 *rows, int64_t L, const int64_t *pos,        \
             int64_t A, int64_t N, const int64_t *slots, f32 *scratch, const int64_t *p) {                     \
    const int64_t nb = p[2] / 2;                                                                               \
    if (A < 1 || A > GATHER_MAX_AXES || nb > GATHER_MAX_N) return -2;                                          \
    int32_t sl2[2 * GATHER_MAX_N];                                                                             \
    for (int64_t j = 0; j < nb; ++j) {                                                                         \
        if (slots[j] < 0 || slots[j] >= A) return -2;                                                          \
        sl2[j] = sl2[nb + j] = (int32_t)slots[j];                                                              \
    }                                                                                                          \
    f32 small[AXIS_STACK_FLOATS]; /* decoding: the scratch of a few tokens on the stack */                       \
    if (!scratch) {                                                                                            \
        if (N * 2 * nb > AXIS_STACK_FLOATS) return -2;                                                         \
        scratch = small;                                                                                       \
    }                                                                                                          \
    const axis_map_c m = {A, N, sl2, scratch};                                                                 \
    const axis_map_c *AX = &m;                                                                                 \
    PLAN_GATHER_BODY(T, KERNEL, A * N, axis_blend(rows, pos, &m, 2 * nb, (int)p[5]))                          \
}

ROPE_PLAN_AXES(ropekit_plan_axes_f32, f32, ropekit_rope_f32)
ROPE_PLAN_AXES(ropekit_plan_axes_bf16, bf16, ropekit_rope_bf16)
ROPE_PLAN_AXES(ropekit_plan_axes_f16, f16, ropekit_rope_f16)

ROPE_PLAN_GATHER(ropekit_plan_gather_f32, f32, ropekit_rope_f32)
ROPE_PLAN_GATHER(ropekit_plan_gather_bf16, bf16, ropekit_rope_bf16)
ROPE_PLAN_GATHER(ropekit_plan_gather_f16, f16, ropekit_rope_f16)

#include "rope_cache_write.h"
#include "rope_phase.h"

// Multi-axis tables from the exact 1-D cache rows (ropekit/axis_tables.py): band j of token t is read at the
// position of its own axis, out[k][t][j] = rows[pos[slots[j]][t]][k][j] for k = 0 (cos), 1 (sin).
// rows: [L, 2, n] float32 contiguous (the packed cache); pos: [A, N] int64 contiguous; slots: [n] axis per band;
// out: [2, N, n].
// Returns -1 (nothing written) if a position is negative or A is past GATHER_MAX_AXES (the caller then computes
// the tables exactly), the largest position if one is >= L (nothing written: the caller grows the cache and calls
// again), else the largest position (< L) after writing.
typedef struct {
    const f32 *rows;
    const int64_t *pos;
    const int32_t *slots;  // int32 copy of the band -> axis map: the blend's compare is as wide as the floats
    f32 *out;
    int64_t n, A, N;
} gather_args;

// Tokens [begin, end). A token whose axes all hold the same position (a text token) copies that one row.
static void gather_range(const void *vctx, int64_t begin, int64_t end) {
    const gather_args *g = (const gather_args *)vctx;
    const int64_t n = g->n, A = g->A, N = g->N;
    const int32_t *R sl = g->slots;
    const f32 *src[GATHER_MAX_AXES];
    for (int64_t t = begin; t < end; ++t) {
        const int64_t p0 = g->pos[t];
        int same = 1;
        for (int64_t a = 1; a < A; ++a) same &= g->pos[a * N + t] == p0;
        for (int k = 0; k < 2; ++k) {  // the cos row, then the sin row of the token
            const f32 *tab = g->rows + k * n;  // row p of this table at tab + p * 2n
            f32 *R o = g->out + k * N * n + t * n;
            if (same) {
                memcpy(o, tab + p0 * 2 * n, (size_t)n * sizeof(f32));
                continue;
            }
            for (int64_t a = 0; a < A; ++a) src[a] = tab + g->pos[a * N + t] * 2 * n;
            blend_row(o, src, sl, n, A);  // band j from the row of axis sl[j]
        }
    }
}

int64_t ropekit_axis_gather(const f32 *R rows, int64_t L, int64_t n, const int64_t *R pos, int64_t A, int64_t N,
                            const int64_t *R slots, f32 *R out, int nthreads) {
    int64_t hi = -1;
    for (int64_t i = 0; i < A * N; ++i) {
        if (pos[i] < 0) return -1;
        if (pos[i] > hi) hi = pos[i];
    }
    if (hi >= L) return hi;
    if (A > GATHER_MAX_AXES) return -1;
    int32_t sl_small[256];
    int32_t *sl = n <= 256 ? sl_small : (int32_t *)malloc((size_t)n * sizeof(int32_t));
    if (!sl) return -1;
    for (int64_t j = 0; j < n; ++j) sl[j] = (int32_t)slots[j];
    const gather_args g = {rows, pos, sl, out, n, A, N};
    parallel_range(gather_range, &g, N, 256, nthreads);  // chunks of 256 tokens (128 KB of rows at n = 64)
    if (sl != sl_small) free(sl);
    return hi;
}

int ropekit_abi_version(void) { return 9; }

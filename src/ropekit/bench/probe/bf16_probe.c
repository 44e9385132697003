// SPDX-License-Identifier: MIT
// Why is the bfloat16 cache write of a short prefill ~1.4-1.6x the plain copy (issue 12 point 3)? A one-thread
// probe of the kernel's bfloat16 half-layout row function against memcpy over the same rows, compiled like the
// kernel (docs/kernels.md, "The in-cache bfloat16 cache write").
//
//   gcc -O3 -march=native -std=c11 -D_GNU_SOURCE -Wno-aggressive-loop-optimizations -o /tmp/bf16_probe
//       src/ropekit/bench/probe/bf16_probe.c -lm     (one command line), then: /tmp/bf16_probe 9
//
// Rows of 128 bfloat16 (64 pairs), one table row (L1), out of place, in three working sets: 64 rows (L1/L2),
// 256 rows (L2), 16384 rows (4 MiB in + 4 MiB out: L3, the cache write's k at 2048 tokens x 8 heads).
// Variants (best of the rounds, ns per 16 pairs = 64 bytes in and 64 bytes out):
//   memcpy        the copy the cache write does for v (and the floor's copy of k)
//   kernel        half_bf16_vec: what ships (exact: bit-identical to the scalar loop and to the PyTorch path)
//   no den. test  the same without the denormal-result test (NOT exact for results below 2^-126): its cost
//   truncate      the rotation, then the float32 results cut to bfloat16 without rounding (NOT exact): the
//                 arithmetic and the conversions in, without the rounding out
// Requires AVX512-BF16 (ROPEKIT_BF16_VEC); elsewhere it says so and exits.
#include "../../kernels/rope_cpu.c"
#include <math.h>
#include <stdio.h>
#include <time.h>

#ifdef ROPEKIT_BF16_VEC
static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

// the pair rotation of 16 bands at i, shared by the variants below (they differ only in the rounding to bf16)
static inline void rot16(const bf16 *x, const f32 *R c, const f32 *R s, int64_t n, int64_t i, __m512 *lo, __m512 *hi) {
    const __m512 a = bf16x16_load(x + i), b = bf16x16_load(x + n + i);
    const __m512 ci = _mm512_loadu_ps(c + i), si = _mm512_loadu_ps(s + i);
    *lo = _mm512_sub_ps(_mm512_mul_ps(a, ci), _mm512_mul_ps(b, si));
    *hi = _mm512_add_ps(_mm512_mul_ps(b, ci), _mm512_mul_ps(a, si));
}

static void no_den_test(bf16 *o, const bf16 *x, const f32 *R c, const f32 *R s, int64_t n) {
    for (int64_t i = 0; i + 16 <= n; i += 16) {
        __m512 lo, hi;
        rot16(x, c, s, n, i, &lo, &hi);
        _mm256_storeu_si256((__m256i *)(o + i), (__m256i)_mm512_cvtneps_pbh(lo));
        _mm256_storeu_si256((__m256i *)(o + n + i), (__m256i)_mm512_cvtneps_pbh(hi));
    }
}

static void truncate_out(bf16 *o, const bf16 *x, const f32 *R c, const f32 *R s, int64_t n) {
    for (int64_t i = 0; i + 16 <= n; i += 16) {
        __m512 lo, hi;
        rot16(x, c, s, n, i, &lo, &hi);
        _mm256_storeu_si256((__m256i *)(o + i), _mm512_cvtepi32_epi16(_mm512_srli_epi32(_mm512_castps_si512(lo), 16)));
        _mm256_storeu_si256((__m256i *)(o + n + i),
                            _mm512_cvtepi32_epi16(_mm512_srli_epi32(_mm512_castps_si512(hi), 16)));
    }
}

enum { D = 128, N = 64, VARIANTS = 4 };
static const char *NAMES[VARIANTS] = {"memcpy", "kernel", "no den. test", "truncate"};

static double best_ns(int v, bf16 *o, const bf16 *x, const f32 *c, const f32 *s, int64_t rows, int rounds) {
    const int reps = (int)(1 + (1 << 20) / rows);  // ~1M rows per timing, whatever the working set
    double best = 1e30;
    for (int r = 0; r < rounds; ++r) {
        const double t0 = now();
        for (int k = 0; k < reps; ++k)
            for (int64_t j = 0; j < rows; ++j) {
                bf16 *oj = o + j * D;
                const bf16 *xj = x + j * D;
                if (v == 0) memcpy(oj, xj, D * sizeof(bf16));
                else if (v == 1) half_bf16_vec(oj, xj, c, s, N, 1.0f);
                else if (v == 2) no_den_test(oj, xj, c, s, N);
                else truncate_out(oj, xj, c, s, N);
            }
        const double t = (now() - t0) / ((double)reps * (double)rows * (N / 16));
        if (t < best) best = t;
    }
    return best * 1e9;
}

int main(int argc, char **argv) {
    const int rounds = argc > 1 ? atoi(argv[1]) : 9;
    const int64_t sets[3] = {64, 256, 16384};
    f32 c[N], s[N];
    for (int i = 0; i < N; ++i) c[i] = cosf(0.37f * (f32)i), s[i] = sinf(0.37f * (f32)i);
    printf("ns per 16 pairs (64 B in, 64 B out), one thread, best of %d rounds\n%-14s", rounds, "rows");
    for (int v = 0; v < VARIANTS; ++v) printf("%14s", NAMES[v]);
    printf("%14s\n", "kernel/memcpy");
    for (int w = 0; w < 3; ++w) {
        const int64_t rows = sets[w];
        bf16 *x = aligned_alloc(64, (size_t)rows * D * sizeof(bf16)), *o = aligned_alloc(64, (size_t)rows * D * 2);
        for (int64_t i = 0; i < rows * D; ++i) store_bf16(x + i, (f32)((i * 2654435761u) % 1000u) / 500.0f - 1.0f);
        memset(o, 0, (size_t)rows * D * sizeof(bf16));
        double t[VARIANTS];
        printf("%-14lld", (long long)rows);
        for (int v = 0; v < VARIANTS; ++v) printf("%14.2f", t[v] = best_ns(v, o, x, c, s, rows, rounds));
        printf("%14.2f\n", t[1] / t[0]);
        free(x);
        free(o);
    }
    return 0;
}
#else
#include <stdio.h>
int main(void) {
    puts("this CPU (or compiler) has no AVX512-BF16: the kernel's bfloat16 rows are scalar here");
    return 0;
}
#endif

// SPDX-License-Identifier: MIT
// What is the floor for RoPE's memory traffic? A one-thread probe of the fused kernel's row function against
// hand-written loops with the same traffic, compiled like the kernel (docs/kernels.md, "The inner loop").
//
//   gcc -O3 -march=native -pthread -std=gnu11 -Wno-aggressive-loop-optimizations -o /tmp/floor_probe
//       src/ropekit/bench/probe/floor_probe.c     (one command line), then: /tmp/floor_probe 25
//   THP=1 /tmp/floor_probe 25   # q and the tables on 2 MiB transparent huge pages (madvise)
//
// q: [32 heads, 4096 tokens, 128] float32 (64 MiB, bhsd, rotated in place); tables cos, sin [4096, 64] float32.
// Variants (each run once per round, rounds interleaved; min, 25th percentile and median in ms):
//   scale         x *= 1 (read q, write q): the in-place floor (torch's mul_(1.0) does the same work)
//   same row      the rotation with one table row for every token (table in L1): the arithmetic alone
//   rotation      the kernel's row function with per-token table rows (what ropekit does)
//   traffic       no rotation, the same reads of q and of the table rows (x += c * 0): the traffic alone
//   tiled 512     the rotation, 512-token blocks outside and heads inside (table block reused from L2)
//   packed        the rotation from one table [4096][cos 64 | sin 64] placed 2 KiB off q's page offset
//   hg G          packed, in head groups: for each group of G heads, token by token, the G rows of that token (the
//                 table row read once per group, G q streams advancing together): what the kernel does for bhsd
#define _GNU_SOURCE
#include "../../kernels/rope_cpu.c"
#include <stdio.h>
#include <sys/mman.h>
#include <time.h>

#define H 32
#define S 4096
#define DD 128
#define NB 64
static f32 *q, *cs, *sn, *pk;
static volatile f32 one_v = 1.0f;

static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
static f32 *row(int h, int s) { return q + ((int64_t)h * S + s) * DD; }
static void v_scale(void) { const f32 o = one_v; for (int64_t i = 0; i < (int64_t)H * S * DD; ++i) q[i] *= o; }
static void v_same(void) { for (int h = 0; h < H; ++h) for (int s = 0; s < S; ++s) half_inplace_f32(row(h, s), cs, sn, NB, 1.0f); }
static void v_rot(void) {
    for (int h = 0; h < H; ++h)
        for (int s = 0; s < S; ++s) half_inplace_f32(row(h, s), cs + (int64_t)s * NB, sn + (int64_t)s * NB, NB, 1.0f);
}
static void v_traffic(void) {
    for (int h = 0; h < H; ++h)
        for (int s = 0; s < S; ++s) {
            f32 *R x = row(h, s);
            const f32 *R c = cs + (int64_t)s * NB, *R z = sn + (int64_t)s * NB;
            for (int i = 0; i < NB; ++i) { x[i] = x[i] + c[i] * 0.0f; x[i + NB] = x[i + NB] + z[i] * 0.0f; }
        }
}
static void v_tiled(void) {
    for (int s0 = 0; s0 < S; s0 += 512)
        for (int h = 0; h < H; ++h)
            for (int s = s0; s < s0 + 512; ++s)
                half_inplace_f32(row(h, s), cs + (int64_t)s * NB, sn + (int64_t)s * NB, NB, 1.0f);
}
static void v_packed(void) {
    for (int h = 0; h < H; ++h)
        for (int s = 0; s < S; ++s) half_inplace_f32(row(h, s), pk + (int64_t)s * 128, pk + (int64_t)s * 128 + 64, NB, 1.0f);
}

#define HG(G)                                                                                                  \
    static void v_hg##G(void) {                                                                                \
        for (int h0 = 0; h0 < H; h0 += G)                                                                      \
            for (int s = 0; s < S; ++s)                                                                        \
                for (int h = h0; h < h0 + G; ++h)                                                              \
                    half_inplace_f32(row(h, s), pk + (int64_t)s * 128, pk + (int64_t)s * 128 + 64, NB, 1.0f);  \
    }
HG(2)
HG(4)
HG(8)
HG(16)

static void *alloc(size_t bytes, int huge) {
    void *p = aligned_alloc(huge ? (1u << 21) : 64, (bytes + (1u << 21) - 1) & ~(size_t)((1u << 21) - 1));
    if (huge) madvise(p, bytes, MADV_HUGEPAGE);
    return p;
}

int main(int argc, char **argv) {
    const int rounds = argc > 1 ? atoi(argv[1]) : 15, huge = getenv("THP") != NULL;
    const size_t n = (size_t)H * S * DD;
    q = alloc(n * 4, huge);
    cs = alloc((size_t)S * NB * 8, huge);
    sn = cs + S * NB;
    pk = (f32 *)alloc((size_t)S * 128 * 4 + 8192, huge) + ((((uintptr_t)q & 4095) + 2048) & 4095) / 4;
    for (size_t i = 0; i < n; ++i) q[i] = (f32)(i % 97) * 0.01f;
    for (int i = 0; i < S * NB; ++i) { cs[i] = 1.0f; sn[i] = 0.0f; }
    for (int i = 0; i < S * 128; ++i) pk[i] = (i % 128) < 64 ? 1.0f : 0.0f;
    struct { const char *name; void (*fn)(void); } v[] = {
        {"scale", v_scale}, {"same row", v_same}, {"rotation", v_rot},
        {"traffic", v_traffic}, {"tiled 512", v_tiled}, {"packed", v_packed},
        {"hg 2", v_hg2}, {"hg 4", v_hg4}, {"hg 8", v_hg8}, {"hg 16", v_hg16},
    };
    enum { NV = sizeof v / sizeof v[0] };
    double *t = malloc(sizeof(double) * NV * (size_t)rounds);
    for (int i = 0; i < NV; ++i) v[i].fn();
    for (int r = 0; r < rounds; ++r)
        for (int i = 0; i < NV; ++i) { const double t0 = now(); v[i].fn(); t[i * rounds + r] = now() - t0; }
    printf("%s pages, %d rounds\n", huge ? "2 MiB" : "4 KiB", rounds);
    for (int i = 0; i < NV; ++i) {
        double *x = t + i * rounds;
        for (int a = 0; a < rounds; ++a)
            for (int b = a + 1; b < rounds; ++b) if (x[b] < x[a]) { const double z = x[a]; x[a] = x[b]; x[b] = z; }
        printf("%-10s min %6.2f  q25 %6.2f  median %6.2f ms\n", v[i].name, x[0] * 1e3, x[rounds / 4] * 1e3,
               x[rounds / 2] * 1e3);
    }
    return 0;
}

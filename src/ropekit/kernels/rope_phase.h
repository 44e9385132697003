// SPDX-License-Identifier: MIT
// Exact cos/sin tables of float (continuous) positions: ropekit.phases' eager CPU path for float32 / float64
// positions. Included at the end of rope_cpu.c (one translation unit, one library).
//
// The reduction is ropekit/reduction.py's reduced_turns, operation for operation and in the same order (the build
// has -ffp-contract=off, so no product is fused into an FMA): x = trunc(x) + f, trunc(x) = hi * 2^32 + lo, six
// exact pieces per band, reduced once more to t in [-1/2, 1/2] turn. The turns are bit-identical to the PyTorch
// path's. hi and lo are formed in float64 (hi = floor(trunc(x) / 2^32), lo = trunc(x) - hi * 2^32: both exact, the
// values the PyTorch path gets through int64) so that the band loop needs no int64 conversion and vectorizes.
//
// cos and sin of 2 pi t: t = q / 4 + r with q = round(4 t) in {-2, ..., 2} and r = t - q / 4 in [-1/8, 1/8] (both
// exact), a = fl(2 pi r) in [-pi/4, pi/4], then the Taylor series of sin and cos about 0, through a^17 and a^18
// (the first terms left out, a^19 / 19! and a^20 / 20!, are below 1e-19 there), by Horner's rule in z = a^2 with
// the coefficients +-1 / k! (k! exact in float64 up to 18!, so each coefficient is one correctly rounded division),
// and the quadrant q by swaps and sign flips (exact). Branch-free, so the band loop vectorizes. Error: the
// reduction's ~2^-51 turn, fl(2 pi r) below 2^-54 * pi/4 rad, a few ulp of Horner rounding;
// tests/ropekit/test_float_positions_fast*.py check the tables against mpmath.
#include <math.h>

// sin(a) = a + a z (S3 + z (S5 + ...)), cos(a) = 1 + z (C2 + z (C4 + ...)): Sk = (-1)^((k-1)/2) / k!, Ck = (-1)^(k/2) / k!
#define PH_S3 (-1.0 / 6.0)
#define PH_S5 (1.0 / 120.0)
#define PH_S7 (-1.0 / 5040.0)
#define PH_S9 (1.0 / 362880.0)
#define PH_S11 (-1.0 / 39916800.0)
#define PH_S13 (1.0 / 6227020800.0)
#define PH_S15 (-1.0 / 1307674368000.0)
#define PH_S17 (1.0 / 355687428096000.0)
#define PH_C2 (-1.0 / 2.0)
#define PH_C4 (1.0 / 24.0)
#define PH_C6 (-1.0 / 720.0)
#define PH_C8 (1.0 / 40320.0)
#define PH_C10 (-1.0 / 3628800.0)
#define PH_C12 (1.0 / 479001600.0)
#define PH_C14 (-1.0 / 87178291200.0)
#define PH_C16 (1.0 / 20922789888000.0)
#define PH_C18 (-1.0 / 6402373705728000.0)
#define PH_TWO_PI 6.283185307179586         // fl(2 pi), the constant the PyTorch path multiplies by
#define PH_TWO32 4294967296.0
#define PH_INV_TWO32 2.3283064365386963e-10  // 2^-32 (exact)

typedef struct {
    const void *pos;
    int pos_f32, out_f64;
    int64_t n;
    const double *consts;  // [7, n]: A0, B0, R0, A1, B1, R1, theta / 2 pi (ropekit.reduction.band_constants)
    double factor;
    void *cos_out, *sin_out;  // [npos, n] each, float32 or float64
} phase_args;

// x - floor(x) for the products it is applied to (multiples of 2^-42 below 2^53 in magnitude, so both this and
// the PyTorch path's x - floor(x) are exact: the same value). Written with nearbyint because GCC vectorizes that (a
// rounding instruction that raises no exception) but not floor under its default -ftrapping-math; x - r is exact
// (|x - r| <= 1/2) and so is adding 1 to it.
static inline double ph_frac(double x) {
    const double d = x - nearbyint(x);
    return d + (d < 0.0 ? 1.0 : 0.0);
}

// Bands [0, m) of one position, x = ip + f with ip = hi * 2^32 + lo; k: the constants' 7 rows, rows ld apart.
// cos/sin (times factor) to c, s in float64.
static inline void phase_row(double lo, double hi, double f, const double *R k, int64_t ld, int64_t m, double factor,
                             double *R c, double *R s) {
    const double *R A0 = k, *R B0 = k + ld, *R R0 = k + 2 * ld, *R A1 = k + 3 * ld, *R B1 = k + 4 * ld,
                 *R R1 = k + 5 * ld, *R F = k + 6 * ld;
    for (int64_t j = 0; j < m; ++j) {
        const double big = (ph_frac(lo * A0[j]) + ph_frac(lo * B0[j])) + (ph_frac(hi * A1[j]) + ph_frac(hi * B1[j]));
        double t = big + (lo * R0[j] + hi * R1[j]);
        t = t + f * F[j];
        t = t - nearbyint(t);  // torch.round: half to even, as nearbyint in the default rounding mode
        const double q = nearbyint(4.0 * t), r = t - 0.25 * q;
        const double a = r * PH_TWO_PI, z = a * a;
        const double sp =
            PH_S3 + z * (PH_S5 + z * (PH_S7 + z * (PH_S9 + z * (PH_S11 + z * (PH_S13 + z * (PH_S15 + z * PH_S17))))));
        const double cp =
            PH_C4 + z * (PH_C6 + z * (PH_C8 + z * (PH_C10 + z * (PH_C12 + z * (PH_C14 + z * (PH_C16 + z * PH_C18))))));
        const double s0 = a + (a * z) * sp;
        // cos = (1 - z/2) + z^2 cp: 1 - z/2 rounded to w, its rounding error (1 - w) - z/2 recovered exactly (Fast2Sum,
        // |z/2| <= 0.31 < 1) and added back with the tail
        const double hz = 0.5 * z, w = 1.0 - hz;
        const double c0 = w + (((1.0 - w) - hz) + (z * z) * cp);
        // quadrant q: cos(a + q pi/2), sin(a + q pi/2) from (c0, s0) by a swap (q odd) and sign flips
        // (selects between constants and computed values: GCC's -ftrapping-math if-converts those, so it vectorizes)
        const int odd = (q == 1.0) | (q == -1.0);
        const double cv = odd ? s0 : c0, sv = odd ? c0 : s0;
        const double cg = ((q > 0.5) | (q < -1.5)) ? -1.0 : 1.0, sg = ((q < -0.5) | (q > 1.5)) ? -1.0 : 1.0;
        c[j] = (cv * cg) * factor;
        s[j] = (sv * sg) * factor;
    }
}

#define PH_BLOCK 256
// Positions [begin, end): their rows of both tables.
static void phase_range(const void *vctx, int64_t begin, int64_t end) {
    const phase_args *g = (const phase_args *)vctx;
    const int64_t n = g->n;
    double cbuf[PH_BLOCK], sbuf[PH_BLOCK];  // float32 tables: a block of the row in float64, then rounded once
    for (int64_t i = begin; i < end; ++i) {
        const double x = g->pos_f32 ? (double)((const f32 *)g->pos)[i] : ((const double *)g->pos)[i];
        const double ip = trunc(x) + 0.0, f = x - ip;  // + 0.0: -0 -> +0, as through int64
        const double hi = floor(ip * PH_INV_TWO32), lo = ip - hi * PH_TWO32;
        if (g->out_f64) {
            double *co = (double *)g->cos_out + i * n, *so = (double *)g->sin_out + i * n;
            phase_row(lo, hi, f, g->consts, n, n, g->factor, co, so);
            continue;
        }
        f32 *R co = (f32 *)g->cos_out + i * n, *R so = (f32 *)g->sin_out + i * n;
        for (int64_t j0 = 0; j0 < n; j0 += PH_BLOCK) {
            const int64_t m = n - j0 < PH_BLOCK ? n - j0 : PH_BLOCK;
            phase_row(lo, hi, f, g->consts + j0, n, m, g->factor, cbuf, sbuf);
            for (int64_t j = 0; j < m; ++j) {
                co[j0 + j] = (f32)cbuf[j];
                so[j0 + j] = (f32)sbuf[j];
            }
        }
    }
}

// cos/sin tables [npos, n] (float32, or float64 when out_f64) of npos float32 (pos_f32) or float64 positions,
// times factor. Returns -1, or (nothing written) the index of the first position that is not finite with magnitude
// below 2^63 (ropekit.phases.check_positions refuses those before this runs: a second line of defence).
int64_t ropekit_phase_tables(const void *R pos, int pos_f32, int64_t npos, const double *R consts, int64_t n,
                             double factor, void *R cos_out, void *R sin_out, int out_f64, int nthreads) {
    for (int64_t i = 0; i < npos; ++i) {
        const double x = pos_f32 ? (double)((const f32 *)pos)[i] : ((const double *)pos)[i];
        if (!(fabs(x) < 9223372036854775808.0)) return i;
    }
    const phase_args g = {pos, pos_f32, out_f64, n, consts, factor, cos_out, sin_out};
    const int64_t rows = n >= 4096 ? 1 : 4096 / (n > 0 ? n : 1);  // chunks of ~4K (position, band) pairs
    parallel_range(phase_range, &g, npos, rows, nthreads);
    return -1;
}

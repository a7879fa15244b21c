/* Helpers shared by the benchmark programs: a monotonic clock, medians,
 * filled 64-byte-aligned buffers and a row-major sgemm with ut_gemm's
 * conventions.
 * defines: bench_now, bench_median, bench_buf, bench_gemm. */
#ifndef UTRAIN_BENCH_UTIL_H
#define UTRAIN_BENCH_UTIL_H

#include <cblas.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static inline double bench_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static inline int bench_cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Sorts v in place. */
static inline double bench_median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, bench_cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* n floats in [-0.5, 0.5), a fixed pattern; exits on allocation failure. */
static inline float *bench_buf(size_t n) {
    float *p = aligned_alloc(64, ((n * sizeof(float) + 63) / 64) * 64);
    if (!p) {
        fprintf(stderr, "bench: out of memory for %zu floats\n", n);
        exit(1);
    }
    for (size_t i = 0; i < n; i++) p[i] = (float)((i * 2654435761u) % 1000) * 1e-3f - 0.5f;
    return p;
}

/* row-major C (M, Nc) = op(A) op(Bm) + beta C, as ut_gemm (ta: A stored (K, M); tb: Bm stored (Nc, K)) */
static inline void bench_gemm(bool ta, bool tb, int M, int Nc, int K, const float *A, const float *Bm,
                              float beta, float *Cm) {
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, Nc,
                K, 1.0f, A, ta ? M : K, Bm, tb ? K : Nc, beta, Cm, Nc);
}
#endif

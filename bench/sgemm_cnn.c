/* OpenBLAS sgemm rate on the gemm shapes of one training step of the
 * Fashion-MNIST CNN (src/models/cnn.c, batch 64), issued the way utrain
 * issues them.
 *
 *   sgemm_cnn [--repeats N] [--threads N] [--json]
 *
 * Convolutions (src/ops/conv.c): one gemm per image, the 64 images of the
 * batch split over the threads (omp parallel for; OpenBLAS runs single-threaded
 * inside the region), each thread on its own buffers:
 *   conv1 fwd   out (32,676)  = w (32,9)     @ col (9,676)         NN
 *   conv2 fwd   out (64,576)  = w (64,288)   @ col (288,576)       NN
 *   conv1 dw    dw  (32,9)   += dout (32,676) @ col^T (676,9)      NT
 *   conv2 dw    dw  (64,288) += dout (64,576) @ col^T (576,288)    NT
 *   conv2 dx    dcol (288,576) = w^T (288,64) @ dout (64,576)      TN
 * (conv1's input needs no gradient, so there is no conv1 dx gemm.)
 * Linear layers (src/ops/matmul.c): one gemm per batch, OpenBLAS threaded:
 *   fc1/fc2 fwd x@W^T (NT), dx = dout@W (NN, beta 1), dW += dout^T@x (TN, beta 1).
 * Each shape is timed for a whole batch (64 per-image gemms, or one batch
 * gemm), median over the repeats; the step-weighted rate is all gemm FLOPs of
 * a step divided by the sum of those medians. Buffers stay cache-warm across
 * images, so the rate is an optimistic one (right for a limit).
 * For comparison (not in the weighted rate) it also times each convolution
 * gemm as one batch-wide, OpenBLAS-threaded gemm (N = 64 * OH*OW), the shape a
 * batched im2col would give. */
#include <cblas.h>
#include <omp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_util.h"

enum { B = 64 };

typedef struct {
    const char *name;
    bool ta, tb;
    int M, N, K;
    float beta;
    bool per_image; /* 64 gemms split over threads, else one batch gemm */
} shape;

static const shape shapes[] = {
    {"conv1 fwd", false, false, 32, 676, 9, 0.0f, true},
    {"conv2 fwd", false, false, 64, 576, 288, 0.0f, true},
    {"conv1 dw", false, true, 32, 9, 676, 1.0f, true},
    {"conv2 dw", false, true, 64, 288, 576, 1.0f, true},
    {"conv2 dx", true, false, 288, 576, 64, 0.0f, true},
    {"fc1 fwd", false, true, B, 128, 9216, 0.0f, false},
    {"fc1 dx", false, false, B, 9216, 128, 1.0f, false},
    {"fc1 dw", true, false, 128, 9216, B, 1.0f, false},
    {"fc2 fwd", false, true, B, 10, 128, 0.0f, false},
    {"fc2 dx", false, false, B, 128, 10, 1.0f, false},
    {"fc2 dw", true, false, 10, 128, B, 1.0f, false},
};
enum { NSHAPES = sizeof shapes / sizeof shapes[0] };

/* per-thread buffers, large enough for any per-image shape */
enum { MAXEL = 288 * 676 };

static double time_shape(const shape *s, float **A, float **Bm, float **Cm, int nthr) {
    double t0 = bench_now();
    if (s->per_image) {
#pragma omp parallel num_threads(nthr)
        {
            int th = omp_get_thread_num();
#pragma omp for schedule(static)
            for (int n = 0; n < B; n++) bench_gemm(s->ta, s->tb, s->M, s->N, s->K, A[th], Bm[th], s->beta, Cm[th]);
        }
    } else {
        bench_gemm(s->ta, s->tb, s->M, s->N, s->K, A[0], Bm[0], s->beta, Cm[0]);
    }
    return bench_now() - t0;
}

int main(int argc, char **argv) {
    long repeats = 7, threads = 0;
    bool json = false;
    for (int i = 1; i < argc; i++) {
        int got = bench_repeats_threads("sgemm_cnn", argc, argv, &i, &repeats, &threads);
        if (got < 0) return 2;
        if (got > 0) continue;
        if (!strcmp(argv[i], "--json")) {
            json = true;
        } else {
            fprintf(stderr, "usage: sgemm_cnn [--repeats N] [--threads N] [--json]\n");
            return 2;
        }
    }
    if (threads > 0) omp_set_num_threads((int)threads);
    int nthr = omp_get_max_threads();
    float *A[64], *Bm[64], *Cm[64];
    if (nthr > 64) nthr = 64;
    /* batch gemms (fc and the batched-conv comparison) use buffer 0: size it for the largest */
    size_t big = (size_t)288 * 676 * B;
    for (int t = 0; t < nthr; t++) {
        size_t n = t == 0 ? big : MAXEL;
        A[t] = bench_buf(n), Bm[t] = bench_buf(n), Cm[t] = bench_buf(n);
    }
    double *tv = malloc((size_t)repeats * sizeof *tv);
    if (!tv) return 1;
    for (int i = 0; i < NSHAPES; i++) time_shape(&shapes[i], A, Bm, Cm, nthr); /* warm-up */

    if (!json)
        printf("OpenBLAS sgemm on the Fashion-MNIST CNN step shapes, batch %d (%s, core %s), threads %d, "
               "median of %ld\n",
               B, openblas_get_config(), openblas_get_corename(), nthr, repeats);
    double step_flops = 0, step_time = 0;
    for (int i = 0; i < NSHAPES; i++) {
        const shape *s = &shapes[i];
        for (long r = 0; r < repeats; r++) tv[r] = time_shape(s, A, Bm, Cm, nthr);
        double med = bench_median(tv, (int)repeats);
        double flops = 2.0 * s->M * (double)s->N * s->K * (s->per_image ? B : 1);
        step_flops += flops;
        step_time += med;
        if (!json)
            printf("  %-10s %s%s M %4d N %5d K %5d %-9s %8.3f ms  %7.1f GFLOP/s\n", s->name,
                   s->ta ? "T" : "N", s->tb ? "T" : "N", s->M, s->N, s->K,
                   s->per_image ? "x64 imgs" : "batch", 1e3 * med, flops / med * 1e-9);
    }
    double rate = step_flops / step_time;
    /* comparison: each convolution gemm as one batch-wide threaded gemm */
    double bat_flops = 0, bat_time = 0;
    for (int i = 0; i < NSHAPES; i++) {
        const shape *s = &shapes[i];
        if (!s->per_image) continue;
        /* fwd / dx: N grows to 64*OHW; dw: K grows to 64*OHW */
        bool dw = s->tb;
        int M = s->M, N = dw ? s->N : s->N * B, K = dw ? s->K * B : s->K;
        for (long r = 0; r < repeats; r++) {
            double t0 = bench_now();
            bench_gemm(s->ta, s->tb, M, N, K, A[0], Bm[0], s->beta, Cm[0]);
            tv[r] = bench_now() - t0;
        }
        double med = bench_median(tv, (int)repeats), flops = 2.0 * M * (double)N * K;
        bat_flops += flops;
        bat_time += med;
        if (!json)
            printf("  %-10s %s%s M %4d N %5d K %5d batched   %8.3f ms  %7.1f GFLOP/s   (comparison)\n",
                   s->name, s->ta ? "T" : "N", s->tb ? "T" : "N", M, N, K, 1e3 * med, flops / med * 1e-9);
    }
    if (json)
        printf("{\"impl\":\"sgemm\",\"core\":\"%s\",\"threads\":%d,\"repeats\":%ld,"
               "\"step_gemm_flops\":%.0f,\"step_gemm_s\":%.6f,\"gflops\":%.2f,"
               "\"conv_batched_gflops\":%.2f}\n",
               openblas_get_corename(), nthr, repeats, step_flops, step_time, rate * 1e-9,
               bat_flops / bat_time * 1e-9);
    else
        printf("  step-weighted: %.3f GFLOP in %.2f ms = %.1f GFLOP/s (convolutions batched instead: "
               "%.1f GFLOP/s on their part)\n",
               step_flops * 1e-9, step_time * 1e3, rate * 1e-9, bat_flops / bat_time * 1e-9);
    for (int t = 0; t < nthr; t++) free(A[t]), free(Bm[t]), free(Cm[t]);
    free(tv);
    return 0;
}

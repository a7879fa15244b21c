/* Does an sgemm computed a block of rows at a time give the whole product's
 * bits, and what does the blocking cost? The product is a linear's forward,
 * out (M, N) = x (M, K) @ W^T (W is (N, K)), on bf16-valued operands; by
 * default GPT-2 124M's output projection at 1024 tokens.
 *
 *   sgemm_blocks [--rows M] [--cols N] [--inner K] [--threads T] [--repeats R] [BLOCK ...]
 *
 * For each row block size (default 24 48 96 192 512) it prints how many of
 * the M x N elements differ from the whole product, and the median time of
 * the blocked product against the whole one's, measured alternately.
 * utrain's blocked 16-bit linear (src/backend/cpu/matmul.c) relies on
 * blocks of whole row tiles giving the same bits on one thread. */
#include <cblas.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"

static void product(float *out, const float *x, const float *w, int M, int N, int K, int block) {
    for (int m0 = 0; m0 < M; m0 += block) {
        int m = M - m0 < block ? M - m0 : block;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, N, K, 1.0f, x + (size_t)m0 * K, K, w, K, 0.0f,
                    out + (size_t)m0 * N, N);
    }
}

/* seeded values in [-0.5, 0.5) with bf16's 8-bit significand */
static void fill(float *a, size_t n, uint32_t s) {
    for (size_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        float f = (float)(s >> 8) * 0x1p-24f - 0.5f;
        uint32_t u;
        memcpy(&u, &f, 4);
        u &= 0xffff0000u;
        memcpy(&a[i], &u, 4);
    }
}

static double timed(float *out, const float *x, const float *w, int M, int N, int K, int block) {
    double t0 = bench_now();
    product(out, x, w, M, N, K, block);
    return bench_now() - t0;
}

int main(int argc, char **argv) {
    long M = 1024, N = 50257, K = 768, threads = 1, repeats = 3;
    int blocks[32], nb = 0;
    for (int i = 1; i < argc; i++) {
        long *dst = !strcmp(argv[i], "--rows") ? &M : !strcmp(argv[i], "--cols") ? &N
                    : !strcmp(argv[i], "--inner") ? &K : !strcmp(argv[i], "--threads") ? &threads
                    : !strcmp(argv[i], "--repeats") ? &repeats : NULL;
        if (dst && i + 1 < argc) *dst = atol(argv[++i]);
        else if (atoi(argv[i]) > 0 && nb < 32) blocks[nb++] = atoi(argv[i]);
        else return fprintf(stderr, "sgemm_blocks: unknown argument '%s'\n", argv[i]), 2;
    }
    if (M <= 0 || N <= 0 || K <= 0 || threads <= 0 || repeats <= 0) return fprintf(stderr, "sgemm_blocks: sizes must be > 0\n"), 2;
    if (!nb) blocks[nb++] = 24, blocks[nb++] = 48, blocks[nb++] = 96, blocks[nb++] = 192, blocks[nb++] = 512;
    omp_set_num_threads((int)threads);
    openblas_set_num_threads((int)threads);
    size_t mn = (size_t)M * N;
    float *x = malloc(sizeof(float) * M * K), *w = malloc(sizeof(float) * N * K);
    float *whole = malloc(sizeof(float) * mn), *blk = malloc(sizeof(float) * mn);
    double *tw = malloc(sizeof(double) * repeats), *tb = malloc(sizeof(double) * repeats);
    if (!x || !w || !whole || !blk || !tw || !tb) abort();
    fill(x, (size_t)M * K, 1), fill(w, (size_t)N * K, 2);
    printf("out (%ld, %ld) = x (%ld, %ld) @ W^T, %ld thread(s), OpenBLAS %s kernels\n", M, N, M, K, threads,
           openblas_get_corename());
    for (int b = 0; b < nb; b++) {
        for (long r = 0; r < repeats; r++) {
            tw[r] = timed(whole, x, w, (int)M, (int)N, (int)K, (int)M);
            tb[r] = timed(blk, x, w, (int)M, (int)N, (int)K, blocks[b]);
        }
        size_t diff = 0;
        for (size_t i = 0; i < mn; i++) diff += memcmp(&whole[i], &blk[i], 4) != 0;
        double mw = bench_median(tw, (int)repeats), mb = bench_median(tb, (int)repeats);
        printf("  blocks of %4d rows: %9zu of %zu elements differ; %.3f s against %.3f s whole (%.2fx)\n",
               blocks[b], diff, mn, mb, mw, mb / mw);
    }
    free(x), free(w), free(whole), free(blk), free(tw), free(tb);
    return 0;
}

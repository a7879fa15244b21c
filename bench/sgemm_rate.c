/* OpenBLAS sgemm rate on the matrix shapes of the GPT-2 124M training step
 * (batch 4 x seq 64 = 256 rows, n_embd 768, vocab 50257).
 *
 *   sgemm_rate [--repeats N] [--threads N] [--json]
 *   sgemm_rate --core      (prints the OpenBLAS kernel set in use and exits)
 *
 * For every linear layer of the step (qkv 768->2304, attn proj 768->768, fc
 * 768->3072, mlp proj 3072->768, tied lm_head 768->50257) it times the three
 * gemms utrain issues (src/ops/matmul.c, ut_linear_forward/backward_cpu):
 *   fwd  out (N,OC)  = x (N,C) @ W^T            (NT)
 *   dx   dx  (N,C)  += dout (N,OC) @ W          (NN, beta 1)
 *   dw   dW  (OC,C) += dout^T (OC,N) @ x (N,C)  (TN, beta 1)
 * and prints each one's median GFLOP/s over the repeats, then the step rate:
 * the FLOPs of all of them weighted by how often the step runs them (12 per
 * layer kind, 1 for lm_head) divided by the matching weighted median times. */
#include <cblas.h>
#include <omp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_util.h"

enum { N = 256, C = 768, V = 50257, L = 12 };

typedef struct {
    const char *name;
    int in, out, count;
} layer;

int main(int argc, char **argv) {
    long repeats = 5, threads = 0;
    bool json = false;
    for (int i = 1; i < argc; i++) {
        int got = bench_repeats_threads("sgemm_rate", argc, argv, &i, &repeats, &threads);
        if (got < 0) return 2;
        if (got > 0) continue;
        if (!strcmp(argv[i], "--json")) {
            json = true;
        } else if (!strcmp(argv[i], "--core")) {
            printf("%s\n", openblas_get_corename());
            return 0;
        } else {
            fprintf(stderr, "usage: sgemm_rate [--repeats N] [--threads N] [--json] | --core\n");
            return 2;
        }
    }
    if (threads > 0) omp_set_num_threads((int)threads);
    int nthreads = omp_get_max_threads();

    const layer layers[] = {{"qkv", C, 3 * C, L},
                            {"attn.proj", C, C, L},
                            {"mlp.fc", C, 4 * C, L},
                            {"mlp.proj", 4 * C, C, L},
                            {"lm_head", C, V, 1}};
    const int nl = (int)(sizeof layers / sizeof layers[0]);
    size_t maxw = (size_t)V * C, maxa = (size_t)N * V;
    float *x = bench_buf((size_t)N * 4 * C), *w = bench_buf(maxw), *dw = bench_buf(maxw);
    float *out = bench_buf(maxa), *dout = bench_buf(maxa), *dx = bench_buf((size_t)N * 4 * C);
    double *t = malloc((size_t)repeats * sizeof *t);
    if (!t) return 1;

    /* one warm-up pass over every shape (thread pool start, page faults) */
    for (int l = 0; l < nl; l++) bench_gemm(false, true, N, layers[l].out, layers[l].in, x, w, 0.0f, out);

    double step_flops = 0, step_time = 0;
    if (!json)
        printf("OpenBLAS sgemm on the GPT-2 124M step shapes (%s, core %s), threads %d, median of %ld\n",
               openblas_get_config(), openblas_get_corename(), nthreads, repeats);
    for (int l = 0; l < nl; l++) {
        const layer *ly = &layers[l];
        int in = ly->in, oc = ly->out;
        for (int kind = 0; kind < 3; kind++) {
            for (long r = 0; r < repeats; r++) {
                double t0 = bench_now();
                if (kind == 0) bench_gemm(false, true, N, oc, in, x, w, 0.0f, out);
                else if (kind == 1) bench_gemm(false, false, N, in, oc, dout, w, 1.0f, dx);
                else bench_gemm(true, false, oc, in, N, dout, x, 1.0f, dw);
                t[r] = bench_now() - t0;
            }
            double med = bench_median(t, (int)repeats);
            double flops = 2.0 * N * (double)in * (double)oc;
            step_flops += ly->count * flops;
            step_time += ly->count * med;
            static const char *kinds[] = {"fwd  x@W^T   ", "dx   dout@W  ", "dw   dout^T@x"};
            static const char *shapes[] = {"(%dx%d)x(%dx%d)", "(%dx%d)x(%dx%d)", "(%dx%d)x(%dx%d)"};
            char shape[64];
            if (kind == 0) snprintf(shape, sizeof shape, shapes[0], N, in, in, oc);
            else if (kind == 1) snprintf(shape, sizeof shape, shapes[1], N, oc, oc, in);
            else snprintf(shape, sizeof shape, shapes[2], oc, N, N, in);
            if (!json)
                printf("  %-10s %s %-24s %8.2f ms  %7.1f GFLOP/s\n", ly->name, kinds[kind], shape,
                       1e3 * med, flops / med * 1e-9);
        }
    }
    double rate = step_flops / step_time;
    if (json)
        printf("{\"impl\":\"sgemm\",\"core\":\"%s\",\"threads\":%d,\"repeats\":%ld,"
               "\"step_gemm_flops\":%.0f,\"step_gemm_s\":%.6f,\"gflops\":%.2f}\n",
               openblas_get_corename(), nthreads, repeats, step_flops, step_time, rate * 1e-9);
    else
        printf("  step-weighted: %.1f GFLOP in %.1f ms = %.1f GFLOP/s\n", step_flops * 1e-9,
               step_time * 1e3, rate * 1e-9);
    free(x);
    free(w);
    free(dw);
    free(out);
    free(dout);
    free(dx);
    free(t);
    return 0;
}

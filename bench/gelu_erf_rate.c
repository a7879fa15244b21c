/* Exact GELU kernels, forward and backward: utrain's (vmath.h's vectorised
 * erf and exp) against the same loops calling glibc's erff and expf (the
 * kernels before the change), interleaved, medians of R repetitions, in
 * ns per element on one thread. N defaults to a MiniLM step's intermediate
 * activation (32 x 48 tokens x 1536).
 *
 *   gelu_erf_rate [N] [R]
 *
 * Also prints the largest difference between the two forward outputs. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

#include "bench_util.h"

/* the kernels (src/backend/cpu/cpu.h, inside libutrain.a) */
void ut_gelu_erf_forward_cpu(float *out, const float *inp, int64_t N);
void ut_gelu_erf_backward_cpu(float *dinp, const float *dout, const float *inp, int64_t N);

static void libm_forward(float *out, const float *inp, int64_t N) {
    for (int64_t i = 0; i < N; i++) out[i] = 0.5f * inp[i] * (1.0f + erff(inp[i] * 0.70710678118654752f));
}

static void libm_backward(float *dinp, const float *dout, const float *inp, int64_t N) {
    for (int64_t i = 0; i < N; i++) {
        float x = inp[i];
        float cdf = 0.5f * (1.0f + erff(x * 0.70710678118654752f));
        float pdf = 0.39894228040143268f * expf(-0.5f * x * x);
        dinp[i] += dout[i] * (cdf + x * pdf);
    }
}

int main(int argc, char **argv) {
    long N = argc > 1 ? atol(argv[1]) : 32L * 48 * 1536, R = argc > 2 ? atol(argv[2]) : 15;
    if (N <= 0 || R <= 0) {
        fprintf(stderr, "usage: gelu_erf_rate [N] [R]\n");
        return 2;
    }
    omp_set_num_threads(1);
    float *x = bench_buf((size_t)N), *g = bench_buf((size_t)N), *o1 = bench_buf((size_t)N),
          *o2 = bench_buf((size_t)N), *d = bench_buf((size_t)N);
    for (long i = 0; i < N; i++) x[i] = 8.0f * x[i]; /* [-4, 4) */
    double *t[4];
    for (int k = 0; k < 4; k++) t[k] = calloc((size_t)R, sizeof(double));
    for (long r = 0; r < R; r++) {
        double a = bench_now();
        ut_gelu_erf_forward_cpu(o1, x, N);
        double b = bench_now();
        libm_forward(o2, x, N);
        double c = bench_now();
        ut_gelu_erf_backward_cpu(d, g, x, N);
        double e = bench_now();
        libm_backward(d, g, x, N);
        double f = bench_now();
        t[0][r] = b - a, t[1][r] = c - b, t[2][r] = e - c, t[3][r] = f - e;
    }
    double diff = 0;
    for (long i = 0; i < N; i++) diff = fmax(diff, fabs((double)o1[i] - (double)o2[i]));
    const char *name[4] = {"forward, utrain", "forward, glibc erff", "backward, utrain", "backward, glibc erff/expf"};
    for (int k = 0; k < 4; k++)
        printf("  %-28s %7.2f ns/element (median of %ld)\n", name[k], 1e9 * bench_median(t[k], (int)R) / (double)N, R);
    printf("  largest forward difference %.3g\n", diff);
    for (int k = 0; k < 4; k++) free(t[k]);
    free(x), free(g), free(o1), free(o2), free(d);
    return 0;
}

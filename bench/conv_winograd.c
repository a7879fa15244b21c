/* 3x3 stride-1 convolutions per direction: utrain's im2col + sgemm path
 * against its Winograd F(2x2, 3x3) path (src/backend/cpu/winograd.c), timed
 * in turn within each repeat, median over the repeats, with the largest
 * difference between the two relative to the largest magnitude, the
 * direct convolution's FLOPs per second for both ("effective" rate, as
 * cuDNN reports Winograd) and the fraction of the cores' FMA peak it is.
 *
 *   conv_winograd [--repeats N] [--threads N] [--peak GFLOPS]
 *
 * Layers: the Fashion-MNIST CNN's conv2 (batch 64, 32 -> 64 channels,
 * 26x26, no padding) and ResNet-style blocks at batch 32 (64 channels at
 * 56x56 and 128 at 28x28, padding 1). Directions: forward (with bias),
 * backward data (dx), backward weights (dw; both paths add the bias
 * gradient the same way, left out). Gradients are added into zeroed
 * buffers, as the trainer does. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/backend/cpu/conv.h"
#include "bench_util.h"

enum { DIR_FWD, DIR_BWD_DATA, DIR_BWD_WEIGHTS };
static const char *const dir_names[] = {"forward", "backward data", "backward weights"};

static size_t nx(const ut_conv2d_shape *d) { return (size_t)(d->B * d->C * d->H * d->W); }
static size_t ny(const ut_conv2d_shape *d) { return (size_t)(d->B * d->OC * d->OH * d->OW); }
static size_t nw(const ut_conv2d_shape *d) { return (size_t)(d->OC * d->C * d->KH * d->KW); }

typedef struct {
    ut_conv2d_shape d;
    int nthr;
    float *x, *w, *b, *dout, *cols, *dw_part, *U, *ws, *dU;
    float *out[2], *dx[2], *dw[2];
} conv_case;

static void run(conv_case *c, int algo, int dir) {
    const ut_conv2d_shape *d = &c->d;
    if (dir == DIR_BWD_DATA) memset(c->dx[algo], 0, nx(d) * sizeof(float));
    if (dir == DIR_BWD_WEIGHTS) memset(c->dw[algo], 0, nw(d) * sizeof(float));
    if (algo == 0) {
        if (dir == DIR_FWD) ut_conv2d_forward_cpu(c->out[0], c->cols, c->x, c->w, c->b, d, c->nthr);
        else
            ut_conv2d_backward_cpu(dir == DIR_BWD_DATA ? c->dx[0] : NULL, dir == DIR_BWD_WEIGHTS ? c->dw[0] : NULL,
                                   NULL, c->cols, c->dw_part, c->dout, NULL, NULL, c->x, c->w, d, c->nthr);
    } else {
        if (dir == DIR_FWD) ut_winograd_forward(c->out[1], NULL, c->U, c->ws, c->x, c->w, c->b, d, c->nthr);
        else
            ut_winograd_backward(dir == DIR_BWD_DATA ? c->dx[1] : NULL, dir == DIR_BWD_WEIGHTS ? c->dw[1] : NULL, c->U,
                                 c->ws, c->dU, c->dout, NULL, NULL, c->x, c->w, d, c->nthr);
    }
}

int main(int argc, char **argv) {
    long repeats = 11, threads = 0;
    double peak = 0;
    for (int i = 1; i < argc; i++) {
        int got = bench_repeats_threads("conv_winograd", argc, argv, &i, &repeats, &threads);
        if (got < 0) return 2;
        if (got > 0) continue;
        if (!strcmp(argv[i], "--peak") && i + 1 < argc) {
            peak = atof(argv[++i]);
            continue;
        }
        fprintf(stderr, "usage: conv_winograd [--repeats N] [--threads N] [--peak GFLOPS]\n");
        return 2;
    }
    if (threads > 0) omp_set_num_threads((int)threads);
    int nthr = omp_get_max_threads();
    const struct {
        const char *name;
        ut_conv2d_shape d;
    } layers[] = {
        {"cnn conv2", {.B = 64, .C = 32, .H = 26, .W = 26, .OC = 64, .KH = 3, .KW = 3, .S = 1, .P = 0, .OH = 24, .OW = 24}},
        {"resnet 64@56", {.B = 32, .C = 64, .H = 56, .W = 56, .OC = 64, .KH = 3, .KW = 3, .S = 1, .P = 1, .OH = 56, .OW = 56}},
        {"resnet 128@28", {.B = 32, .C = 128, .H = 28, .W = 28, .OC = 128, .KH = 3, .KW = 3, .S = 1, .P = 1, .OH = 28, .OW = 28}},
    };
    double *t[2];
    for (int i = 0; i < 2; i++)
        if (!(t[i] = malloc((size_t)repeats * sizeof *t[i]))) return 1;
    printf("3x3 stride-1 convolutions, threads %d, median of %ld (interleaved); GF/s: the direct convolution's "
           "FLOPs per second (effective for Winograd)%s\n", nthr, repeats, peak > 0 ? "; %: of the given peak" : "");
    for (size_t s = 0; s < sizeof layers / sizeof layers[0]; s++) {
        conv_case c = {.d = layers[s].d, .nthr = nthr};
        const ut_conv2d_shape *d = &c.d;
        size_t col = (size_t)(d->C * 9 * d->OH * d->OW);
        c.x = bench_buf(nx(d)), c.w = bench_buf(nw(d)), c.b = bench_buf((size_t)d->OC), c.dout = bench_buf(ny(d));
        c.cols = bench_buf(2 * (size_t)nthr * col), c.dw_part = bench_buf(UT_CONV_DW_CHUNKS * nw(d));
        c.U = bench_buf((size_t)(16 * d->OC * d->C)), c.ws = bench_buf((size_t)nthr * ut_winograd_thread_floats(d));
        c.dU = bench_buf((size_t)(UT_CONV_DW_CHUNKS + 1) * 16 * (size_t)(d->OC * d->C));
        for (int a = 0; a < 2; a++) c.out[a] = bench_buf(ny(d)), c.dx[a] = bench_buf(nx(d)), c.dw[a] = bench_buf(nw(d));
        for (int dir = DIR_FWD; dir <= DIR_BWD_WEIGHTS; dir++) {
            run(&c, 0, dir), run(&c, 1, dir); /* warm-up, and the results compared */
            double diff = dir == DIR_FWD ? bench_rel_diff(c.out[0], c.out[1], ny(d))
                          : dir == DIR_BWD_DATA ? bench_rel_diff(c.dx[0], c.dx[1], nx(d))
                                                : bench_rel_diff(c.dw[0], c.dw[1], nw(d));
            for (long r = 0; r < repeats; r++)
                for (int a = 0; a < 2; a++) {
                    double t0 = bench_now();
                    run(&c, a, dir);
                    t[a][r] = bench_now() - t0;
                }
            double m0 = bench_median(t[0], (int)repeats), m1 = bench_median(t[1], (int)repeats);
            double flops = 2.0 * (double)ny(d) * (double)(d->C * 9);
            char pc[2][32] = {"", ""};
            for (int a = 0; a < 2 && peak > 0; a++)
                snprintf(pc[a], sizeof pc[a], " (%.0f%%)", 100.0 * flops / (a ? m1 : m0) * 1e-9 / peak);
            printf("  %-14s %-16s im2col %7.2f ms %6.1f GF/s%s | winograd %7.2f ms %6.1f GF/s%s (x%.2f) | diff %.1e\n",
                   layers[s].name, dir_names[dir], 1e3 * m0, flops / m0 * 1e-9, pc[0], 1e3 * m1, flops / m1 * 1e-9,
                   pc[1], m1 / m0, diff);
        }
        float *p[] = {c.x, c.w, c.b, c.dout, c.cols, c.dw_part, c.U, c.ws, c.dU, c.out[0], c.out[1], c.dx[0], c.dx[1],
                      c.dw[0], c.dw[1]};
        for (size_t i = 0; i < sizeof p / sizeof p[0]; i++) free(p[i]);
    }
    for (int i = 0; i < 2; i++) free(t[i]);
    return 0;
}

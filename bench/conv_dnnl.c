/* The Fashion-MNIST CNN's two convolutions (src/models/cnn.c, batch 64) per
 * direction: utrain's im2col + OpenBLAS sgemm path (src/backend/cpu/conv.c)
 * against oneDNN's convolution (src/backend/cpu/dnnl_conv.c) on utrain's
 * plain NCHW layouts ("plain") and on the blocked layouts oneDNN picks, with
 * the reorders from and to NCHW included ("blocked"); the three are timed
 * in turn within each repeat, median over the repeats.
 *
 *   conv_dnnl [--repeats N] [--threads N]
 *
 *   conv1: x (64, 1, 28, 28),  w (32, 1, 3, 3)  -> (64, 32, 26, 26)
 *   conv2: x (64, 32, 26, 26), w (64, 32, 3, 3) -> (64, 64, 24, 24)
 * Directions: forward (with bias); backward data (dx, conv2 only: the CNN's
 * conv1 input needs no gradient); backward weights (dw and db together).
 * utrain adds gradients into their buffers, oneDNN writes them: the oneDNN
 * times include adding its result into the gradient (what routing through it
 * would cost). Each line also gives the largest difference between the
 * results, relative to the largest magnitude, and oneDNN's implementation. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/backend/cpu/conv.h"
#include "bench_util.h"

enum { DIR_FWD, DIR_BWD_DATA, DIR_BWD_WEIGHTS };
static const char *const dir_names[] = {"forward", "backward data", "backward weights"};

typedef struct {
    ut_conv2d_shape d;
    float *x, *w, *b, *dout, *cols, *dw_part;
    float *u_out, *u_dx, *u_dw, *u_db;   /* im2col results */
    float *n_out, *n_dx, *n_dw, *n_db;   /* oneDNN results (after adding) */
    float *tmp, *tmp_db;
    int nthr;
} conv_case;

static size_t nx(const ut_conv2d_shape *d) { return (size_t)(d->B * d->C * d->H * d->W); }
static size_t ny(const ut_conv2d_shape *d) { return (size_t)(d->B * d->OC * d->OH * d->OW); }
static size_t nw(const ut_conv2d_shape *d) { return (size_t)(d->OC * d->C * d->KH * d->KW); }

static void add_into(float *dst, const float *src, size_t n) {
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) dst[i] += src[i];
}

static void run_im2col(conv_case *c, int dir) {
    const ut_conv2d_shape *d = &c->d;
    if (dir == DIR_FWD) ut_conv2d_forward_cpu(c->u_out, c->cols, c->x, c->w, c->b, d, c->nthr);
    else if (dir == DIR_BWD_DATA)
        ut_conv2d_backward_cpu(c->u_dx, NULL, NULL, c->cols, c->dw_part, c->dout, NULL, NULL, c->x, c->w, d, c->nthr);
    else ut_conv2d_backward_cpu(NULL, c->u_dw, c->u_db, c->cols, c->dw_part, c->dout, NULL, NULL, c->x, c->w, d, c->nthr);
}

static void run_dnnl(conv_case *c, int dir, ut_dnnl_layout lay) {
    const ut_conv2d_shape *d = &c->d;
    int rc;
    if (dir == DIR_FWD) rc = ut_dnnl_conv2d_forward(c->n_out, c->x, c->w, c->b, d, lay);
    else if (dir == DIR_BWD_DATA) {
        rc = ut_dnnl_conv2d_backward_data(c->tmp, c->dout, c->w, d, lay);
        add_into(c->n_dx, c->tmp, nx(d));
    } else {
        rc = ut_dnnl_conv2d_backward_weights(c->tmp, c->tmp_db, c->dout, c->x, d, lay);
        add_into(c->n_dw, c->tmp, nw(d));
        add_into(c->n_db, c->tmp_db, (size_t)d->OC);
    }
    if (rc) {
        fprintf(stderr, "conv_dnnl: oneDNN has no %s implementation for this shape\n", dir_names[dir]);
        exit(1);
    }
}

static void case_init(conv_case *c, ut_conv2d_shape d, int nthr) {
    c->d = d, c->nthr = nthr;
    size_t col = (size_t)(d.C * d.KH * d.KW * d.OH * d.OW), big = nx(&d) > nw(&d) ? nx(&d) : nw(&d);
    c->x = bench_buf(nx(&d)), c->w = bench_buf(nw(&d)), c->b = bench_buf((size_t)d.OC);
    c->dout = bench_buf(ny(&d)), c->cols = bench_buf(2 * (size_t)nthr * col);
    c->dw_part = bench_buf(UT_CONV_DW_CHUNKS * nw(&d));
    c->u_out = bench_buf(ny(&d)), c->n_out = bench_buf(ny(&d));
    c->tmp = bench_buf(big), c->tmp_db = bench_buf((size_t)d.OC);
    float **z[] = {&c->u_dx, &c->n_dx, &c->u_dw, &c->n_dw, &c->u_db, &c->n_db};
    size_t zn[] = {nx(&d), nx(&d), nw(&d), nw(&d), (size_t)d.OC, (size_t)d.OC};
    for (int i = 0; i < 6; i++) {
        *z[i] = bench_buf(zn[i]);
        memset(*z[i], 0, zn[i] * sizeof(float));
    }
}

static void case_free(conv_case *c) {
    float *p[] = {c->x, c->w, c->b, c->dout, c->cols, c->dw_part, c->u_out, c->n_out, c->tmp,
                  c->tmp_db, c->u_dx, c->n_dx, c->u_dw, c->n_dw, c->u_db, c->n_db};
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++) free(p[i]);
}

static double diff_of(conv_case *c, int dir) {
    if (dir == DIR_FWD) return bench_rel_diff(c->u_out, c->n_out, ny(&c->d));
    if (dir == DIR_BWD_DATA) return bench_rel_diff(c->u_dx, c->n_dx, nx(&c->d));
    return fmax(bench_rel_diff(c->u_dw, c->n_dw, nw(&c->d)), bench_rel_diff(c->u_db, c->n_db, (size_t)c->d.OC));
}

static void bench_dir(conv_case *c, const char *name, int dir, long repeats, double *t[3]) {
    double diff[2];
    for (int lay = 0; lay < 2; lay++) { /* warm-up; one accumulation each for the check */
        for (int z = 0; z < 3; z++) {   /* fresh gradients: im2col and oneDNN each add once */
            float *g[] = {c->u_dx, c->n_dx, c->u_dw, c->n_dw, c->u_db, c->n_db};
            size_t n[] = {nx(&c->d), nx(&c->d), nw(&c->d), nw(&c->d), (size_t)c->d.OC, (size_t)c->d.OC};
            memset(g[2 * z], 0, n[2 * z] * sizeof(float));
            memset(g[2 * z + 1], 0, n[2 * z + 1] * sizeof(float));
        }
        run_im2col(c, dir), run_dnnl(c, dir, (ut_dnnl_layout)lay);
        diff[lay] = diff_of(c, dir);
    }
    for (long r = 0; r < repeats; r++) {
        double t0 = bench_now();
        run_im2col(c, dir);
        double t1 = bench_now();
        run_dnnl(c, dir, UT_DNNL_PLAIN);
        double t2 = bench_now();
        run_dnnl(c, dir, UT_DNNL_BLOCKED);
        t[0][r] = t1 - t0, t[1][r] = t2 - t1, t[2][r] = bench_now() - t2;
    }
    double m[3];
    for (int i = 0; i < 3; i++) m[i] = bench_median(t[i], (int)repeats);
    double flops = 2.0 * (double)ny(&c->d) * (double)(c->d.C * c->d.KH * c->d.KW);
    char impl[2][96];
    for (int lay = 0; lay < 2; lay++) ut_dnnl_conv2d_impl(dir, &c->d, (ut_dnnl_layout)lay, impl[lay], sizeof impl[lay]);
    printf("  %s %-16s im2col+sgemm %7.2f ms %5.1f GF/s | oneDNN plain %7.2f ms (x%.2f, %s, diff %.0e) | "
           "oneDNN blocked %7.2f ms (x%.2f, %s, diff %.0e)\n",
           name, dir_names[dir], 1e3 * m[0], flops / m[0] * 1e-9, 1e3 * m[1], m[1] / m[0], impl[0], diff[0],
           1e3 * m[2], m[2] / m[0], impl[1], diff[1]);
}

int main(int argc, char **argv) {
    long repeats = 21, threads = 0;
    for (int i = 1; i < argc; i++) {
        int got = bench_repeats_threads("conv_dnnl", argc, argv, &i, &repeats, &threads);
        if (got < 0) return 2;
        if (got > 0) continue;
        fprintf(stderr, "usage: conv_dnnl [--repeats N] [--threads N]\n");
        return 2;
    }
    if (threads > 0) omp_set_num_threads((int)threads);
    int nthr = omp_get_max_threads();
    const ut_conv2d_shape shapes[2] = {
        {.B = 64, .C = 1, .H = 28, .W = 28, .OC = 32, .KH = 3, .KW = 3, .S = 1, .P = 0, .OH = 26, .OW = 26},
        {.B = 64, .C = 32, .H = 26, .W = 26, .OC = 64, .KH = 3, .KW = 3, .S = 1, .P = 0, .OH = 24, .OW = 24},
    };
    double *t[3];
    for (int i = 0; i < 3; i++)
        if (!(t[i] = malloc((size_t)repeats * sizeof *t[i]))) return 1;
    printf("Fashion-MNIST CNN convolutions, batch 64, threads %d, median of %ld (interleaved); x: time / "
           "im2col's; diff: max |difference| / max |value| against im2col\n", nthr, repeats);
    for (int s = 0; s < 2; s++) {
        conv_case c;
        case_init(&c, shapes[s], nthr);
        for (int dir = DIR_FWD; dir <= DIR_BWD_WEIGHTS; dir++)
            if (!(s == 0 && dir == DIR_BWD_DATA)) bench_dir(&c, s ? "conv2" : "conv1", dir, repeats, t);
        case_free(&c);
    }
    for (int i = 0; i < 3; i++) free(t[i]);
    return 0;
}

/* Adafactor's step on the CPU (transformers' Adafactor; the rate, its
 * relative step or the schedule's, comes in k->lr): per parameter, the RMS
 * of the weights scales the rate, a matrix
 * keeps running means of g^2 over its rows and over its columns (a vector
 * over its elements), the update g / sqrt(second moment) is scaled down to
 * an RMS of at most clip, and the parameter moves by it.
 *
 * Every sum is a double over a fixed range (a row of a matrix, a block of
 * UT_ADAFACTOR_BLOCK elements of a vector, a column over the rows; within
 * a range, 8 lanes added in order at its end), the ranges added in order
 * afterwards: threads split the ranges, never a sum, so the bits do not
 * depend on the thread count. The update is computed twice (once for its
 * RMS, once to apply it) rather than stored, a row at a time. */
#include <math.h>
#include <omp.h>
#include <stdint.h>

#include "cpu.h"

#define PAR_MIN_ELEMS 32768

/* One parameter's shape as the step walks it: nb leading entries of nr
 * rows of nc elements (a vector: blocks as rows, nb 1). A matrix's state
 * is, per leading entry, its nr row means then its nc column means. */
typedef struct {
    const ut_param_seg *s;
    bool factored;
    int64_t nb, nr, nc;
} shape;

static shape shape_of(const ut_param_seg *s) {
    shape h = {.s = s, .factored = s->rows > 0 && s->cols > 0};
    if (h.factored) h.nr = s->rows, h.nc = s->cols, h.nb = s->numel / (s->rows * s->cols);
    else h.nb = 1, h.nr = (s->numel + UT_ADAFACTOR_BLOCK - 1) / UT_ADAFACTOR_BLOCK, h.nc = UT_ADAFACTOR_BLOCK;
    return h;
}

/* Row k of h: elements [*b, *e) of the parameter. */
static void row_range(const shape *h, int64_t k, int64_t *b, int64_t *e) {
    *b = k * h->nc;
    *e = *b + h->nc < h->s->numel ? *b + h->nc : h->s->numel;
}

static float rms_of(double sum_sq, int64_t n) { return (float)(sqrt(sum_sq) / sqrt((double)n)); }

/* Sums in double over 8 lanes (element i into lane i % 8, the lanes added
 * in order at the end): a fixed order that vectorizes. */
#define LANES 8
static double lanes_total(const double *acc) {
    double t = 0;
    for (int j = 0; j < LANES; j++) t += acc[j];
    return t;
}

/* sum of x[i]^2 over [0, n) */
static double sum_sq(const float *x, int64_t n) {
    double acc[LANES] = {0};
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int j = 0; j < LANES; j++) acc[j] += (double)x[i + j] * (double)x[i + j];
    for (int j = 0; i < n; i++, j++) acc[j] += (double)x[i] * (double)x[i];
    return lanes_total(acc);
}

/* sum of (g[i] gmul)^2 + eps over [0, n), each term rounded to float */
static double sum_g2(const float *g, int64_t n, float gmul, float eps) {
    double acc[LANES] = {0};
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int j = 0; j < LANES; j++) {
            float gi = g[i + j] * gmul;
            acc[j] += (double)(gi * gi + eps);
        }
    for (int j = 0; i < n; i++, j++) {
        float gi = g[i] * gmul;
        acc[j] += (double)(gi * gi + eps);
    }
    return lanes_total(acc);
}

/* Pass 1: per row, the sum of p^2 (psum) and, for a matrix, of g^2 + eps
 * (rsum); per leading entry and column, the sum of g^2 + eps down the rows
 * (csum). */
static void sums(const shape *h, const float *p, const float *g, float gmul, float eps, bool need_p, double *psum,
                 double *rsum, double *csum) {
    int64_t rows = h->nb * h->nr;
#pragma omp parallel for schedule(static) if (h->s->numel >= PAR_MIN_ELEMS)
    for (int64_t k = 0; k < rows; k++) {
        int64_t b, e;
        row_range(h, k, &b, &e);
        psum[k] = need_p ? sum_sq(p + b, e - b) : 0;
        if (h->factored) rsum[k] = sum_g2(g + b, e - b, gmul, eps);
    }
    if (!h->factored) return;
    /* columns: each thread a stretch of 64 columns, down the rows in order */
    int64_t nblk = (h->nc + 63) / 64;
#pragma omp parallel for schedule(static) if (h->s->numel >= PAR_MIN_ELEMS)
    for (int64_t job = 0; job < h->nb * nblk; job++) {
        int64_t lb = job / nblk, c0 = job % nblk * 64, c1 = c0 + 64 < h->nc ? c0 + 64 : h->nc;
        const float *gb = g + lb * h->nr * h->nc;
        double *cb = csum + lb * h->nc;
        for (int64_t c = c0; c < c1; c++) cb[c] = 0;
        for (int64_t r = 0; r < h->nr; r++) {
            const float *gr = gb + r * h->nc;
            for (int64_t c = c0; c < c1; c++) {
                float gi = gr[c] * gmul;
                cb[c] += (double)(gi * gi + eps);
            }
        }
    }
}

/* The running means of a matrix from the sums, then the factors in place
 * of the sums: rsqrt(r / mean(r)) per row and rsqrt(c) per column, so that
 * the update is (fr[r] * fc[c]) * g. (Transposed, the matrix gets the same
 * update up to rounding: r_i c_j / mean(r) is R_i C_j / S either way.)
 * stats: the state. */
static void factors(const shape *h, const ut_optim_consts *k, float *stats, double *rsum, double *csum) {
    for (int64_t lb = 0; lb < h->nb; lb++) {
        float *r = stats + lb * (h->nr + h->nc), *c = r + h->nr;
        double *s1 = rsum + lb * h->nr, *s2 = csum + lb * h->nc;
        double rtot = 0;
        for (int64_t i = 0; i < h->nr; i++) {
            r[i] = r[i] * k->rho + k->one_m_rho * (float)(s1[i] / (double)h->nc);
            rtot += r[i];
        }
        for (int64_t j = 0; j < h->nc; j++) c[j] = c[j] * k->rho + k->one_m_rho * (float)(s2[j] / (double)h->nr);
        float rmean = (float)(rtot / (double)h->nr);
        for (int64_t i = 0; i < h->nr; i++) s1[i] = (double)(1.0f / sqrtf(r[i] / rmean));
        for (int64_t j = 0; j < h->nc; j++) s2[j] = (double)(1.0f / sqrtf(c[j]));
    }
}

/* A row's updates are made in pieces of at most this many (on the stack). */
#define PIECE UT_ADAFACTOR_BLOCK

/* The updates before clipping of elements [c0, c1) of row `row` into u (a
 * vector's v brought up to date with store): (fr * fc[c]) * g for a
 * matrix, rsqrt(v) * g for a vector. */
static void row_updates(const shape *h, const ut_optim_consts *k, const double *fr, const double *fc, float *v,
                        const float *g, float gmul, int64_t row, int64_t c0, int64_t c1, bool store, float *u) {
    int64_t b = row * h->nc + c0, n = c1 - c0;
    if (h->factored) {
        float f = (float)fr[row];
        const double *fcb = fc + row / h->nr * h->nc + c0;
        for (int64_t c = 0; c < n; c++) u[c] = (f * (float)fcb[c]) * (g[b + c] * gmul);
        return;
    }
    for (int64_t i = 0; i < n; i++) {
        float gi = g[b + i] * gmul, vi = v[b + i];
        if (store) {
            vi = vi * k->rho + k->one_m_rho * (gi * gi + k->eps);
            v[b + i] = vi;
        }
        u[i] = (1.0f / sqrtf(vi)) * gi;
    }
}

static void adafactor_param(const ut_optim_buffers *o, const ut_optim_consts *k, int si, float gmul) {
    const ut_param_seg *s = &o->segs[si];
    shape h = shape_of(s);
    float *p = o->params + (s->offset - o->pbase), *g = o->grads + (s->offset - o->gbase);
    float *st = o->state[0] + o->soff[si];
    float *m = o->nstate > 1 ? o->state[1] + (s->offset - o->lo) : NULL;
    int64_t rows = h.nb * h.nr;
    double *psum = o->scratch, *rsum = psum + rows, *csum = rsum + rows;
    if (!h.factored) rsum = csum = NULL;
    sums(&h, p, g, gmul, k->eps, k->scale_parameter, psum, rsum, csum);
    double pt = 0;
    for (int64_t r = 0; r < rows; r++) pt += psum[r];
    float rms = rms_of(pt, s->numel);
    float a = k->scale_parameter ? (rms > k->eps2 ? rms : k->eps2) * k->lr : k->lr;
    /* the factors take the sums' places */
    double *fr = NULL, *fc = NULL;
    if (h.factored) {
        factors(&h, k, st, rsum, csum);
        fr = rsum, fc = csum;
    }
    /* pass 2: the update's sum of squares, per row (its pieces' in order) */
    double *usum = psum;
#pragma omp parallel for schedule(static) if (s->numel >= PAR_MIN_ELEMS)
    for (int64_t r = 0; r < rows; r++) {
        float u[PIECE];
        int64_t b, e;
        row_range(&h, r, &b, &e);
        double us = 0;
        for (int64_t c0 = 0; c0 < e - b; c0 += PIECE) {
            int64_t c1 = c0 + PIECE < e - b ? c0 + PIECE : e - b;
            row_updates(&h, k, fr, fc, st, g, gmul, r, c0, c1, true, u);
            us += sum_sq(u, c1 - c0);
        }
        usum[r] = us;
    }
    double ut = 0;
    for (int64_t r = 0; r < rows; r++) ut += usum[r];
    float q = rms_of(ut, s->numel) / k->clip;
    float denom = q > 1.0f ? q : 1.0f;
    float wd_a = s->decay ? -k->wd * a : 0.0f;
    /* pass 3: apply */
#pragma omp parallel for schedule(static) if (s->numel >= PAR_MIN_ELEMS)
    for (int64_t r = 0; r < rows; r++) {
        float u[PIECE];
        int64_t b, e;
        row_range(&h, r, &b, &e);
        for (int64_t c0 = 0; c0 < e - b; c0 += PIECE) {
            int64_t c1 = c0 + PIECE < e - b ? c0 + PIECE : e - b;
            row_updates(&h, k, fr, fc, st, g, gmul, r, c0, c1, false, u);
            float *pr = p + b + c0, *mr = m ? m + b + c0 : NULL;
            for (int64_t i = 0; i < c1 - c0; i++) {
                float ui = u[i] / denom * a;
                if (mr) {
                    mr[i] = mr[i] * k->beta1 + k->one_m_b1 * ui;
                    ui = mr[i];
                }
                float pi = pr[i];
                if (wd_a != 0.0f) pi = pi + wd_a * pi;
                pr[i] = pi - ui;
            }
        }
    }
}

void ut_cpu_adafactor_step(const ut_optim_buffers *o, const ut_optim_consts *k, bool zero) {
    float gmul = o->scalars ? o->scalars[0] : 1.0f;
    bool skip = o->scalars && o->scalars[1] != 0.0f;
    for (int si = 0; si < o->nsegs && !skip; si++) adafactor_param(o, k, si, gmul);
    for (int si = 0; si < o->nsegs; si++) {
        const ut_param_seg *s = &o->segs[si];
        if (o->p16)
            ut_cpu_convert_run((uint16_t *)o->p16 + (s->offset - o->pbase), o->p16_dtype,
                               o->params + (s->offset - o->pbase), UT_F32, s->numel);
    }
    if (zero) ut_cpu_memset(o->grads + (o->lo - o->gbase), 0, (size_t)(o->hi - o->lo) * sizeof(float));
}

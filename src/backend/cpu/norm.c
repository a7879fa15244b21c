/* Layer normalisation over the last dimension, as torch.nn.functional.layer_norm
 * with biased variance. Saves mean and rstd per row (ut_layernorm_mean, ut_layernorm_rstd).
 * RMS normalisation over the last dimension, as T5's T5LayerNorm: no mean, no
 * bias. Saves rstd per row (ut_rms_norm_rstd). */
#include <math.h>

#include "cpu.h"
#include "../../ops/params.h"

/* Columns per block in the dw/db reduction (layernorm's and rms_norm's): each
 * block sums over all rows in row order, so the result does not depend on the
 * thread count. */
#define LN_COL_BLOCK 32

/* out (N, C) = (inp - mean) * rstd * w + b, row by row; mean, rstd (N) saved */
void ut_layernorm_forward_cpu(float *out, float *mean, float *rstd, const float *inp,
                              const float *w, const float *b, int64_t N, int64_t C, float eps) {
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; n++) {
        const float *x = inp + n * C;
        float *o = out + n * C;
        float s = 0.0f;
#pragma omp simd reduction(+ : s)
        for (int64_t c = 0; c < C; c++) s += x[c];
        float m = s / (float)C;
        float v = 0.0f; /* two passes: no cancellation for rows with a large mean */
#pragma omp simd reduction(+ : v)
        for (int64_t c = 0; c < C; c++) v += (x[c] - m) * (x[c] - m);
        float r = 1.0f / sqrtf(v / (float)C + eps);
#pragma omp simd
        for (int64_t c = 0; c < C; c++) o[c] = (x[c] - m) * r * w[c] + b[c];
        mean[n] = m;
        rstd[n] = r;
    }
}

/* dx (N, C) += rstd * (dn - mean(dn) - xhat * mean(dn * xhat)) with dn = dout * w,
 * xhat = (inp - mean) * rstd (dx_acc false: dx holds nothing yet, and 0 +
 * that is written); dw (C) += sum_n dout * xhat; db (C) += sum_n dout.
 * Any of dx, dw, db may be NULL. */
static void layernorm_backward(float *dx, bool dx_acc, float *dw, float *db, const float *dout,
                               const float *inp, const float *w, const float *mean, const float *rstd, int64_t N,
                               int64_t C) {
    if (dx) {
#pragma omp parallel for schedule(static)
        for (int64_t n = 0; n < N; n++) {
            const float *x = inp + n * C, *g = dout + n * C;
            float m = mean[n], r = rstd[n], sdn = 0.0f, sdnx = 0.0f;
#pragma omp simd reduction(+ : sdn, sdnx)
            for (int64_t c = 0; c < C; c++) {
                float dn = g[c] * w[c];
                sdn += dn;
                sdnx += dn * (x[c] - m) * r;
            }
            sdn /= (float)C;
            sdnx /= (float)C;
            float *d = dx + n * C;
#pragma omp simd
            for (int64_t c = 0; c < C; c++)
                d[c] = (dx_acc ? d[c] : 0.0f) + r * (g[c] * w[c] - sdn - (x[c] - m) * r * sdnx);
        }
    }
    if (dw || db) {
#pragma omp parallel for schedule(static)
        for (int64_t c0 = 0; c0 < C; c0 += LN_COL_BLOCK) {
            int64_t nc = C - c0 < LN_COL_BLOCK ? C - c0 : LN_COL_BLOCK;
            float aw[LN_COL_BLOCK] = {0}, ab[LN_COL_BLOCK] = {0};
            for (int64_t n = 0; n < N; n++) {
                const float *x = inp + n * C + c0, *g = dout + n * C + c0;
                float m = mean[n], r = rstd[n];
#pragma omp simd
                for (int64_t c = 0; c < nc; c++) {
                    aw[c] += g[c] * (x[c] - m) * r;
                    ab[c] += g[c];
                }
            }
            for (int64_t c = 0; c < nc; c++) {
                if (dw) dw[c0 + c] += aw[c];
                if (db) db[c0 + c] += ab[c];
            }
        }
    }
}

void ut_layernorm_fwd_cpu(ut_tensor *t, UT_KCTX) {
    ut_tensor *x = t->src[0], *w = t->src[1], *b = t->src[2];
    int64_t C = w->ne[0], N = ut_nelem(x) / C;
    ut_layernorm_set_mean(t, ut_kalloc(k, (size_t)N * sizeof(float)));
    ut_layernorm_set_rstd(t, ut_kalloc(k, (size_t)N * sizeof(float)));
    ut_layernorm_forward_cpu(ut_f32(t), ut_layernorm_mean(t), ut_layernorm_rstd(t), ut_f32(x),
                             ut_f32(w), ut_f32(b), N, C, ut_layernorm_eps(t));
}

void ut_layernorm_bwd_cpu(ut_tensor *t, UT_KCTX) {
    ut_tensor *x = t->src[0], *w = t->src[1], *b = t->src[2];
    int64_t C = w->ne[0], N = ut_nelem(x) / C;
    ut_kzero_fresh(k, t, 6u, ut_cpu_memset); /* dw, db are added into; dx is written when fresh */
    layernorm_backward(x->requires_grad ? x->grad : NULL, !ut_kfresh(k, 0), w->requires_grad ? w->grad : NULL,
                       b->requires_grad ? b->grad : NULL, t->grad, ut_f32(x), ut_f32(w), ut_layernorm_mean(t),
                       ut_layernorm_rstd(t), N, C);
}

/* ---- rms_norm ---- */

/* out (N, C) = inp * rstd * w, rstd = 1 / sqrt(mean(inp^2) + eps), row by row;
 * rstd (N) saved */
void ut_rms_norm_forward_cpu(float *out, float *rstd, const float *inp, const float *w, int64_t N,
                             int64_t C, float eps) {
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; n++) {
        const float *x = inp + n * C;
        float *o = out + n * C;
        float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
        for (int64_t c = 0; c < C; c++) ss += x[c] * x[c];
        float r = 1.0f / sqrtf(ss / (float)C + eps);
#pragma omp simd
        for (int64_t c = 0; c < C; c++) o[c] = x[c] * r * w[c];
        rstd[n] = r;
    }
}

/* dx (N, C) += rstd * (dn - xhat * mean(dn * xhat)) with dn = dout * w,
 * xhat = inp * rstd; dw (C) += sum_n dout * xhat. Either of dx, dw may be NULL. */
void ut_rms_norm_backward_cpu(float *dx, float *dw, const float *dout, const float *inp,
                              const float *w, const float *rstd, int64_t N, int64_t C) {
    if (dx) {
#pragma omp parallel for schedule(static)
        for (int64_t n = 0; n < N; n++) {
            const float *x = inp + n * C, *g = dout + n * C;
            float r = rstd[n], sdnx = 0.0f;
#pragma omp simd reduction(+ : sdnx)
            for (int64_t c = 0; c < C; c++) sdnx += g[c] * w[c] * x[c] * r;
            sdnx /= (float)C;
            float *d = dx + n * C;
#pragma omp simd
            for (int64_t c = 0; c < C; c++) d[c] += r * (g[c] * w[c] - x[c] * r * sdnx);
        }
    }
    if (dw) {
#pragma omp parallel for schedule(static)
        for (int64_t c0 = 0; c0 < C; c0 += LN_COL_BLOCK) {
            int64_t nc = C - c0 < LN_COL_BLOCK ? C - c0 : LN_COL_BLOCK;
            float aw[LN_COL_BLOCK] = {0};
            for (int64_t n = 0; n < N; n++) {
                const float *x = inp + n * C + c0, *g = dout + n * C + c0;
                float r = rstd[n];
#pragma omp simd
                for (int64_t c = 0; c < nc; c++) aw[c] += g[c] * x[c] * r;
            }
            for (int64_t c = 0; c < nc; c++) dw[c0 + c] += aw[c];
        }
    }
}

void ut_rms_norm_fwd_cpu(ut_tensor *t, UT_KCTX) {
    ut_tensor *x = t->src[0], *w = t->src[1];
    int64_t C = w->ne[0], N = ut_nelem(x) / C;
    ut_rms_norm_set_rstd(t, ut_kalloc(k, (size_t)N * sizeof(float)));
    ut_rms_norm_forward_cpu(ut_f32(t), ut_rms_norm_rstd(t), ut_f32(x), ut_f32(w), N, C, ut_rms_norm_eps(t));
}

void ut_rms_norm_bwd_cpu(ut_tensor *t, UT_KCTX) {
    ut_tensor *x = t->src[0], *w = t->src[1];
    int64_t C = w->ne[0], N = ut_nelem(x) / C;
    ut_rms_norm_backward_cpu(x->requires_grad ? x->grad : NULL, w->requires_grad ? w->grad : NULL, t->grad,
                             ut_f32(x), ut_f32(w), ut_rms_norm_rstd(t), N, C);
}

/* Multi-head attention over packed sequences (see src/ops/attention_varlen.c):
 * q, k, v, out (N, C), sequence s the rows [off[s], off[s + 1]), L = its
 * length, hs = C / NH. Per (sequence, head) the products are sgemm calls on
 * the head's columns (leading dimension C), the softmax rows are vector loops,
 * and P (L x L per pair, sequence-major, then head; causal: zero above the
 * diagonal) is saved for backward.
 * Pairs run in parallel, each single-threaded and writing only its own rows
 * and head columns, so the result does not depend on the number of threads
 * or on the other sequences of the batch. With dropout, Pd = P * keep / (1 - p)
 * multiplies v; the keep masks are drawn in one pass before the pairs run. */
#include <math.h>
#include <omp.h>

#include "attn_rows.h"
#include "cpu.h"
#include "gemm.h"
#include "vmath.h"
#include "../../ops/params.h"

/* p (n) = softmax(scale * p) in place */
static void softmax_row(float *p, int64_t n, float scale) {
    float m = -INFINITY, sum = 0.0f;
#pragma omp simd reduction(max : m)
    for (int64_t j = 0; j < n; j++) m = p[j] > m ? p[j] : m;
    m *= scale;
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < n; j++) {
        p[j] = ut_expf_fast(p[j] * scale - m);
        sum += p[j];
    }
    float inv = 1.0f / sum;
#pragma omp simd
    for (int64_t j = 0; j < n; j++) p[j] *= inv;
}

/* one (sequence, head) pair's forward: P (L x L) and out's head columns */
static void pair_forward(float *out, float *P, float *pd, const float *q, const float *k, const float *v,
                         const uint8_t *keep, const ut_varlen_dims *d, int64_t L) {
    int64_t C = d->C;
    ut_gemm_ld(false, true, L, L, d->hs, 1.0f, q, C, k, C, 0.0f, P, L);
    for (int64_t i = 0; i < L; i++) {
        int64_t n = d->causal ? i + 1 : L;
        softmax_row(P + i * L, n, d->scale);
        for (int64_t j = n; j < L; j++) P[i * L + j] = 0.0f;
    }
    const float *A = P;
    if (keep) {
        for (int64_t i = 0; i < L; i++) ut_attn_drop_row(pd + i * L, P + i * L, keep + i * L, d->ks, L);
        A = pd;
    }
    ut_gemm_ld(false, false, L, d->hs, L, 1.0f, A, L, v, C, 0.0f, out, C);
}

/* out (N, C), P, keep (NULL: no dropout); scratch: L_max^2 floats per thread */
static void varlen_forward(float *out, float *P, float *scratch, const float *q, const float *k, const float *v,
                           const uint8_t *keep, const ut_varlen_dims *d) {
    int64_t pairs = d->S * d->NH;
#pragma omp parallel
    {
        float *pd = scratch + (int64_t)omp_get_thread_num() * d->maxL * d->maxL;
#pragma omp for schedule(dynamic, 1)
        for (int64_t ph = 0; ph < pairs; ph++) {
            int64_t s = ph / d->NH, h = ph % d->NH, L = d->off[s + 1] - d->off[s];
            int64_t rows = (int64_t)d->off[s] * d->C + h * d->hs, pb = d->poff[s] + h * L * L;
            pair_forward(out + rows, P + pb, pd, q + rows, k + rows, v + rows, keep ? keep + pb : NULL, d, L);
        }
    }
}

/* one pair's backward, with g = dout's rows and gP, w two L x L scratch blocks:
 * dPd = g v^T; dv += Pd^T g; dP = dPd * keep * ks; dS = P (dP - rowsum(P dP));
 * dq += scale dS k; dk += scale dS^T q */
static void pair_backward(float *dq, float *dk, float *dv, float *gP, float *w, const float *g, const float *q,
                          const float *k, const float *v, const float *P, const uint8_t *keep,
                          const ut_varlen_dims *d, int64_t L) {
    int64_t C = d->C, hs = d->hs;
    ut_gemm_ld(false, true, L, L, hs, 1.0f, g, C, v, C, 0.0f, gP, L);
    const float *Pd = P;
    if (keep) {
        for (int64_t i = 0; i < L; i++) ut_attn_drop_row(w + i * L, P + i * L, keep + i * L, d->ks, L);
        Pd = w;
    }
    if (dv) ut_gemm_ld(true, false, L, hs, L, 1.0f, Pd, L, g, C, 1.0f, dv, C);
    for (int64_t i = 0; i < L; i++) {
        float *r = gP + i * L;
        const float *p = P + i * L;
        if (keep) ut_attn_drop_row(r, r, keep + i * L, d->ks, L);
        ut_attn_softmax_grad_row(r, p, L);
    }
    if (dq) ut_gemm_ld(false, false, L, hs, L, d->scale, gP, L, k, C, 1.0f, dq, C);
    if (dk) ut_gemm_ld(true, false, L, hs, L, d->scale, gP, L, q, C, 1.0f, dk, C);
}

/* dq, dk, dv (N, C) += the gradients (each may be NULL); scratch: 2 L_max^2
 * floats per thread */
static void varlen_backward(float *dq, float *dk, float *dv, float *scratch, const float *dout, const float *q,
                            const float *k, const float *v, const float *P, const uint8_t *keep,
                            const ut_varlen_dims *d) {
    int64_t pairs = d->S * d->NH;
#pragma omp parallel
    {
        float *gP = scratch + 2 * (int64_t)omp_get_thread_num() * d->maxL * d->maxL, *w = gP + d->maxL * d->maxL;
#pragma omp for schedule(dynamic, 1)
        for (int64_t ph = 0; ph < pairs; ph++) {
            int64_t s = ph / d->NH, h = ph % d->NH, L = d->off[s + 1] - d->off[s];
            int64_t rows = (int64_t)d->off[s] * d->C + h * d->hs, pb = d->poff[s] + h * L * L;
            pair_backward(dq ? dq + rows : NULL, dk ? dk + rows : NULL, dv ? dv + rows : NULL, gP, w,
                          dout + rows, q + rows, k + rows, v + rows, P + pb, keep ? keep + pb : NULL, d, L);
        }
    }
}

/* The dimensions and P's block starts; -1 with the context's error set when
 * the offsets are not 0 = off[0] < off[1] < ... < off[S] = N */
static int varlen_dims_of(ut_tensor *t, ut_varlen_dims *d, const ut_kctx *k) {
    ut_tensor *offs = t->src[3];
    int64_t S = offs->ne[0] - 1;
    int64_t *poff = ut_kalloc(k, (size_t)(S + 1) * sizeof *poff);
    if (ut_attention_varlen_dims(t, ut_i32(offs), S, poff, d)) return -1;
    d->poff_dev = poff;
    return 0;
}

void ut_attention_varlen_fwd_cpu(ut_tensor *t, UT_KCTX) {
    ut_varlen_dims d;
    ut_attention_varlen_set_probs(t, NULL);
    ut_attention_varlen_set_keep(t, NULL);
    if (varlen_dims_of(t, &d, k)) return;
    int64_t np = d.poff[d.S];
    float p = ut_attention_varlen_p(t);
    ut_attention_varlen_set_probs(t, ut_kalloc(k, (size_t)np * sizeof(float)));
    if (p > 0.0f) { /* serial draws from the context's stream, as dropout's */
        uint8_t *keep = ut_kalloc(k, (size_t)np);
        ut_attention_varlen_keep_mask(t, &k->rng, keep, p, &d);
        ut_attention_varlen_set_keep(t, keep);
    }
    float *scratch = ut_kalloc(k, (size_t)ut_kthreads(k) * (size_t)(d.maxL * d.maxL) * sizeof(float));
    varlen_forward(ut_f32(t), ut_attention_varlen_probs(t), scratch, ut_f32(t->src[0]), ut_f32(t->src[1]),
                   ut_f32(t->src[2]), ut_attention_varlen_keep(t), &d);
}

void ut_attention_varlen_bwd_cpu(ut_tensor *t, UT_KCTX) {
    ut_tensor *q = t->src[0], *key = t->src[1], *v = t->src[2];
    ut_varlen_dims d;
    if (varlen_dims_of(t, &d, k)) return;
    float *scratch =
        ut_kalloc(k, 2 * (size_t)ut_kthreads(k) * (size_t)(d.maxL * d.maxL) * sizeof(float));
    varlen_backward(q->requires_grad ? q->grad : NULL, key->requires_grad ? key->grad : NULL,
                    v->requires_grad ? v->grad : NULL, scratch, t->grad, ut_f32(q), ut_f32(key), ut_f32(v),
                    ut_attention_varlen_probs(t), ut_attention_varlen_keep(t), &d);
}

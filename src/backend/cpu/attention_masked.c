/* Multi-head attention with separate q (B, Tq, C), k, v (B, Tk, C), an
 * additive key mask (B, Tk) or none, and optionally causal; see
 * src/ops/attention_masked.c. P (B, NH, Tq, Tk) and, with dropout, the keep
 * mask are saved for backward.
 * fp32. Per (b, h) pair the products are sgemm calls on the head's columns
 * (leading dimension C) and the softmax rows vector loops; a pair writes only
 * its own head's slices, so pairs run in parallel, each single-threaded, and
 * the result does not depend on the number of threads. With dropout,
 * out = Pd v where Pd = P * keep / (1 - p); the keep mask is drawn in one
 * pass before the pairs run. */
#include <math.h>
#include <omp.h>

#include "attn_rows.h"
#include "cpu.h"
#include "gemm.h"
#include "vmath.h"
#include "../../ops/params.h"

/* p (n) = softmax(p) in place; a row with every key at -inf (a row of
 * padding only, its mask rounded to -inf under autocast) attends nowhere:
 * all 0 rather than NaN */
static void softmax_row(float *p, int64_t n) {
    float m = -INFINITY, sum = 0.0f;
#pragma omp simd reduction(max : m)
    for (int64_t j = 0; j < n; j++) m = p[j] > m ? p[j] : m;
    if (m == -INFINITY) m = 0.0f; /* every exp below is then 0 */
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < n; j++) {
        p[j] = ut_expf_fast(p[j] - m);
        sum += p[j];
    }
    float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
#pragma omp simd
    for (int64_t j = 0; j < n; j++) p[j] *= inv;
}

/* P (Tq x Tk) of one pair from the scores: scale q k^T + mask, causal keys
 * j > t at probability 0 */
static void pair_probs(float *P, const float *q, const float *k, const float *mask, const ut_masked_dims *d) {
    int64_t Tq = d->Tq, Tk = d->Tk;
    ut_gemm_ld(false, true, Tq, Tk, d->hs, d->scale, q, d->C, k, d->C, 0.0f, P, Tk);
    for (int64_t t = 0; t < Tq; t++) {
        float *p = P + t * Tk;
        int64_t n = d->causal ? t + 1 : Tk;
        if (mask)
#pragma omp simd
            for (int64_t j = 0; j < n; j++) p[j] += mask[j];
        softmax_row(p, n);
        for (int64_t j = n; j < Tk; j++) p[j] = 0.0f;
    }
}

/* out (B, Tq, C), att (B, NH, Tq, Tk) from q (B, Tq, C), k, v (B, Tk, C) and
 * mask (B, Tk) or NULL; keep (B, NH, Tq, Tk) or NULL (no dropout);
 * scratch: Tq * Tk floats per thread */
static void masked_forward(float *out, float *att, float *scratch, const float *q, const float *k, const float *v,
                           const float *mask, const uint8_t *keep, const ut_masked_dims *d) {
    int64_t C = d->C, Tq = d->Tq, Tk = d->Tk;
#pragma omp parallel
    {
        float *pd = scratch + (int64_t)omp_get_thread_num() * Tq * Tk;
#pragma omp for collapse(2) schedule(static)
        for (int64_t b = 0; b < d->B; b++)
            for (int64_t h = 0; h < d->NH; h++) {
                int64_t qb = b * Tq * C + h * d->hs, kb = b * Tk * C + h * d->hs, pb = (b * d->NH + h) * Tq * Tk;
                float *P = att + pb;
                pair_probs(P, q + qb, k + kb, mask ? mask + b * Tk : NULL, d);
                const float *A = P;
                if (keep) {
                    ut_attn_drop_row(pd, P, keep + pb, d->ks, Tq * Tk);
                    A = pd;
                }
                ut_gemm_ld(false, false, Tq, d->hs, Tk, 1.0f, A, Tk, v + kb, C, 0.0f, out + qb, C);
            }
    }
}

/* one pair's backward, g = dout's head block, gP and w two Tq x Tk scratch
 * blocks: dPd = g v^T; dv += Pd^T g; dP = dPd * keep * ks;
 * dS = P (dP - rowsum(P dP)); dq += scale dS k; dk += scale dS^T q */
static void pair_backward(float *dq, float *dk, float *dv, float *gP, float *w, const float *g, const float *q,
                          const float *k, const float *v, const float *P, const uint8_t *keep,
                          const ut_masked_dims *d) {
    int64_t C = d->C, hs = d->hs, Tq = d->Tq, Tk = d->Tk;
    ut_gemm_ld(false, true, Tq, Tk, hs, 1.0f, g, C, v, C, 0.0f, gP, Tk);
    const float *Pd = P;
    if (keep) {
        ut_attn_drop_row(w, P, keep, d->ks, Tq * Tk);
        ut_attn_drop_row(gP, gP, keep, d->ks, Tq * Tk);
        Pd = w;
    }
    if (dv) ut_gemm_ld(true, false, Tk, hs, Tq, 1.0f, Pd, Tk, g, C, 1.0f, dv, C);
    for (int64_t t = 0; t < Tq; t++) {
        float *r = gP + t * Tk;
        const float *p = P + t * Tk;
        ut_attn_softmax_grad_row(r, p, Tk);
    }
    if (dq) ut_gemm_ld(false, false, Tq, hs, Tk, d->scale, gP, Tk, k, C, 1.0f, dq, C);
    if (dk) ut_gemm_ld(true, false, Tk, hs, Tq, d->scale, gP, Tk, q, C, 1.0f, dk, C);
}

/* dq (B, Tq, C), dk, dv (B, Tk, C) += the gradients (each may be NULL);
 * scratch: 2 Tq Tk floats per thread */
static void masked_backward(float *dq, float *dk, float *dv, float *scratch, const float *dout, const float *q,
                            const float *k, const float *v, const float *att, const uint8_t *keep,
                            const ut_masked_dims *d) {
    int64_t C = d->C, Tq = d->Tq, Tk = d->Tk;
#pragma omp parallel
    {
        float *gP = scratch + 2 * (int64_t)omp_get_thread_num() * Tq * Tk, *w = gP + Tq * Tk;
#pragma omp for collapse(2) schedule(static)
        for (int64_t b = 0; b < d->B; b++)
            for (int64_t h = 0; h < d->NH; h++) {
                int64_t qb = b * Tq * C + h * d->hs, kb = b * Tk * C + h * d->hs, pb = (b * d->NH + h) * Tq * Tk;
                pair_backward(dq ? dq + qb : NULL, dk ? dk + kb : NULL, dv ? dv + kb : NULL, gP, w, dout + qb,
                              q + qb, k + kb, v + kb, att + pb, keep ? keep + pb : NULL, d);
            }
    }
}

void ut_attention_masked_fwd_cpu(ut_tensor *t, UT_KCTX) {
    ut_masked_dims d = ut_attention_masked_dims(t);
    const float *mask = t->src[3] ? ut_f32(t->src[3]) : NULL;
    int64_t N = d.B * d.NH * d.Tq * d.Tk;
    float p = ut_attention_masked_p(t);
    ut_attention_masked_set_probs(t, ut_kalloc(k, (size_t)N * sizeof(float)));
    ut_attention_masked_set_keep(t, NULL);
    if (p > 0.0f) { /* serial draws from the context's stream, as dropout's */
        uint8_t *keep = ut_kalloc(k, (size_t)N);
        ut_attention_masked_keep_mask(t, &k->rng, keep, p, &d);
        ut_attention_masked_set_keep(t, keep);
    }
    float *scratch = ut_kalloc(k, (size_t)ut_kthreads(k) * (size_t)(d.Tq * d.Tk) * sizeof(float));
    masked_forward(ut_f32(t), ut_attention_masked_probs(t), scratch, ut_f32(t->src[0]), ut_f32(t->src[1]),
                   ut_f32(t->src[2]), mask, ut_attention_masked_keep(t), &d);
}

void ut_attention_masked_bwd_cpu(ut_tensor *t, UT_KCTX) {
    ut_tensor *q = t->src[0], *key = t->src[1], *v = t->src[2];
    ut_masked_dims d = ut_attention_masked_dims(t);
    float *scratch =
        ut_kalloc(k, 2 * (size_t)ut_kthreads(k) * (size_t)(d.Tq * d.Tk) * sizeof(float));
    masked_backward(q->requires_grad ? q->grad : NULL, key->requires_grad ? key->grad : NULL,
                    v->requires_grad ? v->grad : NULL, scratch, t->grad, ut_f32(q), ut_f32(key), ut_f32(v),
                    ut_attention_masked_probs(t), ut_attention_masked_keep(t), &d);
}

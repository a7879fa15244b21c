/* Multi-head attention with separate q (B, Tq, C), k, v (B, Tk, C), an
 * additive key mask (B, Tk) or none, and optionally causal; see
 * src/ops/attention_masked.c. P (B, NH, Tq, Tk) and, with dropout, the keep
 * mask are saved for backward.
 * fp32; one (b, h) pair writes only its own head's slices, so pairs run in
 * parallel and each sums in order. With dropout, out = sum_j P_j d_j v_j
 * where d_j = keep_j / (1 - p). */
#include <math.h>
#include <omp.h>

#include "cpu.h"
#include "../../ops/params.h"

static inline float dot(const float *a, const float *b, int64_t n) {
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int64_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

/* p (T) = softmax(s), in place; a row with every key at -inf (a row of
 * padding only, its mask rounded to -inf under autocast) attends nowhere:
 * all 0 rather than NaN */
static void softmax_row(float *p, int64_t T) {
    float m = -INFINITY, sum = 0.0f;
    for (int64_t j = 0; j < T; j++) m = p[j] > m ? p[j] : m;
    if (m == -INFINITY) {
        for (int64_t j = 0; j < T; j++) p[j] = 0.0f;
        return;
    }
    for (int64_t j = 0; j < T; j++) {
        p[j] = expf(p[j] - m);
        sum += p[j];
    }
    float inv = 1.0f / sum;
    for (int64_t j = 0; j < T; j++) p[j] *= inv;
}

/* out (B, Tq, C), att (B, NH, Tq, Tk) from q (B, Tq, C), k, v (B, Tk, C) and
 * mask (B, Tk) or NULL; causal: keys j > t get probability 0; keep
 * (B, NH, Tq, Tk) or NULL (no dropout), kept values scaled by ks */
void ut_attention_masked_forward_cpu(float *out, float *att, const float *q, const float *k,
                                     const float *v, const float *mask, const uint8_t *keep, float ks,
                                     int64_t B, int64_t Tq, int64_t Tk, int64_t C, int64_t NH, bool causal) {
    int64_t hs = C / NH;
    float scale = 1.0f / sqrtf((float)hs);
#pragma omp parallel for collapse(3) schedule(static)
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < NH; h++)
            for (int64_t t = 0; t < Tq; t++) {
                int64_t qb = b * Tq * C + h * hs, kb = b * Tk * C + h * hs, n = causal ? t + 1 : Tk;
                const float *qt = q + qb + t * C;
                float *p = att + ((b * NH + h) * Tq + t) * Tk;
                for (int64_t j = 0; j < n; j++)
                    p[j] = dot(qt, k + kb + j * C, hs) * scale + (mask ? mask[b * Tk + j] : 0.0f);
                softmax_row(p, n);
                for (int64_t j = n; j < Tk; j++) p[j] = 0.0f;
                const uint8_t *kp = keep ? keep + ((b * NH + h) * Tq + t) * Tk : NULL;
                float *o = out + qb + t * C;
                for (int64_t i = 0; i < hs; i++) o[i] = 0.0f;
                for (int64_t j = 0; j < n; j++) {
                    const float *vj = v + kb + j * C;
                    float pj = kp ? (kp[j] ? p[j] * ks : 0.0f) : p[j];
#pragma omp simd
                    for (int64_t i = 0; i < hs; i++) o[i] += pj * vj[i];
                }
            }
}

/* Per query row t, with d_j = keep_j ks (1 without dropout):
 * dP_j = d_j (dout_t . v_j), dS_j = P_j (dP_j - sum_i P_i dP_i),
 * dq_t += scale sum_j dS_j k_j, dk_j += scale dS_j q_t, dv_j += P_j d_j dout_t.
 * dq (B, Tq, C), dk, dv (B, Tk, C) may be NULL (no gradient wanted). Each
 * (b, h) pair writes only its own head's slices. scratch: Tk floats per thread. */
void ut_attention_masked_backward_cpu(float *dq, float *dk, float *dv, float *scratch,
                                      const float *dout, const float *q, const float *k,
                                      const float *v, const float *att, const uint8_t *keep, float ks,
                                      int64_t B, int64_t Tq, int64_t Tk, int64_t C, int64_t NH, bool causal) {
    int64_t hs = C / NH;
    float scale = 1.0f / sqrtf((float)hs);
#pragma omp parallel
    {
        float *dp = scratch + (int64_t)omp_get_thread_num() * Tk;
#pragma omp for collapse(2) schedule(static)
        for (int64_t b = 0; b < B; b++)
            for (int64_t h = 0; h < NH; h++)
                for (int64_t t = 0; t < Tq; t++) {
                    int64_t qb = b * Tq * C + h * hs, kb = b * Tk * C + h * hs, n = causal ? t + 1 : Tk;
                    const float *p = att + ((b * NH + h) * Tq + t) * Tk;
                    const uint8_t *kp = keep ? keep + ((b * NH + h) * Tq + t) * Tk : NULL;
                    const float *g = dout + qb + t * C, *qt = q + qb + t * C;
                    float s = 0.0f;
                    for (int64_t j = 0; j < n; j++) {
                        float d = kp ? (kp[j] ? ks : 0.0f) : 1.0f;
                        dp[j] = d * dot(g, v + kb + j * C, hs);
                        s += p[j] * dp[j];
                    }
                    for (int64_t j = 0; j < n; j++) {
                        float ds = p[j] * (dp[j] - s) * scale;
                        float pj = kp ? (kp[j] ? p[j] * ks : 0.0f) : p[j];
                        int64_t o = kb + j * C;
                        if (dq)
                            for (int64_t i = 0; i < hs; i++) dq[qb + t * C + i] += ds * k[o + i];
                        if (dk)
                            for (int64_t i = 0; i < hs; i++) dk[o + i] += ds * qt[i];
                        if (dv)
                            for (int64_t i = 0; i < hs; i++) dv[o + i] += pj * g[i];
                    }
                }
    }
}

void ut_attention_masked_fwd_cpu(ut_tensor *t) {
    ut_tensor *k = t->src[1];
    int64_t B = t->ne[0], Tq = t->ne[1], Tk = k->ne[1], C = t->ne[2], NH = ut_attention_masked_n_head(t);
    const float *mask = t->src[3] ? ut_f32(t->src[3]) : NULL;
    int64_t N = B * NH * Tq * Tk;
    float p = ut_attention_masked_p(t);
    ut_attention_masked_set_probs(t, ut_ctx_alloc(t->ctx, (size_t)N * sizeof(float)));
    ut_attention_masked_set_keep(t, NULL);
    if (p > 0.0f) { /* serial draws from the context's stream, as dropout's */
        uint8_t *keep = ut_ctx_alloc(t->ctx, (size_t)N);
        for (int64_t i = 0; i < N; i++) keep[i] = ut_rng_uniform(&t->ctx->rng) >= p;
        ut_attention_masked_set_keep(t, keep);
    }
    ut_attention_masked_forward_cpu(ut_f32(t), ut_attention_masked_probs(t), ut_f32(t->src[0]), ut_f32(k),
                                    ut_f32(t->src[2]), mask, ut_attention_masked_keep(t),
                                    ut_attention_masked_keep_scale(t), B, Tq, Tk, C, NH,
                                    ut_attention_masked_causal(t) != 0);
}

void ut_attention_masked_bwd_cpu(ut_tensor *t) {
    ut_tensor *q = t->src[0], *k = t->src[1], *v = t->src[2];
    int64_t B = t->ne[0], Tq = t->ne[1], Tk = k->ne[1], C = t->ne[2], NH = ut_attention_masked_n_head(t);
    float *scratch = ut_ctx_alloc(t->ctx, (size_t)omp_get_max_threads() * (size_t)Tk * sizeof(float));
    ut_attention_masked_backward_cpu(q->requires_grad ? q->grad : NULL, k->requires_grad ? k->grad : NULL,
                                     v->requires_grad ? v->grad : NULL, scratch, t->grad, ut_f32(q),
                                     ut_f32(k), ut_f32(v), ut_attention_masked_probs(t), ut_attention_masked_keep(t),
                                     ut_attention_masked_keep_scale(t), B, Tq, Tk, C, NH,
                                     ut_attention_masked_causal(t) != 0);
}

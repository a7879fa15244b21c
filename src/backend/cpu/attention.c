/* Fused causal multi-head self-attention, as nanoGPT's CausalSelfAttention
 * before its output projection:
 *   q, k, v = qkv.split(C, dim=2), each viewed (B, NH, T, hs), hs = C / NH
 *   out = softmax(mask(q k^T / sqrt(hs))) v, heads concatenated -> (B, T, C).
 * Saves the probabilities P (B, NH, T, T) (ut_attention_probs) (zero above the diagonal).
 * Parameter: ut_attention_n_head (src/ops/params.h). */
#include <math.h>
#include <omp.h>

#include "vmath.h"
#include "cpu.h"
#include "../../ops/params.h"

static inline float dot(const float *a, const float *b, int64_t n) {
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int64_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

/* The saved probabilities (B, NH, T, T): float32 in att itself, or (under
 * autocast) 16-bit storage of dt, whose rows a thread computes and reads in
 * a float32 row of its own (rows: T floats per thread), so that no float32
 * copy of the whole tensor exists. */
typedef struct {
    void *att;
    ut_dtype dt;
    float *rows;
    int64_t T;
} probs_rows;

/* Row r's float32 values: att's own row, or this thread's. */
static float *prow(const probs_rows *P, int64_t r) {
    if (P->dt == UT_F32) return (float *)P->att + r * P->T;
    return P->rows + (int64_t)omp_get_thread_num() * P->T;
}

static void *row16(const probs_rows *P, int64_t r) { return (char *)P->att + (size_t)(r * P->T) * 2; }

/* out (B, T, C), P (B, NH, T, T) from qkv (B, T, 3C); one row (b, h, t) per iteration */
static void attention_forward(float *out, const probs_rows *P, const float *qkv, int64_t B, int64_t T, int64_t C,
                              int64_t NH) {
    int64_t hs = C / NH, C3 = 3 * C;
    float scale = 1.0f / sqrtf((float)hs);
#pragma omp parallel for collapse(3) schedule(static)
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < NH; h++)
            for (int64_t t = 0; t < T; t++) {
                const float *base = qkv + b * T * C3 + h * hs;
                const float *q = base + t * C3;
                int64_t row = (b * NH + h) * T + t;
                float *p = prow(P, row);
                for (int64_t t2 = 0; t2 <= t; t2++) p[t2] = dot(q, base + t2 * C3 + C, hs) * scale;
                float m = -INFINITY;
#pragma omp simd reduction(max : m)
                for (int64_t t2 = 0; t2 <= t; t2++) m = p[t2] > m ? p[t2] : m;
                float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
                for (int64_t t2 = 0; t2 <= t; t2++) {
                    p[t2] = ut_expf_fast(p[t2] - m);
                    sum += p[t2];
                }
                float inv = 1.0f / sum;
                float *o = out + (b * T + t) * C + h * hs;
                for (int64_t i = 0; i < hs; i++) o[i] = 0.0f;
                for (int64_t t2 = 0; t2 <= t; t2++) {
                    p[t2] *= inv;
                    const float *v = base + t2 * C3 + 2 * C;
                    float pv = p[t2];
#pragma omp simd
                    for (int64_t i = 0; i < hs; i++) o[i] += pv * v[i];
                }
                for (int64_t t2 = t + 1; t2 < T; t2++) p[t2] = 0.0f;
                if (P->dt != UT_F32) ut_cpu_convert_run(row16(P, row), P->dt, p, UT_F32, T);
            }
}

/* dqkv (B, T, 3C) += gradient of out through the saved att (B, NH, T, T).
 * Per row t: dP = dout_t . v_t2, dS = P (dP - sum_j P dP), dq_t += scale dS k,
 * dk_t2 += scale dS q_t, dv_t2 += P dout_t. A (b, h) pair writes only its own
 * head's slices, so pairs run in parallel and each sums rows in order.
 * scratch: T floats per thread. */
static void attention_backward(float *dqkv, float *scratch, const float *dout, const float *qkv, const probs_rows *P,
                               int64_t B, int64_t T, int64_t C, int64_t NH) {
    int64_t hs = C / NH, C3 = 3 * C;
    float scale = 1.0f / sqrtf((float)hs);
#pragma omp parallel
    {
        float *dp = scratch + (int64_t)omp_get_thread_num() * T;
#pragma omp for collapse(2) schedule(static)
        for (int64_t b = 0; b < B; b++)
            for (int64_t h = 0; h < NH; h++) {
                const float *base = qkv + b * T * C3 + h * hs;
                float *dbase = dqkv + b * T * C3 + h * hs;
                for (int64_t t = 0; t < T; t++) {
                    int64_t row = (b * NH + h) * T + t;
                    float *p = prow(P, row);
                    if (P->dt != UT_F32) ut_cpu_convert_run(p, UT_F32, row16(P, row), P->dt, t + 1);
                    const float *g = dout + (b * T + t) * C + h * hs;
                    const float *q = base + t * C3;
                    float *dq = dbase + t * C3;
                    float s = 0.0f;
                    for (int64_t t2 = 0; t2 <= t; t2++) {
                        dp[t2] = dot(g, base + t2 * C3 + 2 * C, hs);
                        s += p[t2] * dp[t2];
                    }
                    for (int64_t t2 = 0; t2 <= t; t2++) {
                        float ds = p[t2] * (dp[t2] - s) * scale, pt = p[t2];
                        const float *k = base + t2 * C3 + C;
                        float *dk = dbase + t2 * C3 + C, *dv = dbase + t2 * C3 + 2 * C;
#pragma omp simd
                        for (int64_t i = 0; i < hs; i++) {
                            dq[i] += ds * k[i];
                            dk[i] += ds * q[i];
                            dv[i] += pt * g[i];
                        }
                    }
                }
            }
    }
}

/* The probabilities' rows: float32 in the arena, or under autocast its
 * dtype in the arena (2 bytes each) and a float32 row per thread in scratch.
 * A forward allocates them. */
static probs_rows probs_of(ut_tensor *t, int64_t T, int64_t n, bool forward, const ut_kctx *k) {
    probs_rows P = {.dt = t->autocast, .T = T};
    if (forward) ut_attention_set_probs(t, ut_kalloc(k, (size_t)n * ut_dtype_size(P.dt)));
    P.att = ut_attention_probs(t);
    if (P.dt != UT_F32) P.rows = ut_kscratch(k, (size_t)(ut_kthreads(k) * T) * sizeof(float));
    return P;
}

void ut_attention_fwd_cpu(ut_tensor *t, UT_KCTX) {
    int64_t B = t->ne[0], T = t->ne[1], C = t->ne[2], NH = ut_attention_n_head(t);
    probs_rows P = probs_of(t, T, B * NH * T * T, true, k);
    attention_forward(ut_f32(t), &P, ut_f32(t->src[0]), B, T, C, NH);
}

void ut_attention_bwd_cpu(ut_tensor *t, UT_KCTX) {
    ut_tensor *qkv = t->src[0];
    if (!qkv->requires_grad) return;
    int64_t B = t->ne[0], T = t->ne[1], C = t->ne[2], NH = ut_attention_n_head(t);
    float *scratch = ut_kalloc(k, (size_t)ut_kthreads(k) * (size_t)T * sizeof(float));
    probs_rows P = probs_of(t, T, B * NH * T * T, false, k);
    attention_backward(qkv->grad, scratch, t->grad, ut_f32(qkv), &P, B, T, C, NH);
}

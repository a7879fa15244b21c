/* Vocabulary-parallel cross-entropy's kernels (src/ops/vocab.c): per row of
 * this part's logits, the logsumexp and the target's logit; then, over the
 * parts' values, the mean loss. Sums in double, in a fixed order. */
#include <math.h>

#include "cpu.h"
#include "../../ops/params.h"

/* The first target outside [0, V) that is not ignored: the error names it. */
static bool bad_target(const int32_t *tg, int64_t N, int64_t V, int ignore, const char *op, const ut_kctx *k) {
    for (int64_t n = 0; n < N; n++)
        if (tg[n] != ignore && (tg[n] < 0 || tg[n] >= V)) {
            ut_kfail(k, "%s: target %d at row %lld is outside [0, %lld) and is not ignore_index %d", op, (int)tg[n],
                     (long long)n, (long long)V, ignore);
            return true;
        }
    return false;
}

void ut_vocab_partials_fwd_cpu(ut_tensor *t, UT_KCTX) {
    ut_tensor *x = t->src[0], *tg = t->src[1];
    int64_t N = ut_nelem(tg), Vp = x->ne[x->ndim - 1], v0 = ut_vocab_partials_v0(t);
    int64_t P = ut_vocab_partials_parts(t), r = ut_vocab_partials_part(t);
    int ignore = (int)ut_vocab_partials_ignore_index(t);
    const int32_t *ti = ut_i32(tg);
    if (bad_target(ti, N, ut_vocab_partials_vocab(t), ignore, "vocab_partials", k)) return;
    const float *xs = ut_f32(x);
    float *out = ut_f32(t);
    memset(out, 0, (size_t)ut_nelem(t) * sizeof(float));
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; n++) {
        const float *row = xs + n * Vp;
        float m = row[0];
        for (int64_t j = 1; j < Vp; j++) m = row[j] > m ? row[j] : m;
        double s = 0.0;
        for (int64_t j = 0; j < Vp; j++) s += exp((double)row[j] - (double)m);
        int64_t own = (int64_t)ti[n] - v0;
        out[(n * P + r) * 2] = (float)((double)m + log(s));
        out[(n * P + r) * 2 + 1] = ti[n] != ignore && own >= 0 && own < Vp ? row[own] : 0.0f;
    }
}

/* dx[n, j] += g_lse[n] * exp(x[n, j] - lse[n]) + g_t[n] * (j is the target) */
void ut_vocab_partials_bwd_cpu(ut_tensor *t, UT_KCTX) {
    ut_tensor *x = t->src[0], *tg = t->src[1];
    if (!x->requires_grad) return;
    int64_t N = ut_nelem(tg), Vp = x->ne[x->ndim - 1], v0 = ut_vocab_partials_v0(t);
    int64_t P = ut_vocab_partials_parts(t), r = ut_vocab_partials_part(t);
    int ignore = (int)ut_vocab_partials_ignore_index(t);
    const int32_t *ti = ut_i32(tg);
    const float *xs = ut_f32(x), *out = ut_f32(t), *g = t->grad;
    float *dx = x->grad;
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; n++) {
        float gl = g[(n * P + r) * 2], gt = g[(n * P + r) * 2 + 1], lse = out[(n * P + r) * 2];
        const float *row = xs + n * Vp;
        float *d = dx + n * Vp;
        if (gl != 0.0f)
            for (int64_t j = 0; j < Vp; j++) d[j] += gl * expf(row[j] - lse);
        int64_t own = (int64_t)ti[n] - v0;
        if (ti[n] != ignore && own >= 0 && own < Vp) d[own] += gt;
    }
}

/* Row n's logsumexp over the parts' logsumexps */
static double row_lse(const float *p, int64_t P) {
    double m = p[0];
    for (int64_t r = 1; r < P; r++) m = p[2 * r] > m ? p[2 * r] : m;
    double s = 0.0;
    for (int64_t r = 0; r < P; r++) s += exp((double)p[2 * r] - m);
    return m + log(s);
}

void ut_vocab_ce_fwd_cpu(ut_tensor *t, UT_KCTX) {
    ut_tensor *pa = t->src[0], *tg = t->src[1];
    int64_t N = pa->ne[0], P = pa->ne[1];
    int ignore = (int)ut_vocab_ce_ignore_index(t);
    const int32_t *ti = ut_i32(tg);
    if (bad_target(ti, N, ut_vocab_ce_vocab(t), ignore, "vocab_ce", k)) return;
    const float *ps = ut_f32(pa);
    double sum = 0.0;
    int64_t count = 0;
    for (int64_t n = 0; n < N; n++) {
        if (ti[n] == ignore) continue;
        const float *p = ps + n * P * 2;
        double tl = 0.0;
        for (int64_t r = 0; r < P; r++) tl += p[2 * r + 1];
        sum += row_lse(p, P) - tl;
        count++;
    }
    ut_f32(t)[0] = count ? (float)(sum / (double)count) : 0.0f;
}

/* d partials[n, r, 0] += g * exp(lse_r - LSE_n), d partials[n, r, 1] -= g, g = dloss / count */
void ut_vocab_ce_bwd_cpu(ut_tensor *t, UT_KCTX) {
    ut_tensor *pa = t->src[0], *tg = t->src[1];
    if (!pa->requires_grad) return;
    int64_t N = pa->ne[0], P = pa->ne[1];
    int ignore = (int)ut_vocab_ce_ignore_index(t);
    const int32_t *ti = ut_i32(tg);
    int64_t count = 0;
    for (int64_t n = 0; n < N; n++) count += ti[n] != ignore;
    if (!count) return;
    float g = t->grad[0] / (float)count;
    const float *ps = ut_f32(pa);
    float *d = pa->grad;
    for (int64_t n = 0; n < N; n++) {
        if (ti[n] == ignore) continue;
        const float *p = ps + n * P * 2;
        double lse = row_lse(p, P);
        for (int64_t r = 0; r < P; r++) {
            d[(n * P + r) * 2] += g * (float)exp((double)p[2 * r] - lse);
            d[(n * P + r) * 2 + 1] -= g;
        }
    }
}

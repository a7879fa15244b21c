/* Softmax family over the last dimension: softmax, log_softmax, and the two
 * classification losses, cross_entropy (fused log-softmax + NLL) and nll_loss.
 * Inputs are viewed as N rows of V. Rows are independent, so kernels run one
 * row per iteration in parallel; each row subtracts its max before exp (no
 * overflow) and sums the exps in double. exp is ut_expf_fast, so the row loops
 * vectorise; a row's reduction order is fixed by the code, not by threads. Losses keep one double per row and
 * add the rows serially, so results do not depend on the thread count. */
#include <math.h>
#include <omp.h>

#include "vmath.h"
#include "cpu.h"
#include "../../ops/params.h"

/* Largest element of x (V): the shift that keeps exp finite. */
static inline float row_max(const float *x, int64_t V) {
    float m = -INFINITY;
#pragma omp simd reduction(max : m)
    for (int64_t v = 0; v < V; v++) m = x[v] > m ? x[v] : m;
    return m;
}

/* y (V) = exp(x - m); returns sum(y) accumulated in double. */
static inline double row_exp(float *y, const float *x, float m, int64_t V) {
    double s = 0.0;
#pragma omp simd reduction(+ : s)
    for (int64_t v = 0; v < V; v++) {
        float e = ut_expf_fast(x[v] - m);
        y[v] = e;
        s += e;
    }
    return s;
}

/* sum(exp(x - m)) over V, in double, storing nothing */
static inline double row_exp_sum(const float *x, float m, int64_t V) {
    double s = 0.0;
#pragma omp simd reduction(+ : s)
    for (int64_t v = 0; v < V; v++) s += ut_expf_fast(x[v] - m);
    return s;
}

/* sum(a * b) over V, in double */
static inline double row_dot(const float *a, const float *b, int64_t V) {
    double s = 0.0;
#pragma omp simd reduction(+ : s)
    for (int64_t v = 0; v < V; v++) s += (double)a[v] * b[v];
    return s;
}

static inline int64_t last_dim(const ut_tensor *t) { return t->ne[t->ndim - 1]; }
static inline int64_t rows_of(const ut_tensor *t) {
    int64_t V = last_dim(t);
    return V ? ut_nelem(t) / V : 0;
}

/* ---- softmax: out (N, V) = exp(x - max) / sum(exp(x - max)) per row ---- */
void ut_softmax_forward_cpu(float *out, const float *inp, int64_t N, int64_t V) {
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; n++) {
        const float *x = inp + n * V;
        float *y = out + n * V;
        double s = row_exp(y, x, row_max(x, V), V);
        float inv = (float)(1.0 / s);
#pragma omp simd
        for (int64_t v = 0; v < V; v++) y[v] *= inv;
    }
}

/* dinp (N, V) += out * (dout - sum(dout * out)) per row; out the forward result */
void ut_softmax_backward_cpu(float *dinp, const float *dout, const float *out, int64_t N,
                             int64_t V) {
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; n++) {
        const float *g = dout + n * V, *y = out + n * V;
        float *dx = dinp + n * V;
        float d = (float)row_dot(g, y, V);
        for (int64_t v = 0; v < V; v++) dx[v] += y[v] * (g[v] - d);
    }
}

void ut_softmax_fwd_cpu(ut_tensor *t, UT_KCTX) {
    ut_softmax_forward_cpu(ut_f32(t), ut_f32(t->src[0]), rows_of(t), last_dim(t));
}

void ut_softmax_bwd_cpu(ut_tensor *t, UT_KCTX) {
    ut_tensor *a = t->src[0];
    if (a->requires_grad)
        ut_softmax_backward_cpu(a->grad, t->grad, ut_f32(t), rows_of(t), last_dim(t));
}

/* ---- log_softmax: out (N, V) = (x - max) - log(sum(exp(x - max))) per row,
 * in that order: x - max is exact, while folding max into the log term would
 * round it at max's magnitude. The exps go through out as scratch. ---- */
void ut_log_softmax_forward_cpu(float *out, const float *inp, int64_t N, int64_t V) {
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; n++) {
        const float *x = inp + n * V;
        float *y = out + n * V;
        float m = row_max(x, V);
        float ls = (float)log(row_exp(y, x, m, V));
#pragma omp simd
        for (int64_t v = 0; v < V; v++) y[v] = (x[v] - m) - ls;
    }
}

/* dinp (N, V) += dout - exp(out) * sum(dout) per row; out the forward result */
void ut_log_softmax_backward_cpu(float *dinp, const float *dout, const float *out, int64_t N,
                                 int64_t V) {
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; n++) {
        const float *g = dout + n * V, *y = out + n * V;
        float *dx = dinp + n * V;
        double gs = 0.0;
#pragma omp simd reduction(+ : gs)
        for (int64_t v = 0; v < V; v++) gs += g[v];
        float s = (float)gs;
#pragma omp simd
        for (int64_t v = 0; v < V; v++) dx[v] += g[v] - ut_expf_fast(y[v]) * s;
    }
}

void ut_log_softmax_fwd_cpu(ut_tensor *t, UT_KCTX) {
    ut_log_softmax_forward_cpu(ut_f32(t), ut_f32(t->src[0]), rows_of(t), last_dim(t));
}

void ut_log_softmax_bwd_cpu(ut_tensor *t, UT_KCTX) {
    ut_tensor *a = t->src[0];
    if (a->requires_grad)
        ut_log_softmax_backward_cpu(a->grad, t->grad, ut_f32(t), rows_of(t), last_dim(t));
}

/* Counts the targets (N) that are not ignore_index. A target outside [0, V)
 * that is not ignore_index sets the context error (naming the op, the value and
 * its position) and returns -1. Serial: N is the number of rows, and the first
 * bad position is the one reported. */
static int64_t count_targets_of(const ut_tensor *tg, int64_t V, int ignore, const char *name, const ut_kctx *k) {
    const int32_t *T = ut_i32(tg);
    int64_t N = ut_nelem(tg), count = 0;
    for (int64_t n = 0; n < N; n++) {
        if (T[n] == ignore) continue;
        if (T[n] < 0 || T[n] >= V) {
            char shape[64];
            ut_kfail(k,
                             "%s: target %d at position %lld of targets %s is outside [0, %lld) "
                             "and is not ignore_index %d",
                             name, (int)T[n], (long long)n, ut_shape_str(tg, shape, sizeof shape),
                             (long long)V, ignore);
            return -1;
        }
        count++;
    }
    return count;
}

static int64_t count_targets(ut_tensor *t, const char *name, const ut_kctx *k) {
    return count_targets_of(t->src[1], last_dim(t->src[0]), (int)ut_loss_ignore_index(t), name, k);
}

/* Mean of the per-row losses (N) over count, summed serially in row order. */
static float mean_of_rows(const double *rowloss, int64_t N, int64_t count) {
    double s = 0.0;
    for (int64_t n = 0; n < N; n++) s += rowloss[n];
    return count ? (float)(s / (double)count) : 0.0f;
}

/* A row's loss from its logsumexp lse, its target's value xt and (label
 * smoothing eps > 0) the sum sx of its V values, in double:
 * (1 - eps) (lse - xt) + eps (lse - sx / V); eps 0: lse - xt. */
static double smoothed_row(double lse, double xt, double sx, float eps, int64_t V) {
    if (eps == 0.0f) return lse - xt;
    return lse - (1.0 - (double)eps) * xt - (double)eps * sx / (double)V;
}

static double row_sum(const float *x, int64_t V) {
    double s = 0.0;
    for (int64_t v = 0; v < V; v++) s += x[v];
    return s;
}

/* ---- cross_entropy: logits (N, V), targets (N) ->
 * rowloss (N) = logsumexp(logits[n]) - logits[n, targets[n]] (0 when ignored);
 * with label smoothing eps, smoothed_row's.
 * For backward it saves, per row not ignored, the unnormalised exps
 * e (N, V) = exp(logits - rowmax) and inv (N) = 1/sum(e) (NULL: not needed);
 * the softmax e * inv is formed in backward, which saves a pass over (N, V).
 * Targets are already validated. ---- */
void ut_cross_entropy_forward_cpu(double *rowloss, float *e, float *inv, const float *logits,
                                  const int32_t *targets, int ignore_index, float eps, int64_t N, int64_t V) {
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; n++) {
        rowloss[n] = 0.0;
        if (targets[n] == ignore_index) continue;
        const float *x = logits + n * V;
        float m = row_max(x, V);
        double sx = eps > 0.0f ? row_sum(x, V) : 0.0;
        double s = e ? row_exp(e + n * V, x, m, V) : row_exp_sum(x, m, V);
        if (inv) inv[n] = (float)(1.0 / s);
        rowloss[n] = smoothed_row((double)m + log(s), (double)x[targets[n]], sx, eps, V);
    }
}

/* a row's gradient beyond the softmax's: -gscale eps / V everywhere (label
 * smoothing) and -gscale (1 - eps) at the target */
static void minus_targets(float *dx, int32_t t, float gscale, float eps, int64_t V) {
    if (eps > 0.0f) {
        float gs = gscale * eps / (float)V;
#pragma omp simd
        for (int64_t v = 0; v < V; v++) dx[v] -= gs;
        dx[t] -= gscale * (1.0f - eps);
    } else {
        dx[t] -= gscale;
    }
}

/* Gradient of the mean loss, gscale = dloss / count, from the forward's e and
 * inv: d (N, V) = (e * inv - onehot(targets)) * gscale for rows not ignored.
 * dlogits += d, or, when dlogits == e (the gradient takes over the exps'
 * buffer), dlogits = d with ignored rows set to 0. Either way a row's values
 * are computed the same way, so both give the same bits. Label smoothing
 * eps takes gscale eps / V from every element and gscale (1 - eps) from the
 * target's. */
void ut_cross_entropy_backward_cpu(float *dlogits, float *e, const float *inv,
                                   const int32_t *targets, int ignore_index, float eps, float gscale,
                                   int64_t N, int64_t V) {
    bool in_place = dlogits == e;
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; n++) {
        float *dx = dlogits + n * V;
        if (targets[n] == ignore_index) {
            if (in_place) memset(dx, 0, (size_t)V * sizeof(float));
            continue;
        }
        const float *p = e + n * V;
        float r = inv[n];
        if (in_place) {
#pragma omp simd
            for (int64_t v = 0; v < V; v++) dx[v] = p[v] * r * gscale;
        } else {
#pragma omp simd
            for (int64_t v = 0; v < V; v++) dx[v] += p[v] * r * gscale;
        }
        minus_targets(dx, targets[n], gscale, eps, V);
    }
}

/* ---- cross_entropy over 16-bit logits (dt BF16 or F16): each row is
 * widened (exactly) into a float32 row of the thread's own and computed as
 * the float32 kernels compute it; nothing of size (N, V) is float32. The
 * forward saves the row max and 1/sum (N each); backward recomputes the exps
 * from the logits (the same values the forward had), adds the row's gradient
 * to the 16-bit gradient widened, and rounds it back: the bits a float32
 * copy of the logits and of their gradient would give. rows: one float32
 * row of V per thread. ---- */
static void cross_entropy_forward16(double *rowloss, float *mx, float *inv, const void *logits,
                                    ut_dtype dt, const int32_t *targets, int ignore_index, float eps,
                                    int64_t N, int64_t V, float *rows) {
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; n++) {
        rowloss[n] = 0.0;
        if (targets[n] == ignore_index) continue;
        float *x = rows + (int64_t)omp_get_thread_num() * V;
        ut_cpu_convert(x, UT_F32, (const uint16_t *)logits + n * V, dt, V);
        float m = row_max(x, V), xt = x[targets[n]];
        double sx = eps > 0.0f ? row_sum(x, V) : 0.0;
        double s = mx ? row_exp(x, x, m, V) : row_exp_sum(x, m, V);
        if (mx) mx[n] = m, inv[n] = (float)(1.0 / s);
        rowloss[n] = smoothed_row((double)m + log(s), (double)xt, sx, eps, V);
    }
}

/* dlogits == logits (ut_linear_cross_entropy): each row's gradient is
 * written over its logits, from 0 where the separate op's adds into its
 * zeroed gradient (the same bits), and an ignored row's is set to 0. */
static void cross_entropy_backward16(void *dlogits, const void *logits, ut_dtype dt, const float *mx,
                                     const float *inv, const int32_t *targets, int ignore_index, float eps,
                                     float gscale, int64_t N, int64_t V, float *rows) {
    bool in_place = dlogits == logits;
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; n++) {
        uint16_t *d16 = (uint16_t *)dlogits + n * V;
        if (targets[n] == ignore_index) {
            if (in_place) memset(d16, 0, (size_t)V * sizeof(uint16_t));
            continue;
        }
        float *x = rows + 2 * (int64_t)omp_get_thread_num() * V, *dx = x + V;
        ut_cpu_convert(x, UT_F32, (const uint16_t *)logits + n * V, dt, V);
        if (in_place) memset(dx, 0, (size_t)V * sizeof(float));
        else ut_cpu_convert(dx, UT_F32, d16, dt, V);
        float m = mx[n], r = inv[n];
#pragma omp simd
        for (int64_t v = 0; v < V; v++) dx[v] += ut_expf_fast(x[v] - m) * r * gscale;
        minus_targets(dx, targets[n], gscale, eps, V);
        ut_cpu_convert(d16, dt, dx, UT_F32, V);
    }
}

/* 16-bit logits: saved ut_cross_entropy_row_max (N) and _inv_sum (N) when a
 * gradient will be asked for. */
static void cross_entropy_fwd16(ut_tensor *t, double *rowloss, int64_t N, int64_t V, const ut_kctx *k) {
    ut_tensor *x = t->src[0], *tg = t->src[1];
    float *mx = NULL, *inv = NULL;
    if (t->requires_grad) {
        mx = ut_kalloc(k, (size_t)(N ? N : 1) * sizeof(float));
        inv = ut_kalloc(k, (size_t)(N ? N : 1) * sizeof(float));
    }
    float *rows = ut_kalloc(k, (size_t)ut_kthreads(k) * (size_t)V * sizeof(float));
    cross_entropy_forward16(rowloss, mx, inv, x->data, x->dtype, ut_i32(tg), (int)ut_loss_ignore_index(t),
                            ut_loss_smoothing(t), N, V, rows);
    ut_cross_entropy_set_row_max(t, mx);
    ut_cross_entropy_set_inv_sum(t, inv);
}

/* saved: ut_cross_entropy_exps = e (N, V) and ut_cross_entropy_inv_sum = inv
 * (N), only when a gradient will be asked for */
void ut_cross_entropy_fwd_cpu(ut_tensor *t, UT_KCTX) {
    ut_tensor *x = t->src[0], *tg = t->src[1];
    int64_t count = count_targets(t, "cross_entropy", k);
    if (count < 0) return;
    int64_t N = ut_nelem(tg), V = last_dim(x);
    double *rowloss = ut_kalloc(k, (size_t)(N ? N : 1) * sizeof(double));
    if (ut_dtype_is16(x->dtype)) {
        cross_entropy_fwd16(t, rowloss, N, V, k);
        ut_loss_set_count(t, count);
        ut_f32(t)[0] = mean_of_rows(rowloss, N, count);
        return;
    }
    float *e = NULL, *inv = NULL;
    if (t->requires_grad) {
        e = ut_kalloc(k, (size_t)ut_nelem(x) * sizeof(float));
        inv = ut_kalloc(k, (size_t)(N ? N : 1) * sizeof(float));
    }
    ut_cross_entropy_forward_cpu(rowloss, e, inv, ut_f32(x), ut_i32(tg), (int)ut_loss_ignore_index(t),
                                 ut_loss_smoothing(t), N, V);
    ut_loss_set_count(t, count);
    ut_cross_entropy_set_exps(t, e);
    ut_cross_entropy_set_inv_sum(t, inv);
    ut_f32(t)[0] = mean_of_rows(rowloss, N, count);
}

/* Owns src[0]'s gradient (UT_OPP_OWNS_SRC0_GRAD, src/core/internal.h): when the logits have no
 * gradient buffer yet, the exps' buffer, no longer needed, becomes it and the
 * gradient is written into it (no allocation, no zeroing, no read-add-write
 * of N x V floats); otherwise the gradient is added to the existing one. */
void ut_cross_entropy_bwd_cpu(ut_tensor *t, UT_KCTX) {
    ut_tensor *x = t->src[0], *tg = t->src[1];
    if (!x->requires_grad) return;
    if (ut_loss_count(t) == 0) { /* every target ignored: the gradient is 0 */
        ut_grad(x);
        return;
    }
    if (ut_dtype_is16(x->dtype)) {
        int64_t V = last_dim(x);
        float *rows = ut_kalloc(k, 2 * (size_t)ut_kthreads(k) * (size_t)V * sizeof(float));
        cross_entropy_backward16(ut_grad(x), x->data, x->dtype, ut_cross_entropy_row_max(t),
                                 ut_cross_entropy_inv_sum(t), ut_i32(tg), (int)ut_loss_ignore_index(t),
                                 ut_loss_smoothing(t), t->grad[0] / (float)ut_loss_count(t), ut_nelem(tg), V,
                                 rows);
        return;
    }
    if (!x->grad) x->grad = ut_cross_entropy_exps(t);
    ut_cross_entropy_backward_cpu(x->grad, ut_cross_entropy_exps(t), ut_cross_entropy_inv_sum(t),
                                  ut_i32(tg), (int)ut_loss_ignore_index(t), ut_loss_smoothing(t),
                                  t->grad[0] / (float)ut_loss_count(t), ut_nelem(tg), last_dim(x));
}

/* ---- cross-entropy over logits in a buffer of the op's own
 * (ut_linear_cross_entropy, src/backend/cpu/matmul.c): buf (N, V), float32
 * or 16-bit dt, holds the logits; the forward leaves in it what backward
 * needs and backward writes the gradient over it, so the logits and their
 * gradient take one buffer. Float32: the exps written over the logits (the
 * target's logit read first), as cross_entropy saves them; 16-bit: the
 * logits stay, with each row's max and 1 / sum (mx, inv). The arithmetic is
 * cross_entropy's, so the loss and the gradient are its bits. ---- */
int64_t ut_ce_buf_count_cpu(const ut_tensor *targets, int64_t V, int ignore, const ut_kctx *k) {
    return count_targets_of(targets, V, ignore, "linear_cross_entropy", k);
}

float ut_ce_buf_fwd_cpu(void *buf, ut_dtype dt, float *mx, float *inv, const int32_t *targets, int ignore,
                        float eps, int64_t N, int64_t V, int64_t count, bool grad, const ut_kctx *k) {
    double *rowloss = ut_kalloc(k, (size_t)(N ? N : 1) * sizeof(double));
    if (ut_dtype_is16(dt)) {
        float *rows = ut_kalloc(k, (size_t)ut_kthreads(k) * (size_t)V * sizeof(float));
        cross_entropy_forward16(rowloss, grad ? mx : NULL, grad ? inv : NULL, buf, dt, targets, ignore, eps, N, V,
                                rows);
        return mean_of_rows(rowloss, N, count);
    }
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; n++) {
        rowloss[n] = 0.0;
        if (targets[n] == ignore) continue;
        float *x = (float *)buf + n * V;
        float m = row_max(x, V), xt = x[targets[n]];
        double sx = eps > 0.0f ? row_sum(x, V) : 0.0;
        double s = grad ? row_exp(x, x, m, V) : row_exp_sum(x, m, V);
        if (grad) inv[n] = (float)(1.0 / s);
        rowloss[n] = smoothed_row((double)m + log(s), (double)xt, sx, eps, V);
    }
    return mean_of_rows(rowloss, N, count);
}

void ut_ce_buf_bwd_cpu(void *buf, ut_dtype dt, const float *mx, const float *inv, const int32_t *targets,
                       int ignore, float eps, float gscale, int64_t N, int64_t V, const ut_kctx *k) {
    if (ut_dtype_is16(dt)) {
        float *rows = ut_kalloc(k, 2 * (size_t)ut_kthreads(k) * (size_t)V * sizeof(float));
        cross_entropy_backward16(buf, buf, dt, mx, inv, targets, ignore, eps, gscale, N, V, rows);
        return;
    }
    ut_cross_entropy_backward_cpu(buf, buf, inv, targets, ignore, eps, gscale, N, V);
}

/* ---- nll_loss: logp (N, V), targets (N) -> rowloss (N) = -logp[n, targets[n]]
 * (0 when ignored); with label smoothing eps, -(1 - eps) logp[n, targets[n]]
 * - eps * mean(logp[n]). Targets are already validated. ---- */
void ut_nll_loss_forward_cpu(double *rowloss, const float *logp, const int32_t *targets,
                             int ignore_index, float eps, int64_t N, int64_t V) {
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; n++) {
        const float *x = logp + n * V;
        rowloss[n] = targets[n] == ignore_index
                         ? 0.0
                         : smoothed_row(0.0, (double)x[targets[n]], eps > 0.0f ? row_sum(x, V) : 0.0, eps, V);
    }
}

/* dlogp[n, targets[n]] -= gscale for rows not ignored, gscale = dloss / count
 * (label smoothing: minus_targets') */
void ut_nll_loss_backward_cpu(float *dlogp, const int32_t *targets, int ignore_index,
                              float eps, float gscale, int64_t N, int64_t V) {
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; n++)
        if (targets[n] != ignore_index) minus_targets(dlogp + n * V, targets[n], gscale, eps, V);
}

void ut_nll_loss_fwd_cpu(ut_tensor *t, UT_KCTX) {
    ut_tensor *x = t->src[0], *tg = t->src[1];
    int64_t count = count_targets(t, "nll_loss", k);
    if (count < 0) return;
    int64_t N = ut_nelem(tg);
    double *rowloss = ut_kalloc(k, (size_t)(N ? N : 1) * sizeof(double));
    ut_nll_loss_forward_cpu(rowloss, ut_f32(x), ut_i32(tg), (int)ut_loss_ignore_index(t), ut_loss_smoothing(t), N,
                            last_dim(x));
    ut_loss_set_count(t, count);
    ut_f32(t)[0] = mean_of_rows(rowloss, N, count);
}

void ut_nll_loss_bwd_cpu(ut_tensor *t, UT_KCTX) {
    ut_tensor *x = t->src[0], *tg = t->src[1];
    if (!x->requires_grad || ut_loss_count(t) == 0) return;
    ut_nll_loss_backward_cpu(x->grad, ut_i32(tg), (int)ut_loss_ignore_index(t), ut_loss_smoothing(t),
                             t->grad[0] / (float)ut_loss_count(t), ut_nelem(tg), last_dim(x));
}

/* CUDA op glue of the reductions to a scalar: SUM, MEAN and the MSE loss
 * (mean of (a - b)^2; its CPU kernel lives in src/backend/cpu/loss.c). The
 * forward sums in double through device scratch from the context's arena;
 * the backward reads the incoming gradient's scalar on the device.
 * Kernels: reduce.cu. Semantics: src/backend/cpu/reduce.c, loss.c. */
#include "cuda.h"
#include "ew.h"

static void sum_fwd(ut_tensor *t, bool mean, const ut_kctx *k) {
    ut_tensor *a = t->src[0];
    int64_t n = ut_nelem(a);
    void *scratch = ut_kalloc(k, ut_cuda_sum_scratch(n));
    ut_cuda_sum((float *)t->data, (const float *)a->data, n, mean, scratch);
}

static void sum_bwd(ut_tensor *t, bool mean) {
    ut_tensor *a = t->src[0];
    if (a->requires_grad) ut_cuda_spread(a->grad, t->grad, ut_nelem(a), mean);
}

void ut_sum_fwd_cuda(ut_tensor *t, UT_KCTX) { sum_fwd(t, false, k); }
void ut_sum_bwd_cuda(ut_tensor *t, UT_KCTX) { sum_bwd(t, false); }
void ut_mean_fwd_cuda(ut_tensor *t, UT_KCTX) { sum_fwd(t, true, k); }
void ut_mean_bwd_cuda(ut_tensor *t, UT_KCTX) { sum_bwd(t, true); }

void ut_mse_fwd_cuda(ut_tensor *t, UT_KCTX) {
    ut_tensor *a = t->src[0], *b = t->src[1];
    int64_t n = ut_nelem(a);
    void *scratch = ut_kalloc(k, ut_cuda_sum_scratch(n));
    ut_cuda_mse_fwd((float *)t->data, (const float *)a->data, (const float *)b->data, n, scratch);
}

void ut_mse_bwd_cuda(ut_tensor *t, UT_KCTX) {
    ut_tensor *a = t->src[0], *b = t->src[1];
    int64_t n = ut_nelem(a);
    if (!n || (!a->requires_grad && !b->requires_grad)) return;
    ut_cuda_mse_bwd(a->requires_grad ? a->grad : NULL, b->requires_grad ? b->grad : NULL,
                    (const float *)a->data, (const float *)b->data, t->grad, n);
}

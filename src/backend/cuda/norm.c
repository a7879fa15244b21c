/* CUDA op glue of layernorm and rms_norm over the last dimension, with the CPU
 * kernels' semantics (src/backend/cpu/norm.c): layernorm saves each row's mean
 * and rstd (ut_layernorm_mean, ut_layernorm_rstd), rms_norm each row's rstd
 * (ut_rms_norm_rstd), device memory, for backward. The kernels are in norm.cu. */
#include "cuda.h"
#include "norm.h"
#include "../../ops/params.h"

static inline float *dev_f32(const ut_tensor *t) { return (float *)t->data; }

void ut_layernorm_fwd_cuda(ut_tensor *t, UT_KCTX) {
    ut_tensor *x = t->src[0], *w = t->src[1], *b = t->src[2];
    int64_t C = w->ne[0], N = ut_nelem(x) / C;
    size_t bytes = (size_t)(N > 0 ? N : 1) * sizeof(float);
    ut_layernorm_set_mean(t, ut_kalloc(k, bytes));
    ut_layernorm_set_rstd(t, ut_kalloc(k, bytes));
    ut_cuda_layernorm_fwd(dev_f32(t), ut_layernorm_mean(t), ut_layernorm_rstd(t), dev_f32(x),
                          dev_f32(w), dev_f32(b), N, C, ut_layernorm_eps(t));
}

void ut_layernorm_bwd_cuda(ut_tensor *t, UT_KCTX) {
    ut_tensor *x = t->src[0], *w = t->src[1], *b = t->src[2];
    int64_t C = w->ne[0], N = ut_nelem(x) / C;
    float *dx = x->requires_grad ? x->grad : NULL;
    float *dw = w->requires_grad ? w->grad : NULL;
    float *db = b->requires_grad ? b->grad : NULL;
    void *scratch = NULL;
    if (dw || db) scratch = ut_kalloc(k, ut_cuda_layernorm_bwd_scratch_bytes(N, C));
    ut_cuda_layernorm_bwd(dx, dw, db, scratch, t->grad, dev_f32(x), dev_f32(w),
                          ut_layernorm_mean(t), ut_layernorm_rstd(t), N, C);
}

void ut_rms_norm_fwd_cuda(ut_tensor *t, UT_KCTX) {
    ut_tensor *x = t->src[0], *w = t->src[1];
    int64_t C = w->ne[0], N = ut_nelem(x) / C;
    ut_rms_norm_set_rstd(t, ut_kalloc(k, (size_t)(N > 0 ? N : 1) * sizeof(float)));
    ut_cuda_rms_norm_fwd(dev_f32(t), ut_rms_norm_rstd(t), dev_f32(x), dev_f32(w), N, C, ut_rms_norm_eps(t));
}

void ut_rms_norm_bwd_cuda(ut_tensor *t, UT_KCTX) {
    ut_tensor *x = t->src[0], *w = t->src[1];
    int64_t C = w->ne[0], N = ut_nelem(x) / C;
    float *dx = x->requires_grad ? x->grad : NULL;
    float *dw = w->requires_grad ? w->grad : NULL;
    void *scratch = dw ? ut_kalloc(k, ut_cuda_rms_norm_bwd_scratch_bytes(N, C)) : NULL;
    ut_cuda_rms_norm_bwd(dx, dw, scratch, t->grad, dev_f32(x), dev_f32(w), ut_rms_norm_rstd(t), N, C);
}

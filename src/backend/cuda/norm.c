/* CUDA op glue of layernorm and rms_norm over the last dimension, with the CPU
 * kernels' semantics (src/backend/cpu/norm.c): layernorm saves each row's mean
 * and rstd (ut_layernorm_mean, ut_layernorm_rstd), rms_norm each row's rstd
 * (ut_rms_norm_rstd), device memory, for backward. The kernels are in norm.cu. */
#include "cuda.h"
#include "norm.h"
#include "../../ops/params.h"

static inline float *dev_f32(const ut_tensor *t) { return (float *)t->data; }

/* Layernorm takes its tensors as stored (UT_KCAP_NATIVE_16, table.c): x and
 * out (so dx and dy) in float32 or 16 bits, read and written by the kernels
 * themselves. Weight and bias are parameters, float32; one stored in 16 bits
 * is widened into scratch here, and its gradient summed in float32 scratch
 * and added back rounded, as core's copies would. */
static const float *wide(const ut_tensor *p, UT_KCTX) {
    if (!ut_dtype_is16(p->dtype)) return dev_f32(p);
    int64_t n = ut_nelem(p);
    float *f = ut_kalloc(k, (size_t)n * sizeof(float));
    ut_backend_cuda.convert(f, UT_F32, p->data, p->dtype, n);
    return f;
}
static float *wide_grad(const ut_tensor *p, UT_KCTX) {
    if (!p->requires_grad) return NULL;
    if (!ut_dtype_is16(p->dtype)) return p->grad;
    int64_t n = ut_nelem(p);
    float *f = ut_kalloc(k, (size_t)n * sizeof(float));
    ut_backend_cuda.convert(f, UT_F32, p->grad, p->dtype, n);
    return f;
}
static void narrow_grad(const ut_tensor *p, const float *f) {
    if (f && ut_dtype_is16(p->dtype)) ut_backend_cuda.convert(p->grad, p->dtype, f, UT_F32, ut_nelem(p));
}

void ut_layernorm_fwd_cuda(ut_tensor *t, UT_KCTX) {
    ut_tensor *x = t->src[0], *w = t->src[1], *b = t->src[2];
    int64_t C = w->ne[0], N = ut_nelem(x) / C;
    size_t bytes = (size_t)(N > 0 ? N : 1) * sizeof(float);
    ut_layernorm_set_mean(t, ut_kalloc(k, bytes));
    ut_layernorm_set_rstd(t, ut_kalloc(k, bytes));
    ut_cuda_layernorm_fwd(t->data, (int)t->dtype, ut_layernorm_mean(t), ut_layernorm_rstd(t), x->data,
                          (int)x->dtype, wide(w, k), wide(b, k), N, C, ut_layernorm_eps(t));
}

void ut_layernorm_bwd_cuda(ut_tensor *t, UT_KCTX) {
    ut_tensor *x = t->src[0], *w = t->src[1], *b = t->src[2];
    int64_t C = w->ne[0], N = ut_nelem(x) / C;
    void *dx = x->requires_grad ? x->grad : NULL; /* written when fresh (backend.h, UT_KCAP_FRESH_GRAD) */
    ut_kzero_fresh(k, t, 6u, ut_backend_cuda.memset); /* dw, db are added into */
    float *dw = wide_grad(w, k), *db = wide_grad(b, k);
    void *scratch = NULL;
    if (dw || db) scratch = ut_kalloc(k, ut_cuda_layernorm_bwd_scratch_bytes(N, C));
    ut_cuda_layernorm_bwd(dx, !ut_kfresh(k, 0), dw, db, scratch, t->grad, (int)t->dtype, x->data, (int)x->dtype, wide(w, k),
                          ut_layernorm_mean(t), ut_layernorm_rstd(t), N, C);
    narrow_grad(w, dw);
    narrow_grad(b, db);
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

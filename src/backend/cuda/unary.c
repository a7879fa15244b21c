/* CUDA op glue of the elementwise unary ops: SCALE, RELU, GELU (tanh form),
 * GELU_ERF, TANH, SIGMOID, DROPOUT, UNIFORM_NOISE. Inputs are contiguous (the constructors
 * make them so): flat launches over N elements. Dropout's keep mask is drawn
 * on the device from the launch's window of the context's generator, each
 * element's draw the CPU's (the same mask for the same seed), and saved for
 * backward.
 * Kernels: unary.cu. Semantics: src/backend/cpu/unary.c, gelu_erf.c. */
#include "cuda.h"
#include "ew.h"
#include "../../ops/params.h"

static float *out_of(ut_tensor *t) { return (float *)t->data; }
static const float *in_of(const ut_tensor *t) { return (const float *)t->src[0]->data; }

/* ---- scale ---- */
void ut_scale_fwd_cuda(ut_tensor *t, UT_KCTX) {
    ut_cuda_scale_fwd(out_of(t), in_of(t), ut_scale_s(t), ut_nelem(t));
}

void ut_scale_bwd_cuda(ut_tensor *t, UT_KCTX) {
    ut_tensor *a = t->src[0];
    if (a->requires_grad) ut_cuda_scale_bwd(a->grad, t->grad, ut_scale_s(t), ut_nelem(t), !ut_kfresh(k, 0));
}

/* ---- relu ---- */
void ut_relu_fwd_cuda(ut_tensor *t, UT_KCTX) { ut_cuda_relu_fwd(out_of(t), in_of(t), ut_nelem(t)); }

void ut_relu_bwd_cuda(ut_tensor *t, UT_KCTX) {
    ut_tensor *a = t->src[0];
    if (a->requires_grad) ut_cuda_relu_bwd(a->grad, t->grad, in_of(t), ut_nelem(t), !ut_kfresh(k, 0));
}

/* ---- gelu, tanh form and exact: every tensor as stored (the op table's
 * UT_KCAP_NATIVE_16: a 16-bit input, its 16-bit output, and their 16-bit
 * gradients are read and written in place of float32 copies) ---- */
void ut_gelu_fwd_cuda(ut_tensor *t, UT_KCTX) {
    ut_cuda_gelu_fwd(t->data, (int)t->dtype, t->src[0]->data, (int)t->src[0]->dtype, ut_nelem(t));
}

void ut_gelu_bwd_cuda(ut_tensor *t, UT_KCTX) {
    ut_tensor *a = t->src[0];
    if (a->requires_grad)
        ut_cuda_gelu_bwd(a->grad, (int)a->dtype, t->grad, (int)t->dtype, a->data, (int)a->dtype, ut_nelem(t),
                         !ut_kfresh(k, 0));
}

void ut_gelu_erf_fwd_cuda(ut_tensor *t, UT_KCTX) {
    ut_cuda_gelu_erf_fwd(t->data, (int)t->dtype, t->src[0]->data, (int)t->src[0]->dtype, ut_nelem(t));
}

void ut_gelu_erf_bwd_cuda(ut_tensor *t, UT_KCTX) {
    ut_tensor *a = t->src[0];
    if (a->requires_grad)
        ut_cuda_gelu_erf_bwd(a->grad, (int)a->dtype, t->grad, (int)t->dtype, a->data, (int)a->dtype, ut_nelem(t),
                             !ut_kfresh(k, 0));
}

/* ---- tanh (backward from the saved output) ---- */
void ut_tanh_fwd_cuda(ut_tensor *t, UT_KCTX) { ut_cuda_tanh_fwd(out_of(t), in_of(t), ut_nelem(t)); }

void ut_tanh_bwd_cuda(ut_tensor *t, UT_KCTX) {
    ut_tensor *a = t->src[0];
    if (a->requires_grad) ut_cuda_tanh_bwd(a->grad, t->grad, out_of(t), ut_nelem(t), !ut_kfresh(k, 0));
}

/* ---- sigmoid (backward from the saved output) ---- */
void ut_sigmoid_fwd_cuda(ut_tensor *t, UT_KCTX) { ut_cuda_sigmoid_fwd(out_of(t), in_of(t), ut_nelem(t)); }

void ut_sigmoid_bwd_cuda(ut_tensor *t, UT_KCTX) {
    ut_tensor *a = t->src[0];
    if (a->requires_grad) ut_cuda_sigmoid_bwd(a->grad, t->grad, out_of(t), ut_nelem(t), !ut_kfresh(k, 0));
}

/* ---- dropout: the constructor records the op only in training with p > 0;
 * every forward (a checkpoint's recompute too, the generator restored) draws
 * a fresh mask, as the CPU's: the same draws, computed by a kernel from the
 * launch's generator window (src/core/philox.h). Every tensor as stored
 * (UT_KCAP_NATIVE_16): a 16-bit input (a product's output under autocast)
 * keeps its dtype, and its dropout reads and writes 16 bits ---- */
void ut_dropout_fwd_cuda(ut_tensor *t, UT_KCTX) {
    int64_t N = ut_nelem(t);
    uint8_t *keep = ut_kalloc(k, (size_t)N);
    int64_t all = ut_dropout_cols_all(t);
    ut_cuda_dropout_mask(keep, N, k->rng.key, k->rng.stream, k->rng.offset, all, all ? t->ne[t->ndim - 1] : 0,
                         all ? ut_dropout_col0(t) : 0, ut_dropout_p(t));
    ut_dropout_set_keep(t, keep);
    ut_cuda_dropout_fwd(t->data, (int)t->dtype, t->src[0]->data, (int)t->src[0]->dtype, keep, ut_dropout_keep_scale(t),
                        N);
}

void ut_dropout_bwd_cuda(ut_tensor *t, UT_KCTX) {
    ut_tensor *a = t->src[0];
    if (a->requires_grad)
        ut_cuda_dropout_bwd(a->grad, (int)a->dtype, t->grad, (int)t->dtype, ut_dropout_keep(t),
                            ut_dropout_keep_scale(t), ut_nelem(t), !ut_kfresh(k, 0));
}

/* ---- uniform noise: the CPU's values, each element's draw computed on the
 * device from the launch's window (float32: core gives it float32 copies
 * under autocast); backward passes the gradient through ---- */
void ut_uniform_noise_fwd_cuda(ut_tensor *t, UT_KCTX) {
    ut_cuda_uniform_noise_fwd(out_of(t), in_of(t), ut_nelem(t), k->rng.key, k->rng.stream, k->rng.offset,
                              ut_uniform_noise_mag(t));
}

void ut_uniform_noise_bwd_cuda(ut_tensor *t, UT_KCTX) {
    ut_tensor *a = t->src[0];
    if (a->requires_grad) ut_cuda_acc(a->grad, t->grad, ut_nelem(t));
}

/* CUDA op glue of the softmax family: softmax, log_softmax, cross_entropy and
 * nll_loss, with the CPU kernels' semantics (src/backend/cpu/softmax.c). The
 * kernels are in softmax.cu.
 *
 * Differences from the CPU that the host cannot avoid without synchronising:
 * - The losses count their targets on the device: the count (int64, device
 *   memory) is kept in ut_loss_dcount for backward, which divides
 *   the incoming gradient by it on the device; the host parameter
 *   ut_loss_count is not set.
 * - A target that is neither ignore_index nor in [0, V) is not reported
 *   synchronously as on the CPU: the kernels treat it as ignored and write a
 *   code (UT_CUDA_ERR_*) into the device error flag (ut_cuda_error_flag), which
 *   the backend is to check later.
 * - cross_entropy saves each row's max and 1 / sum (as the CPU does for
 *   16-bit logits) instead of the exps (N, V), and backward recomputes
 *   exp(x - max) from the logits: forward reads the logits once and writes
 *   nothing of size (N, V); backward reads them once and writes the gradient
 *   once. The values are the forward's (the same expf of the same inputs). */
#include "cuda.h"
#include "softmax.h"
#include "../../ops/params.h"



static inline float *dev_f32(const ut_tensor *t) { return (float *)t->data; }
static inline const int32_t *dev_i32(const ut_tensor *t) { return (const int32_t *)t->data; }
static inline int64_t last_dim(const ut_tensor *t) { return t->ne[t->ndim - 1]; }
static inline int64_t rows_of(const ut_tensor *t) {
    int64_t V = last_dim(t);
    return V ? ut_nelem(t) / V : 0;
}
static inline size_t at_least_1(int64_t n) { return (size_t)(n > 0 ? n : 1); }

/* ---- softmax, log_softmax ---- */
void ut_softmax_fwd_cuda(ut_tensor *t, UT_KCTX) {
    ut_cuda_softmax_fwd(dev_f32(t), dev_f32(t->src[0]), rows_of(t), last_dim(t));
}

void ut_softmax_bwd_cuda(ut_tensor *t, UT_KCTX) {
    ut_tensor *a = t->src[0];
    if (a->requires_grad)
        ut_cuda_softmax_bwd(a->grad, t->grad, dev_f32(t), rows_of(t), last_dim(t));
}

void ut_log_softmax_fwd_cuda(ut_tensor *t, UT_KCTX) {
    ut_cuda_log_softmax_fwd(dev_f32(t), dev_f32(t->src[0]), rows_of(t), last_dim(t));
}

void ut_log_softmax_bwd_cuda(ut_tensor *t, UT_KCTX) {
    ut_tensor *a = t->src[0];
    if (a->requires_grad)
        ut_cuda_log_softmax_bwd(a->grad, t->grad, dev_f32(t), rows_of(t), last_dim(t));
}

/* ---- cross_entropy: saved ut_cross_entropy_row_max (N) and _inv_sum (N)
 * when a gradient will be asked for, and the device count ---- */
void ut_cross_entropy_fwd_cuda(ut_tensor *t, UT_KCTX) {
    ut_tensor *x = t->src[0], *tg = t->src[1];
    if (x->dtype != UT_F32 && x->dtype != UT_BF16 && x->dtype != UT_F16) {
        ut_kfail(k, "cross_entropy: %s logits are not supported on CUDA",
                         ut_dtype_name(x->dtype));
        return;
    }
    int64_t N = ut_nelem(tg), V = last_dim(x);
    int ignore = (int)ut_loss_ignore_index(t);
    double *rowloss = ut_kalloc(k, at_least_1(N) * sizeof(double));
    int64_t *count = ut_kalloc(k, sizeof(int64_t));
    float *mx = NULL, *inv = NULL;
    if (t->requires_grad) {
        mx = ut_kalloc(k, at_least_1(N) * sizeof(float));
        inv = ut_kalloc(k, at_least_1(N) * sizeof(float));
    }
    ut_cuda_cross_entropy_fwd(rowloss, mx, inv, x->data, (int)x->dtype, dev_i32(tg), ignore, ut_loss_smoothing(t), N,
                              V, V, ut_cuda_error_flag());
    ut_cuda_loss_mean(dev_f32(t), count, rowloss, dev_i32(tg), ignore, N, V);
    ut_cross_entropy_set_row_max(t, mx);
    ut_cross_entropy_set_inv_sum(t, inv);
    ut_loss_set_dcount(t, count);
}

/* Owns src[0]'s gradient (UT_OPP_OWNS_SRC0_GRAD, src/core/internal.h): when the logits have no
 * gradient buffer yet, one is taken from the arena and written whole (rows
 * of ignored targets as 0: no memset, no read-add-write); otherwise the
 * gradient is added to the existing one. Every target ignored: the kernel
 * gives 0 (written) or adds nothing. */
void ut_cross_entropy_bwd_cuda(ut_tensor *t, UT_KCTX) {
    ut_tensor *x = t->src[0], *tg = t->src[1];
    if (!x->requires_grad) return;
    int64_t N = ut_nelem(tg), V = last_dim(x);
    int overwrite = 0;
    if (!x->grad) { /* stored as the logits are: float32, or 16 bits (the op table's UT_KCAP_READS_16) */
        x->grad = ut_kalloc(k, at_least_1(ut_nelem(x)) * (x->dtype == UT_F32 ? sizeof(float) : 2));
        overwrite = 1;
    }
    ut_cuda_cross_entropy_bwd(x->grad, overwrite, x->data, (int)x->dtype, ut_cross_entropy_row_max(t),
                              ut_cross_entropy_inv_sum(t), dev_i32(tg),
                              (int)ut_loss_ignore_index(t), ut_loss_smoothing(t), t->grad, ut_loss_dcount(t), N, V, V);
}

/* ---- nll_loss ---- */
void ut_nll_loss_fwd_cuda(ut_tensor *t, UT_KCTX) {
    ut_tensor *x = t->src[0], *tg = t->src[1];
    int64_t N = ut_nelem(tg), V = last_dim(x);
    int ignore = (int)ut_loss_ignore_index(t);
    double *rowloss = ut_kalloc(k, at_least_1(N) * sizeof(double));
    int64_t *count = ut_kalloc(k, sizeof(int64_t));
    ut_cuda_nll_loss_fwd(rowloss, dev_f32(x), dev_i32(tg), ignore, ut_loss_smoothing(t), N, V, ut_cuda_error_flag());
    ut_cuda_loss_mean(dev_f32(t), count, rowloss, dev_i32(tg), ignore, N, V);
    ut_loss_set_dcount(t, count);
}

void ut_nll_loss_bwd_cuda(ut_tensor *t, UT_KCTX) {
    ut_tensor *x = t->src[0], *tg = t->src[1];
    if (!x->requires_grad) return;
    ut_cuda_nll_loss_bwd(x->grad, dev_i32(tg), (int)ut_loss_ignore_index(t), ut_loss_smoothing(t), t->grad,
                         ut_loss_dcount(t), ut_nelem(tg), last_dim(x));
}

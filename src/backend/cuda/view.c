/* CUDA op glue of the views and copies: RESHAPE, PERMUTE, SLICE (views share
 * their source's data: nothing to compute forward; backward adds the view's
 * contiguous gradient into the source's through the grad strides and offset)
 * and CONTIGUOUS (a strided gather, float32 or int32; its backward a flat add).
 * Kernels: view.cu. Semantics: src/backend/cpu/view.c. */
#include "cuda.h"
#include "ew.h"
#include "../../ops/params.h"

/* a->grad (from the grad offset, at the grad strides) += t->grad */
static void view_bwd(ut_tensor *t) {
    ut_tensor *a = t->src[0];
    if (!a->requires_grad) return;
    ut_cuda_strided_add(a->grad + ut_view_grad_offset(t), t->grad, t->ndim, t->ne,
                        ut_view_grad_strides(t));
}

void ut_contiguous_fwd_cuda(ut_tensor *t, UT_KCTX) {
    ut_tensor *a = t->src[0];
    if (a->dtype == UT_I32) {
        ut_cuda_strided_gather_i32((int32_t *)t->data, (const int32_t *)a->data, a->ndim, a->ne,
                                   a->nb);
        return;
    }
    ut_cuda_strided_gather_f32((float *)t->data, (const float *)a->data, a->ndim, a->ne, a->nb);
}

/* t has a's shape and is contiguous: a's gradient (contiguous) += t's */
void ut_contiguous_bwd_cuda(ut_tensor *t, UT_KCTX) {
    ut_tensor *a = t->src[0];
    if (a->requires_grad) ut_cuda_acc(a->grad, t->grad, ut_nelem(t));
}

void ut_reshape_fwd_cuda(ut_tensor *t, UT_KCTX) { (void)t; }
void ut_reshape_bwd_cuda(ut_tensor *t, UT_KCTX) { view_bwd(t); }

void ut_permute_fwd_cuda(ut_tensor *t, UT_KCTX) { (void)t; }
void ut_permute_bwd_cuda(ut_tensor *t, UT_KCTX) { view_bwd(t); }

void ut_slice_fwd_cuda(ut_tensor *t, UT_KCTX) { (void)t; }
void ut_slice_bwd_cuda(ut_tensor *t, UT_KCTX) { view_bwd(t); }

/* CUDA glue of MAX_POOL2D, 2-D max pooling as torch.nn.functional.max_pool2d
 * (no padding, dilation 1, floor mode; semantics: src/backend/cpu/pool.c).
 * Saves each output's argmax within its input plane (int32, device memory).
 * Launchers: conv.h (kernels in pool.cu). */

#include "cuda.h"
#include "conv.h"
#include "../../ops/params.h"

void ut_max_pool2d_fwd_cuda(ut_tensor *t, UT_KCTX) {
    ut_tensor *x = t->src[0];
    int32_t *arg = ut_kalloc(k, (size_t)ut_nelem(t) * sizeof(int32_t));
    ut_max_pool2d_set_argmax(t, arg);
    ut_cuda_max_pool2d_fwd(t->data, arg, x->data, x->ne[0] * x->ne[1], x->ne[2], x->ne[3], ut_max_pool2d_kernel(t),
                           ut_max_pool2d_stride(t));
}

void ut_max_pool2d_bwd_cuda(ut_tensor *t, UT_KCTX) {
    ut_tensor *x = t->src[0];
    if (x->requires_grad)
        ut_cuda_max_pool2d_bwd(x->grad, t->grad, ut_max_pool2d_argmax(t), x->ne[0] * x->ne[1], x->ne[2], x->ne[3],
                               ut_max_pool2d_kernel(t), ut_max_pool2d_stride(t));
}

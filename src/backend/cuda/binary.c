/* CUDA op glue of the broadcasting binary ops ADD and MUL (b broadcast to a's
 * shape; ut_binary_b_strides gives b's strides in a's shape padded to 4
 * dims). b's gradient is reduced over the broadcast positions in a fixed
 * order, with device scratch from the context's arena for the partial sums.
 * Kernels: binary.cu. Semantics: src/backend/cpu/binary.c. */
#include "cuda.h"
#include "ew.h"
#include "../../ops/params.h"

/* t's shape padded to 4 dims */
static void shape4(const ut_tensor *t, int64_t *n) {
    int pad = 4 - t->ndim;
    for (int i = 0; i < 4; i++) n[i] = i < pad ? 1 : t->ne[i - pad];
}

static void binary_fwd(ut_tensor *t, int op) {
    int64_t n[4];
    shape4(t, n);
    ut_cuda_binary_fwd(op, (float *)t->data, (const float *)t->src[0]->data,
                       (const float *)t->src[1]->data, n, ut_binary_b_strides(t));
}

/* b's gradient += the sum over broadcast positions of t->grad * other (NULL: 1) */
static void reduce_into_b(ut_tensor *t, const float *other, const ut_kctx *k) {
    int64_t n[4];
    const int64_t *s = ut_binary_b_strides(t);
    shape4(t, n);
    size_t bytes = ut_cuda_bcast_reduce_scratch(n, s);
    void *scratch = bytes ? ut_kalloc(k, bytes) : NULL;
    ut_cuda_bcast_reduce(t->src[1]->grad, t->grad, other, n, s, scratch);
}

void ut_add_fwd_cuda(ut_tensor *t, UT_KCTX) { binary_fwd(t, UT_CUDA_BIN_ADD); }
void ut_mul_fwd_cuda(ut_tensor *t, UT_KCTX) { binary_fwd(t, UT_CUDA_BIN_MUL); }

void ut_add_bwd_cuda(ut_tensor *t, UT_KCTX) {
    ut_tensor *a = t->src[0], *b = t->src[1];
    if (a->requires_grad) ut_cuda_acc(a->grad, t->grad, ut_nelem(t));
    if (b->requires_grad) reduce_into_b(t, NULL, k);
}

void ut_mul_bwd_cuda(ut_tensor *t, UT_KCTX) {
    ut_tensor *a = t->src[0], *b = t->src[1];
    if (a->requires_grad) { /* da += g * b (broadcast) */
        int64_t n[4];
        shape4(t, n);
        ut_cuda_mul_bwd_a(a->grad, t->grad, (const float *)b->data, n, ut_binary_b_strides(t));
    }
    if (b->requires_grad) reduce_into_b(t, (const float *)a->data, k);
}

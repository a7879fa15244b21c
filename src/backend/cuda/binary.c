/* CUDA op glue of the broadcasting binary ops ADD and MUL (b broadcast to a's
 * shape; ut_binary_b_strides gives b's strides in a's shape padded to 4
 * dims). b's gradient is reduced over the broadcast positions in a fixed
 * order, with device scratch from the context's arena for the partial sums.
 * Every tensor is taken as stored (UT_KCAP_NATIVE_16: under autocast a
 * product's 16-bit output is added to the float32 residual stream without a
 * float32 copy of it).
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
    const ut_tensor *a = t->src[0], *b = t->src[1];
    ut_cuda_binary_fwd(op, t->data, (int)t->dtype, a->data, (int)a->dtype, b->data, (int)b->dtype, n,
                       ut_binary_b_strides(t));
}

/* Where backward adds a's and b's gradients: each as stored, except a 16-bit
 * tensor that is both a and b (x + x, x * x), whose two terms go into one
 * float32 copy of its gradient that is rounded back once at the end, the
 * bits core's float32 copies give. */
typedef struct {
    void *ga, *gb;
    int adt, bdt;
    float *wide; /* the float32 copy, or NULL */
} grads;

static grads grads_begin(ut_tensor *t, UT_KCTX) {
    ut_tensor *a = t->src[0], *b = t->src[1];
    grads g = {a->grad, b->grad, (int)a->dtype, (int)b->dtype, NULL};
    if (a == b && a->requires_grad && ut_dtype_is16(a->dtype)) {
        int64_t n = ut_nelem(a);
        g.wide = ut_kalloc(k, (size_t)n * sizeof(float));
        ut_backend_cuda.convert(g.wide, UT_F32, a->grad, a->dtype, n);
        g.ga = g.gb = g.wide;
        g.adt = g.bdt = (int)UT_F32;
    }
    return g;
}

static void grads_end(ut_tensor *t, const grads *g) {
    if (g->wide) ut_backend_cuda.convert(t->src[0]->grad, t->src[0]->dtype, g->wide, UT_F32, ut_nelem(t->src[0]));
}

/* b's gradient += the sum over broadcast positions of t->grad * other (NULL: 1) */
static void reduce_into_b(ut_tensor *t, const grads *g, const ut_tensor *other, const ut_kctx *k) {
    int64_t n[4];
    const int64_t *s = ut_binary_b_strides(t);
    shape4(t, n);
    size_t bytes = ut_cuda_bcast_reduce_scratch(n, s);
    void *scratch = bytes ? ut_kalloc(k, bytes) : NULL;
    ut_cuda_bcast_reduce(g->gb, g->bdt, t->grad, (int)t->dtype, other ? other->data : NULL,
                         other ? (int)other->dtype : 0, n, s, scratch);
}

void ut_add_fwd_cuda(ut_tensor *t, UT_KCTX) { binary_fwd(t, UT_CUDA_BIN_ADD); }
void ut_mul_fwd_cuda(ut_tensor *t, UT_KCTX) { binary_fwd(t, UT_CUDA_BIN_MUL); }

/* A fresh gradient (backend.h, UT_KCAP_FRESH_GRAD; never a == b) is written:
 * a's, and b's where b is not broadcast, as 0 + t's gradient in its dtype
 * (the bits adding into zeros gives); a broadcast b's is zeroed and summed
 * into. A source whose gradient core made t's own (UT_KCAP_PASS_GRAD,
 * ut_kpassed: the residual stream's) is left alone. */
void ut_add_bwd_cuda(ut_tensor *t, UT_KCTX) {
    ut_tensor *a = t->src[0], *b = t->src[1];
    int64_t n = ut_nelem(t);
    grads g = grads_begin(t, k);
    if (a->requires_grad && !ut_kpassed(k, 0)) {
        if (ut_kfresh(k, 0)) ut_cuda_put_dt(g.ga, g.adt, t->grad, (int)t->dtype, n);
        else ut_cuda_acc_dt(g.ga, g.adt, t->grad, (int)t->dtype, n);
    }
    if (b->requires_grad && !ut_kpassed(k, 1)) {
        if (ut_kfresh(k, 1) && ut_nelem(b) == n) {
            ut_cuda_put_dt(g.gb, g.bdt, t->grad, (int)t->dtype, n);
        } else {
            ut_kzero_fresh(k, t, 2u, ut_backend_cuda.memset);
            reduce_into_b(t, &g, NULL, k);
        }
    }
    grads_end(t, &g);
}

void ut_mul_bwd_cuda(ut_tensor *t, UT_KCTX) {
    ut_tensor *a = t->src[0], *b = t->src[1];
    grads g = grads_begin(t, k);
    if (a->requires_grad) { /* da += g * b (broadcast) */
        int64_t n[4];
        shape4(t, n);
        ut_cuda_mul_bwd_a(g.ga, g.adt, t->grad, (int)t->dtype, b->data, (int)b->dtype, n, ut_binary_b_strides(t));
    }
    if (b->requires_grad) reduce_into_b(t, &g, a, k);
    grads_end(t, &g);
}

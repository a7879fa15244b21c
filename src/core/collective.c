/* ut_collective: a collective (a function that combines a buffer across
 * ranks) as an op core implements once for every device (UT_OP_ANY in
 * ops.def). Its kernels are host code: they copy through the device's
 * backend and call the collective function, which reaches the device's
 * memory through the backend too (host stages), so they run on any
 * device, in stream order with the kernels around them. */
#include "internal.h"

typedef struct {
    ut_collective_fn fwd, bwd;
    void *user;
    const char *name;
} collective_rec;

static inline collective_rec *rec_of(const ut_tensor *t) { return t->aux[0]; }

ut_tensor *ut_collective(ut_ctx *ctx, ut_tensor *x, ut_collective_fn fwd, ut_collective_fn bwd, void *user,
                         const char *name) {
    if (!name) name = "collective";
    if (!ut_op_check(ctx, name, 1, &x, 0)) return NULL;
    if (!ut_is_contiguous(x)) x = ut_contiguous(ctx, x);
    if (!x) return NULL;
    collective_rec *r = ut_ctx_alloc(ctx, sizeof *r);
    *r = (collective_rec){fwd, bwd, user, name};
    ut_tensor *t = ut_op_new(ctx, UT_OP_COLLECTIVE, x->dtype, x->ndim, x->ne, 1, &x);
    if (!t) return NULL;
    t->aux[0] = r;
    return ut_op_run(t);
}

static void run_fn(ut_collective_fn fn, const collective_rec *r, ut_device dev, float *buf, int64_t n,
                   const ut_kctx *k) {
    char err[400] = "";
    if (fn(r->user, dev, buf, n, err, sizeof err)) ut_kfail(k, "%s: %s", r->name, err[0] ? err : "failed");
}

void ut_collective_fwd(ut_tensor *t, UT_KCTX) {
    const ut_backend *be = ut_backend_get(t->device);
    const collective_rec *r = rec_of(t);
    int64_t n = ut_nelem(t);
    be->copy(t->data, t->src[0]->data, (size_t)n * sizeof(float), UT_COPY_D2D);
    if (r->fwd) run_fn(r->fwd, r, t->device, t->data, n, k);
}

void ut_collective_bwd(ut_tensor *t, UT_KCTX) {
    ut_tensor *x = t->src[0];
    if (!x->requires_grad) return;
    const ut_backend *be = ut_backend_get(t->device);
    const collective_rec *r = rec_of(t);
    int64_t n = ut_nelem(t);
    float *g = t->grad;
    if (r->bwd) {
        g = ut_kalloc(k, (size_t)n * sizeof(float));
        be->copy(g, t->grad, (size_t)n * sizeof(float), UT_COPY_D2D);
        run_fn(r->bwd, r, t->device, g, n, k);
    }
    be->accumulate(x->grad, &g, 1, n, false);
}

/* ---- ut_collective_to: a collective whose output has another shape ---- */
typedef struct {
    ut_collective_to_fn fwd, bwd;
    void *user;
    const char *name;
} collective_to_rec;

ut_tensor *ut_collective_to(ut_ctx *ctx, ut_tensor *x, int ndim, const int64_t *ne, ut_collective_to_fn fwd,
                            ut_collective_to_fn bwd, void *user, const char *name) {
    if (!name) name = "collective";
    if (!ut_op_check(ctx, name, 1, &x, 0)) return NULL;
    if (ndim < 1 || ndim > UT_MAX_DIMS || !fwd || !bwd) {
        ut_op_error(ctx, name, 1, &x, "bad output shape or functions");
        return NULL;
    }
    if (!ut_is_contiguous(x)) x = ut_contiguous(ctx, x);
    if (!x) return NULL;
    collective_to_rec *r = ut_ctx_alloc(ctx, sizeof *r);
    *r = (collective_to_rec){fwd, bwd, user, name};
    ut_tensor *t = ut_op_new(ctx, UT_OP_COLLECTIVE_TO, UT_F32, ndim, ne, 1, &x);
    if (!t) return NULL;
    t->aux[0] = r;
    return ut_op_run(t);
}

void ut_collective_to_fwd(ut_tensor *t, UT_KCTX) {
    const collective_to_rec *r = t->aux[0];
    char err[400] = "";
    if (r->fwd(r->user, t->device, t->src[0]->data, ut_nelem(t->src[0]), t->data, ut_nelem(t), err, sizeof err))
        ut_kfail(k, "%s: %s", r->name, err[0] ? err : "failed");
}

void ut_collective_to_bwd(ut_tensor *t, UT_KCTX) {
    ut_tensor *x = t->src[0];
    if (!x->requires_grad) return;
    const collective_to_rec *r = t->aux[0];
    int64_t n = ut_nelem(x);
    float *g = ut_kalloc(k, (size_t)(n ? n : 1) * sizeof(float));
    char err[400] = "";
    if (r->bwd(r->user, t->device, t->grad, ut_nelem(t), g, n, err, sizeof err)) {
        ut_kfail(k, "%s: %s", r->name, err[0] ? err : "failed");
        return;
    }
    ut_backend_get(t->device)->accumulate(x->grad, &g, 1, n, false);
}

/* The dp strategy's worker group: one process, a model replica and a context
 * per worker thread. The trainer decides what each worker computes (its
 * share of the batch); this file owns the replicas and keeps their
 * parameters and gradients in step with worker 0's. */
#include "utrain/base.h"
#include "utrain/dist.h"
#include "../backend/backend.h"

struct ut_dp {
    int n;
    ut_model **m;   /* [0] is the caller's */
    ut_ctx **ctx;   /* [0] is the caller's */
    float **peer_grads; /* workers 1..n-1's flat gradient buffers */
};

ut_dp *ut_dp_new(int n, ut_model *m0, ut_ctx *ctx0, ut_dp_build_fn build, void *user, uint64_t seed,
                 char *err, size_t errn) {
    UT_ASSERT(n >= 1 && m0 && ctx0);
    ut_dp *d = ut_calloc_check(1, sizeof *d);
    d->n = n;
    d->m = ut_calloc_check((size_t)n, sizeof *d->m);
    d->ctx = ut_calloc_check((size_t)n, sizeof *d->ctx);
    d->peer_grads = ut_calloc_check((size_t)n, sizeof *d->peer_grads);
    d->m[0] = m0;
    d->ctx[0] = ctx0;
    for (int w = 1; w < n; w++) {
        d->m[w] = build(user, err, errn);
        if (!d->m[w]) {
            ut_dp_free(d);
            return NULL;
        }
        if (d->m[w]->params.numel != m0->params.numel) {
            ut_errorf(err, errn, "dp: worker %d's replica has %lld parameters, worker 0's %lld", w,
                      (long long)d->m[w]->params.numel, (long long)m0->params.numel);
            ut_dp_free(d);
            return NULL;
        }
        d->m[w]->checkpoint_activations = m0->checkpoint_activations;
        d->peer_grads[w - 1] = d->m[w]->params.flat_grad;
        /* on the replica's device; the trainer picks each worker's stream */
        d->ctx[w] = ut_ctx_new(&(ut_ctx_opts){.seed = seed, .device = d->m[w]->params.device});
    }
    ut_dp_broadcast(d);
    return d;
}

void ut_dp_free(ut_dp *d) {
    if (!d) return;
    for (int w = 1; w < d->n; w++) {
        if (d->m[w]) ut_model_free(d->m[w]);
        if (d->ctx[w]) ut_ctx_free(d->ctx[w]);
    }
    ut_free(d->m);
    ut_free(d->ctx);
    ut_free(d->peer_grads);
    ut_free(d);
}

int ut_dp_workers(const ut_dp *d) { return d->n; }
ut_model *ut_dp_model(ut_dp *d, int w) { return d->m[w]; }
ut_ctx *ut_dp_ctx(ut_dp *d, int w) { return d->ctx[w]; }

/* On the CPU the workers run side by side, a thread each. On a device they
 * all queue on the device's one compute stream, whose kernels run one after
 * another anyway, and the host work between launches is not made for
 * several threads at once (CUDA crashed now and then with it): there they
 * take turns, in worker order, which also keeps the results independent of
 * thread timing. */
void ut_dp_run(ut_dp *d, void (*fn)(void *user, int w), void *user) {
    if (d->m[0]->params.device != UT_CPU) {
        for (int w = 0; w < d->n; w++) fn(user, w);
        return;
    }
#pragma omp parallel for num_threads(d->n) schedule(static, 1)
    for (int w = 0; w < d->n; w++) fn(user, w);
}

/* Worker 0's gradients += the others' (added in worker order, so the sum
 * has the same bits whatever the thread count), the others' zeroed: one call
 * of the flat buffers' backend. */
void ut_dp_reduce_grads(ut_dp *d) {
    if (d->n < 2) return;
    ut_params *p = &d->m[0]->params;
    ut_backend_get(p->device)->accumulate(p->flat_grad, d->peer_grads, d->n - 1, p->numel, true);
}

void ut_dp_broadcast(ut_dp *d) {
    const ut_params *p = &d->m[0]->params;
    const ut_backend *be = ut_backend_get(p->device);
    for (int w = 1; w < d->n; w++)
        be->copy(d->m[w]->params.flat, p->flat, (size_t)p->numel * sizeof(float), UT_COPY_D2D);
}

/* Inputs prepared on the host (tensor.h, ut_inputs): arrays in memory the
 * device copies from fastest, kept from batch to batch, uploaded with one
 * asynchronous copy each, and the fence that says when that memory may be
 * written again. */
#include <stdio.h>
#include <string.h>

#include "internal.h"

void *ut_inputs_add(ut_inputs *in, ut_dtype dt, int ndim, const int64_t *ne) {
    if (in->n >= UT_MAX_INPUTS || ndim < 0 || ndim > UT_MAX_DIMS)
        ut_abort(__FILE__, __LINE__, "ut_inputs_add: array %d of at most %d, %d dimensions of at most %d", in->n + 1,
                 UT_MAX_INPUTS, ndim, UT_MAX_DIMS);
    int i = in->n++;
    ut_host_array *a = &in->a[i];
    *a = (ut_host_array){.dtype = dt, .ndim = ndim};
    size_t bytes = ut_dtype_size(dt);
    for (int d = 0; d < ndim; d++) bytes *= (size_t)(a->ne[d] = ne[d]);
    if (bytes > in->cap[i] || !in->buf[i]) { /* grows only: a loader's slot settles after a few batches */
        const ut_backend *be = ut_backend_get(in->dev);
        ut_inputs_wait(in);
        if (in->buf[i]) ut_host_free(be, in->buf[i]);
        in->cap[i] = bytes > 2 * in->cap[i] ? bytes : 2 * in->cap[i];
        if (in->cap[i] < 64) in->cap[i] = 64;
        in->buf[i] = ut_host_alloc(be, in->cap[i]);
    }
    return a->host = in->buf[i];
}

void ut_inputs_clear(ut_inputs *in) {
    ut_inputs_wait(in);
    in->n = 0;
    in->layout = 0;
    in->seq_len[0] = in->seq_len[1] = 0;
}

void ut_inputs_wait(ut_inputs *in) {
    if (in->fence) ut_event_sync(ut_backend_get(in->fence_dev), in->fence);
}

void ut_inputs_free(ut_inputs *in) {
    if (!in) return;
    ut_inputs_wait(in);
    const ut_backend *be = ut_backend_get(in->dev);
    for (int i = 0; i < UT_MAX_INPUTS; i++)
        if (in->buf[i]) ut_host_free(be, in->buf[i]);
    if (in->fence) ut_event_free(ut_backend_get(in->fence_dev), in->fence);
    *in = (ut_inputs){.dev = in->dev};
}

void ut_inputs_fence(ut_ctx *ctx, ut_inputs *in) {
    if (in->fence && in->fence_dev != ctx->device) {
        ut_inputs_wait(in);
        ut_event_free(ut_backend_get(in->fence_dev), in->fence);
        in->fence = NULL;
    }
    if (!in->fence) {
        in->fence = ut_event_new(ctx->be);
        in->fence_dev = ctx->device;
    }
    ut_event_record(ctx->be, in->fence, NULL);
}

ut_tensor *ut_tensor_from_async(ut_ctx *ctx, ut_dtype dt, int ndim, const int64_t *ne, const void *host) {
    ut_tensor *t = ut_tensor_new(ctx, dt, ndim, ne);
    if (t) {
        ut_copy_async(ctx->be, t->data, host, (size_t)ut_nelem(t) * ut_dtype_size(dt), UT_COPY_H2D, NULL);
        ut_flops_note_upload(ctx, t, host);
    }
    return t;
}

int ut_inputs_upload(ut_ctx *ctx, ut_inputs *in, ut_tensor **t) {
    for (int i = 0; i < in->n; i++)
        if (!(t[i] = ut_tensor_from_async(ctx, in->a[i].dtype, in->a[i].ndim, in->a[i].ne, in->a[i].host)))
            return -1;
    ut_inputs_fence(ctx, in);
    return 0;
}

int ut_input_error(char *err, size_t n, const char *model, const ut_host_array *x, const char *why) {
    char shape[128] = "";
    size_t k = 0;
    for (int d = 0; d < x->ndim && k < sizeof shape; d++)
        k += (size_t)snprintf(shape + k, sizeof shape - k, "%s%lld", d ? ", " : "", (long long)x->ne[d]);
    snprintf(err, n, "%s: %s (input: %s (%s))", model, why, ut_dtype_name(x->dtype), shape);
    return -1;
}

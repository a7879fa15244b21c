/* A decoder's key/value cache for generation (ut_kv_cache, nn.h): per layer
 * a key and a value buffer, time-major (max_len, rows, width), in memory of
 * a context that lives for the whole generation, so a step's rows go in
 * with one copy, the prefix so far is one contiguous slice, and following
 * the surviving beams is one row gather per buffer. */
#include "utrain/base.h"
#include "utrain/nn.h"
#include "utrain/ops.h"

struct ut_kv_cache {
    int64_t layers, max_len, rows, width;
    ut_tensor **buf; /* layer l's keys at 2l, values at 2l + 1 */
};

ut_kv_cache *ut_kv_cache_new(ut_ctx *keep, int64_t layers, int64_t max_len, int64_t rows, int64_t width) {
    ut_kv_cache *c = ut_calloc_check(1, sizeof *c);
    *c = (ut_kv_cache){.layers = layers, .max_len = max_len, .rows = rows, .width = width,
                       .buf = ut_calloc_check((size_t)(2 * layers), sizeof *c->buf)};
    for (int64_t i = 0; i < 2 * layers; i++)
        c->buf[i] = ut_tensor_zeros(keep, UT_F32, 3, (int64_t[]){max_len, rows, width});
    return c;
}

void ut_kv_cache_free(ut_kv_cache *c) {
    if (!c) return;
    ut_free(c->buf);
    ut_free(c);
}

int ut_kv_cache_put(ut_kv_cache *c, int64_t layer, int which, int64_t t, const ut_tensor *x) {
    ut_tensor *b = c->buf[2 * layer + which];
    int64_t row = c->rows * c->width, k = x ? ut_nelem(x) / row : 0;
    if (!b || !x || k < 1 || k * row != ut_nelem(x) || t < 0 || t + k > c->max_len) return -1;
    return ut_tensor_copy_into(b, t * row, x);
}

ut_tensor *ut_kv_cache_get(ut_ctx *ctx, const ut_kv_cache *c, int64_t layer, int which, int64_t len) {
    ut_tensor *b = ut_tensor_share(ctx, c->buf[2 * layer + which]);
    return b ? ut_slice(ctx, b, 0, 0, len) : NULL;
}

int ut_kv_cache_reorder(ut_ctx *ctx, ut_kv_cache *c, const int32_t *rows, int64_t len) {
    if (len <= 0) return 0;
    int64_t N = c->rows;
    int32_t *idx = ut_ctx_alloc(ctx, (size_t)(len * N) * sizeof *idx);
    for (int64_t t = 0; t < len; t++)
        for (int64_t r = 0; r < N; r++) idx[t * N + r] = (int32_t)(t * N + rows[r]);
    ut_tensor *it = ut_tensor_from(ctx, UT_I32, 1, (int64_t[]){len * N}, idx);
    for (int64_t i = 0; i < 2 * c->layers; i++) {
        ut_tensor *all = ut_reshape(ctx, ut_tensor_share(ctx, c->buf[i]), 2, (int64_t[]){c->max_len * N, c->width});
        ut_tensor *g = ut_embedding(ctx, it, all);
        if (!g || ut_tensor_copy_into(c->buf[i], 0, g)) return -1;
    }
    return 0;
}

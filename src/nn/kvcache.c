/* What the models' decoders for generation share (nn.h): the key/value
 * cache (ut_kv_cache: per layer a key and a value buffer, time-major
 * (max_len, rows, width), in memory of a context that lives for the whole
 * generation, so a step's rows go in with one copy, the prefix so far is one
 * contiguous slice, and following the surviving beams is one row gather per
 * buffer), and a decoding state's common part (ut_decode_base): its two
 * contexts, the beam-reorder check, sources expanded to their rows. */
#include <float.h>
#include <string.h>

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

/* ---- what the models' decoders share (ut_decode_base) ---- */
static ut_ctx *decode_ctx(const ut_model *m) {
    ut_ctx *c = ut_ctx_new(&(ut_ctx_opts){.arena_bytes = 16u << 20, .device = m->params.device});
    ut_ctx_set_grad_enabled(c, false);
    ut_ctx_set_training(c, false);
    return c;
}

void ut_decode_base_init(ut_decode_base *b, ut_model *m, const char *model, int64_t rows, int per, int64_t max_len,
                         bool cache) {
    *b = (ut_decode_base){.m = m, .model = model, .keep = decode_ctx(m), .ctx = decode_ctx(m), .rows = rows,
                          .per = per, .max_len = max_len, .cache = cache};
}

void ut_decode_base_free(ut_decode_base *b) {
    ut_ctx_free(b->ctx);
    ut_ctx_free(b->keep);
    ut_kv_cache_free(b->kv);
    ut_free(b->cross);
}

void ut_decode_end(void *state) {
    if (!state) return;
    ut_decode_base_free(state);
    ut_free(state);
}

const int32_t *ut_decode_start(ut_decode_base *b, int64_t start) {
    int32_t *p = ut_ctx_alloc(b->keep, (size_t)b->rows * sizeof *p);
    for (int64_t r = 0; r < b->rows; r++) p[r] = (int32_t)start;
    return p;
}

int ut_decode_failed(const ut_decode_base *b, ut_ctx *ctx, char *err, size_t n) {
    return ut_ctx_error(ctx) ? ut_errorf(err, n, "%s generation: %s", b->model, ut_ctx_error(ctx)) : 0;
}

int ut_decode_reorder(ut_decode_base *b, const int32_t *rows, char *err, size_t n) {
    for (int64_t r = 0; r < b->rows; r++)
        if (rows[r] < 0 || rows[r] >= b->rows || rows[r] / b->per != r / b->per)
            return ut_errorf(err, n, "%s generation: row %lld cannot continue row %d of another source", b->model,
                             (long long)r, rows[r]);
    bool same = true; /* the beams kept their rows: nothing to move */
    for (int64_t r = 0; r < b->rows && same; r++) same = rows[r] == r;
    if (same || !b->cache || !b->kv) return 0;
    ut_kv_cache_reorder(b->ctx, b->kv, rows, b->len);
    int rc = ut_decode_failed(b, b->ctx, err, n);
    ut_ctx_reset(b->ctx);
    return rc;
}

ut_tensor *ut_decode_expand(ut_ctx *ctx, ut_tensor *x, int per) {
    if (!x) return NULL;
    int64_t B = x->ne[0], row = ut_nelem(x) / (B ? B : 1);
    int32_t *idx = ut_ctx_alloc(ctx, (size_t)(B * per) * sizeof *idx);
    for (int64_t r = 0; r < B * per; r++) idx[r] = (int32_t)(r / per);
    ut_tensor *g = ut_embedding(ctx, ut_tensor_from(ctx, UT_I32, 1, (int64_t[]){B * per}, idx),
                                ut_reshape(ctx, x, 2, (int64_t[]){B, row}));
    int64_t ne[UT_MAX_DIMS];
    for (int d = 0; d < x->ndim; d++) ne[d] = x->ne[d];
    ne[0] = B * per;
    return g ? ut_reshape(ctx, g, x->ndim, ne) : NULL;
}

float *ut_decode_mask(ut_ctx *ctx, const int32_t *mask, int64_t B, int64_t S, int per) {
    float *m = ut_ctx_alloc(ctx, (size_t)(B * per * S) * sizeof *m);
    for (int64_t r = 0; r < B * per; r++)
        for (int64_t t = 0; t < S; t++) m[r * S + t] = mask[(r / per) * S + t] ? 0.0f : -FLT_MAX;
    return m;
}

int ut_decode_logits(ut_decode_base *b, ut_tensor *logits, int64_t len, float *out, char *err, size_t n) {
    int rc = ut_decode_failed(b, b->ctx, err, n);
    if (!rc && (!logits || ut_tensor_get(logits, out, (size_t)ut_nelem(logits) * sizeof(float))))
        rc = ut_errorf(err, n, "%s generation: reading the logits failed", b->model);
    ut_ctx_reset(b->ctx);
    if (!rc) b->len = len;
    return rc;
}

int ut_decode_step_ok(const ut_decode_base *b, int64_t len, char *err, size_t n) {
    if (len >= 1 && len <= b->max_len && (!b->cache || len == b->len + 1)) return 0;
    return ut_errorf(err, n, "%s generation: step of %lld tokens after %lld (at most %lld)", b->model, (long long)len,
                     (long long)b->len, (long long)b->max_len);
}

ut_tensor *ut_decode_last_ids(ut_decode_base *b, const int32_t *seq, int64_t ld, int64_t len) {
    int32_t *ids = ut_ctx_alloc(b->ctx, (size_t)b->rows * sizeof *ids);
    for (int64_t r = 0; r < b->rows; r++) ids[r] = seq[r * ld + len - 1];
    return ut_tensor_from(b->ctx, UT_I32, 2, (int64_t[]){b->rows, 1}, ids);
}

ut_tensor *ut_decode_prefix(ut_decode_base *b, const int32_t *seq, int64_t ld, int64_t len) {
    int32_t *ids = ut_ctx_alloc(b->ctx, (size_t)(b->rows * len) * sizeof *ids);
    for (int64_t r = 0; r < b->rows; r++) memcpy(ids + r * len, seq + r * ld, (size_t)len * sizeof *ids);
    return ut_tensor_from(b->ctx, UT_I32, 2, (int64_t[]){b->rows, len}, ids);
}

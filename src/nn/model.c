/* The model: parameter store over two flat buffers, and the registry. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "utrain/base.h"
#include "utrain/ops.h"
#include "utrain/nn.h"
#include "../backend/backend.h"

/* The device and the layout of the models made while ut_model_create_on
 * and ut_model_create_layout run a build. */
static _Thread_local ut_device build_device = UT_CPU;
static _Thread_local const ut_model_layout *build_layout;

static const ut_backend *params_backend(const ut_params *p) { return ut_backend_get(p->device); }

ut_model *ut_model_new(const char *type) {
    ut_model *m = ut_calloc_check(1, sizeof *m);
    m->params.device = build_device;
    m->tp_size = 1;
    m->pp_size = 1;
    size_t n = strlen(type) + 1;
    m->type = memcpy(ut_malloc_check(n), type, n);
    return m;
}

void ut_model_order_at(ut_model *m, int64_t key) {
    m->params.ordered = true;
    m->params.order_next = key;
}

ut_tensor *ut_param_add(ut_model *m, const char *name, int ndim, const int64_t *ne, ut_init init) {
    ut_params *p = &m->params;
    UT_ASSERT(!p->flat); /* parameters are registered before ut_model_finalize */
    UT_ASSERT(ndim >= 1 && ndim <= UT_MAX_DIMS);
    if (p->n == p->cap) {
        p->cap = p->cap ? 2 * p->cap : 32;
        p->t = ut_realloc_check(p->t, p->cap * sizeof *p->t);
        p->names = ut_realloc_check(p->names, p->cap * sizeof *p->names);
        p->init = ut_realloc_check(p->init, p->cap * sizeof *p->init);
        p->segs = ut_realloc_check(p->segs, p->cap * sizeof *p->segs);
        p->part = ut_realloc_check(p->part, p->cap * sizeof *p->part);
        p->order = ut_realloc_check(p->order, p->cap * sizeof *p->order);
    }
    p->order[p->n] = p->order_next++;
    ut_tensor *t = ut_calloc_check(1, sizeof *t);
    t->dtype = UT_F32;
    t->device = p->device;
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++) t->ne[i] = ne[i];
    ut_set_contiguous_strides(t);
    t->requires_grad = true;
    t->param_index = p->n;
    size_t len = strlen(name) + 1;
    p->names[p->n] = memcpy(ut_malloc_check(len), name, len);
    t->name = p->names[p->n];
    p->t[p->n] = t;
    p->init[p->n] = init;
    p->segs[p->n] = (ut_param_seg){.offset = p->numel, .numel = ut_nelem(t), .decay = ndim >= 2,
                                   .rows = ndim >= 2 ? ne[ndim - 2] : 0, .cols = ndim >= 2 ? ne[ndim - 1] : 0};
    p->part[p->n] = (ut_partition){.dim = 0, .parts = 1, .part = 0, .blocks = 1};
    for (int i = 0; i < ndim; i++) p->part[p->n].full_ne[i] = ne[i];
    p->numel += ut_nelem(t);
    p->n++;
    return t;
}

/* Random initialisation runs in chunks of this many elements, filled in
 * parallel; the values do not depend on the chunking. */
#define INIT_CHUNK 65536

ut_tensor *ut_param_add_part(ut_model *m, const char *name, int ndim, const int64_t *full_ne, ut_init init,
                             int dim, int parts, int part, int blocks, char *err, size_t errn) {
    if (ndim < 1 || ndim > UT_MAX_DIMS || dim < 0 || dim >= ndim || parts < 1 || part < 0 || part >= parts ||
        blocks < 1 || full_ne[dim] % ((int64_t)parts * blocks)) {
        snprintf(err, errn,
                 "parameter %s: cannot split dimension %d (of %d) of size %lld into %d block(s) of %d parts and "
                 "take part %d",
                 name, dim, ndim, dim >= 0 && dim < ndim ? (long long)full_ne[dim] : -1LL, blocks, parts, part);
        return NULL;
    }
    int64_t ne[UT_MAX_DIMS];
    for (int i = 0; i < ndim; i++) ne[i] = full_ne[i];
    ne[dim] /= parts;
    ut_tensor *t = ut_param_add(m, name, ndim, ne, init);
    ut_partition *pt = &m->params.part[t->param_index];
    *pt = (ut_partition){.dim = dim, .parts = parts, .part = part, .blocks = blocks};
    for (int i = 0; i < ndim; i++) pt->full_ne[i] = full_ne[i];
    return t;
}

int64_t ut_partition_full_row(const ut_tensor *t, const ut_partition *pt, int part, int64_t r) {
    const int64_t L = t->ne[pt->dim], F = pt->full_ne[pt->dim];
    const int64_t piece = F / ((int64_t)pt->blocks * pt->parts); /* rows of one block held by one part */
    int64_t o = r / L, c = r % L;
    return o * F + (c / piece) * (F / pt->blocks) + part * piece + c % piece;
}

/* Fills a part (ut_partition) with its slice of the full tensor, row by row
 * (ut_partition_full_row). */
static void fill_part(float *x, const ut_tensor *t, const ut_partition *pt, ut_init init, uint64_t seed,
                      const char *name) {
    int64_t inner = 1, outer = 1;
    for (int d = pt->dim + 1; d < t->ndim; d++) inner *= t->ne[d];
    for (int d = 0; d < pt->dim; d++) outer *= t->ne[d];
    const int64_t L = t->ne[pt->dim];
#pragma omp parallel for schedule(static) if (outer * L * inner >= 4 * INIT_CHUNK)
    for (int64_t r = 0; r < outer * L; r++)
        ut_init_fill(x + r * inner, ut_partition_full_row(t, pt, pt->part, r) * inner, inner, init, seed, name);
}


/* The Philox stream of a parameter: a 64-bit FNV-1a hash of its name, mixed
 * (the dropout streams are mixes of micro-batch coordinates: another domain). */
static uint64_t name_stream(const char *name) {
    uint64_t h = 0xcbf29ce484222325ULL;
    for (const unsigned char *p = (const unsigned char *)name; *p; p++) h = (h ^ *p) * 0x100000001b3ULL;
    return ut_philox_stream(h, 0x696e6974ULL /* "init" */, 0);
}

void ut_init_fill(float *x, int64_t first, int64_t n, ut_init init, uint64_t seed, const char *name) {
    float a = init.a;
    if (init.kind == UT_INIT_ZEROS || init.kind == UT_INIT_ONES) {
        for (int64_t j = 0; j < n; j++) x[j] = init.kind == UT_INIT_ONES ? 1.0f : 0.0f;
        return;
    }
    ut_philox g;
    ut_philox_seed(&g, seed);
    const uint64_t stream = name_stream(name);
    uint32_t c[4];
    if (init.kind == UT_INIT_UNIFORM) { /* element e: word e % 4 of block e / 4, its top 24 bits */
        for (int64_t j = 0; j < n; j++) {
            uint64_t e = (uint64_t)(first + j);
            if (j == 0 || e % 4 == 0) ut_philox_block(g.key, stream, e / 4, c);
            x[j] = a * (2.0f * ((float)(c[e % 4] >> 8) * (1.0f / 16777216.0f)) - 1.0f);
        }
        return;
    }
    /* Box-Muller: elements 2k and 2k+1 are the pair of block k, from two
     * 53-bit uniforms (u1 in (0, 1], so the log is finite) */
    double r = 0, sn = 0, cs = 0;
    for (int64_t j = 0; j < n; j++) {
        uint64_t e = (uint64_t)(first + j);
        if (j == 0 || e % 2 == 0) {
            ut_philox_block(g.key, stream, e / 2, c);
            double u1 = (double)((((uint64_t)c[0] << 32) | c[1]) >> 11) * (1.0 / 9007199254740992.0);
            double u2 = (double)((((uint64_t)c[2] << 32) | c[3]) >> 11) * (1.0 / 9007199254740992.0);
            r = sqrt(-2.0 * log(1.0 - u1));
            sincos(6.283185307179586 * u2, &sn, &cs);
        }
        x[j] = a * (float)(r * (e % 2 ? sn : cs));
    }
}

/* The chunks of parameter i's whole-tensor fill (none for a part of a split
 * one: fill_part fills it). */
static int64_t chunks_of(const ut_params *p, int i) {
    return p->part[i].parts > 1 ? 0 : (p->segs[i].numel + INIT_CHUNK - 1) / INIT_CHUNK;
}

/* Element e of parameter NAME is a function of (seed, NAME, e) alone
 * (ut_init_fill): not of the parameter's index, the other parameters, the
 * thread count, or which rank or device fills it, so a shard of a parameter
 * filled on its own equals that slice of the whole. */
void ut_model_finalize(ut_model *m, uint64_t seed) {
    ut_params *p = &m->params;
    const ut_backend *be = params_backend(p);
    p->flat = ut_pages_alloc(be, p->numel);
    p->flat_grad = ut_pages_alloc(be, p->numel); /* zeroed, and not resident until written */
    int64_t nchunks = 0;
    for (int i = 0; i < p->n; i++) {
        ut_tensor *t = p->t[i];
        ut_tensor_bind(t, p->flat + p->segs[i].offset, p->flat_grad + p->segs[i].offset);
        nchunks += chunks_of(p, i);
    }
    /* the values are drawn on the host: in place where the flat buffers are
     * host memory, else in a staging buffer copied over at the end */
    ut_stage st;
    float *host = ut_stage_begin(&st, be, p->flat, (size_t)p->numel * sizeof(float), false);
    /* k numbers the chunks of all parameters in order; each iteration finds
     * its parameter i and chunk c within it (a walk over the short list) */
#pragma omp parallel for schedule(dynamic, 4) if (p->numel >= 4 * INIT_CHUNK)
    for (int64_t k = 0; k < nchunks; k++) {
        int i = 0;
        int64_t c = k;
        while (c >= chunks_of(p, i)) c -= chunks_of(p, i++);
        int64_t off = c * INIT_CHUNK, n = p->segs[i].numel - off;
        ut_init_fill(host + p->segs[i].offset + off, off, n < INIT_CHUNK ? n : INIT_CHUNK, p->init[i], seed,
                     p->names[i]);
    }
    for (int i = 0; i < p->n; i++) /* the parts of split parameters, run by run */
        if (p->part[i].parts > 1) fill_part(host + p->segs[i].offset, p->t[i], &p->part[i], p->init[i], seed, p->names[i]);
    ut_stage_end(&st, true);
}

void ut_model_free(ut_model *m) {
    if (!m) return;
    ut_inputs_free(m->host_inputs); /* waits for uploads from it */
    ut_free(m->host_inputs);
    ut_params *p = &m->params;
    for (int i = 0; i < p->n; i++) {
        ut_free(p->t[i]);
        ut_free(p->names[i]);
    }
    ut_free(p->t);
    ut_free(p->names);
    ut_free(p->init);
    ut_free(p->part);
    ut_free(p->order);
    ut_free(p->segs);
    ut_pages_free(params_backend(p), p->flat, p->numel);
    ut_pages_free(params_backend(p), p->flat_grad, p->numel);
    if (m->free_impl) m->free_impl(m->impl);
    ut_free(m->type);
    ut_free(m);
}

void ut_model_zero_grad(ut_model *m) {
    params_backend(&m->params)->memset(m->params.flat_grad, 0, (size_t)m->params.numel * sizeof(float));
}

ut_tensor *ut_model_param(const ut_model *m, const char *name) {
    for (int i = 0; i < m->params.n; i++)
        if (strcmp(m->params.names[i], name) == 0) return m->params.t[i];
    return NULL;
}

ut_tensor *ut_model_forward_inputs(ut_model *m, ut_ctx *ctx, ut_inputs *in) {
    ut_prepared p = {.n = in->n, .layout = in->layout, .seq_len = {in->seq_len[0], in->seq_len[1]}};
    if (ut_ctx_error(ctx) || ut_inputs_upload(ctx, in, p.t)) return NULL;
    return m->forward_prepared(m, ctx, &p);
}

ut_tensor *ut_model_forward_loss_inputs(ut_model *m, ut_ctx *ctx, ut_inputs *in, ut_tensor *targets,
                                        ut_tensor **output) {
    ut_prepared p = {.n = in->n, .layout = in->layout, .seq_len = {in->seq_len[0], in->seq_len[1]}};
    ut_tensor *unused;
    if (!output) output = &unused;
    *output = NULL;
    if (ut_ctx_error(ctx) || ut_inputs_upload(ctx, in, p.t)) return NULL;
    if (m->forward_loss) {
        ut_tensor *loss = m->forward_loss(m, ctx, &p, targets);
        if (loss || ut_ctx_error(ctx)) return loss;
    }
    *output = m->forward_prepared(m, ctx, &p);
    return *output ? m->loss(m, ctx, *output, targets) : NULL;
}

/* A model with prepare given a tensor: its values to the host (the
 * context's arena), prepared there into the model's own ut_inputs (kept, so
 * a warm step allocates nothing), for uploading (the trainer does this on
 * the loader thread instead). NULL with the context's error. */
static ut_inputs *prepare_via_host(ut_model *m, ut_ctx *ctx, ut_tensor *x, ut_tensor *targets) {
    if (!ut_op_check(ctx, m->type, 1, &x, 1)) return NULL;
    if (!ut_is_contiguous(x)) {
        ut_op_error(ctx, m->type, 1, &x, "expects a contiguous input");
        return NULL;
    }
    size_t bytes = (size_t)ut_nelem(x) * ut_dtype_size(x->dtype);
    ut_host_array h = {.dtype = x->dtype, .ndim = x->ndim, .host = ut_ctx_alloc(ctx, bytes ? bytes : 1)};
    memcpy(h.ne, x->ne, sizeof h.ne);
    if (!m->host_inputs) {
        m->host_inputs = ut_calloc_check(1, sizeof *m->host_inputs);
        m->host_inputs->dev = m->params.device;
    }
    ut_inputs *in = m->host_inputs;
    ut_inputs_clear(in); /* the last call's uploads are done */
    char err[512];
    if (ut_tensor_get(x, h.host, bytes)) return NULL;
    /* the targets too, for a model that prepares from them (in->targets) */
    if (m->prepare_targets && targets && ut_is_contiguous(targets)) {
        size_t tb = (size_t)ut_nelem(targets) * ut_dtype_size(targets->dtype);
        in->targets = (ut_host_array){.dtype = targets->dtype, .ndim = targets->ndim,
                                      .host = ut_ctx_alloc(ctx, tb ? tb : 1)};
        memcpy(in->targets.ne, targets->ne, sizeof in->targets.ne);
        if (ut_tensor_get(targets, in->targets.host, tb)) {
            in->targets = (ut_host_array){0};
            return NULL;
        }
    }
    int rc = m->prepare(m, &h, in, err, sizeof err);
    in->targets = (ut_host_array){0};
    if (rc) {
        ut_ctx_set_error(ctx, "%s", err);
        return NULL;
    }
    return in;
}

static ut_tensor *forward_via_host(ut_model *m, ut_ctx *ctx, ut_tensor *x) {
    ut_inputs *in = prepare_via_host(m, ctx, x, NULL);
    return in ? ut_model_forward_inputs(m, ctx, in) : NULL;
}

ut_tensor *ut_model_forward_loss(ut_model *m, ut_ctx *ctx, ut_tensor *x, ut_tensor *targets, ut_tensor **output) {
    ut_tensor *unused;
    if (!output) output = &unused;
    *output = NULL;
    if (!m->prepare) {
        *output = m->forward(m, ctx, x);
        return *output ? m->loss(m, ctx, *output, targets) : NULL;
    }
    ut_inputs *in = prepare_via_host(m, ctx, x, targets);
    return in ? ut_model_forward_loss_inputs(m, ctx, in, targets, output) : NULL;
}

ut_tensor *ut_model_forward(ut_model *m, ut_ctx *ctx, ut_tensor *input) {
    return m->prepare ? forward_via_host(m, ctx, input) : m->forward(m, ctx, input);
}

/* Multi-label: the mean binary cross-entropy with logits of x (N, K)
 * against 0/1 targets (N, K), as torch's BCEWithLogitsLoss. For a label y
 * of 0 or 1 it is the cross-entropy of the two logits (0, x) against class
 * y: -log(e^(y x) / (1 + e^x)). The pairs are x times the constant rows
 * (0, 1), a linear of x (N K, 1) with the weight ((0), (1)), so the fused
 * cross-entropy of every backend computes it and its gradient,
 * sigmoid(x) - y, without an op of its own. */
static ut_tensor *multi_label_loss(ut_model *m, ut_ctx *ctx, ut_tensor *logits, ut_tensor *targets) {
    char what[96];
    snprintf(what, sizeof what, "%s multi-label loss", m->type);
    if (!ut_op_check(ctx, what, 2, (ut_tensor *[]){logits, targets}, 2)) return NULL;
    if (logits->ndim != 2 || logits->ne[0] != targets->ne[0] || logits->ne[1] != targets->ne[1] ||
        !ut_is_contiguous(targets)) {
        ut_op_error(ctx, what, 2, (ut_tensor *[]){logits, targets},
                    "0/1 targets (N, K), contiguous, are each example's labels: the logits must be (N, K) "
                    "(model.num_labels K)");
        return NULL;
    }
    int64_t NK = ut_nelem(logits);
    static const float pair[2] = {0.0f, 1.0f};
    ut_tensor *w = ut_tensor_from(ctx, UT_F32, 2, (int64_t[]){2, 1}, pair);
    ut_tensor *x = ut_reshape(ctx, ut_contiguous(ctx, logits), 2, (int64_t[]){NK, 1});
    return ut_cross_entropy(ctx, ut_linear(ctx, x, w, NULL), ut_reshape(ctx, targets, 1, (int64_t[]){NK}), -100);
}

ut_tensor *ut_model_class_loss(ut_model *m, ut_ctx *ctx, ut_tensor *logits, ut_tensor *targets) {
    if (targets && targets->dtype == UT_I32 && targets->ndim == 2) return multi_label_loss(m, ctx, logits, targets);
    if (!targets || targets->dtype != UT_F32) return ut_cross_entropy(ctx, logits, targets, -100);
    /* a regression: one score per example */
    char what[96];
    snprintf(what, sizeof what, "%s regression loss", m->type);
    if (!ut_op_check(ctx, what, 2, (ut_tensor *[]){logits, targets}, 0)) return NULL;
    if (logits->ndim != 2 || logits->ne[1] != 1 || targets->ndim != 1 || targets->ne[0] != logits->ne[0]) {
        ut_op_error(ctx, what, 2, (ut_tensor *[]){logits, targets},
                    "float targets (N) are scores: the logits must be (N, 1) (model.num_labels 1)");
        return NULL;
    }
    return ut_mse(ctx, ut_reshape(ctx, logits, 1, (int64_t[]){logits->ne[0]}), targets);
}

int ut_model_problem_type(const ut_kv *opts, ut_problem *type, bool *said, char *err, size_t n) {
    const char *pt = ut_kv_get(opts, "problem_type"), *key = ut_kv_get(opts, "num_labels") ? "num_labels" : "num_classes";
    long long K = 0;
    char e[256];
    *type = UT_PROBLEM_SINGLE_LABEL;
    *said = false;
    if (ut_kv_get(opts, key) && ut_kv_int(opts, key, 0, &K, e, sizeof e)) return ut_errorf(err, n, "model.%s", e);
    *said = pt || K;
    if (pt && !strcmp(pt, "regression")) {
        if (K && K != 1)
            return ut_errorf(err, n, "model.problem_type: regression predicts one score per example, and model.%s "
                                     "is %lld: set model.%s: 1 (or remove it)", key, K, key);
        *type = UT_PROBLEM_REGRESSION;
        return 0;
    }
    if (pt && !strcmp(pt, "single_label_classification")) {
        if (K == 1)
            return ut_errorf(err, n, "model.problem_type: single_label_classification with model.%s 1: a classifier "
                                     "needs at least 2 classes; for a score per example write problem_type: "
                                     "regression", key);
        return 0;
    }
    if (pt && !strcmp(pt, "multi_label_classification")) {
        if (K == 1)
            return ut_errorf(err, n, "model.problem_type: multi_label_classification with model.%s 1: one label "
                                     "that an example has or not is a two-class task (single_label_classification, "
                                     "model.%s: 2)", key, key);
        *type = UT_PROBLEM_MULTI_LABEL;
        return 0;
    }
    if (pt)
        return ut_errorf(err, n, "model.problem_type: '%s' is not a problem type (regression, "
                                 "single_label_classification, multi_label_classification)", pt);
    if (K == 1) *type = UT_PROBLEM_REGRESSION;
    return 0;
}

/* targets (B, T) against a (B, T, ...) tensor x of the decoder: logits, or
 * the states the head reads */
static bool seq2seq_targets_fit(ut_model *m, ut_ctx *ctx, ut_tensor *x, ut_tensor *targets, const char *x_is) {
    char what[96], why[128];
    snprintf(what, sizeof what, "%s seq2seq loss", m->type);
    if (!ut_op_check(ctx, what, 2, (ut_tensor *[]){x, targets}, 2)) return false;
    if (targets->ndim != 2 || x->ndim != 3 || targets->ne[0] != x->ne[0] || targets->ne[1] != x->ne[1]) {
        snprintf(why, sizeof why, "targets (B, T) must match the %s: T the batch's longest target", x_is);
        ut_op_error(ctx, what, 2, (ut_tensor *[]){x, targets}, why);
        return false;
    }
    return true;
}

ut_tensor *ut_model_seq2seq_loss(ut_model *m, ut_ctx *ctx, ut_tensor *logits, ut_tensor *targets) {
    if (!seq2seq_targets_fit(m, ctx, logits, targets, "logits (B, T, V)")) return NULL;
    return ut_cross_entropy(ctx, logits, targets, -100);
}

ut_tensor *ut_model_token_loss(ut_model *m, ut_ctx *ctx, ut_tensor *logits, ut_tensor *targets) {
    char what[96];
    snprintf(what, sizeof what, "%s token classification loss", m->type);
    if (!ut_op_check(ctx, what, 2, (ut_tensor *[]){logits, targets}, 2)) return NULL;
    if (targets->dtype != UT_I32 || targets->ndim != 2 || logits->ndim != 3 || targets->ne[0] != logits->ne[0] ||
        targets->ne[1] != logits->ne[1]) {
        ut_op_error(ctx, what, 2, (ut_tensor *[]){logits, targets},
                    "I32 targets (B, T), a class per token, must match the logits (B, T, K)");
        return NULL;
    }
    return ut_cross_entropy(ctx, logits, targets, -100);
}

ut_tensor *ut_model_seq2seq_head_loss(ut_model *m, ut_ctx *ctx, ut_tensor *h, ut_tensor *w, ut_tensor *b,
                                      ut_tensor *targets) {
    if (!seq2seq_targets_fit(m, ctx, h, targets, "decoder's states (B, T, C)")) return NULL;
    return ut_linear_cross_entropy(ctx, h, w, b, targets, -100);
}

ut_tensor *ut_model_loss(ut_model *m, ut_ctx *ctx, ut_tensor *output, ut_tensor *targets) {
    return m->loss(m, ctx, output, targets);
}

/* ---- registry ---- */
typedef struct { char name[64]; ut_model_build_fn build; } entry;
static entry registry[64];
static int nregistry;

ut_model *ut_mlp_build(const ut_kv *opts, uint64_t seed, char *err, size_t n);
ut_model *ut_cnn_build(const ut_kv *opts, uint64_t seed, char *err, size_t n);
ut_model *ut_gpt2_build(const ut_kv *opts, uint64_t seed, char *err, size_t n);
ut_model *ut_bow_build(const ut_kv *opts, uint64_t seed, char *err, size_t n);
ut_model *ut_bert_build(const ut_kv *opts, uint64_t seed, char *err, size_t n);
ut_model *ut_bart_build(const ut_kv *opts, uint64_t seed, char *err, size_t n);
ut_model *ut_roberta_build(const ut_kv *opts, uint64_t seed, char *err, size_t n);
ut_model *ut_t5_build(const ut_kv *opts, uint64_t seed, char *err, size_t n);

static void add(const char *name, ut_model_build_fn build) {
    for (int i = 0; i < nregistry; i++)
        if (strcmp(registry[i].name, name) == 0) {
            registry[i].build = build;
            return;
        }
    UT_ASSERT(nregistry < (int)(sizeof registry / sizeof registry[0]));
    UT_ASSERT(strlen(name) < sizeof registry[0].name);
    strcpy(registry[nregistry].name, name);
    registry[nregistry++].build = build;
}

static void register_builtins(void) {
    static bool done;
    if (done) return;
    done = true;
    add("mlp", ut_mlp_build);
    add("cnn", ut_cnn_build);
    add("gpt2", ut_gpt2_build);
    add("bow", ut_bow_build);
    add("bert", ut_bert_build);
    add("bart", ut_bart_build);
    add("roberta", ut_roberta_build);
    add("t5", ut_t5_build);
}

void ut_model_register(const char *name, ut_model_build_fn build) {
    register_builtins(); /* so a user's model of the same name replaces the built-in */
    add(name, build);
}

const char *ut_model_names(char *buf, size_t n) {
    register_builtins();
    size_t k = 0;
    buf[0] = 0;
    for (int i = 0; i < nregistry && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, "%s%s", i ? ", " : "", registry[i].name);
    return buf;
}

ut_model *ut_model_create_on(const char *name, const ut_kv *opts, uint64_t seed, ut_device dev, char *err,
                             size_t n) {
    if (ut_backend_check(dev, err, n)) return NULL;
    ut_device saved = build_device;
    build_device = dev;
    ut_model *m = ut_model_create(name, opts, seed, err, n);
    build_device = saved;
    return m;
}

ut_model_layout ut_model_build_layout(void) {
    return build_layout ? *build_layout : (ut_model_layout){.tp_rank = 0, .tp_size = 1};
}

ut_model *ut_model_create_layout(const char *name, const ut_kv *opts, uint64_t seed, ut_device dev,
                                 const ut_model_layout *layout, char *err, size_t n) {
    if (layout && layout->pp_size > 1 && (layout->pp_rank < 0 || layout->pp_rank >= layout->pp_size)) {
        snprintf(err, n, "model %s: pipeline stage %d of %d", name, layout->pp_rank, layout->pp_size);
        return NULL;
    }
    if (layout && (layout->tp_size < 1 || layout->tp_rank < 0 || layout->tp_rank >= layout->tp_size)) {
        snprintf(err, n, "model %s: tensor-parallel rank %d of %d", name, layout->tp_rank, layout->tp_size);
        return NULL;
    }
    const ut_model_layout *saved = build_layout;
    build_layout = layout;
    ut_model *m = ut_model_create_on(name, opts, seed, dev, err, n);
    build_layout = saved;
    int tp = layout ? layout->tp_size : 1, pp = layout && layout->pp_size > 1 ? layout->pp_size : 1;
    if (m && m->pp_size != pp) {
        snprintf(err, n, "model %s has no pipeline form (dist.pipeline_parallel %d): gpt2, bert, roberta, bart and t5 "
                 "have one; train it with dist.pipeline_parallel: 1", name, pp);
        ut_model_free(m);
        return NULL;
    }
    if (m && layout && layout->seq_parallel && tp > 1 && !m->seq_parallel) {
        snprintf(err, n, "model %s has no sequence-parallel form (dist.sequence_parallel): gpt2's language model has "
                 "one; remove dist.sequence_parallel", name);
        ut_model_free(m);
        return NULL;
    }
    if (m && m->tp_size != tp) {
        snprintf(err, n, "model %s has no tensor-parallel form (dist.tensor_parallel %d): build it whole", name, tp);
        ut_model_free(m);
        return NULL;
    }
    return m;
}

ut_model *ut_model_create(const char *name, const ut_kv *opts, uint64_t seed, char *err, size_t n) {
    register_builtins();
    for (int i = 0; i < nregistry; i++) {
        if (strcmp(registry[i].name, name)) continue;
        ut_model *m = registry[i].build(opts, seed, err, n);
        /* a model read from a Hugging Face directory takes its sizes from
         * its config.json: a refusal the build did not lay at the
         * directory's door says where its values came from */
        const char *dir = ut_kv_get(opts, "pretrained");
        if (!m && dir && n && !strstr(err, dir)) {
            size_t at = strlen(err);
            snprintf(err + at, n - at, " (model.pretrained: %s/config.json, the run's model options over it)", dir);
        }
        return m;
    }
    char names[512];
    snprintf(err, n, "unknown model '%s' (registered: %s)", name, ut_model_names(names, sizeof names));
    return NULL;
}

int ut_pipeline_stage_blocks(const ut_model_layout *lay, int64_t L, double head_blocks, int64_t *b0, int64_t *b1,
                             char *err, size_t n) {
    int P = lay && lay->pp_size > 1 ? lay->pp_size : 1, stage = P > 1 ? lay->pp_rank : 0;
    if (P == 1) return *b0 = 0, *b1 = L, 0;
    int64_t at = 0, start = 0;
    if (lay->pp_blocks) {
        for (int s = 0; s < P; s++) {
            if (lay->pp_blocks[s] < 1)
                return ut_errorf(err, n, "dist.pipeline_blocks: stage %d has %d blocks (each needs at least 1)", s,
                                 lay->pp_blocks[s]);
            if (s == stage) start = at;
            at += lay->pp_blocks[s];
        }
        if (at != L)
            return ut_errorf(err, n, "dist.pipeline_blocks: the stages' blocks add up to %lld, the model has "
                                     "%lld", (long long)at, (long long)L);
        *b0 = start, *b1 = start + lay->pp_blocks[stage];
        return 0;
    }
    if (P > L)
        return ut_errorf(err, n, "%lld blocks cannot make dist.pipeline_parallel %d stages", (long long)L, P);
    double total = (double)L + (head_blocks > 0 ? head_blocks : 0); /* in blocks */
    for (int s = 0; s < P; s++) {
        int64_t end = s == P - 1 ? L : (int64_t)llround((double)(s + 1) * total / P);
        if (end < at + 1) end = at + 1;                   /* at least one block here */
        if (end > L - (P - 1 - s)) end = L - (P - 1 - s); /* and one for each stage after */
        if (s == stage) {
            *b0 = at, *b1 = end;
            return 0;
        }
        at = end;
    }
    return 0;
}

/* The model: parameter store over two flat buffers, and the registry. */
#include <math.h>
#include <stdlib.h>

#include "internal.h"
#include "utrain/nn.h"

ut_model *ut_model_new(const char *type) {
    ut_model *m = ut_calloc_check(1, sizeof *m);
    size_t n = strlen(type) + 1;
    m->type = memcpy(ut_malloc_check(n), type, n);
    return m;
}

ut_tensor *ut_param_add(ut_model *m, const char *name, int ndim, const int64_t *ne, ut_init init) {
    ut_params *p = &m->params;
    UT_ASSERT(!p->data); /* parameters are registered before ut_model_finalize */
    UT_ASSERT(ndim >= 1 && ndim <= UT_MAX_DIMS);
    if (p->n == p->cap) {
        p->cap = p->cap ? 2 * p->cap : 32;
        p->t = ut_realloc_check(p->t, p->cap * sizeof *p->t);
        p->names = ut_realloc_check(p->names, p->cap * sizeof *p->names);
        p->init = ut_realloc_check(p->init, p->cap * sizeof *p->init);
        p->segs = ut_realloc_check(p->segs, p->cap * sizeof *p->segs);
    }
    ut_tensor *t = ut_calloc_check(1, sizeof *t);
    t->dtype = UT_F32;
    t->device = UT_CPU;
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
    p->segs[p->n] = (ut_param_seg){.offset = p->numel, .numel = ut_nelem(t), .decay = ndim >= 2};
    p->numel += ut_nelem(t);
    p->n++;
    return t;
}

void ut_model_finalize(ut_model *m, uint64_t seed) {
    ut_params *p = &m->params;
    size_t bytes = (size_t)(p->numel ? p->numel : 1) * sizeof(float);
    p->data = ut_aligned_alloc_check(bytes);
    p->grad = ut_aligned_alloc_check(bytes);
    memset(p->grad, 0, bytes);
    ut_rng rng;
    ut_rng_seed(&rng, seed);
    for (int i = 0; i < p->n; i++) {
        ut_tensor *t = p->t[i];
        t->data = p->data + p->segs[i].offset;
        t->grad = p->grad + p->segs[i].offset;
        float *x = t->data, a = p->init[i].a;
        for (int64_t j = 0; j < p->segs[i].numel; j++) {
            switch (p->init[i].kind) {
            case UT_INIT_ZEROS: x[j] = 0.0f; break;
            case UT_INIT_ONES: x[j] = 1.0f; break;
            case UT_INIT_NORMAL: x[j] = a * ut_rng_normal(&rng); break;
            case UT_INIT_UNIFORM: x[j] = a * (2.0f * ut_rng_uniform(&rng) - 1.0f); break;
            }
        }
    }
}

void ut_model_free(ut_model *m) {
    if (!m) return;
    ut_params *p = &m->params;
    for (int i = 0; i < p->n; i++) {
        ut_free(p->t[i]);
        ut_free(p->names[i]);
    }
    ut_free(p->t);
    ut_free(p->names);
    ut_free(p->init);
    ut_free(p->segs);
    ut_free(p->data);
    ut_free(p->grad);
    if (m->free_impl) m->free_impl(m->impl);
    ut_free(m->type);
    ut_free(m);
}

void ut_model_zero_grad(ut_model *m) {
    memset(m->params.grad, 0, (size_t)m->params.numel * sizeof(float));
}

ut_tensor *ut_model_param(const ut_model *m, const char *name) {
    for (int i = 0; i < m->params.n; i++)
        if (strcmp(m->params.names[i], name) == 0) return m->params.t[i];
    return NULL;
}

ut_tensor *ut_model_forward(ut_model *m, ut_ctx *ctx, ut_tensor *input) {
    return m->forward(m, ctx, input);
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

ut_model *ut_model_create(const char *name, const ut_kv *opts, uint64_t seed, char *err, size_t n) {
    register_builtins();
    for (int i = 0; i < nregistry; i++)
        if (strcmp(registry[i].name, name) == 0) return registry[i].build(opts, seed, err, n);
    char names[512];
    snprintf(err, n, "unknown model '%s' (registered: %s)", name, ut_model_names(names, sizeof names));
    return NULL;
}

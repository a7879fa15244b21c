/* gpt2: decoder-only transformer with learned positions, pre-LayerNorm blocks
 * and the output projection tied to the token embedding.
 * Options: n_layer (12), n_head (12), n_embd (768), vocab_size (50257),
 * block_size (1024), dropout (0). Input tokens I32 (B, T) with T <= block_size;
 * output logits (B, T, vocab_size); loss cross-entropy (targets -1 ignored).
 * Init as GPT-2: N(0, 0.02) weights, residual projections N(0, 0.02/sqrt(2 n_layer)). */
#include <math.h>
#include <stdio.h>

#include "utrain/base.h"
#include "utrain/ops.h"
#include "utrain/nn.h"

typedef struct {
    int64_t n_layer, n_head, C, V, block_size;
    ut_embedding_layer wte, wpe;
    ut_block_layer *h;
    ut_layernorm_layer ln_f;
    float dropout;
} gpt2;

static void gpt2_free(void *impl) {
    gpt2 *g = impl;
    ut_free(g->h);
    ut_free(g);
}

static ut_tensor *gpt2_forward(ut_model *m, ut_ctx *ctx, ut_tensor *idx) {
    const gpt2 *g = m->impl;
    if (!ut_op_check(ctx, "gpt2", 1, &idx, 1)) return NULL;
    if (idx->ndim != 2 || idx->ne[1] > g->block_size) {
        ut_op_error(ctx, "gpt2", 1, &idx,
                    ut_fmt("expected tokens (B, T) with T <= block_size %lld", (long long)g->block_size));
        return NULL;
    }
    int64_t T = idx->ne[1];
    ut_tensor *pos = ut_tensor_new(ctx, UT_I32, 1, &T);
    for (int64_t t = 0; t < T; t++) ut_i32(pos)[t] = (int32_t)t;
    ut_tensor *tok = ut_embedding_layer_forward(ctx, &g->wte, idx);
    ut_tensor *x = ut_add(ctx, tok, ut_embedding_layer_forward(ctx, &g->wpe, pos));
    if (g->dropout > 0) x = ut_dropout(ctx, x, g->dropout);
    for (int64_t l = 0; l < g->n_layer; l++)
        x = ut_block_layer_forward(ctx, &g->h[l], x, m->checkpoint_activations);
    x = ut_layernorm_layer_forward(ctx, &g->ln_f, x);
    return ut_linear(ctx, x, g->wte.w, NULL);
}

static ut_tensor *gpt2_loss(ut_model *m, ut_ctx *ctx, ut_tensor *logits, ut_tensor *targets) {
    (void)m;
    return ut_cross_entropy(ctx, logits, targets, -1);
}

ut_model *ut_gpt2_build(const ut_kv *opts, uint64_t seed, char *err, size_t n) {
    static const char *const known[] = {"n_layer",    "n_head",     "n_embd", "vocab_size",
                                        "block_size", "dropout",    NULL};
    long long L, NH, C, V, BS;
    double dropout;
    if (ut_kv_check_keys(opts, known, "model gpt2", err, n) ||
        ut_kv_int(opts, "n_layer", 12, &L, err, n) || ut_kv_int(opts, "n_head", 12, &NH, err, n) ||
        ut_kv_int(opts, "n_embd", 768, &C, err, n) ||
        ut_kv_int(opts, "vocab_size", 50257, &V, err, n) ||
        ut_kv_int(opts, "block_size", 1024, &BS, err, n) ||
        ut_kv_float(opts, "dropout", 0.0, &dropout, err, n))
        return NULL;
    if (L < 1 || NH < 1 || C < 1 || V < 1 || BS < 1)
        return snprintf(err, n, "gpt2: n_layer, n_head, n_embd, vocab_size, block_size must be >= 1"), NULL;
    if (C % NH)
        return snprintf(err, n, "gpt2: n_embd %lld is not divisible by n_head %lld", C, NH), NULL;
    if (V > INT32_MAX || BS > INT32_MAX) return snprintf(err, n, "gpt2: vocab_size/block_size too large"), NULL;
    if (dropout < 0 || dropout >= 1) return snprintf(err, n, "option 'dropout': must be in [0, 1)"), NULL;

    /* parameters and their gradients (ut_model_finalize), checked before allocating */
    double numel = (double)(V + BS) * C + (double)L * (12.0 * C * C + 13.0 * C) + 2.0 * C;
    if (ut_memory_check(8 * numel, ut_fmt("gpt2 (n_layer %lld, n_embd %lld, vocab_size %lld, "
                                         "block_size %lld: %.3g parameters)", L, C, V, BS, numel),
                        err, n))
        return NULL;
    ut_model *m = ut_model_new("gpt2");
    gpt2 *g = ut_calloc_check(1, sizeof *g);
    *g = (gpt2){.n_layer = L, .n_head = NH, .C = C, .V = V, .block_size = BS, .dropout = (float)dropout};
    g->h = ut_calloc_check((size_t)L, sizeof *g->h);
    float proj_std = 0.02f / sqrtf(2.0f * (float)L);
    ut_embedding_layer_init(m, &g->wte, "wte", V, C, 0.02f);
    ut_embedding_layer_init(m, &g->wpe, "wpe", BS, C, 0.02f);
    for (int64_t l = 0; l < L; l++) {
        char name[32];
        snprintf(name, sizeof name, "h.%lld", (long long)l);
        ut_block_layer_init(m, &g->h[l], name, C, (int)NH, proj_std, (float)dropout);
    }
    ut_layernorm_layer_init(m, &g->ln_f, "ln_f", C);
    m->impl = g;
    m->free_impl = gpt2_free;
    m->forward = gpt2_forward;
    m->loss = gpt2_loss;
    ut_model_finalize(m, seed);
    return m;
}

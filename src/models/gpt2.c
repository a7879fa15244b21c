/* gpt2: decoder-only transformer with learned positions, pre-LayerNorm blocks
 * and the output projection tied to the token embedding.
 * Options: n_layer (12), n_head (12), n_embd (768), vocab_size (50257),
 * block_size (1024), dropout (0). Input tokens I32 (B, T) with T <= block_size;
 * output logits (B, T, vocab_size); loss cross-entropy (targets -1 ignored).
 * Init as GPT-2: N(0, 0.02) weights, residual projections N(0, 0.02/sqrt(2 n_layer)).
 * pretrained: DIR, a Hugging Face GPT-2 directory (config.json's n_layer, n_head,
 * n_embd, vocab_size, n_positions, layer_norm_epsilon; Conv1D weights transposed
 * on import); task: causal_lm (the tied LM head). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "utrain/base.h"
#include "utrain/io.h"
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
    int32_t *ps = ut_ctx_alloc(ctx, (size_t)T * sizeof *ps);
    for (int64_t t = 0; t < T; t++) ps[t] = (int32_t)t;
    ut_tensor *pos = ut_tensor_wrap(ctx, UT_I32, 1, &T, ps);
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

static ut_model *gpt2_new(const ut_kv *opts, uint64_t seed, char *err, size_t n) {
    long long L, NH, C, V, BS;
    double dropout, eps;
    if (ut_kv_int(opts, "n_layer", 12, &L, err, n) || ut_kv_int(opts, "n_head", 12, &NH, err, n) ||
        ut_kv_float(opts, "layer_norm_epsilon", 1e-5, &eps, err, n) ||
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
    if (!(eps > 0)) return snprintf(err, n, "gpt2: layer_norm_epsilon must be > 0"), NULL;

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
        g->h[l].ln_1.eps = g->h[l].ln_2.eps = (float)eps;
    }
    ut_layernorm_layer_init(m, &g->ln_f, "ln_f", C);
    g->ln_f.eps = (float)eps;
    m->impl = g;
    m->free_impl = gpt2_free;
    m->forward = gpt2_forward;
    m->loss = gpt2_loss;
    ut_model_finalize(m, seed);
    return m;
}

/* config.json's names for the architecture; model.pretrained supplies them */
static const char *const arch_keys[] = {"n_layer", "n_head", "n_embd", "vocab_size", "block_size",
                                        "n_positions", "layer_norm_epsilon", NULL};

/* What transformers' GPT2 can be configured to do that this model does not. */
static int check_hf_config(const ut_kv *kv, const char *dir, char *err, size_t n) {
    static const char *const off[] = {"scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn",
                                      "add_cross_attention", NULL};
    const char *act = ut_kv_get(kv, "activation_function"), *inner = ut_kv_get(kv, "n_inner");
    const char *scale = ut_kv_get(kv, "scale_attn_weights"), *tie = ut_kv_get(kv, "tie_word_embeddings");
    if (tie && strcmp(tie, "true"))
        return ut_errorf(err, n, "model.pretrained: %s/config.json: tie_word_embeddings false is not "
                                 "supported (the LM head is the token embedding)", dir);
    if (act && strcmp(act, "gelu_new") && strcmp(act, "gelu_pytorch_tanh"))
        return ut_errorf(err, n, "model.pretrained: %s/config.json: activation_function '%s' is not "
                                 "supported (gelu_new, gelu_pytorch_tanh)", dir, act);
    if (scale && strcmp(scale, "true"))
        return ut_errorf(err, n, "model.pretrained: %s/config.json: scale_attn_weights false is not "
                                 "supported", dir);
    for (int i = 0; off[i]; i++) {
        const char *v = ut_kv_get(kv, off[i]);
        if (v && strcmp(v, "false"))
            return ut_errorf(err, n, "model.pretrained: %s/config.json: %s is not supported", dir, off[i]);
    }
    long long C = 768, I = 0;
    char why[256];
    if (inner && (ut_kv_int(kv, "n_embd", 768, &C, why, sizeof why) ||
                  ut_kv_int(kv, "n_inner", 0, &I, why, sizeof why) || I != 4 * C))
        return ut_errorf(err, n, "model.pretrained: %s/config.json: n_inner %s is not supported "
                                 "(4 * n_embd, or null)", dir, inner);
    return 0;
}

/* config.json under the user's options: the architecture from the directory
 * only (n_positions as block_size), dropout from resid_pdrop unless given. */
static ut_kv *merged_options(const ut_kv *opts, const char *dir, char *err, size_t n) {
    char why[1024];
    ut_kv *kv = ut_hf_config_read(dir, why, sizeof why);
    if (!kv) return ut_errorf(err, n, "model.pretrained: %s", why), NULL;
    const char *type = ut_kv_get(kv, "model_type");
    int rc = 0;
    if (strcmp(type, "gpt2"))
        rc = ut_errorf(err, n, "model.pretrained: %s/config.json has model_type '%s'; model gpt2 reads "
                               "model_type gpt2 (model.name: bert reads bert)", dir, type);
    for (int i = 0; arch_keys[i] && !rc; i++)
        if (ut_kv_get(opts, arch_keys[i]))
            rc = ut_errorf(err, n, "model.%s: set by model.pretrained (%s/config.json); remove it",
                           arch_keys[i], dir);
    if (!rc) rc = check_hf_config(kv, dir, err, n);
    if (rc) {
        ut_kv_free(kv);
        return NULL;
    }
    if (ut_kv_get(kv, "n_positions")) ut_kv_set(kv, "block_size", ut_kv_get(kv, "n_positions"));
    if (ut_kv_get(kv, "resid_pdrop")) ut_kv_set(kv, "dropout", ut_kv_get(kv, "resid_pdrop"));
    for (int i = 0; i < ut_kv_len(opts); i++)
        ut_kv_set(kv, ut_kv_key(opts, i), ut_kv_get(opts, ut_kv_key(opts, i)));
    return kv;
}

static int load_pretrained(ut_model *m, const char *dir, char *err, size_t n) {
    static const char *const transposed[] = {".c_attn.weight", ".c_proj.weight", ".c_fc.weight", NULL};
    static const char *const ignored[] = {"lm_head.weight", ".attn.bias", ".attn.masked_bias", NULL};
    ut_hf_load_opts o = {.file_prefix = "transformer.", .transposed = transposed, .ignored = ignored};
    return ut_hf_load_pretrained(m, dir, o, err, n);
}

ut_model *ut_gpt2_build(const ut_kv *opts, uint64_t seed, char *err, size_t n) {
    static const char *const known[] = {"n_layer", "n_head",  "n_embd",     "vocab_size", "block_size",
                                        "dropout", "task",    "pretrained", "layer_norm_epsilon", NULL};
    if (ut_kv_check_keys(opts, known, "model gpt2", err, n)) return NULL;
    const char *task = ut_kv_get(opts, "task"), *dir = ut_kv_get(opts, "pretrained");
    if (task && strcmp(task, "causal_lm"))
        return ut_errorf(err, n, "model.task: '%s' is not available for gpt2; use causal_lm", task), NULL;
    ut_kv *merged = dir ? merged_options(opts, dir, err, n) : NULL;
    if (dir && !merged) return NULL;
    ut_model *m = gpt2_new(merged ? merged : opts, seed, err, n);
    ut_kv_free(merged);
    if (m && dir && load_pretrained(m, dir, err, n)) {
        ut_model_free(m);
        return NULL;
    }
    return m;
}

/* bert: BERT as Hugging Face's BertForSequenceClassification. Word, position
 * and token type embeddings with LayerNorm, post-LayerNorm encoder layers
 * (separate query/key/value, bidirectional attention with the padding mask,
 * exact GELU), the pooler (dense + tanh on [CLS]) and a classifier.
 * Input x I32 (B, 3, T): planes of token ids, token type ids and attention
 * mask (1 = token, 0 = padding), as the pretrained-tokenizer TSV dataset
 * gives them. Output logits (B, num_labels); loss cross-entropy.
 * Parameter names are Hugging Face's ("bert.encoder.layer.0.attention.self.query.weight",
 * "classifier.weight"), so model.safetensors loads by name (src/io/hf.c).
 * Options, in config.json's names: vocab_size, hidden_size, num_hidden_layers,
 * num_attention_heads, intermediate_size, max_position_embeddings,
 * type_vocab_size, layer_norm_eps, hidden_dropout_prob,
 * attention_probs_dropout_prob, initializer_range,
 * hidden_act, plus num_labels (num_classes), task and pretrained (a model
 * directory, which supplies the architecture and the weights). docs/models.md. */
#include <float.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "utrain/base.h"
#include "utrain/io.h"
#include "utrain/ops.h"
#include "utrain/nn.h"

typedef struct {
    ut_linear_layer query, key, value, attn_out, inter, out;
    ut_layernorm_layer attn_ln, out_ln;
} bert_layer;

typedef struct layer_arg layer_arg;

typedef struct {
    int64_t L, NH, C, I, V, P, TV, K;
    float eps, dropout, attn_dropout;
    bool exact_gelu;
    ut_embedding_layer word, pos, type;
    ut_layernorm_layer emb_ln;
    bert_layer *layer;
    ut_linear_layer pooler, classifier;
    layer_arg *args;          /* per layer: ut_checkpoint keeps the pointer until backward */
} bert;

/* one encoder layer's fn argument: in = {x (B, T, C), mask (B, T)} */
struct layer_arg {
    const bert *net;
    const bert_layer *l;
};

static void bert_free(void *impl) {
    bert *net = impl;
    ut_free(net->layer);
    ut_free(net->args);
    ut_free(net);
}

/* ---- forward ---- */
static ut_tensor *layer_fn(ut_ctx *ctx, void *user, ut_tensor **in, int n) {
    (void)n;
    const layer_arg *a = user;
    const bert_layer *l = a->l;
    ut_tensor *x = in[0];
    ut_tensor *h = ut_attention_masked(ctx, ut_linear_layer_forward(ctx, &l->query, x),
                                       ut_linear_layer_forward(ctx, &l->key, x),
                                       ut_linear_layer_forward(ctx, &l->value, x), in[1], (int)a->net->NH,
                                       a->net->attn_dropout);
    h = ut_dropout(ctx, ut_linear_layer_forward(ctx, &l->attn_out, h), a->net->dropout);
    x = ut_layernorm_layer_forward(ctx, &l->attn_ln, ut_add(ctx, h, x));
    h = ut_linear_layer_forward(ctx, &l->inter, x);
    h = a->net->exact_gelu ? ut_gelu_erf(ctx, h) : ut_gelu(ctx, h);
    h = ut_dropout(ctx, ut_linear_layer_forward(ctx, &l->out, h), a->net->dropout);
    return ut_layernorm_layer_forward(ctx, &l->out_ln, ut_add(ctx, h, x));
}

/* ids, type ids (B, T) I32, the additive mask (B, T) F32 and positions (T)
 * from x (B, 3, T), through one host copy */
static int split_inputs(ut_ctx *ctx, ut_tensor *x, ut_tensor **ids, ut_tensor **types,
                        ut_tensor **mask, ut_tensor **pos) {
    int64_t B = x->ne[0], T = x->ne[2];
    int32_t *h = ut_ctx_alloc(ctx, (size_t)(B * 3 * T) * sizeof *h);
    int32_t *id = ut_ctx_alloc(ctx, (size_t)(2 * B * T + T) * sizeof *id), *ty = id + B * T, *ps = ty + B * T;
    float *mk = ut_ctx_alloc(ctx, (size_t)(B * T) * sizeof *mk);
    if (ut_tensor_get(x, h, (size_t)(B * 3 * T) * sizeof *h)) return -1;
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < T; t++) {
            id[b * T + t] = h[(b * 3) * T + t];
            ty[b * T + t] = h[(b * 3 + 1) * T + t];
            mk[b * T + t] = h[(b * 3 + 2) * T + t] ? 0.0f : -FLT_MAX; /* as (1 - mask) * finfo.min */
        }
    for (int64_t t = 0; t < T; t++) ps[t] = (int32_t)t;
    *ids = ut_tensor_wrap(ctx, UT_I32, 2, (int64_t[]){B, T}, id);
    *types = ut_tensor_wrap(ctx, UT_I32, 2, (int64_t[]){B, T}, ty);
    *mask = ut_tensor_wrap(ctx, UT_F32, 2, (int64_t[]){B, T}, mk);
    *pos = ut_tensor_wrap(ctx, UT_I32, 1, &T, ps);
    return *ids && *types && *mask && *pos ? 0 : -1;
}

static ut_tensor *bert_forward(ut_model *m, ut_ctx *ctx, ut_tensor *x) {
    const bert *net = m->impl;
    if (!ut_op_check(ctx, "bert", 1, &x, 1)) return NULL;
    if (x->ndim != 3 || x->ne[1] != 3 || x->ne[2] > net->P || !ut_is_contiguous(x)) {
        ut_op_error(ctx, "bert", 1, &x,
                    ut_fmt("expected contiguous x (B, 3, T): token ids, token type ids and attention "
                           "mask, T <= max_position_embeddings %lld", (long long)net->P));
        return NULL;
    }
    ut_tensor *ids, *types, *mask, *pos;
    if (split_inputs(ctx, x, &ids, &types, &mask, &pos)) return NULL;
    ut_tensor *h = ut_add(ctx, ut_embedding_layer_forward(ctx, &net->word, ids),
                          ut_embedding_layer_forward(ctx, &net->type, types));
    h = ut_add(ctx, h, ut_embedding_layer_forward(ctx, &net->pos, pos));
    h = ut_dropout(ctx, ut_layernorm_layer_forward(ctx, &net->emb_ln, h), net->dropout);
    for (int64_t l = 0; l < net->L; l++) {
        ut_tensor *in[2] = {h, mask};
        h = m->checkpoint_activations ? ut_checkpoint(ctx, layer_fn, &net->args[l], in, 2)
                                      : layer_fn(ctx, &net->args[l], in, 2);
    }
    /* pooler on the first token ([CLS]) */
    ut_tensor *cls = ut_reshape(ctx, ut_slice(ctx, h, 1, 0, 1), 2, (int64_t[]){x->ne[0], net->C});
    ut_tensor *pooled = ut_tanh(ctx, ut_linear_layer_forward(ctx, &net->pooler, cls));
    return ut_linear_layer_forward(ctx, &net->classifier, ut_dropout(ctx, pooled, net->dropout));
}

static ut_tensor *bert_loss(ut_model *m, ut_ctx *ctx, ut_tensor *logits, ut_tensor *y) {
    (void)m;
    return ut_cross_entropy(ctx, logits, y, -100);
}

/* ---- building ---- */
static void linear_init(ut_model *m, ut_linear_layer *l, const char *prefix, int64_t in, int64_t out,
                        float std) {
    char buf[256];
    snprintf(buf, sizeof buf, "%s.weight", prefix);
    l->w = ut_param_add(m, buf, 2, (int64_t[]){out, in}, (ut_init){UT_INIT_NORMAL, std});
    snprintf(buf, sizeof buf, "%s.bias", prefix);
    l->b = ut_param_add(m, buf, 1, &out, (ut_init){UT_INIT_ZEROS, 0});
}

static void ln_init(ut_model *m, ut_layernorm_layer *l, const char *prefix, int64_t C, float eps) {
    ut_layernorm_layer_init(m, l, prefix, C);
    l->eps = eps;
}

static void layer_init(ut_model *m, bert *net, bert_layer *l, int64_t i, float std) {
    char p[128], q[160];
    int64_t C = net->C;
    snprintf(p, sizeof p, "bert.encoder.layer.%lld", (long long)i);
    const char *leaf[3] = {"query", "key", "value"};
    ut_linear_layer *qkv[3] = {&l->query, &l->key, &l->value};
    for (int k = 0; k < 3; k++) {
        snprintf(q, sizeof q, "%s.attention.self.%s", p, leaf[k]);
        linear_init(m, qkv[k], q, C, C, std);
    }
    snprintf(q, sizeof q, "%s.attention.output.dense", p);
    linear_init(m, &l->attn_out, q, C, C, std);
    snprintf(q, sizeof q, "%s.attention.output.LayerNorm", p);
    ln_init(m, &l->attn_ln, q, C, net->eps);
    snprintf(q, sizeof q, "%s.intermediate.dense", p);
    linear_init(m, &l->inter, q, C, net->I, std);
    snprintf(q, sizeof q, "%s.output.dense", p);
    linear_init(m, &l->out, q, net->I, C, std);
    snprintf(q, sizeof q, "%s.output.LayerNorm", p);
    ln_init(m, &l->out_ln, q, C, net->eps);
}

/* Parameters in Hugging Face's state_dict order, initialised as its
 * _init_weights: N(0, initializer_range) weights and embeddings, zero biases,
 * LayerNorm 1 and 0. */
static ut_model *bert_new(bert *net, float std, uint64_t seed) {
    ut_model *m = ut_model_new("bert");
    ut_embedding_layer_init(m, &net->word, "bert.embeddings.word_embeddings", net->V, net->C, std);
    ut_embedding_layer_init(m, &net->pos, "bert.embeddings.position_embeddings", net->P, net->C, std);
    ut_embedding_layer_init(m, &net->type, "bert.embeddings.token_type_embeddings", net->TV, net->C, std);
    ln_init(m, &net->emb_ln, "bert.embeddings.LayerNorm", net->C, net->eps);
    net->layer = ut_calloc_check((size_t)net->L, sizeof *net->layer);
    net->args = ut_calloc_check((size_t)net->L, sizeof *net->args);
    for (int64_t i = 0; i < net->L; i++) {
        layer_init(m, net, &net->layer[i], i, std);
        net->args[i] = (layer_arg){net, &net->layer[i]};
    }
    linear_init(m, &net->pooler, "bert.pooler.dense", net->C, net->C, std);
    linear_init(m, &net->classifier, "classifier", net->C, net->K, std);
    m->impl = net;
    m->free_impl = bert_free;
    m->forward = bert_forward;
    m->loss = bert_loss;
    ut_model_finalize(m, seed);
    return m;
}

/* The architecture options (config.json's names); model.pretrained supplies them. */
static const char *const arch_keys[] = {"vocab_size", "hidden_size", "num_hidden_layers",
                                        "num_attention_heads", "intermediate_size",
                                        "max_position_embeddings", "type_vocab_size",
                                        "layer_norm_eps", "hidden_act", NULL};

/* Merges config.json (when opts has "pretrained") under the user's options:
 * the architecture comes from the directory only. */
static ut_kv *merged_options(const ut_kv *opts, char *err, size_t n) {
    const char *dir = ut_kv_get(opts, "pretrained");
    if (!dir) return NULL;
    char why[1024];
    ut_kv *kv = ut_hf_config_read(dir, why, sizeof why);
    if (!kv) return ut_errorf(err, n, "model.pretrained: %s", why), NULL;
    const char *type = ut_kv_get(kv, "model_type");
    if (strcmp(type, "bert")) {
        ut_errorf(err, n, "model.pretrained: %s/config.json has model_type '%s'; model bert reads "
                          "model_type bert (GPT-2 and BART directories are read by model.name: gpt2 "
                          "and bart; RoBERTa is not supported yet)",
                  dir, type);
        ut_kv_free(kv);
        return NULL;
    }
    for (int i = 0; arch_keys[i]; i++)
        if (ut_kv_get(opts, arch_keys[i])) {
            ut_errorf(err, n, "model.%s: set by model.pretrained (%s/config.json); remove it", arch_keys[i],
                      dir);
            ut_kv_free(kv);
            return NULL;
        }
    for (int i = 0; i < ut_kv_len(opts); i++)
        ut_kv_set(kv, ut_kv_key(opts, i), ut_kv_get(opts, ut_kv_key(opts, i)));
    return kv;
}

/* The integer sizes: config.json's names, BERT-base defaults, each >= 1 */
static const struct {
    const char *key;
    long long def;
    size_t at;
} size_keys[] = {
    {"num_hidden_layers", 12, offsetof(bert, L)},   {"num_attention_heads", 12, offsetof(bert, NH)},
    {"hidden_size", 768, offsetof(bert, C)},        {"intermediate_size", 3072, offsetof(bert, I)},
    {"vocab_size", 30522, offsetof(bert, V)},       {"max_position_embeddings", 512, offsetof(bert, P)},
    {"type_vocab_size", 2, offsetof(bert, TV)},
};

static int read_dims(const ut_kv *kv, bert *net, double *std, char *err, size_t n) {
    *net = (bert){0};
    for (size_t i = 0; i < sizeof size_keys / sizeof size_keys[0]; i++) {
        long long v;
        if (ut_kv_int(kv, size_keys[i].key, size_keys[i].def, &v, err, n)) return -1;
        if (v < 1 || v > INT32_MAX)
            return ut_errorf(err, n, "bert: %s %lld is outside [1, %d]", size_keys[i].key, v, INT32_MAX);
        *(int64_t *)((char *)net + size_keys[i].at) = v;
    }
    long long K1, K2;
    double eps, drop, adrop;
    if (ut_kv_int(kv, "num_classes", 2, &K1, err, n) || ut_kv_int(kv, "num_labels", K1, &K2, err, n) ||
        ut_kv_float(kv, "layer_norm_eps", 1e-12, &eps, err, n) ||
        ut_kv_float(kv, "hidden_dropout_prob", 0.1, &drop, err, n) ||
        ut_kv_float(kv, "attention_probs_dropout_prob", 0.1, &adrop, err, n) ||
        ut_kv_float(kv, "initializer_range", 0.02, std, err, n))
        return -1;
    if (K2 < 1 || K2 > INT32_MAX) return ut_errorf(err, n, "bert: num_labels %lld must be >= 1", K2);
    if (net->C % net->NH)
        return ut_errorf(err, n, "bert: hidden_size %lld is not divisible by num_attention_heads %lld",
                         (long long)net->C, (long long)net->NH);
    if (drop < 0 || drop >= 1) return ut_errorf(err, n, "bert: hidden_dropout_prob %g is outside [0, 1)", drop);
    if (adrop < 0 || adrop >= 1)
        return ut_errorf(err, n, "bert: attention_probs_dropout_prob %g is outside [0, 1)", adrop);
    if (!(eps > 0) || !(*std >= 0))
        return ut_errorf(err, n, "bert: layer_norm_eps must be > 0 and initializer_range >= 0");
    net->K = K2;
    net->eps = (float)eps;
    net->dropout = (float)drop;
    net->attn_dropout = (float)adrop;
    return 0;
}

/* hidden_act, position_embedding_type and task: what is supported */
static int read_kinds(const ut_kv *kv, bert *net, char *err, size_t n) {
    const char *act = ut_kv_get(kv, "hidden_act"), *pos = ut_kv_get(kv, "position_embedding_type"),
               *task = ut_kv_get(kv, "task");
    if (!act || !strcmp(act, "gelu")) net->exact_gelu = true;
    else if (!strcmp(act, "gelu_new") || !strcmp(act, "gelu_pytorch_tanh")) net->exact_gelu = false;
    else
        return ut_errorf(err, n, "bert: hidden_act '%s' is not supported (gelu, gelu_new, gelu_pytorch_tanh)",
                         act);
    if (pos && strcmp(pos, "absolute"))
        return ut_errorf(err, n, "bert: position_embedding_type '%s' is not supported (absolute)", pos);
    if (task && strcmp(task, "sequence_classification"))
        return ut_errorf(err, n, "model.task: '%s' is not available for bert; use sequence_classification",
                         task);
    return 0;
}

static int load_pretrained(ut_model *m, const char *dir, char *err, size_t n) {
    static const char *const optional[] = {"bert.pooler.", "classifier.", NULL};
    static const char *const ignored[] = {"position_ids", "cls.", NULL};
    ut_hf_load_opts o = {.base_prefix = "bert.", .optional = optional, .ignored = ignored};
    return ut_hf_load_pretrained(m, dir, o, err, n);
}

ut_model *ut_bert_build(const ut_kv *opts, uint64_t seed, char *err, size_t n) {
    static const char *const known[] = {"vocab_size", "hidden_size", "num_hidden_layers",
                                        "num_attention_heads", "intermediate_size",
                                        "max_position_embeddings", "type_vocab_size", "layer_norm_eps",
                                        "hidden_act", "hidden_dropout_prob",
                                        "attention_probs_dropout_prob", "initializer_range",
                                        "num_labels", "num_classes", "task", "pretrained", NULL};
    if (ut_kv_check_keys(opts, known, "model bert", err, n)) return NULL;
    const char *dir = ut_kv_get(opts, "pretrained");
    ut_kv *merged = dir ? merged_options(opts, err, n) : NULL;
    if (dir && !merged) return NULL;
    const ut_kv *kv = merged ? merged : opts;
    bert net;
    double std;
    int rc = read_dims(kv, &net, &std, err, n) || read_kinds(kv, &net, err, n);
    ut_kv_free(merged);
    if (rc) return NULL;
    double C = (double)net.C, numel = (double)(net.V + net.P + net.TV) * C +
                                      (double)net.L * (4.0 * C * C + 2.0 * C * (double)net.I) +
                                      C * (C + (double)net.K);
    if (ut_memory_check(8 * numel, ut_fmt("bert (%.3g parameters)", numel), err, n)) return NULL;
    bert *impl = ut_malloc_check(sizeof *impl);
    *impl = net;
    ut_model *m = bert_new(impl, (float)std, seed);
    if (dir && load_pretrained(m, dir, err, n)) {
        ut_model_free(m);
        return NULL;
    }
    return m;
}

/* bow: a bag-of-embeddings text classifier. Token embeddings are averaged
 * over the non-padding positions (id 0 is padding), then a hidden ReLU layer
 * and a linear classifier. Options: vocab_size (required; filled from the
 * data by the trainer), n_embd (64), hidden (64; 0 for none), num_classes (2),
 * dropout (0). Input tokens I32 (B, L); output logits (B, classes); loss
 * cross-entropy. */
#include <stdio.h>
#include <string.h>

#include "utrain/base.h"
#include "utrain/ops.h"
#include "utrain/nn.h"

typedef struct {
    ut_embedding_layer emb;
    ut_linear_layer fc, out;
    bool has_hidden;
    float dropout;
} bow;

/* On the host (the loader thread): the ids (B, L) and weights (B, 1, L),
 * 1/count at non-padding positions, so weights @ emb is the mean. */
static int bow_prepare(const ut_model *m, const ut_host_array *x, ut_inputs *in, char *err, size_t n) {
    (void)m;
    if (x->dtype != UT_I32 || x->ndim != 2) return ut_input_error(err, n, "bow", x, "expected I32 token ids (B, L)");
    int64_t B = x->ne[0], L = x->ne[1];
    const int32_t *id = x->host;
    memcpy(ut_inputs_add(in, UT_I32, 2, x->ne), id, (size_t)(B * L) * sizeof *id);
    float *mw = ut_inputs_add(in, UT_F32, 3, (int64_t[]){B, 1, L});
    for (int64_t b = 0; b < B; b++) {
        int64_t count = 0;
        for (int64_t l = 0; l < L; l++) count += id[b * L + l] != 0;
        for (int64_t l = 0; l < L; l++) mw[b * L + l] = id[b * L + l] != 0 ? 1.0f / (float)count : 0.0f;
    }
    return 0;
}

static ut_tensor *bow_forward(ut_model *m, ut_ctx *ctx, const ut_prepared *in) {
    const bow *net = m->impl;
    ut_tensor *e = ut_embedding_layer_forward(ctx, &net->emb, in->t[0]);     /* (B, L, C) */
    ut_tensor *x = ut_matmul(ctx, in->t[1], e);                              /* (B, 1, C) */
    x = ut_flatten(ctx, x, 1);                                               /* (B, C) */
    if (net->has_hidden) x = ut_relu(ctx, ut_linear_layer_forward(ctx, &net->fc, x));
    if (net->dropout > 0) x = ut_dropout(ctx, x, net->dropout);
    return ut_linear_layer_forward(ctx, &net->out, x);
}

ut_model *ut_bow_build(const ut_kv *opts, uint64_t seed, char *err, size_t n) {
    static const char *const known[] = {"vocab_size", "n_embd", "hidden", "num_classes", "dropout", NULL};
    long long V, C, H, K;
    double dropout;
    if (ut_kv_check_keys(opts, known, "model bow", err, n) ||
        ut_kv_int(opts, "vocab_size", 0, &V, err, n) || ut_kv_int(opts, "n_embd", 64, &C, err, n) ||
        ut_kv_int(opts, "hidden", 64, &H, err, n) || ut_kv_int(opts, "num_classes", 2, &K, err, n) ||
        ut_kv_float(opts, "dropout", 0.0, &dropout, err, n))
        return NULL;
    if (V < 2) return snprintf(err, n, "bow: option 'vocab_size' is needed (at least 2)"), NULL;
    if (C < 1 || H < 0 || K < 2) return snprintf(err, n, "bow: need n_embd >= 1, hidden >= 0, num_classes >= 2"), NULL;
    if (dropout < 0 || dropout >= 1) return snprintf(err, n, "option 'dropout': must be in [0, 1)"), NULL;
    double numel = (double)V * C + (H > 0 ? (double)C * H + H : 0) + (double)(H > 0 ? H : C) * K + K;
    if (ut_memory_check(8 * numel, ut_fmt("bow (vocab_size %lld, n_embd %lld, hidden %lld, "
                                         "num_classes %lld: %.3g parameters)", V, C, H, K, numel),
                        err, n))
        return NULL;
    ut_model *m = ut_model_new("bow");
    bow *net = ut_calloc_check(1, sizeof *net);
    ut_embedding_layer_init(m, &net->emb, "emb", V, C, 0.1f);
    net->has_hidden = H > 0;
    if (net->has_hidden) ut_linear_layer_init(m, &net->fc, "fc", C, H, true);
    ut_linear_layer_init(m, &net->out, "out", H > 0 ? H : C, K, true);
    net->dropout = (float)dropout;
    m->impl = net;
    m->free_impl = ut_free;
    m->prepare = bow_prepare;
    m->forward_prepared = bow_forward;
    m->loss = ut_model_class_loss;
    ut_model_finalize(m, seed);
    return m;
}

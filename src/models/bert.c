/* bert: BERT as Hugging Face's BertForSequenceClassification, and RoBERTa
 * (RobertaForSequenceClassification) as a variant of it. Word, position
 * and token type embeddings with LayerNorm, post-LayerNorm encoder layers
 * (separate query/key/value, bidirectional attention with the padding mask,
 * exact GELU), the pooler (dense + tanh on [CLS]) and a classifier.
 * Input x I32 (B, 3, T): planes of token ids, token type ids and attention
 * mask (1 = token, 0 = padding), as the pretrained-tokenizer TSV dataset
 * gives them. Output logits (B, num_labels); loss cross-entropy.
 * Computed unpadded: the real tokens packed into rows, attention per sequence
 * (ut_attention_varlen), the pooler on each sequence's first row; a batch
 * where a sequence starts with padding runs padded (ut_attention_masked).
 * Parameter names are Hugging Face's ("bert.encoder.layer.0.attention.self.query.weight",
 * "classifier.weight"), so model.safetensors loads by name (src/io/hf.c).
 * Options, in config.json's names: vocab_size, hidden_size, num_hidden_layers,
 * num_attention_heads, intermediate_size, max_position_embeddings,
 * type_vocab_size, layer_norm_eps, hidden_dropout_prob,
 * attention_probs_dropout_prob, initializer_range,
 * hidden_act, plus num_labels (num_classes), task and pretrained (a model
 * directory, which supplies the architecture and the weights), classifier_dropout.
 * model.task token_classification: BertForTokenClassification (and
 * RobertaForTokenClassification): no pooler, dropout and the classifier
 * on every token, logits (B, T, K) against a class per token (-100
 * ignored); unpadded too, the packed rows' logits put back at their
 * positions by one gather (padding reads row 0; its targets are -100).
 * model.task masked_lm: BertForMaskedLM (RobertaForMaskedLM): no pooler;
 * the prediction head (dense, the activation (RoBERTa's: exact GELU),
 * LayerNorm) and the decoder tied to the word embedding plus a bias, over
 * the vocabulary; cross-entropy against the masked tokens (-100 elsewhere).
 * Given the batch's targets (the trainer's path, ut_inputs.targets) only
 * the rows with a label go through the head: logits (M, V) of those M
 * positions in order (one ignored row when none has one); otherwise every
 * position's, (B, T, V), as transformers computes them.
 * RoBERTa (config.json's model_type roberta, or model.name: roberta): names
 * under "roberta.", position ids pad_token_id + 1 + the count of non-padding
 * tokens before (padding at pad_token_id: transformers'
 * create_position_ids_from_input_ids), no pooler, and the head
 * classifier.dense + tanh + classifier.out_proj on <s>. docs/models.md. */
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
    int64_t pad_id;           /* RoBERTa's padding_idx */
    float eps, dropout, attn_dropout, cls_dropout;
    bool exact_gelu, roberta;
    bool token;               /* model.task token_classification: a class per token */
    bool mlm;                 /* model.task masked_lm: a token of the vocabulary per masked position */
    const char *prefix;       /* "bert" or "roberta" */
    ut_embedding_layer word, pos, type;
    ut_layernorm_layer emb_ln;
    bert_layer *layer;
    ut_linear_layer pooler, classifier; /* RoBERTa: classifier.dense, classifier.out_proj */
    ut_linear_layer transform; /* masked LM: the head's dense (cls.predictions.transform.dense, lm_head.dense) */
    ut_layernorm_layer transform_ln;
    ut_tensor *decoder_bias;  /* masked LM: the bias over the vocabulary (cls.predictions.bias, lm_head.bias) */
    ut_tensor *mlm_y;         /* masked LM: the last forward's labels of its rows (M), for loss */
    layer_arg *args;          /* per layer: ut_checkpoint keeps the pointer until backward */
    ut_model_layout lay;      /* tensor parallel: heads, features and the word embedding's vocabulary split */
    /* pipeline: this stage's layers [b0, b1); the first stage embeds, the
     * last has the pooler and the classifier */
    int64_t b0, b1;
    bool first, last;
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
/* the rest of an encoder layer after attention: h = attention's output,
 * x = the layer's input (rows of any layout) */
static ut_tensor *layer_tail(ut_ctx *ctx, const layer_arg *a, ut_tensor *h, ut_tensor *x) {
    const bert_layer *l = a->l;
    const ut_tp_hooks *tp = &a->net->lay.tp; /* zeroed when whole: plain linears */
    h = ut_dropout(ctx, ut_tp_row_out(ctx, tp, h, &l->attn_out), a->net->dropout);
    x = ut_layernorm_layer_forward(ctx, &l->attn_ln, ut_add(ctx, h, x));
    h = ut_tp_col_in(ctx, tp, x);
    h = a->net->exact_gelu ? ut_gelu_erf(ctx, ut_linear_layer_forward(ctx, &l->inter, h))
                           : ut_linear_layer_forward_gelu(ctx, &l->inter, h);
    h = ut_dropout(ctx, ut_tp_row_out(ctx, tp, h, &l->out), a->net->dropout);
    return ut_layernorm_layer_forward(ctx, &l->out_ln, ut_add(ctx, h, x));
}

/* this rank's attention heads (all of them when whole) */
static int local_heads(const bert *net) { return (int)(net->NH / net->lay.tp_size); }

/* padded layout: in = {x (B, T, C), additive mask (B, T)} */
static ut_tensor *layer_fn(ut_ctx *ctx, void *user, ut_tensor **in, int n) {
    (void)n;
    const layer_arg *a = user;
    const bert_layer *l = a->l;
    ut_tensor *x = in[0], *xi = ut_tp_col_in(ctx, &a->net->lay.tp, x);
    int nh = local_heads(a->net);
    ut_tensor *h = ut_attention_qkv_heads(ctx, ut_linear_layer_forward(ctx, &l->query, xi),
                                          ut_linear_layer_forward(ctx, &l->key, xi),
                                          ut_linear_layer_forward(ctx, &l->value, xi), in[1], nh, false,
                                          a->net->attn_dropout, a->net->lay.tp_rank * nh, (int)a->net->NH);
    return layer_tail(ctx, a, h, x);
}

/* packed layout: in = {x (N, C), the real tokens of every sequence one after
 * the other, offsets I32 (B + 1) where each sequence starts} */
static ut_tensor *layer_fn_packed(ut_ctx *ctx, void *user, ut_tensor **in, int n) {
    (void)n;
    const layer_arg *a = user;
    const bert_layer *l = a->l;
    ut_tensor *x = in[0], *xi = ut_tp_col_in(ctx, &a->net->lay.tp, x);
    int nh = local_heads(a->net);
    ut_tensor *h = ut_attention_varlen_heads(ctx, ut_linear_layer_forward(ctx, &l->query, xi),
                                             ut_linear_layer_forward(ctx, &l->key, xi),
                                             ut_linear_layer_forward(ctx, &l->value, xi), in[1], nh, false,
                                             a->net->attn_dropout, a->net->lay.tp_rank * nh, (int)a->net->NH);
    return layer_tail(ctx, a, h, x);
}

/* RoBERTa's position ids (B, T): padding at pad_id, the others pad_id + 1 +
 * the number of non-padding tokens before them */
static void roberta_positions(int32_t *ps, const int32_t *id, int64_t B, int64_t T, int64_t pad) {
    for (int64_t b = 0; b < B; b++) {
        int32_t k = 0;
        for (int64_t t = 0; t < T; t++)
            ps[b * T + t] = id[b * T + t] == pad ? (int32_t)pad : (int32_t)(pad + ++k);
    }
}

/* ---- inputs: prepared on the host (the loader thread), ut_model.prepare ---- */
/* ut_inputs layouts; a masked LM's _ROWS: with its labeled rows and their labels */
enum { PACKED, PADDED, PACKED_ROWS, PADDED_ROWS };

static int32_t *add_i32(ut_inputs *in, int64_t n) { return ut_inputs_add(in, UT_I32, 1, &n); }

/* A masked LM given the batch's targets (in->targets (B, T)): the rows of
 * the labeled positions, row[b * T + t] the row of position (b, t) (NULL:
 * b * T + t), and their labels, two arrays (M); with none labeled one row,
 * ignored. false without such targets (nothing added). */
static bool mlm_rows(const int32_t *row, int64_t B, int64_t T, ut_inputs *in) {
    const ut_host_array *y = &in->targets;
    if (!y->host || y->dtype != UT_I32 || y->ndim != 2 || y->ne[0] != B || y->ne[1] != T) return false;
    const int32_t *lab = y->host;
    int64_t M = 0;
    for (int64_t i = 0; i < B * T; i++) M += lab[i] != -100;
    int32_t *rows = add_i32(in, M ? M : 1), *ys = add_i32(in, M ? M : 1);
    rows[0] = 0, ys[0] = -100;
    for (int64_t i = 0, r = 0; i < B * T; i++)
        if (lab[i] != -100) rows[r] = row ? row[i] : (int32_t)i, ys[r++] = lab[i];
    return true;
}

/* From h (B, 3, T): ids, type ids (B, T), the additive mask (B, T) and
 * positions (T; RoBERTa (B, T)). */
static void split_inputs(const bert *net, const int32_t *h, int64_t B, int64_t T, ut_inputs *in) {
    int32_t *id = ut_inputs_add(in, UT_I32, 2, (int64_t[]){B, T}), *ty = ut_inputs_add(in, UT_I32, 2, (int64_t[]){B, T});
    float *mk = ut_inputs_add(in, UT_F32, 2, (int64_t[]){B, T});
    int32_t *ps = net->roberta ? ut_inputs_add(in, UT_I32, 2, (int64_t[]){B, T}) : add_i32(in, T);
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < T; t++) {
            id[b * T + t] = h[(b * 3) * T + t];
            ty[b * T + t] = h[(b * 3 + 1) * T + t];
            mk[b * T + t] = h[(b * 3 + 2) * T + t] ? 0.0f : -FLT_MAX; /* as (1 - mask) * finfo.min */
        }
    if (net->roberta) roberta_positions(ps, id, B, T, net->pad_id);
    else
        for (int64_t t = 0; t < T; t++) ps[t] = (int32_t)t;
    in->layout = PADDED;
    if (net->mlm && mlm_rows(NULL, B, T, in)) in->layout = PADDED_ROWS;
}

/* The real tokens of h (B, 3, T) packed: ids, type ids and position ids (N)
 * of the N tokens whose mask is set, sequence by sequence, offsets (B + 1)
 * where each sequence starts and first (B) = offsets[0..B-1], its first row.
 * false when some sequence's first token is padding (the pooler reads that
 * position: the padded layout computes it). */
static bool pack_inputs(const bert *net, const int32_t *h, int64_t B, int64_t T, ut_inputs *in) {
    int64_t N = 0;
    for (int64_t b = 0; b < B; b++) {
        if (!h[(b * 3 + 2) * T]) return false;
        for (int64_t t = 0; t < T; t++) N += h[(b * 3 + 2) * T + t] != 0;
    }
    int32_t *id = add_i32(in, N), *ty = add_i32(in, N), *ps = add_i32(in, N), *off = add_i32(in, B + 1);
    int32_t *first = add_i32(in, B), *rp = ut_malloc_check((size_t)(T > 0 ? T : 1) * sizeof *rp);
    /* a token classifier (a masked LM: to find its labeled rows, or all of
     * them): each position's packed row (B, T), padding row 0 */
    int32_t *at = net->token || net->mlm ? ut_inputs_add(in, UT_I32, 2, (int64_t[]){B, T}) : NULL;
    int64_t r = 0;
    off[0] = 0;
    for (int64_t b = 0; b < B; b++) {
        const int32_t *ib = h + b * 3 * T, *tb = ib + T, *mb = tb + T;
        if (net->roberta) roberta_positions(rp, ib, 1, T, net->pad_id);
        for (int64_t t = 0; t < T; t++) {
            if (at) at[b * T + t] = mb[t] ? (int32_t)r : 0;
            if (!mb[t]) continue;
            id[r] = ib[t];
            ty[r] = tb[t];
            ps[r++] = net->roberta ? rp[t] : (int32_t)t;
        }
        first[b] = off[b];
        off[b + 1] = (int32_t)r;
    }
    ut_free(rp);
    in->layout = PACKED;
    if (net->mlm && mlm_rows(at, B, T, in)) in->layout = PACKED_ROWS;
    return true;
}

static int bert_prepare(const ut_model *m, const ut_host_array *x, ut_inputs *in, char *err, size_t n) {
    const bert *net = m->impl;
    int64_t maxT = net->roberta ? net->P - net->pad_id - 1 : net->P; /* RoBERTa's positions start after pad */
    if (x->dtype != UT_I32 || x->ndim != 3 || x->ne[1] != 3 || x->ne[2] > maxT)
        return ut_input_error(err, n, m->type, x,
                              ut_fmt("expected I32 x (B, 3, T): token ids, token type ids and attention mask, "
                                     "T <= %lld (max_position_embeddings %lld%s)", (long long)maxT,
                                     (long long)net->P, net->roberta ? " less pad_token_id + 1" : ""));
    /* unpadded execution: every op but attention is row-wise and padded
     * positions never reach real ones, so only the real tokens are computed */
    if (!pack_inputs(net, x->host, x->ne[0], x->ne[2], in)) split_inputs(net, x->host, x->ne[0], x->ne[2], in);
    in->seq_len[0] = x->ne[2];
    return 0;
}

/* embeddings, LayerNorm and dropout of ids, types and pos (any shape). As
 * transformers builds them, the word embedding has padding_idx pad_token_id
 * (its row takes no gradient, also where a text holds the pad token or a
 * batch is left-padded), and so has RoBERTa's position embedding. NEFTune's
 * noise goes on the word embedding alone (transformers' hook on
 * word_embeddings), scaled by the batch's padded length L. */
static ut_tensor *embed(ut_ctx *ctx, const bert *net, ut_tensor *ids, ut_tensor *types, ut_tensor *pos, int64_t L) {
    const ut_tp_hooks *tp = &net->lay.tp;
    ut_tensor *word = net->lay.tp_size > 1 ? tp->embedding(ctx, ids, net->word.w, net->V, (int)net->pad_id, tp->group)
                                           : ut_embedding_pad(ctx, ids, net->word.w, (int)net->pad_id);
    word = ut_neftune(ctx, word, L);
    ut_tensor *h = ut_add(ctx, word, ut_embedding_layer_forward(ctx, &net->type, types));
    h = ut_add(ctx, h, net->roberta ? ut_embedding_pad(ctx, pos, net->pos.w, (int)net->pad_id)
                                    : ut_embedding_layer_forward(ctx, &net->pos, pos));
    return ut_dropout(ctx, ut_layernorm_layer_forward(ctx, &net->emb_ln, h), net->dropout);
}

static ut_tensor *encoder(ut_model *m, ut_ctx *ctx, ut_tensor *h, ut_tensor *aux, ut_checkpoint_fn fn) {
    const bert *net = m->impl;
    for (int64_t l = net->b0; l < net->b1; l++) {
        ut_ctx_rng_region(ctx, l + 1); /* the layer's masks whichever stage runs it */
        ut_tensor *in[2] = {h, aux};
        h = m->checkpoint_activations ? ut_checkpoint(ctx, fn, &net->args[l], in, 2)
                                      : fn(ctx, &net->args[l], in, 2);
    }
    return h;
}

/* BERT: pooler on the first token ([CLS]); RoBERTa: its head's dense on <s>;
 * cls (B, C) */
static ut_tensor *head(ut_ctx *ctx, const bert *net, ut_tensor *cls) {
    ut_ctx_rng_region(ctx, net->L + 1);
    if (net->roberta) cls = ut_dropout(ctx, cls, net->cls_dropout);
    ut_tensor *pooled = ut_tanh(ctx, ut_linear_layer_forward(ctx, &net->pooler, cls));
    return ut_linear_layer_forward(ctx, &net->classifier, ut_dropout(ctx, pooled, net->cls_dropout));
}

/* A token classifier's logits of h (..., C): dropout, then the classifier
 * on every row */
static ut_tensor *token_head(ut_ctx *ctx, const bert *net, ut_tensor *h) {
    ut_ctx_rng_region(ctx, net->L + 1);
    return ut_linear_layer_forward(ctx, &net->classifier, ut_dropout(ctx, h, net->cls_dropout));
}

/* A masked LM's prediction head before the decoder: dense, activation
 * (BERT's hidden_act; RoBERTa's lm_head exact GELU), LayerNorm; h (..., C) */
static ut_tensor *mlm_transform(ut_ctx *ctx, const bert *net, ut_tensor *h) {
    h = net->exact_gelu || net->roberta ? ut_gelu_erf(ctx, ut_linear_layer_forward(ctx, &net->transform, h))
                                        : ut_linear_layer_forward_gelu(ctx, &net->transform, h);
    return ut_layernorm_layer_forward(ctx, &net->transform_ln, h);
}

/* The decoder, tied to the word embedding, and its bias: logits over the
 * vocabulary, or (split) over this rank's part of it, its columns (the
 * input's gradient summed over the group) */
static ut_tensor *mlm_decoder(ut_ctx *ctx, const bert *net, ut_tensor *x) {
    const ut_tp_hooks *tp = &net->lay.tp;
    if (x && net->lay.tp_size > 1) x = tp->copy(ctx, x, tp->group);
    return ut_linear(ctx, x, net->word.w, net->decoder_bias);
}

static bool padded_layout(int layout) { return layout == PADDED || layout == PADDED_ROWS; }
static bool rows_layout(int layout) { return layout == PACKED_ROWS || layout == PADDED_ROWS; }

/* The encoder's final states: (B, T, C) padded, (N, C) packed; a stage
 * before the last's activation. A pipeline stage after the first starts
 * from the activation it was sent. */
static ut_tensor *states(ut_model *m, ut_ctx *ctx, const ut_prepared *in) {
    const bert *net = m->impl;
    ut_tensor *const *t = in->t;
    if (padded_layout(in->layout)) {
        ut_tensor *x = net->first ? embed(ctx, net, t[0], t[1], t[3], in->seq_len[0]) : m->stage_input;
        return encoder(m, ctx, x, t[2], layer_fn);
    }
    ut_tensor *x = net->first ? embed(ctx, net, t[0], t[1], t[2], in->seq_len[0]) : m->stage_input;
    return encoder(m, ctx, x, t[3], layer_fn_packed);
}

/* A masked LM's head input from the final states h: the transformed states
 * of the labeled rows (M, C) (their labels in *ys), or of every position
 * (B, T, C) (*ys NULL) */
static ut_tensor *mlm_hidden(ut_ctx *ctx, const bert *net, const ut_prepared *in, ut_tensor *h, ut_tensor **ys) {
    ut_tensor *const *t = in->t;
    bool padded = padded_layout(in->layout);
    *ys = NULL;
    if (!h) return NULL;
    if (rows_layout(in->layout)) { /* the rows and labels follow the layout's arrays */
        int r = padded ? 4 : 6;
        if (padded) h = ut_reshape(ctx, h, 2, (int64_t[]){h->ne[0] * h->ne[1], net->C});
        *ys = t[r + 1];
        return mlm_transform(ctx, net, ut_embedding(ctx, t[r], h));
    }
    h = mlm_transform(ctx, net, h);
    return padded ? h : ut_embedding(ctx, t[5], h); /* the packed rows back to (B, T, C) */
}

/* PACKED: ids, types, positions, offsets, first (a token classifier, a
 * masked LM: and each position's row; PACKED_ROWS: then the labeled rows
 * and their labels); PADDED: ids, types, mask, positions (padded
 * execution, for batches where some sequence starts with padding;
 * PADDED_ROWS: then the labeled rows and their labels) */
static ut_tensor *bert_forward(ut_model *m, ut_ctx *ctx, const ut_prepared *in) {
    bert *net = m->impl;
    ut_tensor *const *t = in->t;
    ut_tensor *h = states(m, ctx, in);
    if (!net->last) return h;
    if (net->mlm) {
        ut_tensor *logits = mlm_decoder(ctx, net, mlm_hidden(ctx, net, in, h, &net->mlm_y));
        /* split: an evaluation's logits whole on every rank (its accuracy reads the whole vocabulary) */
        if (net->lay.tp_size > 1 && !ut_ctx_grad_enabled(ctx))
            return net->lay.tp.gather(ctx, logits, net->lay.tp.group);
        return logits;
    }
    if (padded_layout(in->layout)) {
        if (net->token) return token_head(ctx, net, h);
        return head(ctx, net, ut_reshape(ctx, ut_slice(ctx, h, 1, 0, 1), 2, (int64_t[]){t[0]->ne[0], net->C}));
    }
    if (net->token) return ut_embedding(ctx, t[5], token_head(ctx, net, h)); /* (B, T, K) */
    return head(ctx, net, ut_embedding(ctx, t[4], h));
}

/* A masked LM's loss with the decoder in the same op (ut_linear_cross_entropy:
 * the logits over the vocabulary never a tensor of their own), over the
 * labeled rows where prepare had the targets; NULL (nothing run) for the
 * other tasks and a stage without the head. */
static ut_tensor *bert_forward_loss(ut_model *m, ut_ctx *ctx, const ut_prepared *in, ut_tensor *targets) {
    bert *net = m->impl;
    if (!net->mlm || !net->last) return NULL;
    ut_tensor *ys, *x = mlm_hidden(ctx, net, in, states(m, ctx, in), &ys);
    if (!x) return NULL;
    if (!ys) { /* every position: against the targets (B, T) */
        if (!targets || targets->ndim != 2 || targets->ne[0] != x->ne[0] || targets->ne[1] != x->ne[1]) {
            ut_ctx_set_error(ctx, "%s masked LM loss: I32 targets (B, T), a token per position (-100: none), "
                                  "must match the batch's (%lld, %lld)", m->type, (long long)x->ne[0],
                             (long long)x->ne[1]);
            return NULL;
        }
        ys = targets;
    }
    if (net->lay.tp_size > 1) /* split: the vocabulary-parallel loss, the logits never gathered */
        return net->lay.tp.cross_entropy(ctx, mlm_decoder(ctx, net, x), ys, net->V, -100, net->lay.tp.group);
    return ut_linear_cross_entropy(ctx, x, net->word.w, net->decoder_bias, ys, -100);
}

/* A masked LM's loss of its logits: of the labeled rows (M, V) against
 * their labels from the same forward, or of every position (B, T, V)
 * against the targets (B, T) */
static ut_tensor *mlm_loss(ut_model *m, ut_ctx *ctx, ut_tensor *logits, ut_tensor *targets) {
    bert *net = m->impl;
    const ut_tp_hooks *tp = &net->lay.tp;
    /* split: a training forward's logits are this rank's part of the vocabulary */
    bool part = net->lay.tp_size > 1 && logits && logits->ne[logits->ndim - 1] != net->V;
    if (logits && logits->ndim == 2 && net->mlm_y && net->mlm_y->ne[0] == logits->ne[0])
        return part ? tp->cross_entropy(ctx, logits, net->mlm_y, net->V, -100, tp->group)
                    : ut_cross_entropy(ctx, logits, net->mlm_y, -100);
    if (part && logits->ndim == 3 && targets && targets->ndim == 2)
        return tp->cross_entropy(ctx, logits, targets, net->V, -100, tp->group);
    return ut_model_token_loss(m, ctx, logits, targets);
}

/* ---- building ---- */
static void ln_init(ut_model *m, ut_layernorm_layer *l, const char *prefix, int64_t C, float eps) {
    ut_layernorm_layer_init(m, l, prefix, C);
    l->eps = eps;
}

static void layer_init(ut_model *m, bert *net, bert_layer *l, int64_t i, float std) {
    char p[128], q[160];
    int64_t C = net->C;
    snprintf(p, sizeof p, "%s.encoder.layer.%lld", net->prefix, (long long)i);
    const char *leaf[3] = {"query", "key", "value"};
    ut_linear_layer *qkv[3] = {&l->query, &l->key, &l->value};
    /* split: q, k, v and intermediate column-parallel (this rank's heads,
     * its share of the features), the two output denses row-parallel
     * (divisibility checked in build) */
    const ut_model_layout *lay = &net->lay;
    for (int k = 0; k < 3; k++) {
        snprintf(q, sizeof q, "%s.attention.self.%s", p, leaf[k]);
        ut_linear_layer_init_layout(m, qkv[k], q, C, C, std, 0, lay);
    }
    snprintf(q, sizeof q, "%s.attention.output.dense", p);
    ut_linear_layer_init_layout(m, &l->attn_out, q, C, C, std, 1, lay);
    snprintf(q, sizeof q, "%s.attention.output.LayerNorm", p);
    ln_init(m, &l->attn_ln, q, C, net->eps);
    snprintf(q, sizeof q, "%s.intermediate.dense", p);
    ut_linear_layer_init_layout(m, &l->inter, q, C, net->I, std, 0, lay);
    snprintf(q, sizeof q, "%s.output.dense", p);
    ut_linear_layer_init_layout(m, &l->out, q, net->I, C, std, 1, lay);
    snprintf(q, sizeof q, "%s.output.LayerNorm", p);
    ln_init(m, &l->out_ln, q, C, net->eps);
}

/* Parameters in Hugging Face's state_dict order, initialised as its
 * _init_weights: N(0, initializer_range) weights and embeddings, zero biases,
 * LayerNorm 1 and 0. */
static void embeddings_init(ut_model *m, bert *net, float std) {
    char p[128];
    const char *leaf[3] = {"word_embeddings", "position_embeddings", "token_type_embeddings"};
    ut_embedding_layer *e[3] = {&net->word, &net->pos, &net->type};
    int64_t rows[3] = {net->V, net->P, net->TV};
    for (int k = 0; k < 3; k++) {
        snprintf(p, sizeof p, "%s.embeddings.%s", net->prefix, leaf[k]);
        /* split: the word embedding by rows of the vocabulary */
        ut_embedding_layer_init_layout(m, e[k], p, rows[k], net->C, std, k == 0 ? &net->lay : NULL);
    }
    snprintf(p, sizeof p, "%s.embeddings.LayerNorm", net->prefix);
    ln_init(m, &net->emb_ln, p, net->C, net->eps);
}

static ut_model *bert_new(bert *net, float std, uint64_t seed) {
    ut_model *m = ut_model_new(net->prefix);
    if (net->first) embeddings_init(m, net, std);
    net->layer = ut_calloc_check((size_t)net->L, sizeof *net->layer);
    net->args = ut_calloc_check((size_t)net->L, sizeof *net->args);
    for (int64_t i = net->b0; i < net->b1; i++) {
        layer_init(m, net, &net->layer[i], i, std);
        net->args[i] = (layer_arg){net, &net->layer[i]};
    }
    if (net->last && net->mlm) {
        /* a pipeline's last stage: its copy of the tied word embedding (the
         * trainer sums the copies' gradients) */
        char p[128];
        snprintf(p, sizeof p, "%s.embeddings.word_embeddings", net->prefix);
        if (!net->first) ut_embedding_layer_init_layout(m, &net->word, p, net->V, net->C, std, &net->lay);
        ut_linear_layer_init_normal(m, &net->transform,
                                    net->roberta ? "lm_head.dense" : "cls.predictions.transform.dense", net->C, net->C,
                                    std);
        ln_init(m, &net->transform_ln, net->roberta ? "lm_head.layer_norm" : "cls.predictions.transform.LayerNorm",
                net->C, net->eps);
        /* split: this rank's part of the vocabulary, as the word embedding's rows */
        const char *bias = net->roberta ? "lm_head.bias" : "cls.predictions.bias";
        int T = net->lay.tp_size;
        char err[256];
        net->decoder_bias = T > 1 ? ut_param_add_part(m, bias, 1, (int64_t[]){net->V}, (ut_init){UT_INIT_ZEROS, 0}, 0,
                                                      T, net->lay.tp_rank, 1, err, sizeof err)
                                  : ut_param_add(m, bias, 1, (int64_t[]){net->V}, (ut_init){UT_INIT_ZEROS, 0});
        UT_ASSERT(net->decoder_bias); /* vocab_size divisible by the ranks: checked in build */
    } else if (net->last && net->token) {
        ut_linear_layer_init_normal(m, &net->classifier, "classifier", net->C, net->K, std);
    } else if (net->last) {
        ut_linear_layer_init_normal(m, &net->pooler, net->roberta ? "classifier.dense" : "bert.pooler.dense", net->C,
                                    net->C, std);
        ut_linear_layer_init_normal(m, &net->classifier, net->roberta ? "classifier.out_proj" : "classifier", net->C,
                                    net->K, std);
    }
    /* a masked LM's word embedding, on the first stage and (its decoder) the last: every stage names it */
    if (net->mlm)
        m->pp_tied = net->roberta ? "roberta.embeddings.word_embeddings.weight"
                                  : "bert.embeddings.word_embeddings.weight";
    if (net->lay.tp_size > 1) m->tp_size = net->lay.tp_size; /* every stage is split, with or without embeddings */
    int P = net->lay.pp_size > 1 ? net->lay.pp_size : 1;
    m->pp_size = P, m->pp_rank = P > 1 ? net->lay.pp_rank : 0, m->pp_b0 = net->b0, m->pp_b1 = net->b1;
    m->impl = net;
    m->free_impl = bert_free;
    m->prepare = bert_prepare;
    m->forward_prepared = bert_forward;
    m->loss = net->mlm ? mlm_loss : net->token ? ut_model_token_loss : ut_model_class_loss;
    if (net->mlm) m->forward_loss = bert_forward_loss, m->prepare_targets = true;
    ut_model_finalize(m, seed);
    return m;
}

/* The architecture options (config.json's names); model.pretrained supplies them. */
static const char *const arch_keys[] = {"vocab_size", "hidden_size", "num_hidden_layers",
                                        "num_attention_heads", "intermediate_size",
                                        "max_position_embeddings", "type_vocab_size",
                                        "layer_norm_eps", "hidden_act", "pad_token_id", NULL};

/* Merges config.json (when opts has "pretrained") under the user's options:
 * the architecture comes from the directory only; model_type bert or roberta
 * (model.name roberta: roberta only). */
static ut_kv *merged_options(const ut_kv *opts, bool roberta, char *err, size_t n) {
    const char *dir = ut_kv_get(opts, "pretrained");
    if (!dir) return NULL;
    static const char *const types[] = {"bert", "roberta", NULL};
    const ut_hf_config_spec spec = {roberta ? "roberta" : "bert", roberta ? types + 1 : types,
                                    "GPT-2 and BART directories are read by model.name: gpt2 and bart", arch_keys,
                                    NULL};
    ut_kv *kv = ut_hf_config_checked(opts, dir, &spec, err, n);
    if (kv) ut_kv_update(kv, opts);
    return kv;
}

/* The integer sizes: config.json's names, BERT-base (RoBERTa-base) defaults, each >= 1 */
static const struct {
    const char *key;
    long long def, roberta_def;
    size_t at;
} size_keys[] = {
    {"num_hidden_layers", 12, 12, offsetof(bert, L)},   {"num_attention_heads", 12, 12, offsetof(bert, NH)},
    {"hidden_size", 768, 768, offsetof(bert, C)},       {"intermediate_size", 3072, 3072, offsetof(bert, I)},
    {"vocab_size", 30522, 50265, offsetof(bert, V)},    {"max_position_embeddings", 512, 514, offsetof(bert, P)},
    {"type_vocab_size", 2, 1, offsetof(bert, TV)},
};

static int read_dims(const ut_kv *kv, bert *net, double *std, char *err, size_t n) {
    bool roberta = net->roberta;
    *net = (bert){.roberta = roberta};
    for (size_t i = 0; i < sizeof size_keys / sizeof size_keys[0]; i++) {
        long long v;
        if (ut_kv_int(kv, size_keys[i].key, roberta ? size_keys[i].roberta_def : size_keys[i].def, &v, err, n))
            return -1;
        if (v < 1 || v > INT32_MAX)
            return ut_errorf(err, n, "bert: %s %lld is outside [1, %d]", size_keys[i].key, v, INT32_MAX);
        *(int64_t *)((char *)net + size_keys[i].at) = v;
    }
    long long K1, K2, pad;
    double eps, drop, adrop, cdrop;
    if (ut_kv_int(kv, "num_classes", 2, &K1, err, n) || ut_kv_int(kv, "num_labels", K1, &K2, err, n) ||
        ut_kv_int(kv, "pad_token_id", roberta ? 1 : 0, &pad, err, n) ||
        ut_kv_float(kv, "layer_norm_eps", roberta ? 1e-5 : 1e-12, &eps, err, n) ||
        ut_kv_float(kv, "hidden_dropout_prob", 0.1, &drop, err, n) ||
        ut_kv_float(kv, "attention_probs_dropout_prob", 0.1, &adrop, err, n) ||
        ut_kv_float(kv, "initializer_range", 0.02, std, err, n) ||
        ut_kv_float(kv, "classifier_dropout", drop, &cdrop, err, n))
        return -1;
    if (K2 < 1 || K2 > INT32_MAX) return ut_errorf(err, n, "bert: num_labels %lld must be >= 1", K2);
    if (net->C % net->NH)
        return ut_errorf(err, n, "bert: hidden_size %lld is not divisible by num_attention_heads %lld",
                         (long long)net->C, (long long)net->NH);
    if (drop < 0 || drop >= 1) return ut_errorf(err, n, "bert: hidden_dropout_prob %g is outside [0, 1)", drop);
    if (adrop < 0 || adrop >= 1)
        return ut_errorf(err, n, "bert: attention_probs_dropout_prob %g is outside [0, 1)", adrop);
    if (cdrop < 0 || cdrop >= 1) return ut_errorf(err, n, "bert: classifier_dropout %g is outside [0, 1)", cdrop);
    if (roberta && (pad < 0 || pad + 2 > net->P || pad >= net->V))
        return ut_errorf(err, n, "roberta: pad_token_id %lld must be a token id and leave room for positions "
                                 "below max_position_embeddings %lld", pad, (long long)net->P);
    if (!(eps > 0) || !(*std >= 0))
        return ut_errorf(err, n, "bert: layer_norm_eps must be > 0 and initializer_range >= 0");
    net->K = K2;
    net->eps = (float)eps;
    net->dropout = (float)drop;
    net->attn_dropout = (float)adrop;
    net->cls_dropout = (float)cdrop;
    net->pad_id = pad;
    net->prefix = roberta ? "roberta" : "bert";
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
    if (task && strcmp(task, "sequence_classification") && strcmp(task, "token_classification") &&
        strcmp(task, "masked_lm"))
        return ut_errorf(err, n, "model.task: '%s' is not available for bert; use sequence_classification, "
                                 "token_classification or masked_lm", task);
    net->token = task && !strcmp(task, "token_classification");
    net->mlm = task && !strcmp(task, "masked_lm");
    return 0;
}

/* transformers' _init_weights zeroes an embedding's padding_idx row: RoBERTa's
 * word and position rows pad_id, through one host copy of each table */
static void zero_padding_rows(const bert *net) {
    /* split: on the rank that holds it; a masked LM's last stage: its copy of the word embedding */
    if (net->word.w) ut_embedding_layer_zero_row(&net->word, net->pad_id, &net->lay);
    if (net->pos.w) ut_embedding_layer_zero_row(&net->pos, net->pad_id, NULL);
}

static int load_pretrained(ut_model *m, const bert *net, const char *dir, bool mismatched, char *err, size_t n) {
    bool roberta = net->roberta, token = net->token;
    static const char *const optional[] = {"bert.pooler.", "classifier.", NULL};
    static const char *const ignored[] = {"position_ids", "cls.", NULL};
    /* a bare RobertaModel keeps a pooler the classifier does not use; lm_head: the MLM head */
    static const char *const r_ignored[] = {"position_ids", "lm_head.", "pooler.", NULL};
    /* a token classifier from a sequence classifier's save: its pooler and
     * RoBERTa's two-layer head are not read (transformers drops them too) */
    static const char *const t_ignored[] = {"position_ids", "cls.", "bert.pooler.", NULL};
    static const char *const tr_ignored[] = {"position_ids", "lm_head.", "pooler.", "classifier.dense.",
                                             "classifier.out_proj.", NULL};
    /* a masked LM: the decoder is the word embedding (its bias the head's
     * bias); a checkpoint without the head (a bare encoder, a classifier)
     * gives it fresh, as transformers does, and its other heads are not read */
    static const char *const m_optional[] = {"cls.predictions.", NULL}, *const mr_optional[] = {"lm_head.", NULL};
    static const char *const m_ignored[] = {"position_ids", "cls.predictions.decoder.", "cls.seq_relationship.",
                                            "bert.pooler.", "classifier.", NULL};
    static const char *const mr_ignored[] = {"position_ids", "lm_head.decoder.", "pooler.", "classifier.", NULL};
    ut_hf_load_opts o = {.base_prefix = roberta ? "roberta." : "bert.", .optional = optional,
                         .ignored = token ? (roberta ? tr_ignored : t_ignored) : roberta ? r_ignored : ignored,
                         .ignore_mismatched = mismatched};
    if (net->mlm) o.optional = roberta ? mr_optional : m_optional, o.ignored = roberta ? mr_ignored : m_ignored;
    return ut_hf_load_pretrained(m, dir, o, err, n);
}

static ut_model *build(const ut_kv *opts, bool roberta, uint64_t seed, char *err, size_t n) {
    static const char *const known[] = {"vocab_size", "hidden_size", "num_hidden_layers",
                                        "num_attention_heads", "intermediate_size",
                                        "max_position_embeddings", "type_vocab_size", "layer_norm_eps",
                                        "hidden_act", "hidden_dropout_prob",
                                        "attention_probs_dropout_prob", "initializer_range",
                                        "num_labels", "num_classes", "task", "pretrained",
                                        "classifier_dropout", "pad_token_id", "problem_type",
                                        "ignore_mismatched_sizes", NULL};
    if (ut_kv_check_keys(opts, known, roberta ? "model roberta" : "model bert", err, n)) return NULL;
    bool said, mismatched;
    ut_problem problem;
    if (ut_model_problem_type(opts, &problem, &said, err, n) ||
        ut_kv_bool(opts, "ignore_mismatched_sizes", false, &mismatched, err, n))
        return NULL;
    const char *dir = ut_kv_get(opts, "pretrained");
    ut_kv *merged = dir ? merged_options(opts, roberta, err, n) : NULL;
    if (dir && !merged) return NULL;
    const ut_kv *kv = merged ? merged : opts;
    bert net = {.roberta = roberta || (merged && !strcmp(ut_kv_get(merged, "model_type"), "roberta"))};
    if (!net.roberta && ut_kv_get(opts, "pad_token_id")) {
        ut_kv_free(merged);
        return ut_errorf(err, n, "model.pad_token_id: BERT's positions do not depend on padding; it is read "
                                 "by RoBERTa only (model.name: roberta); remove it"), NULL;
    }
    double std;
    int rc = read_dims(kv, &net, &std, err, n) || read_kinds(kv, &net, err, n);
    ut_kv_free(merged);
    if (rc) return NULL;
    if (net.mlm && (said || ut_kv_get(opts, "classifier_dropout")))
        return ut_errorf(err, n, "model.task masked_lm predicts tokens of the vocabulary, not classes: remove "
                                 "model.%s", ut_kv_get(opts, "problem_type") ? "problem_type"
                                 : ut_kv_get(opts, "classifier_dropout") ? "classifier_dropout"
                                 : ut_kv_get(opts, "num_labels") ? "num_labels" : "num_classes"), NULL;
    if (net.token && (problem != UT_PROBLEM_SINGLE_LABEL || net.K < 2))
        return ut_errorf(err, n, "model.task token_classification: a class per token from at least 2 (the tags); "
                                 "%s", net.K < 2 ? "num_labels must be 2 or more" : "remove model.problem_type"), NULL;
    if (problem == UT_PROBLEM_REGRESSION) net.K = 1; /* problem_type regression: one score, whatever config.json's labels */
    net.lay = ut_model_build_layout();
    /* pipeline stages of equal layer counts (the pooler and classifier cost next to nothing) */
    if (ut_pipeline_stage_blocks(&net.lay, net.L, 0, &net.b0, &net.b1, err, n)) return NULL;
    net.first = net.b0 == 0, net.last = net.b1 == net.L;
    int T = net.lay.tp_size;
    if (T > 1) {
        const char *who = net.roberta ? "roberta" : "bert";
        if (net.NH % T || net.I % T || net.V % T)
            return ut_errorf(err, n, "%s: num_attention_heads %lld, intermediate_size %lld and vocab_size %lld "
                                     "must be divisible by dist.tensor_parallel %d (pad the vocabulary, as "
                                     "Megatron-LM does)", who, (long long)net.NH, (long long)net.I,
                             (long long)net.V, T), NULL;
    }
    double C = (double)net.C, numel = (double)(net.V + net.P + net.TV) * C +
                                      (double)net.L * (4.0 * C * C + 2.0 * C * (double)net.I) +
                                      (net.mlm ? C * (C + 2) + (double)net.V
                                               : C * ((net.token ? 0 : C) + (double)net.K));
    if (ut_memory_check(8 * numel, ut_fmt("bert (%.3g parameters)", numel), err, n)) return NULL;
    bert *impl = ut_malloc_check(sizeof *impl);
    *impl = net;
    ut_model *m = bert_new(impl, (float)std, seed);
    if (impl->roberta && !dir) zero_padding_rows(impl);
    if (dir && load_pretrained(m, impl, dir, mismatched, err, n)) {
        ut_model_free(m);
        return NULL;
    }
    return m;
}

ut_model *ut_bert_build(const ut_kv *opts, uint64_t seed, char *err, size_t n) {
    return build(opts, false, seed, err, n);
}

ut_model *ut_roberta_build(const ut_kv *opts, uint64_t seed, char *err, size_t n) {
    return build(opts, true, seed, err, n);
}

/* bart: BART as Hugging Face's BartForSequenceClassification. A shared token
 * embedding (scaled by sqrt(d_model) when scale_embedding), learned positions
 * with BART's offset of 2, layernorm_embedding, post-LayerNorm encoder layers
 * (self-attention with the key padding mask) and decoder layers (causal
 * self-attention, cross-attention over the encoder states with the encoder's
 * padding mask), GELU feed-forward; the decoder reads the input shifted right
 * (shift_tokens_right with decoder_start_token_id) and its state at each
 * row's last </s> goes through the classification head (dense, tanh,
 * out_proj).
 * Input x I32 (B, 3, T): planes of token ids, token type ids (not read) and
 * attention mask, as the pretrained-tokenizer TSV dataset gives them
 * (right-padded batches run unpadded: encoder and decoder on the real rows,
 * ut_attention_varlen). Output
 * logits (B, num_labels); loss cross-entropy.
 * Parameter names are transformers' ("model.shared.weight",
 * "model.encoder.layers.0.self_attn.q_proj.weight",
 * "classification_head.dense.weight"), so model.safetensors loads by name.
 * Options, in config.json's names, plus num_labels (num_classes), task and
 * pretrained (a model directory). docs/models.md. */
#include <float.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "utrain/base.h"
#include "utrain/io.h"
#include "utrain/nn.h"
#include "utrain/ops.h"

typedef struct {
    ut_linear_layer k, v, q, out;
    ut_layernorm_layer ln;
} bart_attn;

typedef struct {
    bart_attn self, cross; /* cross: decoder layers only */
    ut_linear_layer fc1, fc2;
    ut_layernorm_layer final_ln;
} bart_layer;

enum { ACT_GELU, ACT_GELU_TANH, ACT_RELU };

typedef struct bart bart;

/* one layer's fn argument for ut_checkpoint: encoder in = {x, mask},
 * decoder in = {x, encoder states, encoder mask} */
typedef struct {
    const bart *net;
    const bart_layer *l;
} layer_arg;

struct bart {
    int64_t EL, DL, ENH, DNH, C, EF, DF, V, P, K;
    int64_t pad, eos, start;
    int act;
    float dropout, attn_dropout, act_dropout, cls_dropout, embed_scale;
    ut_embedding_layer shared, enc_pos, dec_pos;
    ut_layernorm_layer enc_ln, dec_ln;
    bart_layer *layer; /* EL encoder layers, then DL decoder layers */
    layer_arg *args;
    ut_linear_layer dense, out_proj;
    bool gen;          /* task seq2seq: BartForConditionalGeneration's LM head instead of the classifier */
    float *final_bias; /* its final_logits_bias (V), read from model.pretrained; NULL: zeros */
    int64_t forced_bos; /* forced_bos_token_id, -1: none */
    ut_model_layout lay; /* tensor parallel: heads, features and the shared embedding's vocabulary split */
    /* pipeline: this stage's layers [b0, b1) of the EL + DL (encoder's,
     * then decoder's); the first stage embeds both streams, the last has
     * the classification head or the tied LM head */
    int64_t b0, b1;
    bool first, last;
};

static void bart_free(void *impl) {
    bart *net = impl;
    ut_free(net->layer);
    ut_free(net->args);
    ut_free(net->final_bias);
    ut_free(net);
}

/* ---- forward ---- */
/* attention of x's rows to kv's: padded, mask (B, T) F32 or NULL; packed
 * (the real rows of each sequence, one after the other), aux the I32
 * offsets where each sequence starts */
static ut_tensor *attend(ut_ctx *ctx, const bart *net, const bart_attn *a, ut_tensor *x, ut_tensor *kv,
                         ut_tensor *aux, int64_t NH, bool causal) {
    const ut_tp_hooks *tp = &net->lay.tp; /* zeroed when whole: plain linears */
    ut_tensor *xi = ut_tp_col_in(ctx, tp, x), *kvi = kv == x ? xi : ut_tp_col_in(ctx, tp, kv);
    ut_tensor *q = ut_linear_layer_forward(ctx, &a->q, xi), *k = ut_linear_layer_forward(ctx, &a->k, kvi),
              *v = ut_linear_layer_forward(ctx, &a->v, kvi);
    int all = (int)NH, nh = (int)(NH / net->lay.tp_size), h0 = net->lay.tp_rank * nh; /* this rank's heads */
    ut_tensor *h = aux && aux->dtype == UT_I32
                       ? ut_attention_varlen_heads(ctx, q, k, v, aux, nh, causal, net->attn_dropout, h0, all)
                       : ut_attention_qkv_heads(ctx, q, k, v, aux, nh, causal, net->attn_dropout, h0, all);
    h = ut_dropout(ctx, ut_tp_row_out(ctx, tp, h, &a->out), net->dropout);
    return ut_layernorm_layer_forward(ctx, &a->ln, ut_add(ctx, x, h));
}

static ut_tensor *feed_forward(ut_ctx *ctx, const bart *net, const bart_layer *l, ut_tensor *x) {
    ut_tensor *h = ut_tp_col_in(ctx, &net->lay.tp, x);
    h = net->act == ACT_GELU   ? ut_gelu_erf(ctx, ut_linear_layer_forward(ctx, &l->fc1, h))
        : net->act == ACT_RELU ? ut_relu(ctx, ut_linear_layer_forward(ctx, &l->fc1, h))
                               : ut_linear_layer_forward_gelu(ctx, &l->fc1, h);
    if (net->lay.tp_size > 1) { /* this rank's features of F: the whole tensor's mask, column slice */
        int64_t Fp = h->ne[h->ndim - 1];
        h = ut_dropout_cols(ctx, h, net->act_dropout, (int64_t)net->lay.tp_rank * Fp, Fp * net->lay.tp_size);
    } else {
        h = ut_dropout(ctx, h, net->act_dropout);
    }
    h = ut_dropout(ctx, ut_tp_row_out(ctx, &net->lay.tp, h, &l->fc2), net->dropout);
    return ut_layernorm_layer_forward(ctx, &l->final_ln, ut_add(ctx, x, h));
}

/* in = {x, mask (B, T) F32} padded, {x, offsets (B + 1) I32} packed */
static ut_tensor *encoder_layer(ut_ctx *ctx, void *user, ut_tensor **in, int n) {
    (void)n;
    const layer_arg *a = user;
    ut_tensor *x = attend(ctx, a->net, &a->l->self, in[0], in[0], in[1], a->net->ENH, false);
    return feed_forward(ctx, a->net, a->l, x);
}

/* in = {x, encoder states, the encoder's mask or offsets} as encoder_layer;
 * packed, the decoder rows are the first L of each sequence of L tokens */
static ut_tensor *decoder_layer(ut_ctx *ctx, void *user, ut_tensor **in, int n) {
    (void)n;
    const layer_arg *a = user;
    ut_tensor *self_aux = in[2]->dtype == UT_I32 ? in[2] : NULL;
    ut_tensor *x = attend(ctx, a->net, &a->l->self, in[0], in[0], self_aux, a->net->DNH, true);
    x = attend(ctx, a->net, &a->l->cross, x, in[1], in[2], a->net->DNH, false);
    return feed_forward(ctx, a->net, a->l, x);
}

/* ---- inputs: prepared on the host (the loader thread), ut_model.prepare ----
 * Both layouts hold ids, dec_ids, pos, eos_at and the rows' description:
 * padded, ids and dec_ids (B, T), pos (T), eos_at (B) rows of (B*T, C) and
 * the additive mask (B, T); packed, the same for the N real tokens (N),
 * eos_at rows of (N, C) and offsets (B + 1). */
enum { PACKED, PADDED, GEN }; /* GEN: task seq2seq's arrays (gen_prepare) */

static int32_t *add_i32(ut_inputs *in, int64_t n) { return ut_inputs_add(in, UT_I32, 1, &n); }

/* The index b*T + t of each row's last </s> into at; every row must hold the
 * same number of them, at least one (transformers' rule). */
static int find_eos(const bart *net, const ut_host_array *x, int32_t *at, char *err, size_t n) {
    int64_t B = x->ne[0], T = x->ne[2], first = -1;
    const int32_t *h = x->host;
    for (int64_t b = 0; b < B; b++) {
        int64_t count = 0;
        for (int64_t t = 0; t < T; t++)
            if (h[b * 3 * T + t] == net->eos) count++, at[b] = (int32_t)(b * T + t);
        if (first < 0) first = count;
        if (count == 0 || count != first)
            return ut_input_error(err, n, "bart", x,
                                  ut_fmt("row %lld of the batch holds %lld </s> (eos_token_id %lld), row 0 holds "
                                         "%lld: every row needs the same number, at least one (transformers' "
                                         "BartForSequenceClassification rule; do not mix single sentences and "
                                         "pairs; a text holding the </s> token itself counts)",
                                         (long long)b, (long long)count, (long long)net->eos, (long long)first));
    }
    return 0;
}

/* shift_tokens_right: the start token, then the input without its last token */
static int32_t dec_id(const bart *net, const int32_t *ib, int64_t t) { return t ? ib[t - 1] : (int32_t)net->start; }

/* Unpadded execution: every row is right-padded (mask 1...1 0...0, L >= 1
 * ones) with its last </s> inside the L tokens, so the encoder's L real rows
 * and the decoder's first L rows (causal: they never see the later ones) are
 * all the head depends on. false (nothing added) when a row does not qualify. */
static bool pack_inputs(const bart *net, const int32_t *h, const int32_t *at, int64_t B, int64_t T, ut_inputs *in) {
    int64_t N = 0;
    for (int64_t b = 0; b < B; b++) {
        const int32_t *mb = h + (b * 3 + 2) * T;
        int64_t L = 0;
        while (L < T && mb[L]) L++;
        for (int64_t t = L; t < T; t++)
            if (mb[t]) return false;
        if (L == 0 || at[b] - b * T >= L) return false;
        N += L;
    }
    int32_t *pid = add_i32(in, N), *pdec = add_i32(in, N), *pps = add_i32(in, N), *pat = add_i32(in, B);
    int32_t *off = add_i32(in, B + 1);
    off[0] = 0;
    for (int64_t b = 0; b < B; b++) {
        const int32_t *ib = h + b * 3 * T, *mb = ib + 2 * T;
        int64_t L = 0;
        while (L < T && mb[L]) L++;
        off[b + 1] = off[b] + (int32_t)L;
        for (int64_t t = 0; t < L; t++) {
            pid[off[b] + t] = ib[t];
            pdec[off[b] + t] = dec_id(net, ib, t);
            pps[off[b] + t] = (int32_t)(t + 2); /* BART's position offset */
        }
        pat[b] = (int32_t)(off[b] + at[b] - b * T);
    }
    in->layout = PACKED;
    return true;
}

static void split_inputs(const bart *net, const int32_t *h, const int32_t *at, int64_t B, int64_t T, ut_inputs *in) {
    int32_t *id = ut_inputs_add(in, UT_I32, 2, (int64_t[]){B, T}), *dec = ut_inputs_add(in, UT_I32, 2, (int64_t[]){B, T});
    int32_t *ps = add_i32(in, T), *eos = add_i32(in, B);
    float *mk = ut_inputs_add(in, UT_F32, 2, (int64_t[]){B, T});
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < T; t++) {
            id[b * T + t] = h[(b * 3) * T + t];
            mk[b * T + t] = h[(b * 3 + 2) * T + t] ? 0.0f : -FLT_MAX; /* as (1 - mask) * finfo.min */
            dec[b * T + t] = dec_id(net, h + b * 3 * T, t);
        }
    for (int64_t t = 0; t < T; t++) ps[t] = (int32_t)(t + 2); /* BART's position offset */
    memcpy(eos, at, (size_t)B * sizeof *eos);
    in->layout = PADDED;
}

static int gen_prepare(const bart *net, const ut_host_array *x, ut_inputs *in, char *err, size_t n);

static int bart_prepare(const ut_model *m, const ut_host_array *x, ut_inputs *in, char *err, size_t n) {
    const bart *net = m->impl;
    if (net->gen && x->dtype == UT_I32) return gen_prepare(net, x, in, err, n);
    if (x->dtype != UT_I32 || x->ndim != 3 || x->ne[1] != 3 || x->ne[2] > net->P)
        return ut_input_error(err, n, "bart", x,
                              ut_fmt("expected I32 x (B, 3, T): token ids, token type ids and attention mask, "
                                     "T <= max_position_embeddings %lld", (long long)net->P));
    int64_t B = x->ne[0], T = x->ne[2];
    int32_t *at = ut_malloc_check((size_t)(B > 0 ? B : 1) * sizeof *at);
    int rc = find_eos(net, x, at, err, n);
    if (!rc && !pack_inputs(net, x->host, at, B, T, in)) split_inputs(net, x->host, at, B, T, in);
    in->seq_len[0] = T;
    ut_free(at);
    return rc;
}

/* token (scaled) + position embeddings, layernorm_embedding, dropout;
 * NEFTune's noise on the scaled token embedding (the embed_tokens module's
 * output), scaled by the padded length L (0: ids' last dimension) */
static ut_tensor *embed(ut_ctx *ctx, const bart *net, ut_tensor *ids, ut_tensor *pos,
                        const ut_embedding_layer *pe, const ut_layernorm_layer *ln, int64_t L) {
    const ut_tp_hooks *tp = &net->lay.tp;
    ut_tensor *h = net->lay.tp_size > 1 ? tp->embedding(ctx, ids, net->shared.w, net->V, (int)net->pad, tp->group)
                                        : ut_embedding_pad(ctx, ids, net->shared.w, (int)net->pad);
    if (net->embed_scale != 1.0f) h = ut_scale(ctx, h, net->embed_scale);
    h = ut_neftune(ctx, h, L);
    h = ut_add(ctx, h, ut_embedding_layer_forward(ctx, pe, pos));
    return ut_dropout(ctx, ut_layernorm_layer_forward(ctx, ln, h), net->dropout);
}

static ut_tensor *run_layer(ut_model *m, ut_ctx *ctx, int64_t i, ut_tensor **in, int n) {
    bart *net = m->impl;
    ut_checkpoint_fn fn = i < net->EL ? encoder_layer : decoder_layer;
    return m->checkpoint_activations ? ut_checkpoint(ctx, fn, &net->args[i], in, n)
                                     : fn(ctx, &net->args[i], in, n);
}

static ut_tensor *gen_forward(ut_model *m, ut_ctx *ctx, const ut_prepared *p);

/* Dropout regions (ut_ctx_rng_region): the encoder's embeddings 0, layer i
 * (of the EL + DL) i + 1, the decoder's embeddings EL + DL + 1, the head
 * EL + DL + 2, so a layer's masks do not depend on the pipeline stage that
 * runs it. */
static int64_t dec_embed_region(const bart *net) { return net->EL + net->DL + 1; }

/* A (rows, C) view of a stream of states */
static ut_tensor *rows_of(ut_ctx *ctx, const bart *net, ut_tensor *h) {
    return ut_reshape(ctx, h, 2, (int64_t[]){ut_nelem(h) / net->C, net->C});
}

/* The classifier. Between pipeline stages the two streams travel as one
 * tensor, the encoder's rows then the decoder's ((2 R, C), R the rows of
 * the batch's ids): every stage's input and output but the last's. */
static ut_tensor *bart_forward(ut_model *m, ut_ctx *ctx, const ut_prepared *p) {
    const bart *net = m->impl;
    if (p->layout == GEN) return gen_forward(m, ctx, p);
    /* aux: the offsets (packed) or the mask (padded) */
    ut_tensor *ids = p->t[0], *dec_ids = p->t[1], *pos = p->t[2], *eos_at = p->t[3], *aux = p->t[4];
    int64_t shape[UT_MAX_DIMS], R = ut_nelem(ids);
    for (int d = 0; d < ids->ndim; d++) shape[d] = ids->ne[d];
    shape[ids->ndim] = net->C;
    ut_tensor *enc, *h;
    if (net->first) {
        ut_ctx_rng_region(ctx, 0);
        enc = embed(ctx, net, ids, pos, &net->enc_pos, &net->enc_ln, p->seq_len[0]);
        ut_ctx_rng_region(ctx, dec_embed_region(net));
        h = embed(ctx, net, dec_ids, pos, &net->dec_pos, &net->dec_ln, p->seq_len[0]);
    } else {
        ut_tensor *x = m->stage_input;
        if (!x || ut_nelem(x) != 2 * R * net->C) {
            ut_ctx_set_error(ctx, "bart pipeline stage %d: received %lld values, the batch's two streams are %lld",
                             m->pp_rank, x ? (long long)ut_nelem(x) : 0LL, (long long)(2 * R * net->C));
            return NULL;
        }
        x = ut_reshape(ctx, x, 2, (int64_t[]){2 * R, net->C});
        enc = ut_reshape(ctx, ut_slice(ctx, x, 0, 0, R), ids->ndim + 1, shape);
        h = ut_reshape(ctx, ut_slice(ctx, x, 0, R, 2 * R), ids->ndim + 1, shape);
    }
    for (int64_t l = net->b0; l < net->b1; l++) {
        ut_ctx_rng_region(ctx, l + 1);
        if (l < net->EL) enc = run_layer(m, ctx, l, (ut_tensor *[]){enc, aux}, 2);
        else h = run_layer(m, ctx, l, (ut_tensor *[]){h, enc, aux}, 3);
    }
    if (!net->last) return ut_concat_rows(ctx, rows_of(ctx, net, enc), rows_of(ctx, net, h));
    /* the decoder state at each row's last </s>, gathered as rows of (rows, C) */
    ut_ctx_rng_region(ctx, dec_embed_region(net) + 1);
    ut_tensor *rep = ut_embedding(ctx, eos_at, rows_of(ctx, net, h));
    rep = ut_dropout(ctx, rep, net->cls_dropout);
    rep = ut_tanh(ctx, ut_linear_layer_forward(ctx, &net->dense, rep));
    return ut_linear_layer_forward(ctx, &net->out_proj, ut_dropout(ctx, rep, net->cls_dropout));
}

/* ---- sequence to sequence (task seq2seq): BartForConditionalGeneration ----
 * Input x I32 (B, 4, L): planes of source ids, source attention mask,
 * target ids and target mask (ut_seq2seq_dataset_open); targets y I32
 * (B, T), T the longest target of the batch, -100 past each target's end.
 * The decoder reads the targets shifted right (the start token, then the
 * target without its last token, padding where the target has ended), as
 * transformers does with labels; output logits (B, T, V) through the tied
 * head plus final_logits_bias. */
/* The length of a row's mask: one past its last 1 (at least 1). */
static int64_t mask_len(const int32_t *m, int64_t L) {
    int64_t n = 0;
    for (int64_t t = 0; t < L; t++)
        if (m[t]) n = t + 1;
    return n ? n : 1;
}

static int gen_prepare(const bart *net, const ut_host_array *x, ut_inputs *in, char *err, size_t n) {
    if (x->ndim != 3 || x->ne[1] != 4)
        return ut_input_error(err, n, "bart", x,
                              "task seq2seq expects I32 x (B, 4, L): source ids, source mask, target ids and "
                              "target mask (data.name: seq2seq_text)");
    int64_t B = x->ne[0], L = x->ne[2], S = 1, T = 1;
    const int32_t *h = x->host;
    for (int64_t b = 0; b < B; b++) {
        int64_t s = mask_len(h + (b * 4 + 1) * L, L), t = mask_len(h + (b * 4 + 3) * L, L);
        S = s > S ? s : S;
        T = t > T ? t : T;
    }
    if (S > net->P || T > net->P)
        return ut_input_error(err, n, "bart", x,
                              ut_fmt("a source of %lld or a target of %lld tokens is longer than "
                                     "max_position_embeddings %lld (lower data.max_source_len / max_target_len)",
                                     (long long)S, (long long)T, (long long)net->P));
    int32_t *ids = ut_inputs_add(in, UT_I32, 2, (int64_t[]){B, S}), *sp = add_i32(in, S);
    float *mk = ut_inputs_add(in, UT_F32, 2, (int64_t[]){B, S});
    int32_t *dec = ut_inputs_add(in, UT_I32, 2, (int64_t[]){B, T}), *tp = add_i32(in, T);
    for (int64_t b = 0; b < B; b++) {
        const int32_t *src = h + b * 4 * L, *sm = src + L, *tgt = src + 2 * L, *tm = src + 3 * L;
        for (int64_t t = 0; t < S; t++) {
            ids[b * S + t] = src[t];
            mk[b * S + t] = sm[t] ? 0.0f : -FLT_MAX;
        }
        for (int64_t t = 0; t < T; t++)
            dec[b * T + t] = t == 0 ? (int32_t)net->start : tm[t - 1] ? tgt[t - 1] : (int32_t)net->pad;
    }
    for (int64_t t = 0; t < S; t++) sp[t] = (int32_t)(t + 2);
    for (int64_t t = 0; t < T; t++) tp[t] = (int32_t)(t + 2);
    in->layout = GEN;
    return 0;
}

/* the tied head: h @ shared^T + final_logits_bias */
static ut_tensor *lm_head(ut_ctx *ctx, const bart *net, ut_tensor *h) {
    /* split: this rank's rows of the vocabulary (column-parallel), the
     * logits never gathered (the loss is vocabulary-parallel) */
    int T = net->lay.tp_size;
    int64_t Vp = net->V / T;
    ut_tensor *bias = net->final_bias ? ut_tensor_from(ctx, UT_F32, 1, (int64_t[]){Vp},
                                                       net->final_bias + (int64_t)net->lay.tp_rank * Vp)
                                      : NULL;
    if (T > 1) h = net->lay.tp.copy(ctx, h, net->lay.tp.group);
    return ut_linear(ctx, h, net->shared.w, bias);
}

static ut_tensor *gen_loss_split(ut_model *m, ut_ctx *ctx, ut_tensor *logits, ut_tensor *targets) {
    const bart *net = m->impl;
    return net->lay.tp.cross_entropy(ctx, logits, targets, net->V, -100, net->lay.tp.group);
}

static ut_tensor *encode(ut_model *m, ut_ctx *ctx, ut_tensor *ids, ut_tensor *pos, ut_tensor *mask) {
    const bart *net = m->impl;
    ut_tensor *enc = embed(ctx, net, ids, pos, &net->enc_pos, &net->enc_ln, 0);
    for (int64_t l = 0; l < net->EL; l++) enc = run_layer(m, ctx, l, (ut_tensor *[]){enc, mask}, 2);
    return enc;
}

/* the decoder's states (B, T, C) for ids (B, T) at positions pos over the encoder's states */
static ut_tensor *decode(ut_model *m, ut_ctx *ctx, ut_tensor *ids, ut_tensor *pos, ut_tensor *enc, ut_tensor *mask) {
    const bart *net = m->impl;
    ut_tensor *h = embed(ctx, net, ids, pos, &net->dec_pos, &net->dec_ln, 0);
    for (int64_t l = 0; l < net->DL; l++) h = run_layer(m, ctx, net->EL + l, (ut_tensor *[]){h, enc, mask}, 3);
    return h;
}

/* Training and evaluation: this stage's layers (all of them when whole),
 * with the dropout regions bart_forward uses, so a layer's masks are the
 * same whichever stage runs it. Between pipeline stages the two streams
 * travel as one tensor, the encoder's B S rows then the decoder's B T
 * ((B (S + T), C)); the last stage has the tied head (its own copy of
 * model.shared, pp_tied). */
static ut_tensor *gen_states(ut_model *m, ut_ctx *ctx, const ut_prepared *p) {
    const bart *net = m->impl;
    ut_tensor *ids = p->t[0], *spos = p->t[1], *mask = p->t[2], *dec_ids = p->t[3], *tpos = p->t[4];
    int64_t Rs = ut_nelem(ids), Rt = ut_nelem(dec_ids), C = net->C;
    ut_tensor *enc, *h;
    if (net->first) {
        ut_ctx_rng_region(ctx, 0);
        enc = embed(ctx, net, ids, spos, &net->enc_pos, &net->enc_ln, 0);
        ut_ctx_rng_region(ctx, dec_embed_region(net));
        h = embed(ctx, net, dec_ids, tpos, &net->dec_pos, &net->dec_ln, 0);
    } else {
        ut_tensor *x = m->stage_input;
        if (!x || ut_nelem(x) != (Rs + Rt) * C) {
            ut_ctx_set_error(ctx, "bart pipeline stage %d: received %lld values, the batch's two streams are %lld",
                             m->pp_rank, x ? (long long)ut_nelem(x) : 0LL, (long long)((Rs + Rt) * C));
            return NULL;
        }
        x = ut_reshape(ctx, x, 2, (int64_t[]){Rs + Rt, C});
        enc = ut_reshape(ctx, ut_slice(ctx, x, 0, 0, Rs), 3, (int64_t[]){ids->ne[0], ids->ne[1], C});
        h = ut_reshape(ctx, ut_slice(ctx, x, 0, Rs, Rs + Rt), 3, (int64_t[]){dec_ids->ne[0], dec_ids->ne[1], C});
    }
    for (int64_t l = net->b0; l < net->b1; l++) {
        ut_ctx_rng_region(ctx, l + 1);
        if (l < net->EL) enc = run_layer(m, ctx, l, (ut_tensor *[]){enc, mask}, 2);
        else h = run_layer(m, ctx, l, (ut_tensor *[]){h, enc, mask}, 3);
    }
    if (!net->last) return ut_concat_rows(ctx, rows_of(ctx, net, enc), rows_of(ctx, net, h));
    return m->hidden = h;
}

static ut_tensor *gen_forward(ut_model *m, ut_ctx *ctx, const ut_prepared *p) {
    const bart *net = m->impl;
    ut_tensor *h = gen_states(m, ctx, p);
    return net->last ? lm_head(ctx, net, h) : h;
}

/* forward_loss (include/utrain/nn.h) of the conditional generator: the tied
 * head with final_logits_bias and the loss one op; not with the vocabulary
 * split over ranks (ut_tp_cross_entropy's loss), not on a stage without
 * the head, not for the classifier */
static ut_tensor *bart_forward_loss(ut_model *m, ut_ctx *ctx, const ut_prepared *p, ut_tensor *targets) {
    const bart *net = m->impl;
    if (p->layout != GEN || !net->gen || net->lay.tp_size > 1 || !net->last) return NULL;
    ut_tensor *h = gen_states(m, ctx, p);
    ut_tensor *bias = net->final_bias ? ut_tensor_from(ctx, UT_F32, 1, (int64_t[]){net->V}, net->final_bias) : NULL;
    return ut_model_seq2seq_head_loss(m, ctx, h, net->shared.w, bias, targets);
}

/* ---- generation (ut_decoder_ops): the encoder once, then one decoder step
 * per token. Cached, each decoder layer keeps its self-attention keys and
 * values (time-major (max_len, N, C): a step's N rows go in with one copy)
 * and the cross-attention's, computed once from the encoder's states. */
typedef struct {
    ut_decode_base b; /* b.kv: the decoder's self-attention keys and values; b.enc, b.mask, b.cross */
    bart *net;
} dec_state;

static void *dec_begin(ut_model *m, const int32_t *src, const int32_t *mask, int64_t B, int64_t S, int per,
                       int64_t max_new, bool cache, const int32_t **prompt, int64_t *prompt_len, char *err,
                       size_t n) {
    int64_t max_len = max_new + 1; /* the start token, then the new ones */
    bart *net = m->impl;
    if (B < 1 || S < 1 || per < 1 || max_len < 1)
        return ut_errorf(err, n, "bart generation: empty batch"), NULL;
    if (S > net->P || max_len > net->P)
        return ut_errorf(err, n, "bart generation: a source of %lld tokens or %lld decoder tokens is longer than "
                                 "max_position_embeddings %lld", (long long)S, (long long)max_len,
                         (long long)net->P), NULL;
    dec_state *s = ut_calloc_check(1, sizeof *s);
    int64_t N = B * per, C = net->C;
    ut_decode_base_init(&s->b, m, "bart", N, per, max_len, cache);
    s->net = net, s->b.S = S;
    ut_ctx *k = s->b.keep;
    int32_t *pos = ut_ctx_alloc(k, (size_t)S * sizeof *pos);
    *prompt = ut_decode_start(&s->b, net->start), *prompt_len = 1;
    for (int64_t t = 0; t < S; t++) pos[t] = (int32_t)(t + 2);
    ut_tensor *enc = encode(m, k, ut_tensor_from(k, UT_I32, 2, (int64_t[]){B, S}, src),
                            ut_tensor_from(k, UT_I32, 1, (int64_t[]){S}, pos),
                            ut_tensor_from(k, UT_F32, 2, (int64_t[]){B, S}, ut_decode_mask(k, mask, B, S, 1)));
    s->b.enc = ut_decode_expand(k, enc, per); /* each source's states for its per_source rows */
    s->b.mask = ut_tensor_from(k, UT_F32, 2, (int64_t[]){N, S}, ut_decode_mask(k, mask, B, S, per));
    if (cache && s->b.enc) { /* split: this rank's heads' keys and values (C / tp wide) */
        s->b.kv = ut_kv_cache_new(k, net->DL, max_len, N, C / net->lay.tp_size);
        s->b.cross = ut_calloc_check((size_t)(2 * net->DL), sizeof *s->b.cross);
        ut_tensor *enc_in = ut_tp_col_in(k, &net->lay.tp, s->b.enc);
        for (int64_t l = 0; l < net->DL; l++) {
            const bart_layer *ly = &net->layer[net->EL + l];
            s->b.cross[2 * l] = ut_linear_layer_forward(k, &ly->cross.k, enc_in);
            s->b.cross[2 * l + 1] = ut_linear_layer_forward(k, &ly->cross.v, enc_in);
        }
    }
    if (ut_decode_failed(&s->b, k, err, n)) {
        ut_decode_end(s);
        return NULL;
    }
    return s;
}

/* out-projection (row-parallel when split), dropout (off), residual and
 * layer norm after an attention's heads h */
static ut_tensor *attn_out(ut_ctx *ctx, const bart *net, const bart_attn *a, ut_tensor *x, ut_tensor *h) {
    return ut_layernorm_layer_forward(ctx, &a->ln, ut_add(ctx, x, ut_tp_row_out(ctx, &net->lay.tp, h, &a->out)));
}

/* A keep-context tensor in the step context (the same memory) */
static ut_tensor *in_step(dec_state *s, const ut_tensor *t) { return ut_tensor_share(s->b.ctx, t); }

/* One cached step: x (N, 1, C), the rows' tokens at position t */
static ut_tensor *cached_layer(dec_state *s, int64_t l, ut_tensor *x, int64_t t) {
    ut_ctx *ctx = s->b.ctx;
    const bart *net = s->net;
    const bart_layer *ly = &net->layer[net->EL + l];
    ut_tensor *xi = ut_tp_col_in(ctx, &net->lay.tp, x); /* split: this rank's heads from here */
    ut_tensor *q = ut_linear_layer_forward(ctx, &ly->self.q, xi);
    ut_tensor *kn = ut_linear_layer_forward(ctx, &ly->self.k, xi), *vn = ut_linear_layer_forward(ctx, &ly->self.v, xi);
    if (ut_kv_cache_put(s->b.kv, l, 0, t, kn) || ut_kv_cache_put(s->b.kv, l, 1, t, vn)) return NULL;
    ut_tensor *kv[2]; /* the keys and values so far, (N, t + 1, C) */
    for (int i = 0; i < 2; i++)
        kv[i] = ut_contiguous(ctx, ut_transpose(ctx, ut_kv_cache_get(ctx, s->b.kv, l, i, t + 1), 0, 1));
    int nh = (int)(net->DNH / net->lay.tp_size);
    x = attn_out(ctx, net, &ly->self, x, ut_attention_qkv(ctx, q, kv[0], kv[1], NULL, nh, false, 0));
    q = ut_linear_layer_forward(ctx, &ly->cross.q, ut_tp_col_in(ctx, &net->lay.tp, x));
    ut_tensor *h = ut_attention_qkv(ctx, q, in_step(s, s->b.cross[2 * l]), in_step(s, s->b.cross[2 * l + 1]),
                                    in_step(s, s->b.mask), nh, false, 0);
    x = attn_out(ctx, net, &ly->cross, x, h);
    return feed_forward(ctx, net, ly, x);
}

static int dec_step(void *state, const int32_t *seq, int64_t ld, int64_t len, float *logits, char *err, size_t n) {
    dec_state *s = state;
    const bart *net = s->net;
    ut_ctx *ctx = s->b.ctx;
    int64_t N = s->b.rows, C = net->C;
    if (ut_decode_step_ok(&s->b, len, err, n)) return -1;
    ut_tensor *h;
    if (s->b.cache) {
        int32_t pos = (int32_t)(len + 1);
        h = embed(ctx, net, ut_decode_last_ids(&s->b, seq, ld, len), ut_tensor_from(ctx, UT_I32, 1, (int64_t[]){1}, &pos),
                  &net->dec_pos, &net->dec_ln, 1);
        for (int64_t l = 0; l < net->DL && h; l++) h = cached_layer(s, l, h, len - 1);
    } else {
        int32_t *pos = ut_ctx_alloc(ctx, (size_t)len * sizeof *pos);
        for (int64_t t = 0; t < len; t++) pos[t] = (int32_t)(t + 2);
        h = decode(s->b.m, ctx, ut_decode_prefix(&s->b, seq, ld, len),
                   ut_tensor_from(ctx, UT_I32, 1, (int64_t[]){len}, pos), in_step(s, s->b.enc), in_step(s, s->b.mask));
        h = ut_contiguous(ctx, ut_slice(ctx, h, 1, len - 1, len));
    }
    if (h) h = lm_head(ctx, net, ut_reshape(ctx, h, 2, (int64_t[]){N, C}));
    if (h && net->lay.tp_size > 1) h = net->lay.tp.gather(ctx, h, net->lay.tp.group); /* the whole vocabulary */
    return ut_decode_logits(&s->b, h, len, logits, err, n);
}

static int dec_reorder(void *state, const int32_t *rows, char *err, size_t n) {
    return ut_decode_reorder(&((dec_state *)state)->b, rows, err, n);
}

static const ut_decoder_ops bart_decoder = {dec_begin, dec_step, dec_reorder, ut_decode_end};

/* ---- building ---- */
/* k, v, q, out projections and the layer norm after, in transformers' order */
/* k, v, q (column-parallel when split), out (row-parallel) projections and
 * the layer norm after, in transformers' order */
static void attn_init(ut_model *m, const bart *net, bart_attn *a, const char *prefix, const char *ln, int64_t C,
                      float std) {
    char q[200];
    const char *leaf[4] = {"k_proj", "v_proj", "q_proj", "out_proj"};
    ut_linear_layer *proj[4] = {&a->k, &a->v, &a->q, &a->out};
    for (int i = 0; i < 4; i++) {
        snprintf(q, sizeof q, "%s.%s", prefix, leaf[i]);
        ut_linear_layer_init_layout(m, proj[i], q, C, C, std, i == 3, &net->lay);
    }
    ut_layernorm_layer_init(m, &a->ln, ln, C);
}

static void layer_init(ut_model *m, bart *net, int64_t i, float std) {
    bool dec = i >= net->EL;
    int64_t k = dec ? i - net->EL : i, F = dec ? net->DF : net->EF, C = net->C;
    bart_layer *l = &net->layer[i];
    char p[128], a[160], b[160];
    snprintf(p, sizeof p, "model.%s.layers.%lld", dec ? "decoder" : "encoder", (long long)k);
    snprintf(a, sizeof a, "%s.self_attn", p);
    snprintf(b, sizeof b, "%s.self_attn_layer_norm", p);
    attn_init(m, net, &l->self, a, b, C, std);
    if (dec) {
        snprintf(a, sizeof a, "%s.encoder_attn", p);
        snprintf(b, sizeof b, "%s.encoder_attn_layer_norm", p);
        attn_init(m, net, &l->cross, a, b, C, std);
    }
    snprintf(a, sizeof a, "%s.fc1", p);
    ut_linear_layer_init_layout(m, &l->fc1, a, C, F, std, 0, &net->lay);
    snprintf(a, sizeof a, "%s.fc2", p);
    ut_linear_layer_init_layout(m, &l->fc2, a, F, C, std, 1, &net->lay);
    snprintf(a, sizeof a, "%s.final_layer_norm", p);
    ut_layernorm_layer_init(m, &l->final_ln, a, C);
    net->args[i] = (layer_arg){net, l};
}

/* nn.Embedding(padding_idx) starts with that row zero, as _init_weights leaves it */
static void zero_pad_row(const bart *net) {
    ut_embedding_layer_zero_row(&net->shared, net->pad, &net->lay); /* split: on the rank that holds it */
}

/* Parameters in transformers' state_dict order, initialised as its
 * _init_weights: N(0, init_std) weights and embeddings, zero biases, layer
 * norms 1 and 0, the padding row of the token embedding 0. */
static ut_model *bart_new(bart *net, float std, uint64_t seed) {
    ut_model *m = ut_model_new("bart");
    int64_t n = net->EL + net->DL;
    net->layer = ut_calloc_check((size_t)n, sizeof *net->layer);
    net->args = ut_calloc_check((size_t)n, sizeof *net->args);
    /* a pipeline stage registers its own: the first the embeddings, each its
     * layers, the last the head; each at its place in the whole model's
     * order (ut_model_order_at: section, then layer), which the stages'
     * lists one after the other are not (the embeddings' layer norms come
     * after the encoder's layers) */
#define AT(section, layer) ut_model_order_at(m, ((int64_t)(section) << 40) | ((int64_t)(layer) << 20))
    /* model.shared: the first stage's token embedding, and the tied LM
     * head's copy of it on the last (the same name: the same values) */
    AT(0, 0);
    if (net->first || (net->gen && net->last))
        ut_embedding_layer_init_layout(m, &net->shared, "model.shared", net->V, net->C, std, &net->lay);
    if (net->gen) m->pp_tied = "model.shared.weight";
    AT(1, 0);
    if (net->first)
        ut_embedding_layer_init(m, &net->enc_pos, "model.encoder.embed_positions", net->P + 2, net->C, std);
    for (int64_t i = net->b0; i < net->b1 && i < net->EL; i++) {
        AT(2, i);
        layer_init(m, net, i, std);
    }
    AT(3, 0);
    if (net->first) {
        ut_layernorm_layer_init(m, &net->enc_ln, "model.encoder.layernorm_embedding", net->C);
        ut_embedding_layer_init(m, &net->dec_pos, "model.decoder.embed_positions", net->P + 2, net->C, std);
    }
    for (int64_t i = net->b0 > net->EL ? net->b0 : net->EL; i < net->b1; i++) {
        AT(4, i);
        layer_init(m, net, i, std);
    }
    AT(5, 0);
    if (net->first) ut_layernorm_layer_init(m, &net->dec_ln, "model.decoder.layernorm_embedding", net->C);
    AT(6, 0);
#undef AT
    if (net->lay.tp_size > 1) m->tp_size = net->lay.tp_size; /* every stage is split, with or without embeddings */
    int P = net->lay.pp_size > 1 ? net->lay.pp_size : 1;
    m->pp_size = P, m->pp_rank = P > 1 ? net->lay.pp_rank : 0, m->pp_b0 = net->b0, m->pp_b1 = net->b1;
    if (net->last && !net->gen) {
        ut_linear_layer_init_normal(m, &net->dense, "classification_head.dense", net->C, net->C, std);
        ut_linear_layer_init_normal(m, &net->out_proj, "classification_head.out_proj", net->C, net->K, std);
    }
    m->impl = net;
    m->free_impl = bart_free;
    m->prepare = bart_prepare;
    m->forward_prepared = bart_forward;
    m->forward_loss = bart_forward_loss;
    m->loss = !net->gen ? ut_model_class_loss : net->lay.tp_size > 1 ? gen_loss_split : ut_model_seq2seq_loss;
    /* tensor parallel: every rank of the group runs the same search on the
     * gathered logits; a pipeline stage has only some of the layers, and
     * generates nothing */
    if (net->gen && P == 1) {
        m->decoder = &bart_decoder;
        m->tokens = (ut_decoder_tokens){.start = net->start, .eos = net->eos, .pad = net->pad,
                                        .forced_bos = net->forced_bos, .vocab = net->V};
    }
    ut_model_finalize(m, seed);
    if (net->first || (net->gen && net->last)) zero_pad_row(net);
    return m;
}

/* ---- options ---- */
/* The architecture (config.json's names): model.pretrained supplies them. */
static const char *const arch_keys[] = {"vocab_size", "d_model", "encoder_layers", "decoder_layers",
                                        "encoder_attention_heads", "decoder_attention_heads",
                                        "encoder_ffn_dim", "decoder_ffn_dim", "max_position_embeddings",
                                        "scale_embedding", "activation_function", "pad_token_id",
                                        "eos_token_id", "decoder_start_token_id", "forced_bos_token_id", NULL};

/* What transformers' BartConfig (and older BART configs) can say that this
 * model does not do: key, the value that is supported, what to do instead. */
static const struct {
    const char *key, *ok;
} fixed_keys[] = {
    {"normalize_before", "false"},          /* mBART's pre-LayerNorm blocks */
    {"add_final_layer_norm", "false"},      /* mBART's final layer norms */
    {"normalize_embedding", "true"},        /* layernorm_embedding present */
    {"static_position_embeddings", "false"}, /* sinusoidal positions */
};

static int check_hf_config(const ut_kv *kv, const char *dir, char *err, size_t n) {
    for (size_t i = 0; i < sizeof fixed_keys / sizeof fixed_keys[0]; i++) {
        const char *v = ut_kv_get(kv, fixed_keys[i].key);
        if (v && strcmp(v, fixed_keys[i].ok))
            return ut_errorf(err, n, "model.pretrained: %s/config.json: %s %s is not supported (model bart is "
                                     "BART's layout: %s %s; mBART-style variants are not)",
                             dir, fixed_keys[i].key, v, fixed_keys[i].key, fixed_keys[i].ok);
    }
    const char *pe = ut_kv_get(kv, "extra_pos_embeddings");
    if (pe && strcmp(pe, "2"))
        return ut_errorf(err, n, "model.pretrained: %s/config.json: extra_pos_embeddings %s is not supported "
                                 "(BART's position offset is 2)", dir, pe);
    return 0;
}

/* config.json (model.pretrained) under the user's options: the architecture
 * from the directory only. */
static ut_kv *merged_options(const ut_kv *opts, const char *dir, char *err, size_t n) {
    static const char *const types[] = {"bart", NULL};
    const ut_hf_config_spec spec = {"bart", types, "bert and gpt2 directories are read by model.name: bert, gpt2",
                                    arch_keys, check_hf_config};
    ut_kv *kv = ut_hf_config_checked(opts, dir, &spec, err, n);
    if (kv) ut_kv_update(kv, opts);
    return kv;
}

/* The integer sizes: config.json's names, BART-base defaults, each >= 1 */
static const ut_kv_field size_keys[] = {
    {"encoder_layers", 6, offsetof(bart, EL)},          {"decoder_layers", 6, offsetof(bart, DL)},
    {"encoder_attention_heads", 12, offsetof(bart, ENH)}, {"decoder_attention_heads", 12, offsetof(bart, DNH)},
    {"d_model", 768, offsetof(bart, C)},                {"encoder_ffn_dim", 3072, offsetof(bart, EF)},
    {"decoder_ffn_dim", 3072, offsetof(bart, DF)},      {"vocab_size", 50265, offsetof(bart, V)},
    {"max_position_embeddings", 1024, offsetof(bart, P)},
};

/* The special token ids: pad 1, eos 2, decoder start 2 (BART's), each in the vocabulary */
static const ut_kv_field token_keys[] = {
    {"pad_token_id", 1, offsetof(bart, pad)},
    {"eos_token_id", 2, offsetof(bart, eos)},
    {"decoder_start_token_id", 2, offsetof(bart, start)},
};

static int read_dims(const ut_kv *kv, bart *net, char *err, size_t n) {
    if (ut_kv_read_fields(kv, size_keys, (int)(sizeof size_keys / sizeof size_keys[0]), 1, INT32_MAX, NULL, net,
                          "bart", err, n))
        return -1;
    if (ut_kv_read_fields(kv, token_keys, (int)(sizeof token_keys / sizeof token_keys[0]), 0, net->V - 1,
                          "the vocabulary", net, "bart", err, n))
        return -1;
    if (net->C % net->ENH || net->C % net->DNH)
        return ut_errorf(err, n, "bart: d_model %lld is not divisible by encoder_attention_heads %lld and "
                                 "decoder_attention_heads %lld", (long long)net->C, (long long)net->ENH,
                         (long long)net->DNH);
    return 0;
}

/* dropout rates, each in [0, 1): dropout 0.1, the others 0 (BartConfig's defaults) */
static const struct {
    const char *key;
    double def;
    size_t at;
} rate_keys[] = {
    {"dropout", 0.1, offsetof(bart, dropout)},
    {"attention_dropout", 0.0, offsetof(bart, attn_dropout)},
    {"activation_dropout", 0.0, offsetof(bart, act_dropout)},
    {"classifier_dropout", 0.0, offsetof(bart, cls_dropout)},
};

static int read_rates(const ut_kv *kv, bart *net, double *std, char *err, size_t n) {
    for (size_t i = 0; i < sizeof rate_keys / sizeof rate_keys[0]; i++) {
        double v;
        if (ut_kv_float(kv, rate_keys[i].key, rate_keys[i].def, &v, err, n)) return -1;
        if (!(v >= 0 && v < 1)) return ut_errorf(err, n, "bart: %s %g is outside [0, 1)", rate_keys[i].key, v);
        *(float *)((char *)net + rate_keys[i].at) = (float)v;
    }
    long long K1, K2;
    if (ut_kv_float(kv, "init_std", 0.02, std, err, n) || ut_kv_int(kv, "num_classes", 2, &K1, err, n) ||
        ut_kv_int(kv, "num_labels", K1, &K2, err, n))
        return -1;
    if (!(*std >= 0)) return ut_errorf(err, n, "bart: init_std must be >= 0");
    if (K2 < 1 || K2 > INT32_MAX) return ut_errorf(err, n, "bart: num_labels %lld must be >= 1", K2);
    net->K = K2;
    return 0;
}

/* activation_function, scale_embedding, the LayerDrop rates and task: what is supported */
static int read_kinds(const ut_kv *kv, bart *net, char *err, size_t n) {
    const char *act = ut_kv_get(kv, "activation_function"), *task = ut_kv_get(kv, "task");
    if (!act || !strcmp(act, "gelu")) net->act = ACT_GELU;
    else if (!strcmp(act, "gelu_new") || !strcmp(act, "gelu_pytorch_tanh")) net->act = ACT_GELU_TANH;
    else if (!strcmp(act, "relu")) net->act = ACT_RELU;
    else
        return ut_errorf(err, n, "bart: activation_function '%s' is not supported (gelu, gelu_new, "
                                 "gelu_pytorch_tanh, relu)", act);
    bool scale;
    if (ut_kv_bool(kv, "scale_embedding", false, &scale, err, n)) return -1;
    net->embed_scale = scale ? sqrtf((float)net->C) : 1.0f;
    const char *drops[2] = {"encoder_layerdrop", "decoder_layerdrop"};
    for (int i = 0; i < 2; i++) {
        double v;
        if (ut_kv_float(kv, drops[i], 0.0, &v, err, n)) return -1;
        if (v != 0)
            return ut_errorf(err, n, "bart: %s %g is not supported (LayerDrop skips whole layers); set "
                                     "model.%s: 0", drops[i], v, drops[i]);
    }
    net->gen = task && (!strcmp(task, "seq2seq") || !strcmp(task, "conditional_generation"));
    if (task && !net->gen && strcmp(task, "sequence_classification"))
        return ut_errorf(err, n, "model.task: '%s' is not available for bart; use sequence_classification or "
                                 "seq2seq", task);
    long long fb;
    if (ut_kv_int(kv, "forced_bos_token_id", -1, &fb, err, n)) return -1;
    if (fb < -1 || fb >= net->V)
        return ut_errorf(err, n, "bart: forced_bos_token_id %lld is outside the vocabulary [0, %lld)", fb,
                         (long long)net->V);
    net->forced_bos = fb;
    return 0;
}

/* BartForConditionalGeneration's final_logits_bias (1, V), a buffer
 * transformers does not train: kept beside the parameters, read from the
 * directory (absent or all zeros: none). */
static int load_final_bias(bart *net, const char *dir, char *err, size_t n) {
    char path[4096];
    if (ut_hf_weights_path(dir, path, sizeof path, err, n)) return -1;
    ut_st_file *f = ut_st_open(path, err, n);
    if (!f) return -1;
    const ut_st_tensor *t = ut_st_get(f, "final_logits_bias");
    if (!t) t = ut_st_get(f, "model.final_logits_bias");
    int rc = 0;
    if (t && ut_st_numel(t) != net->V)
        rc = ut_errorf(err, n, "%s: final_logits_bias has %lld values, vocab_size is %lld", path,
                       (long long)ut_st_numel(t), (long long)net->V);
    bool nonzero = false;
    for (int64_t i = 0; t && !rc && i < net->V && !nonzero; i++) nonzero = ut_st_float(t, i) != 0.0f;
    if (nonzero) {
        net->final_bias = ut_malloc_check((size_t)net->V * sizeof(float));
        for (int64_t i = 0; i < net->V; i++) net->final_bias[i] = ut_st_float(t, i);
    }
    ut_st_close(f);
    return rc;
}

/* The checkpoint may be a BartForSequenceClassification (names as ours), a
 * bare BartModel with or without the "model." prefix; the head is optional.
 * The copies of the shared embedding that older files hold under
 * encoder/decoder.embed_tokens, and the LM head of a
 * BartForConditionalGeneration, are not read. */
static int load_pretrained(ut_model *m, const char *dir, bool mismatched, char *err, size_t n) {
    static const char *const optional[] = {"classification_head.", NULL};
    static const char *const ignored[] = {"embed_tokens.weight", "final_logits_bias", "lm_head.", NULL};
    static const char *const gen_ignored[] = {"embed_tokens.weight", "final_logits_bias", "lm_head.",
                                              "classification_head.", NULL};
    bart *net = m->impl;
    ut_hf_load_opts o = {.base_prefix = "model.", .optional = optional, .ignored = net->gen ? gen_ignored : ignored,
                         .ignore_mismatched = mismatched};
    if (ut_hf_load_pretrained(m, dir, o, err, n)) return -1;
    return net->gen ? load_final_bias(net, dir, err, n) : 0;
}

static double param_count(const bart *b) {
    double C = (double)b->C, attn = 4.0 * C * C + 6.0 * C, ffn_e = 2.0 * C * (double)b->EF,
           ffn_d = 2.0 * C * (double)b->DF;
    return (double)(b->V + 2 * (b->P + 2)) * C + (double)b->EL * (attn + ffn_e) +
           (double)b->DL * (2.0 * attn + ffn_d) + (b->gen ? 0.0 : C * (C + (double)b->K));
}

ut_model *ut_bart_build(const ut_kv *opts, uint64_t seed, char *err, size_t n) {
    static const char *const known[] = {
        "vocab_size", "d_model", "encoder_layers", "decoder_layers", "encoder_attention_heads",
        "decoder_attention_heads", "encoder_ffn_dim", "decoder_ffn_dim", "max_position_embeddings",
        "scale_embedding", "activation_function", "pad_token_id", "eos_token_id", "decoder_start_token_id",
        "dropout", "attention_dropout", "activation_dropout", "classifier_dropout", "init_std",
        "encoder_layerdrop", "decoder_layerdrop", "num_labels", "num_classes", "task", "pretrained",
        "forced_bos_token_id", "problem_type", "ignore_mismatched_sizes", NULL};
    if (ut_kv_check_keys(opts, known, "model bart", err, n)) return NULL;
    bool said, mismatched;
    ut_problem problem;
    if (ut_model_problem_type(opts, &problem, &said, err, n) ||
        ut_kv_bool(opts, "ignore_mismatched_sizes", false, &mismatched, err, n))
        return NULL;
    const char *dir = ut_kv_get(opts, "pretrained");
    ut_kv *merged = dir ? merged_options(opts, dir, err, n) : NULL;
    if (dir && !merged) return NULL;
    const ut_kv *kv = merged ? merged : opts;
    bart net = {0};
    double std;
    int rc = read_dims(kv, &net, err, n) || read_rates(kv, &net, &std, err, n) || read_kinds(kv, &net, err, n);
    if (problem == UT_PROBLEM_REGRESSION) net.K = 1; /* problem_type regression: one score, whatever config.json's labels */
    ut_kv_free(merged);
    if (rc) return NULL;
    if (net.gen && ut_kv_get(opts, "problem_type"))
        return ut_errorf(err, n, "model.problem_type: the classifier's (regression, single_label_classification or "
                                 "multi_label_classification); "
                                 "a sequence-to-sequence model (model.task seq2seq) has no classifier: remove it"), NULL;
    net.lay = ut_model_build_layout();
    int T = net.lay.tp_size;
    /* pipeline stages of equal layer counts over the encoder's layers then the decoder's */
    if (ut_pipeline_stage_blocks(&net.lay, net.EL + net.DL, 0, &net.b0, &net.b1, err, n)) return NULL;
    net.first = net.b0 == 0, net.last = net.b1 == net.EL + net.DL;
    if (T > 1) {
        if (net.ENH % T || net.DNH % T || net.EF % T || net.DF % T || net.V % T)
            return ut_errorf(err, n, "bart: the attention heads (%lld, %lld), ffn dims (%lld, %lld) and "
                                     "vocab_size %lld must be divisible by dist.tensor_parallel %d (pad the "
                                     "vocabulary, as Megatron-LM does)", (long long)net.ENH, (long long)net.DNH,
                             (long long)net.EF, (long long)net.DF, (long long)net.V, T), NULL;
        /* dropout: on tensors every rank holds whole, the same masks on every rank (and as the whole
         * model); on split ones (attention probabilities, fc1's features) each part draws its slice of
         * the whole mask (ut_attention_qkv_heads, ut_dropout_cols) */
    }
    double numel = param_count(&net);
    if (ut_memory_check(8 * numel, ut_fmt("bart (%.3g parameters)", numel), err, n)) return NULL;
    bart *impl = ut_malloc_check(sizeof *impl);
    *impl = net;
    ut_model *m = bart_new(impl, (float)std, seed);
    if (dir && load_pretrained(m, dir, mismatched, err, n)) {
        ut_model_free(m);
        return NULL;
    }
    return m;
}

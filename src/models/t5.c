/* t5: T5 as Hugging Face's T5ForConditionalGeneration (t5, T5 v1.1,
 * flan-t5, mT5). A shared token embedding (no positions: each stack's first
 * layer holds a relative-position bias, bucketed by distance as T5 does,
 * that every layer of the stack adds to its attention scores), pre-norm
 * blocks with T5's RMS layer norm (no mean, no bias), attention without
 * the 1/sqrt(d_kv) scaling (T5 folds it into its initialisation), a ReLU or
 * gated-GELU feed-forward, a final norm per stack; the head is the shared
 * embedding with the decoder's states scaled by d_model^-0.5 (T5), or
 * lm_head unscaled (T5 v1.1's tie_word_embeddings false; transformers 5
 * writes scale_decoder_outputs false with the head tied instead). The decoder reads the target shifted right behind
 * decoder_start_token_id (the pad id).
 * Input x I32 (B, 4, L): source ids, source mask, target ids, target mask
 * (ut_seq2seq_dataset_open); targets y I32 (B, T), -100 past each target;
 * output logits (B, T, V). Parameter names are transformers' ("shared.weight",
 * "encoder.block.0.layer.0.SelfAttention.q.weight", ...), so model.safetensors
 * loads by name. Options: config.json's names, plus task (seq2seq) and
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
    ut_linear_layer q, k, v, o;
} t5_attn;

typedef struct {
    t5_attn self, cross;        /* cross: decoder blocks only */
    ut_tensor *ln_self, *ln_cross, *ln_ff;
    ut_linear_layer wi, wi0, wi1, wo; /* wi (ReLU / GELU) or wi0, wi1 (gated) */
} t5_block;

enum { ACT_RELU, ACT_GELU, ACT_GELU_TANH };

typedef struct t5 t5;
typedef struct {
    const t5 *net;
    const t5_block *b;
} block_arg;

struct t5 {
    int64_t EL, DL, H, C, DK, F, V, NB, MD;
    int64_t pad, eos, start;
    bool gated, tied, scale; /* scale: the decoder's states times d_model^-0.5 before the head */
    int act;
    float dropout, eps;
    ut_embedding_layer shared;
    ut_tensor *enc_rel, *dec_rel; /* relative-position bias tables (buckets, heads) */
    ut_tensor *enc_ln, *dec_ln;   /* the stacks' final norms */
    ut_linear_layer lm_head;      /* untied only */
    t5_block *block;              /* EL encoder blocks, then DL decoder blocks */
    block_arg *args;
    /* tensor parallel (Megatron-LM): each rank holds Hl = H / tp_size heads
     * (q, k, v column-parallel, o row-parallel, its heads' columns of the
     * position-bias tables), F / tp_size of the feed-forward's features and
     * V / tp_size of the vocabulary (the shared embedding, the head and a
     * vocabulary-parallel loss); norms whole */
    ut_model_layout lay;
    int64_t Hl;
    /* pipeline: this stage's blocks [b0, b1) of the EL + DL (encoder's, then
     * decoder's); the first stage embeds both streams, the last has the
     * decoder's final norm and the head */
    int64_t b0, b1;
    bool first, last;
};

static void t5_free(void *impl) {
    t5 *net = impl;
    ut_free(net->block);
    ut_free(net->args);
    ut_free(net);
}

/* ---- relative positions ----
 * T5's bucket of a key at distance d = key - query: bidirectional (the
 * encoder) halves the buckets by sign; within a half, distances below
 * half of it are exact, the rest logarithmic up to max_distance, as
 * transformers computes them in float32. */
static int32_t bucket(int64_t d, bool bidirectional, int64_t nb, int64_t md) {
    int64_t b = 0;
    if (bidirectional) {
        nb /= 2;
        if (d > 0) b += nb;
        d = d < 0 ? -d : d;
    } else {
        d = d < 0 ? -d : 0;
    }
    int64_t exact = nb / 2;
    if (d < exact) return (int32_t)(b + d);
    float r = logf((float)d / (float)exact) / logf((float)md / (float)exact) * (float)(nb - exact);
    int64_t large = exact + (int64_t)r;
    return (int32_t)(b + (large < nb - 1 ? large : nb - 1));
}

/* buckets of queries q0 .. q0 + Tq - 1 against keys 0 .. Tk - 1, row-major */
static void buckets(int32_t *out, int64_t q0, int64_t Tq, int64_t Tk, bool bidirectional, const t5 *net) {
    for (int64_t i = 0; i < Tq; i++)
        for (int64_t j = 0; j < Tk; j++) out[i * Tk + j] = bucket(j - (q0 + i), bidirectional, net->NB, net->MD);
}

/* the bias (H, Tq, Tk) of the bucket ids (Tq * Tk) */
static ut_tensor *position_bias(ut_ctx *ctx, ut_tensor *table, ut_tensor *ids, int64_t Tq, int64_t Tk) {
    ut_tensor *e = ut_reshape(ctx, ut_embedding(ctx, ids, table), 3, (int64_t[]){Tq, Tk, table->ne[1]});
    return ut_contiguous(ctx, ut_permute(ctx, e, (const int[]){2, 0, 1}));
}

/* ---- attention ---- */
/* x (B, T, H * DK) as heads: perm {0, 2, 1, 3} (B, H, T, DK), {0, 2, 3, 1} (B, H, DK, T) */
static ut_tensor *heads(ut_ctx *ctx, const t5 *net, ut_tensor *x, const int *perm) {
    ut_tensor *h = ut_reshape(ctx, x, 4, (int64_t[]){x->ne[0], x->ne[1], net->Hl, net->DK});
    return ut_contiguous(ctx, ut_permute(ctx, h, perm));
}
static const int AS_Q[4] = {0, 2, 1, 3}, AS_KT[4] = {0, 2, 3, 1};

/* a row-parallel linear without bias: the parts' products summed over the group */
static ut_tensor *row_out(ut_ctx *ctx, const t5 *net, const ut_linear_layer *l, ut_tensor *x) {
    ut_tensor *y = ut_linear(ctx, x, l->w, NULL);
    return net->lay.tp_size > 1 ? net->lay.tp.reduce(ctx, y, net->lay.tp.group) : y;
}

/* softmax(q kT + bias + mask) v, heads back to (B, Tq, H * DK), then o:
 * q (B, H, Tq, DK), kT (B, H, DK, Tk), v (B, H, Tk, DK); bias (H, Tq, Tk)
 * and mask (B, 1, 1, Tk) may be NULL */
static ut_tensor *attend(ut_ctx *ctx, const t5 *net, const t5_attn *a, ut_tensor *q, ut_tensor *kT, ut_tensor *v,
                         ut_tensor *bias, ut_tensor *mask) {
    ut_tensor *s = ut_matmul(ctx, q, kT);
    if (bias) s = ut_add(ctx, s, bias);
    if (mask) s = ut_add(ctx, s, mask);
    ut_tensor *p = ut_softmax(ctx, s);
    if (p && net->lay.tp_size > 1) { /* this rank's heads' slice of the whole (B, H, Tq, Tk) mask */
        int64_t B = p->ne[0], cols = net->Hl * p->ne[2] * p->ne[3];
        p = ut_reshape(ctx, ut_dropout_cols(ctx, ut_reshape(ctx, p, 2, (int64_t[]){B, cols}), net->dropout,
                                            (int64_t)net->lay.tp_rank * cols, cols * net->lay.tp_size),
                       4, p->ne);
    } else {
        p = ut_dropout(ctx, p, net->dropout);
    }
    ut_tensor *o = ut_contiguous(ctx, ut_permute(ctx, ut_matmul(ctx, p, v), AS_Q));
    if (!o) return NULL;
    o = ut_reshape(ctx, o, 3, (int64_t[]){o->ne[0], o->ne[1], net->Hl * net->DK});
    return row_out(ctx, net, &a->o, o);
}

/* attention of x's rows to kv's (both (B, T, C) states, normed) */
static ut_tensor *attention(ut_ctx *ctx, const t5 *net, const t5_attn *a, ut_tensor *x, ut_tensor *kv,
                            ut_tensor *bias, ut_tensor *mask) {
    bool self = kv == x;
    x = ut_tp_col_in(ctx, &net->lay.tp, x);
    kv = self ? x : ut_tp_col_in(ctx, &net->lay.tp, kv);
    ut_tensor *q = heads(ctx, net, ut_linear_layer_forward(ctx, &a->q, x), AS_Q);
    ut_tensor *kT = heads(ctx, net, ut_linear_layer_forward(ctx, &a->k, kv), AS_KT);
    ut_tensor *v = heads(ctx, net, ut_linear_layer_forward(ctx, &a->v, kv), AS_Q);
    return attend(ctx, net, a, q, kT, v, bias, mask);
}

static ut_tensor *rms(ut_ctx *ctx, const t5 *net, ut_tensor *w, ut_tensor *x) {
    return ut_rms_norm(ctx, x, w, net->eps);
}

/* a feed-forward input projection and its activation (gelu_new in the
 * linear op: ut_linear_gelu) */
static ut_tensor *act_of(ut_ctx *ctx, const t5 *net, const ut_linear_layer *l, ut_tensor *n) {
    if (net->act == ACT_GELU_TANH) return ut_linear_layer_forward_gelu(ctx, l, n);
    ut_tensor *h = ut_linear_layer_forward(ctx, l, n);
    return net->act == ACT_RELU ? ut_relu(ctx, h) : ut_gelu_erf(ctx, h);
}

/* x + dropout(feed-forward(norm(x))) */
static ut_tensor *feed_forward(ut_ctx *ctx, const t5 *net, const t5_block *b, ut_tensor *x) {
    ut_tensor *n = ut_tp_col_in(ctx, &net->lay.tp, rms(ctx, net, b->ln_ff, x)), *h;
    if (net->gated)
        h = ut_mul(ctx, act_of(ctx, net, &b->wi0, n), ut_linear_layer_forward(ctx, &b->wi1, n));
    else
        h = act_of(ctx, net, &b->wi, n);
    if (h && net->lay.tp_size > 1) { /* this rank's features: the whole tensor's mask, column slice */
        int64_t Fp = h->ne[h->ndim - 1];
        h = ut_dropout_cols(ctx, h, net->dropout, (int64_t)net->lay.tp_rank * Fp, Fp * net->lay.tp_size);
    } else {
        h = ut_dropout(ctx, h, net->dropout);
    }
    h = row_out(ctx, net, &b->wo, h);
    return ut_add(ctx, x, ut_dropout(ctx, h, net->dropout));
}

/* in = {x, position bias (H, S, S), mask (B, 1, 1, S)} */
static ut_tensor *encoder_block(ut_ctx *ctx, void *user, ut_tensor **in, int n) {
    (void)n;
    const block_arg *a = user;
    const t5 *net = a->net;
    ut_tensor *x = in[0], *h = rms(ctx, net, a->b->ln_self, x);
    x = ut_add(ctx, x, ut_dropout(ctx, attention(ctx, net, &a->b->self, h, h, in[1], in[2]), net->dropout));
    return feed_forward(ctx, net, a->b, x);
}

/* in = {x, position bias with the causal mask (H, T, T), encoder states, their mask (B, 1, 1, S)} */
static ut_tensor *decoder_block(ut_ctx *ctx, void *user, ut_tensor **in, int n) {
    (void)n;
    const block_arg *a = user;
    const t5 *net = a->net;
    ut_tensor *x = in[0], *h = rms(ctx, net, a->b->ln_self, x);
    x = ut_add(ctx, x, ut_dropout(ctx, attention(ctx, net, &a->b->self, h, h, in[1], NULL), net->dropout));
    h = rms(ctx, net, a->b->ln_cross, x);
    x = ut_add(ctx, x, ut_dropout(ctx, attention(ctx, net, &a->b->cross, h, in[2], NULL, in[3]), net->dropout));
    return feed_forward(ctx, net, a->b, x);
}

static ut_tensor *run_block(ut_model *m, ut_ctx *ctx, int64_t i, ut_tensor **in, int n) {
    t5 *net = m->impl;
    ut_checkpoint_fn fn = i < net->EL ? encoder_block : decoder_block;
    return m->checkpoint_activations ? ut_checkpoint(ctx, fn, &net->args[i], in, n) : fn(ctx, &net->args[i], in, n);
}

/* ids (B, L) */
static ut_tensor *embed(ut_ctx *ctx, const t5 *net, ut_tensor *ids) {
    const ut_tp_hooks *tp = &net->lay.tp;
    ut_tensor *e = net->lay.tp_size > 1 ? tp->embedding(ctx, ids, net->shared.w, net->V, -1, tp->group)
                                        : ut_embedding_layer_forward(ctx, &net->shared, ids);
    /* NEFTune's noise on both stacks' token embeddings (transformers' hook on
     * the shared embedding, which each stack calls), L each one's length */
    return ut_dropout(ctx, ut_neftune(ctx, e, 0), net->dropout);
}

/* the encoder's states (B, S, C): ids (B, S), buckets (S * S), mask (B, 1, 1, S) */
static ut_tensor *encode(ut_model *m, ut_ctx *ctx, ut_tensor *ids, ut_tensor *bk, ut_tensor *mask) {
    const t5 *net = m->impl;
    int64_t S = ids->ne[1];
    ut_tensor *x = embed(ctx, net, ids), *bias = position_bias(ctx, net->enc_rel, bk, S, S);
    for (int64_t l = 0; l < net->EL; l++) x = run_block(m, ctx, l, (ut_tensor *[]){x, bias, mask}, 3);
    return ut_dropout(ctx, rms(ctx, net, net->enc_ln, x), net->dropout);
}

/* the decoder's states (B, T, C): ids (B, T), buckets (T * T), causal (T, T) */
static ut_tensor *decode(ut_model *m, ut_ctx *ctx, ut_tensor *ids, ut_tensor *bk, ut_tensor *causal, ut_tensor *enc,
                         ut_tensor *mask) {
    const t5 *net = m->impl;
    int64_t T = ids->ne[1];
    ut_tensor *x = embed(ctx, net, ids), *bias = ut_add(ctx, position_bias(ctx, net->dec_rel, bk, T, T), causal);
    for (int64_t l = 0; l < net->DL; l++) x = run_block(m, ctx, net->EL + l, (ut_tensor *[]){x, bias, enc, mask}, 4);
    return ut_dropout(ctx, rms(ctx, net, net->dec_ln, x), net->dropout);
}

static ut_tensor *lm_head(ut_ctx *ctx, const t5 *net, ut_tensor *h) {
    if (net->scale) h = ut_scale(ctx, h, 1.0f / sqrtf((float)net->C));
    h = ut_tp_col_in(ctx, &net->lay.tp, h); /* split: this rank's rows of the vocabulary, never gathered */
    return net->tied ? ut_linear(ctx, h, net->shared.w, NULL) : ut_linear_layer_forward(ctx, &net->lm_head, h);
}

static ut_tensor *t5_loss_split(ut_model *m, ut_ctx *ctx, ut_tensor *logits, ut_tensor *targets) {
    const t5 *net = m->impl;
    return net->lay.tp.cross_entropy(ctx, logits, targets, net->V, -100, net->lay.tp.group);
}

/* ---- inputs ----
 * src ids (B, S), src mask (B, 1, 1, S), encoder buckets (S * S), decoder
 * ids (B, T), decoder buckets (T * T), causal mask (T, T); S and T the
 * batch's longest source and target. */
static int64_t mask_len(const int32_t *m, int64_t L) {
    int64_t n = 0;
    for (int64_t t = 0; t < L; t++)
        if (m[t]) n = t + 1;
    return n ? n : 1;
}

static int t5_prepare(const ut_model *m, const ut_host_array *x, ut_inputs *in, char *err, size_t n) {
    const t5 *net = m->impl;
    if (x->dtype != UT_I32 || x->ndim != 3 || x->ne[1] != 4)
        return ut_input_error(err, n, "t5", x,
                              "expected I32 x (B, 4, L): source ids, source mask, target ids and target mask "
                              "(data.name: seq2seq_text)");
    int64_t B = x->ne[0], L = x->ne[2], S = 1, T = 1;
    const int32_t *h = x->host;
    for (int64_t b = 0; b < B; b++) {
        int64_t s = mask_len(h + (b * 4 + 1) * L, L), t = mask_len(h + (b * 4 + 3) * L, L);
        S = s > S ? s : S;
        T = t > T ? t : T;
    }
    int32_t *ids = ut_inputs_add(in, UT_I32, 2, (int64_t[]){B, S});
    float *mk = ut_inputs_add(in, UT_F32, 4, (int64_t[]){B, 1, 1, S});
    int32_t *eb = ut_inputs_add(in, UT_I32, 1, (int64_t[]){S * S});
    int32_t *dec = ut_inputs_add(in, UT_I32, 2, (int64_t[]){B, T});
    int32_t *db = ut_inputs_add(in, UT_I32, 1, (int64_t[]){T * T});
    float *causal = ut_inputs_add(in, UT_F32, 2, (int64_t[]){T, T});
    for (int64_t b = 0; b < B; b++) {
        const int32_t *src = h + b * 4 * L, *sm = src + L, *tgt = src + 2 * L, *tm = src + 3 * L;
        for (int64_t t = 0; t < S; t++) {
            ids[b * S + t] = src[t];
            mk[b * S + t] = sm[t] ? 0.0f : -FLT_MAX;
        }
        for (int64_t t = 0; t < T; t++)
            dec[b * T + t] = t == 0 ? (int32_t)net->start : tm[t - 1] ? tgt[t - 1] : (int32_t)net->pad;
    }
    buckets(eb, 0, S, S, true, net);
    buckets(db, 0, T, T, false, net);
    for (int64_t i = 0; i < T; i++)
        for (int64_t j = 0; j < T; j++) causal[i * T + j] = j > i ? -FLT_MAX : 0.0f;
    for (int64_t i = 0; i < B * S; i++)
        if (ids[i] < 0 || ids[i] >= net->V)
            return ut_input_error(err, n, "t5", x, ut_fmt("token id %d is outside the vocabulary [0, %lld)", ids[i],
                                                         (long long)net->V));
    return 0;
}

/* Dropout regions (ut_ctx_rng_region) of training's forward: the
 * encoder's embeddings 0, block i (of the EL + DL) i + 1, the decoder's
 * embeddings EL + DL + 1, the encoder's final norm EL + DL + 2, the
 * decoder's EL + DL + 3, so a block's masks do not depend on the pipeline
 * stage that runs it. */
enum { REGION_DEC_EMBED = 1, REGION_ENC_NORM, REGION_DEC_NORM };

/* A (rows, C) view of a stream of states */
static ut_tensor *rows_of(ut_ctx *ctx, const t5 *net, ut_tensor *h) {
    return ut_reshape(ctx, h, 2, (int64_t[]){ut_nelem(h) / net->C, net->C});
}

/* Training and evaluation: this stage's blocks (all of them when whole).
 * Between pipeline stages the two streams travel as one tensor, the
 * encoder's B S rows then the decoder's B T ((B (S + T), C)); every stage
 * computes the position bias of the stacks it runs from its own copy of
 * their tables (ut_model.pp_shared); the last stage has the head (tied: its
 * own copy of the shared embedding, pp_tied). */
static ut_tensor *t5_states(ut_model *m, ut_ctx *ctx, const ut_prepared *p) {
    const t5 *net = m->impl;
    ut_tensor *ids = p->t[0], *mask = p->t[1], *dec_ids = p->t[3];
    int64_t B = ids->ne[0], S = ids->ne[1], T = dec_ids->ne[1], C = net->C, L = net->EL + net->DL;
    ut_tensor *enc, *h;
    if (net->first) {
        ut_ctx_rng_region(ctx, 0);
        enc = embed(ctx, net, ids);
        ut_ctx_rng_region(ctx, L + REGION_DEC_EMBED);
        h = embed(ctx, net, dec_ids);
    } else {
        ut_tensor *x = m->stage_input;
        if (!x || ut_nelem(x) != B * (S + T) * C) {
            ut_ctx_set_error(ctx, "t5 pipeline stage %d: received %lld values, the batch's two streams are %lld",
                             m->pp_rank, x ? (long long)ut_nelem(x) : 0LL, (long long)(B * (S + T) * C));
            return NULL;
        }
        x = ut_reshape(ctx, x, 2, (int64_t[]){B * (S + T), C});
        enc = ut_reshape(ctx, ut_slice(ctx, x, 0, 0, B * S), 3, (int64_t[]){B, S, C});
        h = ut_reshape(ctx, ut_slice(ctx, x, 0, B * S, B * (S + T)), 3, (int64_t[]){B, T, C});
    }
    ut_tensor *enc_bias = net->b0 < net->EL ? position_bias(ctx, net->enc_rel, p->t[2], S, S) : NULL;
    ut_tensor *dec_bias =
        net->b1 > net->EL ? ut_add(ctx, position_bias(ctx, net->dec_rel, p->t[4], T, T), p->t[5]) : NULL;
    for (int64_t l = net->b0; l < net->b1; l++) {
        ut_ctx_rng_region(ctx, l + 1);
        if (l < net->EL) enc = run_block(m, ctx, l, (ut_tensor *[]){enc, enc_bias, mask}, 3);
        else h = run_block(m, ctx, l, (ut_tensor *[]){h, dec_bias, enc, mask}, 4);
        if (l == net->EL - 1) { /* the encoder's last block: its final norm */
            ut_ctx_rng_region(ctx, L + REGION_ENC_NORM);
            enc = ut_dropout(ctx, rms(ctx, net, net->enc_ln, enc), net->dropout);
        }
    }
    if (!net->last) return ut_concat_rows(ctx, rows_of(ctx, net, enc), rows_of(ctx, net, h));
    ut_ctx_rng_region(ctx, L + REGION_DEC_NORM);
    return m->hidden = ut_dropout(ctx, rms(ctx, net, net->dec_ln, h), net->dropout);
}

static ut_tensor *t5_forward(ut_model *m, ut_ctx *ctx, const ut_prepared *p) {
    const t5 *net = m->impl;
    ut_tensor *h = t5_states(m, ctx, p);
    return net->last ? lm_head(ctx, net, h) : h;
}

/* forward_loss (include/utrain/nn.h): the head and the loss one op; not
 * with the vocabulary split over ranks (ut_tp_cross_entropy's loss) nor on
 * a stage without the head */
static ut_tensor *t5_forward_loss(ut_model *m, ut_ctx *ctx, const ut_prepared *p, ut_tensor *targets) {
    const t5 *net = m->impl;
    if (net->lay.tp_size > 1 || !net->last) return NULL;
    ut_tensor *h = t5_states(m, ctx, p);
    if (h && net->scale) h = ut_scale(ctx, h, 1.0f / sqrtf((float)net->C));
    return ut_model_seq2seq_head_loss(m, ctx, h, net->tied ? net->shared.w : net->lm_head.w,
                                      net->tied ? NULL : net->lm_head.b, targets);
}

/* ---- generation (ut_decoder_ops): the encoder once, then a token per step;
 * cached, each decoder block keeps its self-attention keys and values
 * (ut_kv_cache) and the cross-attention's, computed once */
typedef struct {
    ut_decode_base b; /* b.kv: the decoder's self-attention keys and values; b.enc, b.mask, b.cross */
    t5 *net;
} dec_state;

static void *dec_begin(ut_model *m, const int32_t *src, const int32_t *mask, int64_t B, int64_t S, int per,
                       int64_t max_new, bool cache, const int32_t **prompt, int64_t *prompt_len, char *err,
                       size_t n) {
    int64_t max_len = max_new + 1; /* the start token, then the new ones */
    t5 *net = m->impl;
    if (B < 1 || S < 1 || per < 1 || max_len < 1) return ut_errorf(err, n, "t5 generation: empty batch"), NULL;
    for (int64_t i = 0; i < B * S; i++)
        if (src[i] < 0 || src[i] >= net->V)
            return ut_errorf(err, n, "t5 generation: token id %d is outside the vocabulary [0, %lld)", src[i],
                             (long long)net->V), NULL;
    dec_state *s = ut_calloc_check(1, sizeof *s);
    int64_t N = B * per, HD = net->Hl * net->DK;
    ut_decode_base_init(&s->b, m, "t5", N, per, max_len, cache);
    s->net = net, s->b.S = S;
    ut_ctx *k = s->b.keep;
    int32_t *bk = ut_ctx_alloc(k, (size_t)(S * S) * sizeof *bk);
    *prompt = ut_decode_start(&s->b, net->start), *prompt_len = 1;
    buckets(bk, 0, S, S, true, net);
    ut_tensor *enc = encode(m, k, ut_tensor_from(k, UT_I32, 2, (int64_t[]){B, S}, src),
                            ut_tensor_from(k, UT_I32, 1, (int64_t[]){S * S}, bk),
                            ut_tensor_from(k, UT_F32, 4, (int64_t[]){B, 1, 1, S}, ut_decode_mask(k, mask, B, S, 1)));
    s->b.enc = ut_decode_expand(k, enc, per); /* each source's states for its per_source rows */
    s->b.mask = ut_tensor_from(k, UT_F32, 4, (int64_t[]){N, 1, 1, S}, ut_decode_mask(k, mask, B, S, per));
    if (cache && s->b.enc) {
        s->b.kv = ut_kv_cache_new(k, net->DL, max_len, N, HD);
        s->b.cross = ut_calloc_check((size_t)(2 * net->DL), sizeof *s->b.cross);
        for (int64_t l = 0; l < net->DL; l++) {
            const t5_block *b = &net->block[net->EL + l];
            s->b.cross[2 * l] = heads(k, net, ut_linear_layer_forward(k, &b->cross.k, s->b.enc), AS_KT);
            s->b.cross[2 * l + 1] = heads(k, net, ut_linear_layer_forward(k, &b->cross.v, s->b.enc), AS_Q);
        }
    }
    if (ut_decode_failed(&s->b, k, err, n)) {
        ut_decode_end(s);
        return NULL;
    }
    return s;
}

/* One cached step of decoder block l: x (N, 1, C) at position t, bias (H, 1, t + 1) */
static ut_tensor *cached_block(dec_state *s, int64_t l, ut_tensor *x, int64_t t, ut_tensor *bias) {
    ut_ctx *ctx = s->b.ctx;
    const t5 *net = s->net;
    const t5_block *b = &net->block[net->EL + l];
    ut_tensor *h = rms(ctx, net, b->ln_self, x);
    ut_tensor *q = heads(ctx, net, ut_linear_layer_forward(ctx, &b->self.q, h), AS_Q);
    ut_tensor *kn = ut_linear_layer_forward(ctx, &b->self.k, h), *vn = ut_linear_layer_forward(ctx, &b->self.v, h);
    if (ut_kv_cache_put(s->b.kv, l, 0, t, kn) || ut_kv_cache_put(s->b.kv, l, 1, t, vn)) return NULL;
    /* the keys and values so far, (t + 1, N, H * DK) as heads */
    ut_tensor *kv[2];
    for (int i = 0; i < 2; i++) {
        ut_tensor *c = ut_kv_cache_get(ctx, s->b.kv, l, i, t + 1);
        c = ut_reshape(ctx, ut_contiguous(ctx, c), 4, (int64_t[]){t + 1, s->b.rows, net->Hl, net->DK});
        kv[i] = ut_contiguous(ctx, ut_permute(ctx, c, i ? (const int[]){1, 2, 0, 3} : (const int[]){1, 2, 3, 0}));
    }
    x = ut_add(ctx, x, attend(ctx, net, &b->self, q, kv[0], kv[1], bias, NULL));
    h = rms(ctx, net, b->ln_cross, x);
    q = heads(ctx, net, ut_linear_layer_forward(ctx, &b->cross.q, h), AS_Q);
    x = ut_add(ctx, x, attend(ctx, net, &b->cross, q, ut_tensor_share(ctx, s->b.cross[2 * l]),
                              ut_tensor_share(ctx, s->b.cross[2 * l + 1]), NULL, ut_tensor_share(ctx, s->b.mask)));
    return feed_forward(ctx, net, b, x);
}

static int dec_step(void *state, const int32_t *seq, int64_t ld, int64_t len, float *logits, char *err, size_t n) {
    dec_state *s = state;
    const t5 *net = s->net;
    ut_ctx *ctx = s->b.ctx;
    int64_t N = s->b.rows, C = net->C;
    if (ut_decode_step_ok(&s->b, len, err, n)) return -1;
    ut_tensor *h;
    if (s->b.cache) {
        int64_t t = len - 1;
        int32_t *bk = ut_ctx_alloc(ctx, (size_t)len * sizeof *bk);
        buckets(bk, t, 1, len, false, net);
        ut_tensor *bias = position_bias(ctx, net->dec_rel, ut_tensor_from(ctx, UT_I32, 1, (int64_t[]){len}, bk), 1, len);
        h = embed(ctx, net, ut_decode_last_ids(&s->b, seq, ld, len));
        for (int64_t l = 0; l < net->DL && h; l++) h = cached_block(s, l, h, t, bias);
        h = h ? rms(ctx, net, net->dec_ln, h) : NULL;
    } else {
        int32_t *bk = ut_ctx_alloc(ctx, (size_t)(len * len) * sizeof *bk);
        float *causal = ut_ctx_alloc(ctx, (size_t)(len * len) * sizeof *causal);
        buckets(bk, 0, len, len, false, net);
        for (int64_t i = 0; i < len; i++)
            for (int64_t j = 0; j < len; j++) causal[i * len + j] = j > i ? -FLT_MAX : 0.0f;
        h = decode(s->b.m, ctx, ut_decode_prefix(&s->b, seq, ld, len),
                   ut_tensor_from(ctx, UT_I32, 1, (int64_t[]){len * len}, bk),
                   ut_tensor_from(ctx, UT_F32, 2, (int64_t[]){len, len}, causal), ut_tensor_share(ctx, s->b.enc),
                   ut_tensor_share(ctx, s->b.mask));
        h = ut_contiguous(ctx, ut_slice(ctx, h, 1, len - 1, len));
    }
    if (h) h = lm_head(ctx, net, ut_reshape(ctx, h, 2, (int64_t[]){N, C}));
    if (h && net->lay.tp_size > 1) h = net->lay.tp.gather(ctx, h, net->lay.tp.group); /* the whole vocabulary */
    return ut_decode_logits(&s->b, h, len, logits, err, n);
}

static int dec_reorder(void *state, const int32_t *rows, char *err, size_t n) {
    return ut_decode_reorder(&((dec_state *)state)->b, rows, err, n);
}

static const ut_decoder_ops t5_decoder = {dec_begin, dec_step, dec_reorder, ut_decode_end};

/* ---- building ---- */
/* a linear without bias, N(0, std); split over the layout's tensor-parallel
 * group on dim (0: its output features, 1: its inputs) when dim >= 0 */
static void linear(ut_model *m, const t5 *net, ut_linear_layer *l, const char *name, int64_t in, int64_t out,
                   float std, int dim) {
    ut_init init = {UT_INIT_NORMAL, std};
    char err[256];
    if (dim >= 0 && net->lay.tp_size > 1)
        UT_ASSERT((l->w = ut_param_add_part(m, name, 2, (int64_t[]){out, in}, init, dim, net->lay.tp_size,
                                            net->lay.tp_rank, 1, err, sizeof err)));
    else
        l->w = ut_param_add(m, name, 2, (int64_t[]){out, in}, init);
    l->b = NULL;
}

static ut_tensor *norm_weight(ut_model *m, const char *name, int64_t C) {
    return ut_param_add(m, name, 1, (int64_t[]){C}, (ut_init){UT_INIT_ONES, 0});
}

/* q, k, v, o as T5's _init_weights draws them (initializer_factor f) */
static void attn_init(ut_model *m, const t5 *net, t5_attn *a, const char *prefix, float f) {
    char q[200];
    int64_t C = net->C, HD = net->H * net->DK;
    float stds[4] = {f / sqrtf((float)(C * net->DK)), f / sqrtf((float)C), f / sqrtf((float)C), f / sqrtf((float)HD)};
    const char *leaf[4] = {"q", "k", "v", "o"};
    ut_linear_layer *proj[4] = {&a->q, &a->k, &a->v, &a->o};
    for (int i = 0; i < 4; i++) {
        snprintf(q, sizeof q, "%s.%s.weight", prefix, leaf[i]);
        linear(m, net, proj[i], q, i == 3 ? HD : C, i == 3 ? C : HD, stds[i], i == 3 ? 1 : 0);
    }
}

/* The names of the stacks' relative-position bias tables (held by their
 * first blocks in transformers' state_dict), NULL-terminated */
static const char *const rel_names[] = {"encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight",
                                        "decoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight", NULL};

/* The encoder's (dec false) or decoder's relative-position bias table */
static void rel_table(ut_model *m, t5 *net, bool dec, float f) {
    ut_tensor **rel = dec ? &net->dec_rel : &net->enc_rel;
    ut_init init = {UT_INIT_NORMAL, f / sqrtf((float)net->C)};
    char err[256];
    if (net->lay.tp_size > 1) /* this rank's heads' columns */
        UT_ASSERT((*rel = ut_param_add_part(m, rel_names[dec], 2, (int64_t[]){net->NB, net->H}, init, 1,
                                            net->lay.tp_size, net->lay.tp_rank, 1, err, sizeof err)));
    else
        *rel = ut_param_add(m, rel_names[dec], 2, (int64_t[]){net->NB, net->H}, init);
}

static void block_init(ut_model *m, t5 *net, int64_t i, float f) {
    bool dec = i >= net->EL;
    int64_t k = dec ? i - net->EL : i, C = net->C, F = net->F;
    t5_block *b = &net->block[i];
    char p[128], a[200];
    snprintf(p, sizeof p, "%s.block.%lld.layer", dec ? "decoder" : "encoder", (long long)k);
    snprintf(a, sizeof a, "%s.0.SelfAttention", p);
    attn_init(m, net, &b->self, a, f);
    if (k == 0) rel_table(m, net, dec, f); /* the stack's relative-position bias */
    snprintf(a, sizeof a, "%s.0.layer_norm.weight", p);
    b->ln_self = norm_weight(m, a, C);
    int ff = 1;
    if (dec) {
        snprintf(a, sizeof a, "%s.1.EncDecAttention", p);
        attn_init(m, net, &b->cross, a, f);
        snprintf(a, sizeof a, "%s.1.layer_norm.weight", p);
        b->ln_cross = norm_weight(m, a, C);
        ff = 2;
    }
    if (net->gated) {
        snprintf(a, sizeof a, "%s.%d.DenseReluDense.wi_0.weight", p, ff);
        linear(m, net, &b->wi0, a, C, F, f / sqrtf((float)C), 0);
        snprintf(a, sizeof a, "%s.%d.DenseReluDense.wi_1.weight", p, ff);
        linear(m, net, &b->wi1, a, C, F, f / sqrtf((float)C), 0);
    } else {
        snprintf(a, sizeof a, "%s.%d.DenseReluDense.wi.weight", p, ff);
        linear(m, net, &b->wi, a, C, F, f / sqrtf((float)C), 0);
    }
    snprintf(a, sizeof a, "%s.%d.DenseReluDense.wo.weight", p, ff);
    linear(m, net, &b->wo, a, F, C, f / sqrtf((float)F), 1);
    snprintf(a, sizeof a, "%s.%d.layer_norm.weight", p, ff);
    b->ln_ff = norm_weight(m, a, C);
    net->args[i] = (block_arg){net, b};
}

/* Parameters in transformers' state_dict order. A pipeline stage
 * registers its own, each at its place in the whole model's order
 * (ut_model_order_at: section, then block): the first stage the shared
 * embedding, each stage its blocks and the tables of the stacks it runs
 * (a block's table sits after its first block's q, k, v and o), the stage
 * of the encoder's last block its final norm, the last stage the decoder's
 * and the head (tied: its own copy of the shared embedding). */
static ut_model *t5_new(t5 *net, float f, uint64_t seed) {
    ut_model *m = ut_model_new("t5");
    int64_t n = net->EL + net->DL;
    net->block = ut_calloc_check((size_t)n, sizeof *net->block);
    net->args = ut_calloc_check((size_t)n, sizeof *net->args);
#define AT(section, block, k) ut_model_order_at(m, ((int64_t)(section) << 40) | ((int64_t)(block) << 20) | (k))
    AT(0, 0, 0);
    if (net->first || (net->tied && net->last))
        ut_embedding_layer_init_layout(m, &net->shared, "shared", net->V, net->C, f, &net->lay);
    if (net->tied) m->pp_tied = "shared.weight";
    for (int dec = 0; dec < 2; dec++) {
        int64_t lo = dec ? net->EL : 0, hi = dec ? n : net->EL;
        int64_t b0 = net->b0 > lo ? net->b0 : lo, b1 = net->b1 < hi ? net->b1 : hi;
        if (b0 > lo && b0 < b1) { /* the stack's table on a stage without its first block */
            AT(1 + 2 * dec, lo, 4);
            rel_table(m, net, dec, f);
        }
        for (int64_t i = b0; i < b1; i++) {
            AT(1 + 2 * dec, i, 0);
            block_init(m, net, i, f);
        }
        AT(2 + 2 * dec, 0, 0);
        if (dec ? net->last : b1 == hi && b0 < b1)
            *(dec ? &net->dec_ln : &net->enc_ln) =
                norm_weight(m, dec ? "decoder.final_layer_norm.weight" : "encoder.final_layer_norm.weight", net->C);
    }
    AT(5, 0, 0);
    if (!net->tied && net->last) linear(m, net, &net->lm_head, "lm_head.weight", net->C, net->V, f, 0);
#undef AT
    m->pp_shared = rel_names;
    int P = net->lay.pp_size > 1 ? net->lay.pp_size : 1;
    m->pp_size = P, m->pp_rank = P > 1 ? net->lay.pp_rank : 0, m->pp_b0 = net->b0, m->pp_b1 = net->b1;
    m->impl = net;
    m->free_impl = t5_free;
    m->prepare = t5_prepare;
    m->forward_prepared = t5_forward;
    m->forward_loss = t5_forward_loss;
    m->loss = net->lay.tp_size > 1 ? t5_loss_split : ut_model_seq2seq_loss;
    if (net->lay.tp_size > 1) m->tp_size = net->lay.tp_size;
    /* split: every rank of the group runs the same search on the gathered logits (each holds its heads'
     * keys and values); a pipeline stage has only some of the blocks, and generates nothing */
    if (P == 1) {
        m->decoder = &t5_decoder;
        m->tokens = (ut_decoder_tokens){.start = net->start, .eos = net->eos, .pad = net->pad, .forced_bos = -1,
                                        .vocab = net->V};
    }
    ut_model_finalize(m, seed);
    /* weight decay as Hugging Face Trainer groups T5's parameters (by name:
     * none for a "bias"): the norms' weights decay, the relative-position
     * bias tables do not */
    for (int p = 0; p < m->params.n; p++) m->params.segs[p].decay = !strstr(m->params.names[p], "bias");
    return m;
}

/* ---- options ---- */
static const char *const arch_keys[] = {"vocab_size", "d_model", "d_kv", "d_ff", "num_layers", "num_decoder_layers",
                                        "num_heads", "relative_attention_num_buckets",
                                        "relative_attention_max_distance", "feed_forward_proj",
                                        "tie_word_embeddings", "scale_decoder_outputs", "pad_token_id",
                                        "eos_token_id", "decoder_start_token_id", "layer_norm_epsilon", NULL};

static ut_kv *merged_options(const ut_kv *opts, const char *dir, char *err, size_t n) {
    static const char *const types[] = {"t5", "mt5", NULL};
    const ut_hf_config_spec spec = {"t5", types, "bart directories are read by model.name: bart", arch_keys, NULL};
    ut_kv *kv = ut_hf_config_checked(opts, dir, &spec, err, n);
    if (kv) ut_kv_update(kv, opts);
    return kv;
}

static const ut_kv_field size_keys[] = {
    {"vocab_size", 32128, offsetof(t5, V)},
    {"d_model", 512, offsetof(t5, C)},
    {"d_kv", 64, offsetof(t5, DK)},
    {"d_ff", 2048, offsetof(t5, F)},
    {"num_layers", 6, offsetof(t5, EL)},
    {"num_heads", 8, offsetof(t5, H)},
    {"relative_attention_num_buckets", 32, offsetof(t5, NB)},
    {"relative_attention_max_distance", 128, offsetof(t5, MD)},
};

static const ut_kv_field token_keys[] = {
    {"pad_token_id", 0, offsetof(t5, pad)},
    {"eos_token_id", 1, offsetof(t5, eos)},
    {"decoder_start_token_id", 0, offsetof(t5, start)},
};

static int read_dims(const ut_kv *kv, t5 *net, char *err, size_t n) {
    if (ut_kv_read_fields(kv, size_keys, (int)(sizeof size_keys / sizeof size_keys[0]), 1, INT32_MAX, NULL, net,
                          "t5", err, n))
        return -1;
    long long dl;
    if (ut_kv_int(kv, "num_decoder_layers", net->EL, &dl, err, n)) return -1;
    if (dl < 1 || dl > INT32_MAX) return ut_errorf(err, n, "t5: num_decoder_layers %lld must be >= 1", dl);
    net->DL = dl;
    if (net->NB < 4) return ut_errorf(err, n, "t5: relative_attention_num_buckets %lld must be >= 4", (long long)net->NB);
    if (net->MD <= net->NB / 4)
        return ut_errorf(err, n, "t5: relative_attention_max_distance %lld must exceed a quarter of the buckets",
                         (long long)net->MD);
    if (ut_kv_read_fields(kv, token_keys, (int)(sizeof token_keys / sizeof token_keys[0]), 0, net->V - 1,
                          "the vocabulary", net, "t5", err, n))
        return -1;
    return 0;
}

/* feed_forward_proj, tie_word_embeddings, the rates, task */
static int read_kinds(const ut_kv *kv, t5 *net, double *factor, char *err, size_t n) {
    const char *ff = ut_kv_get(kv, "feed_forward_proj"), *task = ut_kv_get(kv, "task");
    if (!ff) ff = "relu";
    net->gated = !strncmp(ff, "gated-", 6);
    const char *a = net->gated ? ff + 6 : ff;
    if (!strcmp(a, "relu")) net->act = ACT_RELU;
    else if (!strcmp(ff, "gated-gelu") || !strcmp(a, "gelu_new")) net->act = ACT_GELU_TANH; /* transformers' rule */
    else if (!strcmp(a, "gelu")) net->act = ACT_GELU;
    else
        return ut_errorf(err, n, "t5: feed_forward_proj '%s' is not supported (relu, gated-gelu, gelu, gelu_new, "
                                 "gated-relu)", ff);
    double d, eps;
    /* T5 ties its head and scales the states; T5 v1.1's files say tie_word_embeddings false (an lm_head
     * of its own, no scaling); transformers 5 ties always and writes scale_decoder_outputs instead */
    if (ut_kv_bool(kv, "tie_word_embeddings", true, &net->tied, err, n) ||
        ut_kv_bool(kv, "scale_decoder_outputs", net->tied, &net->scale, err, n) ||
        ut_kv_float(kv, "dropout_rate", 0.1, &d, err, n) || ut_kv_float(kv, "layer_norm_epsilon", 1e-6, &eps, err, n) ||
        ut_kv_float(kv, "initializer_factor", 1.0, factor, err, n))
        return -1;
    if (!(d >= 0 && d < 1)) return ut_errorf(err, n, "t5: dropout_rate %g is outside [0, 1)", d);
    if (!(eps > 0)) return ut_errorf(err, n, "t5: layer_norm_epsilon %g must be > 0", eps);
    if (!(*factor >= 0)) return ut_errorf(err, n, "t5: initializer_factor %g must be >= 0", *factor);
    net->dropout = (float)d, net->eps = (float)eps;
    if (task && strcmp(task, "seq2seq") && strcmp(task, "conditional_generation"))
        return ut_errorf(err, n, "model.task: '%s' is not available for t5; use seq2seq", task);
    return 0;
}

/* T5ForConditionalGeneration's file: the tied copies under
 * encoder/decoder.embed_tokens and a tied lm_head are not read */
static int load_pretrained(ut_model *m, const char *dir, bool mismatched, char *err, size_t n) {
    const t5 *net = m->impl;
    static const char *const ignored[] = {"embed_tokens.weight", NULL};
    static const char *const tied_ignored[] = {"embed_tokens.weight", "lm_head.weight", NULL};
    ut_hf_load_opts o = {.ignored = net->tied ? tied_ignored : ignored, .ignore_mismatched = mismatched};
    return ut_hf_load_pretrained(m, dir, o, err, n);
}

ut_model *ut_t5_build(const ut_kv *opts, uint64_t seed, char *err, size_t n) {
    static const char *const known[] = {
        "vocab_size", "d_model", "d_kv", "d_ff", "num_layers", "num_decoder_layers", "num_heads",
        "relative_attention_num_buckets", "relative_attention_max_distance", "feed_forward_proj",
        "tie_word_embeddings", "scale_decoder_outputs", "pad_token_id", "eos_token_id", "decoder_start_token_id",
        "dropout_rate",
        "layer_norm_epsilon", "initializer_factor", "task", "pretrained", "ignore_mismatched_sizes", NULL};
    if (ut_kv_check_keys(opts, known, "model t5", err, n)) return NULL;
    bool mismatched;
    if (ut_kv_bool(opts, "ignore_mismatched_sizes", false, &mismatched, err, n)) return NULL;
    const char *dir = ut_kv_get(opts, "pretrained");
    ut_kv *merged = dir ? merged_options(opts, dir, err, n) : NULL;
    if (dir && !merged) return NULL;
    const ut_kv *kv = merged ? merged : opts;
    t5 net = {0};
    double factor;
    int rc = read_dims(kv, &net, err, n) || read_kinds(kv, &net, &factor, err, n);
    ut_kv_free(merged);
    if (rc) return NULL;
    net.lay = ut_model_build_layout();
    int TP = net.lay.tp_size > 1 ? net.lay.tp_size : 1;
    /* pipeline stages of equal block counts over the encoder's blocks then the decoder's */
    if (ut_pipeline_stage_blocks(&net.lay, net.EL + net.DL, 0, &net.b0, &net.b1, err, n)) return NULL;
    net.first = net.b0 == 0, net.last = net.b1 == net.EL + net.DL;
    if (net.H % TP || net.F % TP || net.V % TP)
        return ut_errorf(err, n, "t5: num_heads %lld, d_ff %lld and vocab_size %lld must be divisible by "
                                 "dist.tensor_parallel %d (pad the vocabulary, as Megatron-LM does)",
                         (long long)net.H, (long long)net.F, (long long)net.V, TP), NULL;
    net.lay.tp_size = TP;
    net.Hl = net.H / TP;
    double C = (double)net.C, HD = (double)(net.H * net.DK), F = (double)net.F * (net.gated ? 3 : 2);
    double numel = (double)net.V * C * (net.tied ? 1 : 2) + (double)net.EL * (4 * C * HD + F * C) +
                   (double)net.DL * (8 * C * HD + F * C) + 2.0 * (double)(net.NB * net.H);
    if (ut_memory_check(8 * numel, ut_fmt("t5 (%.3g parameters)", numel), err, n)) return NULL;
    t5 *impl = ut_malloc_check(sizeof *impl);
    *impl = net;
    ut_model *m = t5_new(impl, (float)factor, seed);
    if (dir && load_pretrained(m, dir, mismatched, err, n)) {
        ut_model_free(m);
        return NULL;
    }
    return m;
}

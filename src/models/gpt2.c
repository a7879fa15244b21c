/* gpt2: decoder-only transformer with learned positions, pre-LayerNorm blocks
 * and the output projection tied to the token embedding.
 * Options: n_layer (12), n_head (12), n_embd (768), vocab_size (50257),
 * block_size (1024), dropout (0). Input tokens I32 (B, T) with T <= block_size;
 * output logits (B, T, vocab_size); loss cross-entropy (targets -1 ignored).
 * Init as GPT-2: N(0, 0.02) weights, residual projections N(0, 0.02/sqrt(2 n_layer)).
 * pretrained: DIR, a Hugging Face GPT-2 directory (config.json's n_layer, n_head,
 * n_embd, vocab_size, n_positions, layer_norm_epsilon; Conv1D weights transposed
 * on import); task: causal_lm (the tied LM head) or sequence_classification
 * (GPT2ForSequenceClassification: input x I32 (B, 3, T) from tsv_text with a
 * tokenizer: ids, token type ids (unused) and attention mask; the causal
 * attention also masks padded keys; the bias-free "score" head reads the
 * hidden state at each row's last token that is not pad_token_id; output
 * (B, num_labels); computed on the real tokens only (packed rows,
 * ut_attention_varlen causal) unless that token is padding; options num_labels (num_classes), pad_token_id and
 * initializer_range, the new head's std). docs/models.md. */
#include <float.h>
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
    bool classify;            /* sequence_classification: score head, (B, 3, T) input */
    int64_t K, pad_id;        /* num_labels; pad_token_id, -1 when unset */
    ut_tensor *score;         /* (K, C), no bias */
    ut_model_layout lay;      /* tensor parallel: wte holds this rank's rows of the vocabulary */
    /* pipeline: this stage's blocks [b0, b1); the first stage has the
     * embeddings, the last ln_f and the head: the language model's weight is
     * its own copy of wte.weight (the trainer sums the two copies'
     * gradients), the classifier's its score */
    int64_t b0, b1;
    bool first, last;
    bool seq;                 /* sequence parallel: the blocks and ln_f on this rank's rows of each sequence */
} gpt2;

static void gpt2_free(void *impl) {
    gpt2 *g = impl;
    ut_free(g->h);
    ut_free(g);
}

/* ---- inputs: prepared on the host (the loader thread), ut_model.prepare ---- */
enum { PACKED, PADDED, LM }; /* ut_inputs layouts */

/* the position of row b's last token that is not pad_id (the last position
 * when pad_id is unset; transformers: argmax of t * (id != pad), 0 if none) */
static int64_t last_token(const gpt2 *g, const int32_t *id, int64_t T) {
    int64_t at = g->pad_id < 0 ? T - 1 : 0;
    for (int64_t t = 0; g->pad_id >= 0 && t < T; t++)
        if (id[t] != g->pad_id) at = t;
    return at;
}

static int32_t *add_i32(ut_inputs *in, int64_t n) { return ut_inputs_add(in, UT_I32, 1, &n); }

/* The real tokens of h (B, 3, T) packed: ids and position ids (N) of the N
 * tokens whose mask is set, sequence by sequence, offsets (B + 1) where each
 * sequence starts and last (B) the packed row of each row's last token
 * (last_token). false when some row's last token is padding (the head reads
 * it: the padded layout computes it). */
static bool pack_inputs(const gpt2 *g, const int32_t *h, int64_t B, int64_t T, ut_inputs *in) {
    int64_t N = 0;
    for (int64_t b = 0; b < B; b++) {
        const int32_t *mb = h + (b * 3 + 2) * T;
        if (!mb[last_token(g, h + b * 3 * T, T)]) return false;
        for (int64_t t = 0; t < T; t++) N += mb[t] != 0;
    }
    int32_t *id = add_i32(in, N), *ps = add_i32(in, N), *off = add_i32(in, B + 1), *last = add_i32(in, B);
    int64_t r = 0;
    off[0] = 0;
    for (int64_t b = 0; b < B; b++) {
        const int32_t *ib = h + b * 3 * T, *mb = ib + 2 * T;
        int64_t at = last_token(g, ib, T);
        for (int64_t t = 0; t < T; t++) {
            if (!mb[t]) continue;
            if (t == at) last[b] = (int32_t)r;
            id[r] = ib[t];
            ps[r++] = (int32_t)t;
        }
        off[b + 1] = (int32_t)r;
    }
    in->layout = PACKED;
    return true;
}

/* From h (B, 3, T): ids (B, T), position ids (T), the additive padding mask
 * (B, T) and the flat index b * T + t of each row's last token (last_token). */
static void split_inputs(const gpt2 *g, const int32_t *h, int64_t B, int64_t T, ut_inputs *in) {
    int32_t *id = ut_inputs_add(in, UT_I32, 2, (int64_t[]){B, T}), *ps = add_i32(in, T);
    float *mk = ut_inputs_add(in, UT_F32, 2, (int64_t[]){B, T});
    int32_t *ls = add_i32(in, B);
    for (int64_t t = 0; t < T; t++) ps[t] = (int32_t)t;
    for (int64_t b = 0; b < B; b++) {
        for (int64_t t = 0; t < T; t++) {
            id[b * T + t] = h[(b * 3) * T + t];
            mk[b * T + t] = h[(b * 3 + 2) * T + t] ? 0.0f : -FLT_MAX; /* as (1 - mask) * finfo.min */
        }
        ls[b] = (int32_t)(b * T + last_token(g, id + b * T, T));
    }
    in->layout = PADDED;
}

static int gpt2_prepare(const ut_model *m, const ut_host_array *x, ut_inputs *in, char *err, size_t n) {
    const gpt2 *g = m->impl;
    if (!g->classify) { /* tokens (B, T) and positions 0..T-1 */
        if (x->dtype != UT_I32 || x->ndim != 2 || x->ne[1] > g->block_size)
            return ut_input_error(err, n, "gpt2", x, ut_fmt("expected I32 tokens (B, T) with T <= block_size %lld",
                                                            (long long)g->block_size));
        int64_t B = x->ne[0], T = x->ne[1];
        memcpy(ut_inputs_add(in, UT_I32, 2, x->ne), x->host, (size_t)(B * T) * sizeof(int32_t));
        int32_t *ps = add_i32(in, T);
        for (int64_t t = 0; t < T; t++) ps[t] = (int32_t)t;
        in->layout = LM;
        in->seq_len[0] = T;
        return 0;
    }
    if (x->dtype != UT_I32 || x->ndim != 3 || x->ne[1] != 3 || x->ne[2] > g->block_size)
        return ut_input_error(err, n, "gpt2",  x,
                              ut_fmt("sequence_classification expects I32 x (B, 3, T): token ids, token type ids "
                                     "and attention mask (tsv_text with data.tokenizer), T <= n_positions %lld",
                                     (long long)g->block_size));
    int64_t B = x->ne[0], T = x->ne[2];
    if (g->pad_id < 0 && B > 1)
        return snprintf(err, n, "gpt2: pad_token_id is not set (by model.pad_token_id or config.json) and the "
                                "batch has %lld rows: the last real token of a padded row cannot be found; set "
                                "model.pad_token_id to the tokenizer's padding id (50256, <|endoftext|>, for "
                                "GPT-2's tokenizer)", (long long)B), -1;
    /* unpadded execution: only the real tokens are computed (rows are
     * independent but for attention, whose padded keys are masked) */
    if (!pack_inputs(g, x->host, B, T, in)) split_inputs(g, x->host, B, T, in);
    in->seq_len[0] = T;
    return 0;
}

/* The language model up to its head: the final hidden states (after ln_f;
 * with sequence parallelism gathered whole), or a pipeline stage's
 * activation where this stage has no head. */
static ut_tensor *lm_hidden(ut_model *m, ut_ctx *ctx, const ut_prepared *in) {
    const gpt2 *g = m->impl;
    const ut_tp_hooks *tp = &g->lay.tp;
    bool split = g->lay.tp_size > 1;
    /* split: each rank looks up its part of the vocabulary, summed over
     * the group; its logits are its part's columns (the tied head is
     * column-parallel), and the loss never gathers them */
    ut_tensor *x = m->stage_input;
    if (g->first) {
        ut_tensor *tok = split ? tp->embedding(ctx, in->t[0], g->wte.w, g->V, -1, tp->group)
                               : ut_embedding_layer_forward(ctx, &g->wte, in->t[0]);
        x = ut_add(ctx, ut_neftune(ctx, tok, in->seq_len[0]), ut_embedding_layer_forward(ctx, &g->wpe, in->t[1]));
        if (g->seq) { /* this rank's rows from here to ln_f, the whole model's masks */
            x = tp->seq_split(ctx, x, tp->group);
            x = ut_dropout_seq(ctx, x, g->dropout, g->lay.tp_rank, g->lay.tp_size);
        } else if (g->dropout > 0) {
            x = ut_dropout(ctx, x, g->dropout);
        }
    }
    for (int64_t l = g->b0; l < g->b1; l++) {
        ut_ctx_rng_region(ctx, l + 1); /* the block's masks whichever stage runs it */
        x = ut_block_layer_forward(ctx, &g->h[l], x, m->checkpoint_activations);
    }
    if (!g->last) return x; /* a pipeline stage's activation, (B, T, C) */
    if (g->seq) { /* ln_f on this rank's rows (its gradient summed over the group), then the whole sequence */
        x = ut_layernorm(ctx, x, tp->copy(ctx, g->ln_f.w, tp->group), tp->copy(ctx, g->ln_f.b, tp->group),
                         g->ln_f.eps);
        return m->hidden = tp->seq_gather(ctx, x, tp->group);
    }
    return m->hidden = ut_layernorm_layer_forward(ctx, &g->ln_f, x);
}

/* The language model's loss with its head in the same op (the model's
 * forward_loss, include/utrain/nn.h): the logits never a tensor of their
 * own. Not with a vocabulary split over ranks (the loss there is
 * ut_tp_cross_entropy's), not for a stage without the head nor for the
 * classifier: NULL, nothing run. */
static ut_tensor *gpt2_forward_loss(ut_model *m, ut_ctx *ctx, const ut_prepared *in, ut_tensor *targets) {
    const gpt2 *g = m->impl;
    if (in->layout != LM || g->classify || g->lay.tp_size > 1 || !g->last) return NULL;
    return ut_linear_cross_entropy(ctx, lm_hidden(m, ctx, in), g->wte.w, NULL, targets, -1);
}

static ut_tensor *gpt2_forward(ut_model *m, ut_ctx *ctx, const ut_prepared *in) {
    const gpt2 *g = m->impl;
    if (in->layout == LM) {
        ut_tensor *x = lm_hidden(m, ctx, in);
        if (!g->last) return x;
        const ut_tp_hooks *tp = &g->lay.tp;
        return ut_linear(ctx, g->lay.tp_size > 1 && !g->seq ? tp->copy(ctx, x, tp->group) : x, g->wte.w, NULL);
    }
    /* PACKED: ids, positions, offsets, last; PADDED: ids, positions, mask, last.
     * Split: the blocks as the language model's, the token lookup by
     * vocabulary, the score head whole on every rank. A pipeline stage runs
     * its blocks on the rows (packed (N, C) or padded (B, T, C)) the one
     * before sent; the last has ln_f and the head. */
    const ut_tp_hooks *tp = &g->lay.tp;
    ut_tensor *h = m->stage_input;
    if (g->first) {
        ut_ctx_rng_region(ctx, 0);
        ut_tensor *tok = g->lay.tp_size > 1 ? tp->embedding(ctx, in->t[0], g->wte.w, g->V, -1, tp->group)
                                            : ut_embedding_layer_forward(ctx, &g->wte, in->t[0]);
        h = ut_add(ctx, ut_neftune(ctx, tok, in->seq_len[0]), ut_embedding_layer_forward(ctx, &g->wpe, in->t[1]));
        if (g->dropout > 0) h = ut_dropout(ctx, h, g->dropout);
    }
    for (int64_t l = g->b0; l < g->b1; l++) {
        ut_ctx_rng_region(ctx, l + 1); /* the block's masks whichever stage runs it */
        h = ut_block_layer_forward_rows(ctx, &g->h[l], h, in->t[2], m->checkpoint_activations);
    }
    if (!g->last) return h;
    h = ut_layernorm_layer_forward(ctx, &g->ln_f, h);
    /* the rows at the last tokens: an embedding lookup into h viewed (rows, C) */
    h = ut_embedding(ctx, in->t[3], ut_reshape(ctx, h, 2, (int64_t[]){ut_nelem(h) / g->C, g->C}));
    return ut_linear(ctx, h, g->score, NULL);
}

static ut_tensor *gpt2_loss(ut_model *m, ut_ctx *ctx, ut_tensor *logits, ut_tensor *targets) {
    const gpt2 *g = m->impl;
    if (g->lay.tp_size > 1 && !g->classify) /* the language model's logits are split by vocabulary */
        return g->lay.tp.cross_entropy(ctx, logits, targets, g->V, -1, g->lay.tp.group);
    return g->classify ? ut_model_class_loss(m, ctx, logits, targets) : ut_cross_entropy(ctx, logits, targets, -1);
}

/* ---- generation from a prompt (ut_decoder_ops; the language model) ----
 * Prompts are left-padded to the longest (transformers' padding_side
 * "left"): padded keys are masked for every later token, and positions
 * count the real tokens only (a pad's is 1, as transformers sets it).
 * Cached, the prompt goes through in one step and each block keeps its keys
 * and values (ut_kv_cache); then one token a step. */
typedef struct {
    ut_decode_base b;        /* b.max_len: the prompt and the new tokens; b.kv: each block's keys and values */
    gpt2 *g;
    int64_t P;               /* the prompt's length */
    /* in b.keep's host arena: */
    int32_t *prompt;         /* (N, P) */
    int32_t *pads;           /* per row: the prompt's padding at its left */
    float *mask;             /* (N, max_len): 0, or -FLT_MAX for a pad */
} lm_state;

static void *lm_begin(ut_model *m, const int32_t *src, const int32_t *mask, int64_t B, int64_t S, int per,
                      int64_t max_new, bool cache, const int32_t **prompt, int64_t *prompt_len, char *err, size_t n) {
    gpt2 *g = m->impl;
    int64_t P = 0, N = B * (int64_t)per;
    for (int64_t b = 0; b < B; b++) {
        int64_t k = 0;
        for (int64_t t = 0; t < S; t++) k += mask[b * S + t] != 0;
        if (k == 0)
            return ut_errorf(err, n, "gpt2 generation: prompt %lld is empty (a causal model continues a text)",
                             (long long)b), NULL;
        P = k > P ? k : P;
    }
    if (P + max_new > g->block_size)
        return ut_errorf(err, n, "gpt2 generation: a prompt of %lld tokens and %lld new ones are more than "
                                 "block_size (n_positions) %lld", (long long)P, (long long)max_new,
                         (long long)g->block_size), NULL;
    lm_state *s = ut_calloc_check(1, sizeof *s);
    int64_t T = P + max_new;
    ut_decode_base_init(&s->b, m, "gpt2", N, per, T, cache);
    s->g = g, s->P = P;
    s->prompt = ut_ctx_alloc(s->b.keep, (size_t)(N * P) * sizeof *s->prompt);
    s->pads = ut_ctx_alloc(s->b.keep, (size_t)N * sizeof *s->pads);
    s->mask = ut_ctx_alloc(s->b.keep, (size_t)(N * T) * sizeof *s->mask);
    int32_t pad = (int32_t)(m->tokens.pad >= 0 ? m->tokens.pad : 0);
    for (int64_t r = 0; r < N; r++) {
        const int32_t *ib = src + (r / per) * S, *mb = mask + (r / per) * S;
        int64_t k = 0;
        for (int64_t t = 0; t < S; t++) k += mb[t] != 0;
        s->pads[r] = (int32_t)(P - k);
        for (int64_t t = 0; t < T; t++) s->mask[r * T + t] = t < P - k ? -FLT_MAX : 0.0f;
        for (int64_t t = 0; t < P - k; t++) s->prompt[r * P + t] = pad;
        for (int64_t t = 0, j = P - k; t < S; t++)
            if (mb[t]) s->prompt[r * P + j++] = ib[t];
    }
    if (cache) s->b.kv = ut_kv_cache_new(s->b.keep, g->n_layer, T, N, g->C);
    if (ut_decode_failed(&s->b, s->b.keep, err, n)) {
        ut_decode_end(s);
        return NULL;
    }
    *prompt = s->prompt, *prompt_len = P;
    return s;
}

/* block l over x (N, T, C) at positions [t0, t0 + T): keys and values from
 * the cache (stored first) or, uncached, x's own; mask (N, t0 + T) */
static ut_tensor *lm_block(lm_state *s, int64_t l, ut_tensor *x, int64_t t0, ut_tensor *mask) {
    ut_ctx *ctx = s->b.ctx;
    const ut_block_layer *b = &s->g->h[l];
    int64_t C = s->g->C, T = x->ne[1];
    ut_tensor *qkv = ut_linear_layer_forward(ctx, &b->attn.c_attn, ut_layernorm_layer_forward(ctx, &b->ln_1, x));
    ut_tensor *q = ut_contiguous(ctx, ut_slice(ctx, qkv, 2, 0, C)), *kv[2];
    for (int i = 0; i < 2; i++) {
        kv[i] = ut_contiguous(ctx, ut_slice(ctx, qkv, 2, (i + 1) * C, (i + 2) * C));
        if (!s->b.cache) continue;
        if (!kv[i] || ut_kv_cache_put(s->b.kv, l, i, t0, ut_contiguous(ctx, ut_transpose(ctx, kv[i], 0, 1))))
            return NULL;
        kv[i] = ut_contiguous(ctx, ut_transpose(ctx, ut_kv_cache_get(ctx, s->b.kv, l, i, t0 + T), 0, 1));
    }
    ut_tensor *y = ut_attention_qkv(ctx, q, kv[0], kv[1], mask, b->attn.n_head, T > 1, 0);
    x = ut_add(ctx, x, ut_linear_layer_forward(ctx, &b->attn.c_proj, y));
    return ut_add(ctx, x, ut_mlp_layer_forward(ctx, &b->mlp, ut_layernorm_layer_forward(ctx, &b->ln_2, x)));
}

static int lm_step(void *state, const int32_t *seq, int64_t ld, int64_t len, float *logits, char *err, size_t n) {
    lm_state *s = state;
    const gpt2 *g = s->g;
    ut_ctx *ctx = s->b.ctx;
    int64_t N = s->b.rows, C = g->C, Tm = s->b.max_len;
    /* cached: the prompt at the first step, then the one new token */
    int64_t t0 = s->b.cache ? s->b.len : 0, T = len - t0;
    if (len < s->P || len > Tm || T < 1 || (s->b.cache && s->b.len == 0 && len != s->P))
        return ut_errorf(err, n, "gpt2 generation: step of %lld tokens after %lld (prompt %lld, at most %lld)",
                         (long long)len, (long long)s->b.len, (long long)s->P, (long long)Tm);
    int32_t *ids = ut_ctx_alloc(ctx, (size_t)(N * T) * sizeof *ids), *pos = ut_ctx_alloc(ctx, (size_t)(N * T) * sizeof *pos);
    float *mk = ut_ctx_alloc(ctx, (size_t)(N * len) * sizeof *mk);
    for (int64_t r = 0; r < N; r++) {
        for (int64_t t = 0; t < T; t++) {
            int64_t at = t0 + t;
            ids[r * T + t] = seq[r * ld + at];
            pos[r * T + t] = at >= s->pads[r] ? (int32_t)(at - s->pads[r]) : 1;
        }
        memcpy(mk + r * len, s->mask + r * Tm, (size_t)len * sizeof *mk);
    }
    ut_tensor *idt = ut_tensor_from(ctx, UT_I32, 2, (int64_t[]){N, T}, ids);
    ut_tensor *x = ut_add(ctx, ut_embedding_layer_forward(ctx, &g->wte, idt),
                          ut_embedding_layer_forward(ctx, &g->wpe, ut_tensor_from(ctx, UT_I32, 2, (int64_t[]){N, T}, pos)));
    ut_tensor *mask = ut_tensor_from(ctx, UT_F32, 2, (int64_t[]){N, len}, mk);
    for (int64_t l = 0; l < g->n_layer && x; l++) x = lm_block(s, l, x, t0, mask);
    if (x) x = ut_contiguous(ctx, ut_slice(ctx, ut_layernorm_layer_forward(ctx, &g->ln_f, x), 1, T - 1, T));
    if (x) x = ut_linear(ctx, ut_reshape(ctx, x, 2, (int64_t[]){N, C}), g->wte.w, NULL);
    return ut_decode_logits(&s->b, x, s->b.cache ? len : 0, logits, err, n);
}

static int lm_reorder(void *state, const int32_t *rows, char *err, size_t n) {
    return ut_decode_reorder(&((lm_state *)state)->b, rows, err, n);
}

static const ut_decoder_ops gpt2_decoder = {lm_begin, lm_step, lm_reorder, ut_decode_end};

/* sequence_classification's options: num_labels (num_classes), pad_token_id
 * (unset: -1), initializer_range (the new score head's std) */
static int read_head(const ut_kv *opts, gpt2 *g, double *std, char *err, size_t n) {
    const char *task = ut_kv_get(opts, "task"), *pad = ut_kv_get(opts, "pad_token_id");
    long long K1, K2, pid = -1;
    g->classify = task && !strcmp(task, "sequence_classification");
    if (ut_kv_int(opts, "num_classes", 2, &K1, err, n) || ut_kv_int(opts, "num_labels", K1, &K2, err, n) ||
        (pad && ut_kv_int(opts, "pad_token_id", -1, &pid, err, n)) ||
        ut_kv_float(opts, "initializer_range", 0.02, std, err, n))
        return -1;
    if (K2 < 1 || K2 > INT32_MAX) return ut_errorf(err, n, "gpt2: num_labels %lld must be >= 1", K2);
    if (pad && (pid < 0 || pid > INT32_MAX))
        return ut_errorf(err, n, "gpt2: pad_token_id %lld must be a token id >= 0", pid);
    if (!(*std >= 0)) return ut_errorf(err, n, "gpt2: initializer_range must be >= 0");
    g->K = K2;
    g->pad_id = pad ? pid : -1;
    return 0;
}

/* Stage lay.pp_rank's blocks [b0, b1) of L (ut_pipeline_stage_blocks): a
 * block costs about 12 C^2 + 2 T C multiply-adds a token (its linears, and
 * attention over T positions), the last stage's head C V. */
static int stage_blocks(const ut_model_layout *lay, int64_t L, int64_t C, int64_t V, int64_t T, int64_t *b0,
                        int64_t *b1, char *err, size_t n) {
    double blk = 12.0 * (double)C * (double)C + 2.0 * (double)T * (double)C, head = (double)C * (double)V;
    return ut_pipeline_stage_blocks(lay, L, head / blk, b0, b1, err, n);
}

/* regression: problem_type regression, one score whatever the options' label count */
static ut_model *gpt2_new(const ut_kv *opts, bool regression, uint64_t seed, char *err, size_t n) {
    gpt2 head = {0};
    double std;
    if (read_head(opts, &head, &std, err, n)) return NULL;
    if (regression) head.K = 1;
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

    ut_model_layout lay = ut_model_build_layout();
    int P = lay.pp_size > 1 ? lay.pp_size : 1, stage = P > 1 ? lay.pp_rank : 0;
    int64_t b0, b1;
    if (stage_blocks(&lay, L, C, head.classify ? head.K : V, BS, &b0, &b1, err, n)) return NULL;
    if (lay.tp_size > 1) {
        if (NH % lay.tp_size || V % lay.tp_size)
            return snprintf(err, n, "gpt2: n_head %lld and vocab_size %lld must be divisible by "
                                    "dist.tensor_parallel %d (pad the vocabulary, as Megatron-LM does)",
                            NH, V, lay.tp_size), NULL;
    }
    /* parameters and their gradients (ut_model_finalize), checked before allocating */
    double numel = (double)(V + BS) * C + (double)L * (12.0 * C * C + 13.0 * C) + 2.0 * C +
                   (head.classify ? (double)head.K * C : 0);
    if (ut_memory_check(8 * numel, ut_fmt("gpt2 (n_layer %lld, n_embd %lld, vocab_size %lld, "
                                         "block_size %lld: %.3g parameters)", L, C, V, BS, numel),
                        err, n))
        return NULL;
    ut_model *m = ut_model_new("gpt2");
    gpt2 *g = ut_calloc_check(1, sizeof *g);
    *g = head;
    g->n_layer = L, g->n_head = NH, g->C = C, g->V = V, g->block_size = BS, g->dropout = (float)dropout;
    g->h = ut_calloc_check((size_t)L, sizeof *g->h);
    float proj_std = 0.02f / sqrtf(2.0f * (float)L);
    g->lay = lay;
    g->b0 = b0, g->b1 = b1;
    g->first = stage == 0, g->last = stage == P - 1;
    m->pp_size = P, m->pp_rank = stage, m->pp_b0 = g->b0, m->pp_b1 = g->b1;
    /* the token embedding on the first stage, the language model's tied head's copy of it on the last */
    if (g->first || (g->last && !g->classify))
        ut_embedding_layer_init_layout(m, &g->wte, "wte", V, C, 0.02f, &lay); /* split: this rank's vocabulary */
    if (!g->classify) m->pp_tied = "wte.weight";
    if (g->first) ut_embedding_layer_init(m, &g->wpe, "wpe", BS, C, 0.02f);
    for (int64_t l = g->b0; l < g->b1; l++) {
        char name[32];
        snprintf(name, sizeof name, "h.%lld", (long long)l);
        if (lay.tp_size > 1)
            UT_ASSERT(ut_block_layer_init_tp(m, &g->h[l], name, C, (int)NH, proj_std, (float)dropout, lay.tp_rank,
                                             lay.tp_size, lay.tp, err, n) == 0); /* n_head checked above */
        else
            ut_block_layer_init(m, &g->h[l], name, C, (int)NH, proj_std, (float)dropout);
        g->h[l].ln_1.eps = g->h[l].ln_2.eps = (float)eps;
    }
    if (lay.tp_size > 1) m->tp_size = lay.tp_size; /* every stage is split, with or without wte */
    /* sequence parallelism: the language model in one stage */
    g->seq = lay.seq_parallel && lay.tp_size > 1 && !g->classify && P == 1;
    for (int64_t l = g->b0; g->seq && l < g->b1; l++) ut_block_layer_set_seq(&g->h[l], lay.tp_rank, lay.tp_size);
    m->seq_parallel = g->seq;
    if (g->last) {
        ut_layernorm_layer_init(m, &g->ln_f, "ln_f", C);
        g->ln_f.eps = (float)eps;
    }
    if (g->classify && g->last) /* as transformers' _init_weights: N(0, initializer_range) */
        g->score = ut_param_add(m, "score.weight", 2, (int64_t[]){g->K, C}, (ut_init){UT_INIT_NORMAL, (float)std});
    m->impl = g;
    m->free_impl = gpt2_free;
    m->prepare = gpt2_prepare;
    m->forward_prepared = gpt2_forward;
    m->loss = gpt2_loss;
    m->forward_loss = gpt2_forward_loss;
    if (!g->classify && lay.tp_size <= 1 && P == 1) { /* the language model generates */
        long long eos;
        if (ut_kv_int(opts, "eos_token_id", V > 50256 ? 50256 : -1, &eos, err, n)) eos = -1;
        m->decoder = &gpt2_decoder;
        m->tokens = (ut_decoder_tokens){.start = -1, .eos = eos < V ? eos : -1, .pad = eos >= 0 && eos < V ? eos : 0,
                                        .forced_bos = -1, .vocab = V};
    }
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
    static const char *const types[] = {"gpt2", NULL};
    const ut_hf_config_spec spec = {"gpt2", types, "model.name: bert reads bert", arch_keys, check_hf_config};
    ut_kv *kv = ut_hf_config_checked(opts, dir, &spec, err, n);
    if (!kv) return NULL;
    if (ut_kv_get(kv, "n_positions")) ut_kv_set(kv, "block_size", ut_kv_get(kv, "n_positions"));
    if (ut_kv_get(kv, "resid_pdrop")) ut_kv_set(kv, "dropout", ut_kv_get(kv, "resid_pdrop"));
    ut_kv_update(kv, opts);
    return kv;
}

static int load_pretrained(ut_model *m, const char *dir, bool mismatched, char *err, size_t n) {
    static const char *const transposed[] = {".c_attn.weight", ".c_proj.weight", ".c_fc.weight", NULL};
    static const char *const ignored[] = {"lm_head.weight", ".attn.bias", ".attn.masked_bias", NULL};
    static const char *const optional[] = {"score.", NULL};
    ut_hf_load_opts o = {.file_prefix = "transformer.", .transposed = transposed, .ignored = ignored,
                         .optional = optional, .ignore_mismatched = mismatched};
    return ut_hf_load_pretrained(m, dir, o, err, n);
}

ut_model *ut_gpt2_build(const ut_kv *opts, uint64_t seed, char *err, size_t n) {
    static const char *const known[] = {"n_layer", "n_head",  "n_embd",     "vocab_size", "block_size",
                                        "dropout", "task",    "pretrained", "layer_norm_epsilon",
                                        "num_labels", "num_classes", "pad_token_id", "initializer_range",
                                        "problem_type", "ignore_mismatched_sizes", NULL};
    if (ut_kv_check_keys(opts, known, "model gpt2", err, n)) return NULL;
    bool mismatched;
    if (ut_kv_bool(opts, "ignore_mismatched_sizes", false, &mismatched, err, n)) return NULL;
    const char *task = ut_kv_get(opts, "task"), *dir = ut_kv_get(opts, "pretrained");
    if (task && strcmp(task, "causal_lm") && strcmp(task, "sequence_classification"))
        return ut_errorf(err, n, "model.task: '%s' is not available for gpt2; use causal_lm or "
                                 "sequence_classification", task), NULL;
    bool cls = task && !strcmp(task, "sequence_classification");
    static const char *const cls_only[] = {"num_labels", "num_classes", "pad_token_id", "initializer_range",
                                           "problem_type", NULL};
    for (int i = 0; !cls && cls_only[i]; i++)
        if (ut_kv_get(opts, cls_only[i]))
            return ut_errorf(err, n, "model.%s: only read with model.task: sequence_classification (the "
                                     "causal LM predicts tokens); remove it", cls_only[i]), NULL;
    bool said;
    ut_problem problem = UT_PROBLEM_SINGLE_LABEL;
    if (cls && ut_model_problem_type(opts, &problem, &said, err, n)) return NULL;
    bool reg = problem == UT_PROBLEM_REGRESSION;
    ut_kv *merged = dir ? merged_options(opts, dir, err, n) : NULL;
    if (dir && !merged) return NULL;
    ut_model *m = gpt2_new(merged ? merged : opts, reg, seed, err, n);
    ut_kv_free(merged);
    if (m && dir && load_pretrained(m, dir, mismatched, err, n)) {
        ut_model_free(m);
        return NULL;
    }
    return m;
}

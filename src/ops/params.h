/* Named op parameters and saved buffers: where each op keeps its parameters
 * in a tensor's ip[] (integers) and fp[] (floats) slots, and the buffers its
 * forward kernel saves for backward in aux[] (arena memory of the op's
 * device). The op constructors (src/ops) set the parameters, a backend's
 * forward kernel sets the saved buffers, and every kernel reads both through
 * these accessors, so no file names a bare slot.
 * defines: ut_<op>_<param>(t) getters and ut_<op>_set_<param>(t, v) setters,
 *          for parameters and saved buffers alike. */
#ifndef UTRAIN_OP_PARAMS_H
#define UTRAIN_OP_PARAMS_H

#include <math.h>

#include "utrain/tensor.h"

#define UT_PARAM_I(op, name, slot)                                                      \
    static inline int64_t ut_##op##_##name(const ut_tensor *t) { return t->ip[slot]; }  \
    static inline void ut_##op##_set_##name(ut_tensor *t, int64_t v) { t->ip[slot] = v; }
#define UT_PARAM_F(op, name, slot)                                                      \
    static inline float ut_##op##_##name(const ut_tensor *t) { return t->fp[slot]; }    \
    static inline void ut_##op##_set_##name(ut_tensor *t, float v) { t->fp[slot] = v; }
#define UT_AUX(op, name, type, slot)                                                    \
    static inline type *ut_##op##_##name(const ut_tensor *t) { return t->aux[slot]; }   \
    static inline void ut_##op##_set_##name(ut_tensor *t, type *v) { t->aux[slot] = v; }

/* views (reshape, permute, slice): gradient strides, one per view dimension
 * (ip[0..3]), map view positions to positions in the source's gradient, which
 * starts at the gradient offset (ip[4]) */
static inline const int64_t *ut_view_grad_strides(const ut_tensor *t) { return t->ip; }
static inline void ut_view_set_grad_strides(ut_tensor *t, int ndim, const int64_t *st) {
    for (int i = 0; i < ndim; i++) t->ip[i] = st[i];
}
UT_PARAM_I(view, grad_offset, 4)

/* add, mul: b's strides in a's shape padded to 4 dims (0 where b broadcasts) */
static inline const int64_t *ut_binary_b_strides(const ut_tensor *t) { return t->ip; }
static inline void ut_binary_set_b_strides(ut_tensor *t, const int64_t *st4) {
    for (int i = 0; i < 4; i++) t->ip[i] = st4[i];
}

/* scale: out = s * x */
UT_PARAM_F(scale, s, 0)
/* dropout: drop probability p and the survivors' factor 1 / (1 - p) */
UT_PARAM_F(dropout, p, 0)
UT_PARAM_F(dropout, keep_scale, 1)
/* a tensor split by columns (tensor parallel, ut_dropout_cols): its last
 * dimension is columns [col0, col0 + cols) of cols_all (0: not split) */
UT_PARAM_I(dropout, col0, 0)
UT_PARAM_I(dropout, cols_all, 1)
/* uniform_noise: out = x + mag * (2u - 1), u uniform in [0, 1) */
UT_PARAM_F(uniform_noise, mag, 0)
/* layernorm */
UT_PARAM_F(layernorm, eps, 0)
/* rms_norm */
UT_PARAM_F(rms_norm, eps, 0)
/* embedding: the row that takes no gradient (-1: none); a vocabulary-parallel
 * part (ut_embedding_part): the table holds ids [offset, offset + rows) of a
 * vocabulary of `vocab` ids (0: the table is the whole vocabulary) */
UT_PARAM_I(embedding, padding_idx, 0)
UT_PARAM_I(embedding, offset, 1)
UT_PARAM_I(embedding, vocab, 2)
/* vocab_partials: this part's ids [v0, v0 + Vp) of a vocabulary of V; the
 * part's place among parts; the ignored target */
UT_PARAM_I(vocab_partials, v0, 0)
UT_PARAM_I(vocab_partials, vocab, 1)
UT_PARAM_I(vocab_partials, part, 2)
UT_PARAM_I(vocab_partials, parts, 3)
UT_PARAM_I(vocab_partials, ignore_index, 4)
/* vocab_ce: the vocabulary size, the ignored target */
UT_PARAM_I(vocab_ce, vocab, 0)
UT_PARAM_I(vocab_ce, ignore_index, 1)
/* vocab_ce on a device that counts its targets there: the count (device, 1) */
UT_AUX(vocab_ce, dcount, int64_t, 0)
/* conv2d */
UT_PARAM_I(conv2d, stride, 0)
UT_PARAM_I(conv2d, padding, 1)
/* 1: the output is relu of the convolution (ut_conv2d_relu): backward masks
 * its gradient by output > 0, so it reads its own output */
UT_PARAM_I(conv2d, fused_relu, 2)
/* 2: then 2x2 stride-2 max pooling too (ut_conv2d_relu_maxpool2, with
 * fused_relu): the output is the pooled one, pool_arg (uint8, one per
 * pooled element) the max's place in its window (0 to 3, row-major) */
UT_PARAM_I(conv2d, fused_pool, 3)
UT_AUX(conv2d, pool_arg, uint8_t, 0)
/* linear: the activation applied in the same op (ut_linear_gelu): 0 none,
 * UT_LINEAR_GELU the tanh-form GELU; the product's output before it is kept
 * for backward (aux pre, below) */
enum { UT_LINEAR_PLAIN = 0, UT_LINEAR_GELU = 1 };
UT_PARAM_I(linear, act, 0)
/* max_pool2d */
UT_PARAM_I(max_pool2d, kernel, 0)
UT_PARAM_I(max_pool2d, stride, 1)
/* attention */
UT_PARAM_I(attention, n_head, 0)
/* attention_masked */
UT_PARAM_I(attention_masked, n_head, 0)
UT_PARAM_I(attention_masked, causal, 1)       /* 1: query t attends keys j <= t only */
/* split by heads (tensor parallel): these heads are [head0, head0 + n_head)
 * of heads_all; dropout draws each head's mask where the whole attention's is */
UT_PARAM_I(attention_masked, head0, 2)
UT_PARAM_I(attention_masked, heads_all, 3)
UT_PARAM_F(attention_masked, p, 0)            /* dropout of the probabilities (0: none) */
UT_PARAM_F(attention_masked, keep_scale, 1)
/* attention_varlen */
UT_PARAM_I(attention_varlen, n_head, 0)
UT_PARAM_I(attention_varlen, causal, 1)       /* 1: a row attends its sequence's rows up to itself only */
UT_PARAM_I(attention_varlen, head0, 2)        /* as attention_masked's */
UT_PARAM_I(attention_varlen, heads_all, 3)
UT_PARAM_F(attention_varlen, p, 0)            /* dropout of the probabilities (0: none) */
UT_PARAM_F(attention_varlen, keep_scale, 1)
/* cross_entropy and nll_loss: the ignored target value, and (set by the
 * forward kernel) the number of targets not ignored, the mean's divisor */
UT_PARAM_I(loss, ignore_index, 0)
UT_PARAM_I(loss, count, 1)
/* label smoothing eps (0: none): each row's loss is (1 - eps) -logp[target]
 * + eps * mean over the classes of -logp, as PyTorch's label_smoothing */
UT_PARAM_F(loss, smoothing, 0)

/* ---- saved buffers (aux[]) ---- */
/* dropout: which elements survived (N bytes, 1 = kept) */
UT_AUX(dropout, keep, uint8_t, 0)
/* layernorm: each row's mean and 1 / std (N rows) */
UT_AUX(layernorm, mean, float, 0)
UT_AUX(layernorm, rstd, float, 1)
/* rms_norm: each row's 1 / sqrt(mean(x^2) + eps) (N rows) */
UT_AUX(rms_norm, rstd, float, 0)
/* linear with an activation: x W^T + b before it (the output's shape and
 * storage dtype: a 16-bit output's pre-activation is rounded to it, as the
 * separate linear's output is) */
UT_AUX(linear, pre, void, 0)
/* max_pool2d: each output's argmax within its plane (int32, like the output) */
UT_AUX(max_pool2d, argmax, int32_t, 0)
/* attention: the probabilities P (B, NH, T, T), zero above the diagonal, in
 * float32 or, under autocast, in the autocast dtype (hence void). The CUDA
 * backend's fused kernel keeps each row's log-sum-exp L (B, NH, T) float32
 * there instead (and under autocast a float32 copy of the output after it). */
UT_AUX(attention, probs, void, 0)
/* attention_masked: P (B, NH, T, T) in float32 and, with dropout, the keep
 * mask (uint8, same shape; NULL without dropout). The CUDA backend's fused
 * kernels keep each row's log-sum-exp L (B, NH, Tq) float32 in probs
 * instead (and under autocast a float32 copy of the output after it), no
 * keep mask, and the launch's window of draws (host memory) in rng, from
 * which the backward draws the same keep decisions again. */
UT_AUX(attention_masked, probs, float, 0)
UT_AUX(attention_masked, keep, uint8_t, 1)
UT_AUX(attention_masked, rng, ut_philox, 2)
/* attention_varlen: P in float32, per sequence and head an L x L block, one
 * after the other (sequence-major), and with dropout the keep mask (uint8,
 * same layout; NULL without dropout). The CUDA backend's fused kernels keep
 * in probs L (NH, N) float32, under autocast a float32 copy of the output,
 * and the checked offsets' plan (src/backend/cuda/attention_varlen.c), and
 * with dropout the launch's window of draws (host memory) in rng. */
UT_AUX(attention_varlen, probs, float, 0)
UT_AUX(attention_varlen, keep, uint8_t, 1)
UT_AUX(attention_varlen, rng, ut_philox, 2)
/* cross_entropy: exp(x - rowmax) (N, V) and 1 / each row's sum (N); NULL
 * when no gradient was asked for. Over 16-bit logits slot 0 holds each
 * row's max (N) instead: the exps are recomputed in backward. */
UT_AUX(cross_entropy, exps, float, 0)
UT_AUX(cross_entropy, row_max, float, 0)
UT_AUX(cross_entropy, inv_sum, float, 1)
/* cross_entropy and nll_loss on a device that counts the targets itself
 * (CUDA): the count (int64, 1, device memory) that backward divides by */
UT_AUX(loss, dcount, int64_t, 2)
/* linear_ce (ut_linear_cross_entropy; sources x, w, targets, b): the loss parameters
 * above, cross_entropy's saved row max (16-bit logits) or exps (float32,
 * written over the logits), inv_sum and the device count, and the buffer
 * that holds the logits (N, V) in the autocast dtype or float32 (on CUDA
 * with rows ld apart, below) and, after backward's first pass, their
 * gradient */
UT_AUX(linear_ce, logits, void, 3)
UT_PARAM_I(linear_ce, ld, 2)

/* ---- shapes the backends derive from an op's tensors alike ---- */
/* matmul: a (..., M, K) @ b (K, N) (shared_b) or (..., K, N), batch products */
typedef struct { int64_t batch, M, K, N; bool shared_b; } ut_mm_dims;
static inline ut_mm_dims ut_matmul_dims(const ut_tensor *t) {
    const ut_tensor *a = t->src[0], *b = t->src[1];
    ut_mm_dims d = {.M = a->ne[a->ndim - 2], .K = a->ne[a->ndim - 1], .N = b->ne[b->ndim - 1]};
    d.batch = ut_nelem(a) / (d.M * d.K);
    d.shared_b = b->ndim == 2;
    return d;
}

/* attention_masked: q (B, Tq, C), k and v (B, Tk, C), NH heads of hs */
typedef struct {
    int64_t B, Tq, Tk, C, NH, hs;
    float scale, ks; /* 1/sqrt(hs); keep scale 1/(1-p) */
    bool causal;
} ut_masked_dims;
static inline ut_masked_dims ut_attention_masked_dims(const ut_tensor *t) {
    ut_masked_dims d = {.B = t->ne[0], .Tq = t->ne[1], .Tk = t->src[1]->ne[1], .C = t->ne[2],
                        .NH = ut_attention_masked_n_head(t), .causal = ut_attention_masked_causal(t) != 0};
    d.hs = d.C / d.NH;
    d.scale = 1.0f / sqrtf((float)d.hs);
    d.ks = ut_attention_masked_keep_scale(t);
    return d;
}

/* attention_varlen: N rows of C = NH heads of hs in S sequences */
typedef struct {
    const int32_t *off;       /* S + 1 offsets, host memory */
    const int64_t *poff;      /* S + 1, host: where each sequence's NH L x L probability blocks start */
    const int64_t *poff_dev;  /* poff in the device's memory (on the CPU, poff itself) */
    int64_t S, N, C, NH, hs, maxL; /* maxL: the longest sequence */
    float scale, ks;          /* 1/sqrt(hs); keep scale 1/(1-p) */
    bool causal;              /* row i attends rows j <= i of its sequence */
} ut_varlen_dims;
/* attention_varlen on a device whose products are planned on the host (the
 * CUDA backend's materialised path): the forward's plan (host memory) in
 * the slot the fused kernels keep their rng in, so backward reads the
 * offsets again without waiting for the device */
UT_AUX(attention_varlen, plan, ut_varlen_dims, 2)

/* d from t and its offsets off (S + 1, host memory), with poff (S + 1, the
 * caller's host buffer) filled; poff_dev is left to the caller. -1 with t's
 * context error set, naming the offset, unless 0 = off[0] < off[1] < ... <
 * off[S] = N. */
static inline int ut_attention_varlen_dims(ut_tensor *t, const int32_t *off, int64_t S, int64_t *poff,
                                           ut_varlen_dims *d) {
    *d = (ut_varlen_dims){.off = off, .poff = poff, .S = S, .N = t->ne[0], .C = t->ne[1],
                          .NH = ut_attention_varlen_n_head(t), .ks = ut_attention_varlen_keep_scale(t),
                          .causal = ut_attention_varlen_causal(t) != 0};
    d->hs = d->C / d->NH;
    d->scale = 1.0f / sqrtf((float)d->hs);
    poff[0] = 0;
    for (int64_t s = 0; s < S; s++) {
        int64_t L = (int64_t)off[s + 1] - off[s];
        if ((s == 0 && off[0] != 0) || L < 1 || off[s + 1] > d->N || (s == S - 1 && off[S] != d->N)) {
            int64_t at = s == 0 && off[0] != 0 ? 0 : s + 1;
            ut_ctx_set_error(t->ctx, "attention_varlen: offsets[%lld] = %d breaks 0 = offsets[0] < offsets[1] "
                                     "< ... < offsets[%lld] = N = %lld", (long long)at, (int)off[at],
                             (long long)S, (long long)d->N);
            return -1;
        }
        poff[s + 1] = poff[s] + d->NH * L * L;
        d->maxL = L > d->maxL ? L : d->maxL;
    }
    return 0;
}

/* Dropout's keep mask of attention probabilities laid out as groups of NH
 * head blocks (group gi starts at local element gstart(gi) and holds NH
 * blocks of blk(gi)), when these heads are [head0, head0 + NH) of an
 * attention of NHall heads: each block is drawn at its place in the whole
 * attention's stream (the whole group starts at gstart(gi) / NH * NHall),
 * so a tensor split by heads draws exactly its slice of the whole mask;
 * unsplit, the one contiguous draw. g is the launch's generator. */
static inline void ut_heads_keep_block(const ut_philox *g, uint8_t *keep, float p, int64_t gstart, int64_t blk,
                                       int64_t NH, int64_t head0, int64_t NHall) {
    for (int64_t h = 0; h < NH; h++)
        ut_philox_keep_mask_at(g, keep + gstart + h * blk, p, (uint64_t)(gstart / NH * NHall + (head0 + h) * blk),
                               blk);
}
/* dropout's mask (N elements): unsplit, the one contiguous draw; split by
 * columns, each row's columns drawn where the whole tensor's row draws them */
static inline void ut_dropout_keep_mask(const ut_tensor *t, const ut_philox *g, uint8_t *keep, int64_t N) {
    int64_t all = ut_dropout_cols_all(t), cols = t->ne[t->ndim - 1], c0 = ut_dropout_col0(t);
    float p = ut_dropout_p(t);
    if (!all) {
        ut_philox g2 = *g;
        ut_philox_keep_mask(&g2, keep, p, N);
        return;
    }
    for (int64_t r = 0; r < N / cols; r++) ut_philox_keep_mask_at(g, keep + r * cols, p, (uint64_t)(r * all + c0), cols);
}
static inline void ut_attention_masked_keep_mask(const ut_tensor *t, const ut_philox *g, uint8_t *keep, float p,
                                                 const ut_masked_dims *d) {
    int64_t h0 = ut_attention_masked_head0(t), all = ut_attention_masked_heads_all(t);
    int64_t blk = d->Tq * d->Tk;
    if (all == d->NH) {
        ut_philox g2 = *g;
        ut_philox_keep_mask(&g2, keep, p, d->B * d->NH * blk);
        return;
    }
    for (int64_t b = 0; b < d->B; b++) ut_heads_keep_block(g, keep, p, b * d->NH * blk, blk, d->NH, h0, all);
}
static inline void ut_attention_varlen_keep_mask(const ut_tensor *t, const ut_philox *g, uint8_t *keep, float p,
                                                 const ut_varlen_dims *d) {
    int64_t h0 = ut_attention_varlen_head0(t), all = ut_attention_varlen_heads_all(t);
    if (all == d->NH) {
        ut_philox g2 = *g;
        ut_philox_keep_mask(&g2, keep, p, d->poff[d->S]);
        return;
    }
    for (int64_t s = 0; s < d->S; s++) {
        int64_t L = (int64_t)d->off[s + 1] - d->off[s];
        ut_heads_keep_block(g, keep, p, d->poff[s], L * L, d->NH, h0, all);
    }
}

#undef UT_PARAM_I
#undef UT_PARAM_F
#undef UT_AUX
#endif

/* utrain ops: each records itself on the context's tape and has a backward.
 * defines: ut_linear, ut_matmul, ut_add, ut_mul, ut_scale, activations, softmax
 *          family, losses, ut_layernorm, ut_rms_norm, ut_embedding, ut_conv2d, ut_max_pool2d,
 *          ut_dropout, ut_attention, reductions, views (reshape, flatten,
 *          permute, transpose, slice, contiguous), ut_op_name, ut_op_check,
 *          ut_op_error.
 *
 * Conventions: shapes are outermost first (PyTorch order). Every op takes the
 * context first, returns a new tensor, and on bad input (shape, dtype, device)
 * returns NULL with ut_ctx_error(ctx) naming the op and the shapes; an op given
 * a NULL input returns NULL, so a model can check once at the end.
 * Float inputs are F32; index inputs (targets, token ids) are I32. */
#ifndef UTRAIN_OPS_H
#define UTRAIN_OPS_H

#include "utrain/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- matrix products (OpenBLAS sgemm) ---- */
/* y = x W^T + b. x (..., C), w (OC, C) as in torch.nn.Linear, b (OC) or NULL -> (..., OC) */
ut_tensor *ut_linear(ut_ctx *ctx, ut_tensor *x, ut_tensor *w, ut_tensor *b);
/* ut_gelu(ut_linear(x, w, b)) in one op where the device's kernels take it
 * (every backend does): the product's output goes to GELU inside the op
 * (on a GPU, cuBLASLt's GELU epilogue where it has one), and backward
 * multiplies by GELU's derivative on its way into the products. The CPU
 * and sim give the two ops' values and gradients bit for bit; the GPU's
 * epilogue takes GELU of the product before it is rounded to 16 bits
 * (docs/engine.md). UT_LINEAR_GELU=0 makes it the two ops. */
ut_tensor *ut_linear_gelu(ut_ctx *ctx, ut_tensor *x, ut_tensor *w, ut_tensor *b);
/* a (..., M, K) @ b (..., K, N) -> (..., M, N); batch dims equal, or b 2-D (K, N). */
ut_tensor *ut_matmul(ut_ctx *ctx, ut_tensor *a, ut_tensor *b);

/* ---- elementwise ---- */
/* a + b and a * b, where b broadcasts to a's shape: b's dims, aligned to a's
 * innermost dims, are each equal to a's or 1 (a bias (C), a conv bias (C,1,1),
 * a per-row scale (N,1), or the same shape). */
ut_tensor *ut_add(ut_ctx *ctx, ut_tensor *a, ut_tensor *b);
ut_tensor *ut_mul(ut_ctx *ctx, ut_tensor *a, ut_tensor *b);
ut_tensor *ut_scale(ut_ctx *ctx, ut_tensor *a, float s);          /* s * a */
ut_tensor *ut_relu(ut_ctx *ctx, ut_tensor *a);
ut_tensor *ut_gelu(ut_ctx *ctx, ut_tensor *a);                    /* tanh approximation */
ut_tensor *ut_gelu_erf(ut_ctx *ctx, ut_tensor *a);                /* exact: 0.5 x (1 + erf(x/sqrt 2)) */
ut_tensor *ut_tanh(ut_ctx *ctx, ut_tensor *a);
ut_tensor *ut_sigmoid(ut_ctx *ctx, ut_tensor *a);
/* Inverted dropout: zeroes with probability p and scales survivors by 1/(1-p)
 * in training mode; identity otherwise. Masks come from the context's RNG. */
ut_tensor *ut_dropout(ut_ctx *ctx, ut_tensor *a, float p);
/* The same on a tensor whose last dimension is columns [col0, col0 + its
 * size) of a tensor of cols_all columns split over tensor-parallel ranks:
 * each row's mask is drawn where the whole tensor's row draws it, so the
 * parts draw the whole tensor's mask. */
ut_tensor *ut_dropout_cols(ut_ctx *ctx, ut_tensor *a, float p, int64_t col0, int64_t cols_all);
/* In training mode a + mag * (2u - 1), u uniform in [0, 1) from the
 * context's RNG (the draws dropout's whole-tensor mask would take, so every
 * backend adds the same noise); identity otherwise. The gradient passes
 * through unchanged. NEFTune's embedding noise (ut_neftune, nn.h). */
ut_tensor *ut_uniform_noise(ut_ctx *ctx, ut_tensor *a, float mag);

/* ---- softmax and losses (over the last dimension) ---- */
ut_tensor *ut_softmax(ut_ctx *ctx, ut_tensor *a);
ut_tensor *ut_log_softmax(ut_ctx *ctx, ut_tensor *a);
/* Mean over the targets that are not ignore_index of -log softmax(logits)[target].
 * logits (..., V), targets I32 (...). Fused softmax + loss. Scalar (1); 0 (with a
 * zero gradient) when every target is ignored, where PyTorch gives nan. */
ut_tensor *ut_cross_entropy(ut_ctx *ctx, ut_tensor *logits, ut_tensor *targets, int ignore_index);
/* The same with label smoothing eps in [0, 1] (ut_cross_entropy takes the
 * context's, ut_ctx_set_label_smoothing): each row's loss is (1 - eps)
 * -log softmax(logits)[target] + eps * the mean over the V classes of
 * -log softmax(logits), as torch's cross_entropy(label_smoothing=eps). */
ut_tensor *ut_cross_entropy_smoothed(ut_ctx *ctx, ut_tensor *logits, ut_tensor *targets, int ignore_index,
                                     float eps);
/* ut_cross_entropy(ut_linear(x, w, b), targets, ignore_index) in one op
 * (with the context's label smoothing): the logits (..., V) exist only inside
 * it, and backward writes their gradient over them, so a language model's
 * head holds one N x V buffer instead of the logits and their gradient (on a
 * GPU also in the products' padded rows, with no copies between them). The
 * CPU and sim give the two ops' loss and gradients bit for bit. x (..., C),
 * w (V, C), b (V) or NULL, targets I32 (...) -> scalar (1). UT_LINEAR_CE=0
 * makes it the two ops (docs/engine.md). */
ut_tensor *ut_linear_cross_entropy(ut_ctx *ctx, ut_tensor *x, ut_tensor *w, ut_tensor *b, ut_tensor *targets,
                                   int ignore_index);
/* Cross-entropy over a vocabulary split into `parts` equal parts, in two
 * ops with a sum over the parts between them (ut_tp_cross_entropy in dist.h
 * puts them together), so no rank ever holds the whole logits:
 * ut_vocab_partials: logits (..., Vp) of ids [v0, v0 + Vp) of a vocabulary
 *   of `vocab`, targets I32 (...) -> (N, parts, 2), N the rows, zero except
 *   [n, part] = (logsumexp of row n's logits, its target's logit when this
 *   part holds the target, else 0);
 * ut_vocab_ce: those summed over the parts (every part's slot filled) ->
 *   the mean over targets that are not ignore_index of logsumexp over the
 *   parts' logsumexps minus the target's logit: cross_entropy's value.
 *   A target outside [0, vocab) is an error. */
ut_tensor *ut_vocab_partials(ut_ctx *ctx, ut_tensor *logits, ut_tensor *targets, int64_t v0, int64_t vocab,
                             int part, int parts, int ignore_index);
ut_tensor *ut_vocab_ce(ut_ctx *ctx, ut_tensor *partials, ut_tensor *targets, int64_t vocab, int ignore_index);
/* Same on log-probabilities: mean of -logp[target] over non-ignored targets
 * (with the context's label smoothing eps: (1 - eps) -logp[target] + eps *
 * the mean of -logp over the classes). */
ut_tensor *ut_nll_loss(ut_ctx *ctx, ut_tensor *logp, ut_tensor *targets, int ignore_index);
ut_tensor *ut_nll_loss_smoothed(ut_ctx *ctx, ut_tensor *logp, ut_tensor *targets, int ignore_index, float eps);
/* mean((a - b)^2), a and b the same shape. Scalar (1). */
ut_tensor *ut_mse(ut_ctx *ctx, ut_tensor *a, ut_tensor *b);

/* ---- normalisation, lookup ---- */
/* x (..., C), w and b (C) */
ut_tensor *ut_layernorm(ut_ctx *ctx, ut_tensor *x, ut_tensor *w, ut_tensor *b, float eps);
/* RMS normalisation over the last dimension, as T5's T5LayerNorm: x (..., C),
 * w (C) -> w * x * rsqrt(mean(x^2 over C) + eps), no mean subtracted, no
 * bias, the mean of squares in float32. eps >= 0. */
ut_tensor *ut_rms_norm(ut_ctx *ctx, ut_tensor *x, ut_tensor *w, float eps);
/* idx I32 (...), table (V, C) -> (..., C). An index outside [0, V) is an error. */
ut_tensor *ut_embedding(ut_ctx *ctx, ut_tensor *idx, ut_tensor *table);
/* The same where row padding_idx (or -1: none) takes no gradient, as
 * torch's nn.Embedding(padding_idx=...) (BART's token embedding). */
ut_tensor *ut_embedding_pad(ut_ctx *ctx, ut_tensor *idx, ut_tensor *table, int padding_idx);
/* A vocabulary-parallel part of an embedding: table (Vp, C) holds the rows
 * of ids [offset, offset + Vp) of a vocabulary of `vocab` ids; an id of
 * another part gives a zero row (the sum over the parts, ut_tp_embedding in
 * dist.h, is the whole lookup) and takes no gradient; an id outside
 * [0, vocab) is an error; padding_idx (an id of the whole vocabulary, or
 * -1) takes no gradient, as in ut_embedding_pad. */
ut_tensor *ut_embedding_part(ut_ctx *ctx, ut_tensor *idx, ut_tensor *table, int64_t offset, int64_t vocab,
                             int padding_idx);

/* ---- convolution, pooling ---- */
/* x (B, C, H, W), w (OC, C, KH, KW), b (OC) or NULL -> (B, OC, OH, OW) */
ut_tensor *ut_conv2d(ut_ctx *ctx, ut_tensor *x, ut_tensor *w, ut_tensor *b, int stride, int padding);
/* ut_relu(ut_conv2d(...)), the same values and gradients, in one op where
 * the device's kernels apply the ReLU as they write the output and mask the
 * gradient as they read it (the CPU: no pass over the activation of its
 * own, no second activation and gradient in memory); elsewhere, and under
 * autocast, the two ops. */
ut_tensor *ut_conv2d_relu(ut_ctx *ctx, ut_tensor *x, ut_tensor *w, ut_tensor *b, int stride, int padding);
/* ut_max_pool2d(ut_conv2d_relu(...), 2, 2), the same values and gradients,
 * in one op on the same devices as ut_conv2d_relu: the convolution's
 * output is pooled as it is written (Winograd's 2x2 output tiles are the
 * pooling windows) and never stored whole; backward rebuilds its gradient
 * from the pooled one where it reads it. */
ut_tensor *ut_conv2d_relu_maxpool2(ut_ctx *ctx, ut_tensor *x, ut_tensor *w, ut_tensor *b, int stride, int padding);
/* The height and width of a conv2d op's convolution (before a fused
 * pooling: t's own for the others) into hw; false for any other tensor. */
bool ut_conv2d_out_hw(const ut_tensor *t, int64_t hw[2]);
/* For a conv2d op's output t: which algorithm its device runs it on
 * ("Winograd F(2x2, 3x3)", "im2col + sgemm"); NULL for any other tensor. */
const char *ut_conv2d_path(const ut_tensor *t);
/* x (B, C, H, W) -> (B, C, OH, OW), window k, stride s (floor mode, no padding) */
ut_tensor *ut_max_pool2d(ut_ctx *ctx, ut_tensor *x, int k, int stride);

/* ---- attention ---- */
/* Causal multi-head self-attention, fused. qkv (B, T, 3C) laid out [q | k | v]
 * along the last dim, heads of size C/NH -> (B, T, C) before the output projection. */
ut_tensor *ut_attention(ut_ctx *ctx, ut_tensor *qkv, int n_head);
/* Bidirectional multi-head attention (BERT): q, k, v (B, T, C), heads of size
 * C/NH; mask (B, T) F32 added to the scores of each key (0 attends, a large
 * negative value masks padding) or NULL -> (B, T, C). No causal mask; the mask
 * takes no gradient. dropout: drop probability of the attention probabilities
 * in training mode (BERT's attention_probs_dropout_prob), 0 for none. */
ut_tensor *ut_attention_masked(ut_ctx *ctx, ut_tensor *q, ut_tensor *k, ut_tensor *v,
                               ut_tensor *mask, int n_head, float dropout);
/* The same with q (B, Tq, C) and k, v (B, Tk, C) of another length (BART's
 * cross-attention: keys from the encoder), mask (B, Tk) or NULL, and causal
 * (Tq == Tk only): query t attends keys j <= t, as a decoder's self-attention. */
ut_tensor *ut_attention_qkv(ut_ctx *ctx, ut_tensor *q, ut_tensor *k, ut_tensor *v, ut_tensor *mask,
                            int n_head, bool causal, float dropout);
/* Bidirectional attention over packed sequences without padding (unpadded
 * BERT): q, k, v (N, C) hold the rows of S sequences one after the other,
 * offsets I32 (S + 1) where each starts (offsets[0] = 0, offsets[S] = N, each
 * sequence at least one row); each row attends to the rows of its own
 * sequence (causal: to those up to itself, GPT-2) -> (N, C). dropout as
 * ut_attention_masked. */
ut_tensor *ut_attention_varlen(ut_ctx *ctx, ut_tensor *q, ut_tensor *k, ut_tensor *v, ut_tensor *offsets,
                               int n_head, bool causal, float dropout);
/* ut_attention_qkv and ut_attention_varlen for heads [head0, head0 +
 * n_head) of an attention of heads_all heads split over tensor-parallel
 * ranks: the same results, and with dropout each head's mask drawn where
 * the whole attention draws it, so the parts of a split model draw the
 * whole model's masks. */
ut_tensor *ut_attention_qkv_heads(ut_ctx *ctx, ut_tensor *q, ut_tensor *k, ut_tensor *v, ut_tensor *mask,
                                  int n_head, bool causal, float dropout, int head0, int heads_all);
ut_tensor *ut_attention_varlen_heads(ut_ctx *ctx, ut_tensor *q, ut_tensor *k, ut_tensor *v, ut_tensor *offsets,
                                     int n_head, bool causal, float dropout, int head0, int heads_all);

/* ---- reductions ---- */
ut_tensor *ut_sum(ut_ctx *ctx, ut_tensor *a);    /* scalar (1) */
ut_tensor *ut_mean(ut_ctx *ctx, ut_tensor *a);   /* scalar (1) */

/* ---- views and copies ---- */
/* Same data, new shape (element count must match); a non-contiguous input is
 * copied first. One dimension may be -1 (inferred). */
ut_tensor *ut_reshape(ut_ctx *ctx, ut_tensor *a, int ndim, const int64_t *ne);
/* Merges dims start_dim.. into one, as torch.flatten(x, start_dim). */
ut_tensor *ut_flatten(ut_ctx *ctx, ut_tensor *a, int start_dim);
/* Strided views sharing data. perm lists the source dim for each output dim. */
ut_tensor *ut_permute(ut_ctx *ctx, ut_tensor *a, const int *perm);
ut_tensor *ut_transpose(ut_ctx *ctx, ut_tensor *a, int d0, int d1);
/* Elements [start, end) of dimension dim. */
ut_tensor *ut_slice(ut_ctx *ctx, ut_tensor *a, int dim, int64_t start, int64_t end);
/* a's rows then b's: the two along dimension 0 (the other dimensions
 * equal), as torch.cat((a, b)). Float32 unless both share a 16-bit dtype. */
ut_tensor *ut_concat_rows(ut_ctx *ctx, ut_tensor *a, ut_tensor *b);
/* Contiguous copy (a no-op returning a when already contiguous). */
ut_tensor *ut_contiguous(ut_ctx *ctx, ut_tensor *a);

/* Input checks for code that composes ops (layers, models): true if every
 * input is non-NULL, F32 unless listed in i32_mask (bit i: input i is I32) and
 * on the context's device; otherwise sets the context's error naming op (and
 * returns false at once if an error is already set). ut_op_error sets the
 * error "op: why (inputs: <dtype and shape of each>)". */
bool ut_op_check(ut_ctx *ctx, const char *op, int n, ut_tensor *const *src, unsigned i32_mask);
void ut_op_error(ut_ctx *ctx, const char *op, int n, ut_tensor *const *src, const char *why);

/* Name of an op id (t->op), "leaf" for UT_OP_NONE. */
const char *ut_op_name(int op);
int ut_op_count(void);

#ifdef __cplusplus
}
#endif
#endif

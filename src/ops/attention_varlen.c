/* Multi-head attention over packed sequences of different lengths
 * (unpadded BERT; causal: unpadded GPT-2 classification): the rows of S sequences stacked without padding,
 *   q, k, v (N, C), offsets I32 (S + 1): sequence s is rows
 *   [offsets[s], offsets[s + 1]), offsets[0] = 0, offsets[S] = N, each
 *   sequence at least one row;
 *   per sequence and head, out = softmax(q k^T / sqrt(hs)) v -> (N, C).
 * A row attends to every row of its own sequence (causal: to the rows of its
 * sequence up to itself) and to nothing else, which
 * is what ut_attention_masked computes for the real tokens of a padded batch
 * with its padding mask, without the padded rows and keys. In training mode
 * with dropout p > 0 the probabilities are dropped (kept ones scaled by
 * 1/(1-p)), the keep masks drawn from the context's generator in sequence,
 * head, row order. The offsets take no gradient; bad offsets fail the
 * forward with an error naming the first bad entry.
 * Saves the probabilities P (per sequence and head, L x L, one after the
 * other) and the keep mask: ut_attention_varlen_probs, _keep (the CUDA
 * backend's fused kernels save other things there and check the offsets
 * on the device, reporting bad ones at the next read: src/ops/params.h).
 * Parameters: ut_attention_varlen_n_head, _causal, _p, _keep_scale (src/ops/params.h).
 * Kernels: src/backend/cpu/attention_varlen.c. */
#include "internal.h"
#include "params.h"

static bool shapes_ok(ut_tensor *const *src) {
    const ut_tensor *q = src[0], *off = src[3];
    if (q->ndim != 2 || q->ne[1] < 1 || off->ndim != 1 || off->ne[0] < 2) return false;
    for (int i = 1; i < 3; i++)
        if (src[i]->ndim != 2 || src[i]->ne[0] != q->ne[0] || src[i]->ne[1] != q->ne[1]) return false;
    return true;
}

ut_tensor *ut_attention_varlen(ut_ctx *ctx, ut_tensor *q, ut_tensor *k, ut_tensor *v, ut_tensor *offsets,
                               int n_head, bool causal, float dropout) {
    return ut_attention_varlen_heads(ctx, q, k, v, offsets, n_head, causal, dropout, 0, n_head);
}

ut_tensor *ut_attention_varlen_heads(ut_ctx *ctx, ut_tensor *q, ut_tensor *k, ut_tensor *v, ut_tensor *offsets,
                                     int n_head, bool causal, float dropout, int head0, int heads_all) {
    ut_tensor *src[4] = {q, k, v, offsets};
    if (!ut_op_check(ctx, "attention_varlen", 4, src, 1u << 3)) return NULL;
    if (!shapes_ok(src)) {
        ut_op_error(ctx, "attention_varlen", 4, src, "expected q, k, v (N, C) and offsets I32 (S + 1), S >= 1");
        return NULL;
    }
    if (n_head < 1 || q->ne[1] % n_head != 0) {
        ut_op_error(ctx, "attention_varlen", 4, src,
                    ut_fmt("C = %lld is not divisible by n_head = %d", (long long)q->ne[1], n_head));
        return NULL;
    }
    if (!(dropout >= 0.0f && dropout < 1.0f)) {
        ut_op_error(ctx, "attention_varlen", 4, src, ut_fmt("dropout %g is outside [0, 1)", (double)dropout));
        return NULL;
    }
    if (head0 < 0 || head0 + n_head > heads_all) {
        ut_op_error(ctx, "attention_varlen", 4, src,
                    ut_fmt("heads [%d, %d) are not heads of %d", head0, head0 + n_head, heads_all));
        return NULL;
    }
    for (int i = 0; i < 3; i++) src[i] = ut_contiguous(ctx, src[i]);
    if (!ut_is_contiguous(offsets)) {
        ut_op_error(ctx, "attention_varlen", 4, src, "offsets must be contiguous");
        return NULL;
    }
    ut_tensor *t = ut_op_new(ctx, UT_OP_ATTENTION_VARLEN, UT_F32, 2, q->ne, 4, src);
    if (!t) return NULL;
    ut_attention_varlen_set_n_head(t, n_head);
    ut_attention_varlen_set_causal(t, causal);
    ut_attention_varlen_set_head0(t, head0);
    ut_attention_varlen_set_heads_all(t, heads_all);
    float p = ctx->training ? dropout : 0.0f;
    ut_attention_varlen_set_p(t, p);
    ut_attention_varlen_set_keep_scale(t, 1.0f / (1.0f - p));
    return ut_op_run(t);
}

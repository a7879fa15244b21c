/* Bidirectional multi-head attention with separate q, k, v and an additive
 * key mask, as BERT's self-attention before its output projection:
 *   q, k, v (B, T, C), each viewed (B, NH, T, hs), hs = C / NH;
 *   out = softmax(q k^T / sqrt(hs) + mask[b, None, None, :]) v -> (B, T, C).
 * mask (B, T) F32 is added to every query's scores for key t (0 to attend, a
 * large negative number for padding: Hugging Face's (1 - attention_mask) *
 * finfo(float32).min); NULL attends everywhere. No causal mask. The mask takes
 * no gradient. In training mode with dropout p > 0 the probabilities are
 * dropped as torch's dropout after the softmax does (kept ones scaled by
 * 1/(1-p)), the keep mask drawn from the context's generator.
 * Saves the probabilities P (B, NH, T, T) and the keep mask (uint8, same
 * shape): ut_attention_masked_probs, ut_attention_masked_keep.
 * Parameters: ut_attention_masked_n_head, _p, _keep_scale (src/ops/params.h).
 * Kernels: src/backend/cpu/attention_masked.c. */
#include "internal.h"
#include "params.h"

static bool shapes_ok(ut_tensor *const *src, bool has_mask) {
    const ut_tensor *q = src[0];
    if (q->ndim != 3 || q->ne[2] < 1) return false;
    for (int i = 1; i < 3; i++)
        if (src[i]->ndim != 3 || memcmp(src[i]->ne, q->ne, 3 * sizeof q->ne[0])) return false;
    return !has_mask || (src[3]->ndim == 2 && src[3]->ne[0] == q->ne[0] && src[3]->ne[1] == q->ne[1]);
}

ut_tensor *ut_attention_masked(ut_ctx *ctx, ut_tensor *q, ut_tensor *k, ut_tensor *v,
                               ut_tensor *mask, int n_head, float dropout) {
    ut_tensor *src[4] = {q, k, v, mask};
    int nsrc = mask ? 4 : 3;
    if (!ut_op_check(ctx, "attention_masked", nsrc, src, 0)) return NULL;
    if (!shapes_ok(src, mask != NULL)) {
        ut_op_error(ctx, "attention_masked", nsrc, src, "expected q, k, v (B, T, C) and mask (B, T)");
        return NULL;
    }
    if (n_head < 1 || q->ne[2] % n_head != 0) {
        ut_op_error(ctx, "attention_masked", nsrc, src,
                    ut_fmt("C = %lld is not divisible by n_head = %d", (long long)q->ne[2], n_head));
        return NULL;
    }
    if (!(dropout >= 0.0f && dropout < 1.0f)) {
        ut_op_error(ctx, "attention_masked", nsrc, src, ut_fmt("dropout %g is outside [0, 1)", (double)dropout));
        return NULL;
    }
    for (int i = 0; i < nsrc; i++) src[i] = ut_contiguous(ctx, src[i]);
    ut_tensor *t = ut_op_new(ctx, UT_OP_ATTENTION_MASKED, UT_F32, 3, q->ne, nsrc, src);
    if (!t) return NULL;
    ut_attention_masked_set_n_head(t, n_head);
    float p = ctx->training ? dropout : 0.0f;
    ut_attention_masked_set_p(t, p);
    ut_attention_masked_set_keep_scale(t, 1.0f / (1.0f - p));
    return ut_op_run(t);
}

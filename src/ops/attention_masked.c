/* Multi-head attention with separate q, k, v, an additive key mask and an
 * optional causal mask: BERT's and BART's encoder self-attention, BART's
 * decoder self-attention (causal) and its cross-attention (keys from the
 * encoder, Tk != Tq), each before its output projection:
 *   q (B, Tq, C), k, v (B, Tk, C), each viewed (B, NH, T, hs), hs = C / NH;
 *   out = softmax(q k^T / sqrt(hs) + mask[b, None, None, :] + causal) v -> (B, Tq, C).
 * mask (B, Tk) F32 is added to every query's scores for key j (0 to attend, a
 * large negative number for padding: Hugging Face's (1 - attention_mask) *
 * finfo(float32).min); NULL attends everywhere. causal (Tq == Tk) gives query
 * t's keys j > t probability 0. The mask takes no gradient. In training mode
 * with dropout p > 0 the probabilities are dropped as torch's dropout after
 * the softmax does (kept ones scaled by 1/(1-p)), the keep mask drawn from
 * the context's generator.
 * Saves the probabilities P (B, NH, Tq, Tk) and the keep mask (uint8, same
 * shape): ut_attention_masked_probs, ut_attention_masked_keep (the CUDA
 * backend's fused kernels save other things there: src/ops/params.h).
 * Parameters: ut_attention_masked_n_head, _causal, _p, _keep_scale (src/ops/params.h).
 * Kernels: src/backend/cpu/attention_masked.c. */
#include "internal.h"
#include "params.h"

static bool shapes_ok(ut_tensor *const *src, bool has_mask, bool causal) {
    const ut_tensor *q = src[0], *k = src[1], *v = src[2];
    if (q->ndim != 3 || q->ne[2] < 1 || k->ndim != 3 || v->ndim != 3) return false;
    if (memcmp(k->ne, v->ne, 3 * sizeof k->ne[0]) || k->ne[0] != q->ne[0] || k->ne[2] != q->ne[2]) return false;
    if (causal && k->ne[1] != q->ne[1]) return false;
    return !has_mask || (src[3]->ndim == 2 && src[3]->ne[0] == q->ne[0] && src[3]->ne[1] == k->ne[1]);
}

ut_tensor *ut_attention_masked(ut_ctx *ctx, ut_tensor *q, ut_tensor *k, ut_tensor *v,
                               ut_tensor *mask, int n_head, float dropout) {
    return ut_attention_qkv(ctx, q, k, v, mask, n_head, false, dropout);
}

ut_tensor *ut_attention_qkv(ut_ctx *ctx, ut_tensor *q, ut_tensor *k, ut_tensor *v, ut_tensor *mask,
                            int n_head, bool causal, float dropout) {
    return ut_attention_qkv_heads(ctx, q, k, v, mask, n_head, causal, dropout, 0, n_head);
}

ut_tensor *ut_attention_qkv_heads(ut_ctx *ctx, ut_tensor *q, ut_tensor *k, ut_tensor *v, ut_tensor *mask,
                                  int n_head, bool causal, float dropout, int head0, int heads_all) {
    ut_tensor *src[4] = {q, k, v, mask};
    int nsrc = mask ? 4 : 3;
    if (!ut_op_check(ctx, "attention_masked", nsrc, src, 0)) return NULL;
    if (!shapes_ok(src, mask != NULL, causal)) {
        ut_op_error(ctx, "attention_masked", nsrc, src,
                    causal ? "expected q, k, v (B, T, C) and mask (B, T) (causal: one length)"
                           : "expected q (B, Tq, C), k and v (B, Tk, C) and mask (B, Tk)");
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
    if (head0 < 0 || head0 + n_head > heads_all) {
        ut_op_error(ctx, "attention_masked", nsrc, src,
                    ut_fmt("heads [%d, %d) are not heads of %d", head0, head0 + n_head, heads_all));
        return NULL;
    }
    for (int i = 0; i < nsrc; i++) src[i] = ut_contiguous(ctx, src[i]);
    ut_tensor *t = ut_op_new(ctx, UT_OP_ATTENTION_MASKED, UT_F32, 3, q->ne, nsrc, src);
    if (!t) return NULL;
    ut_attention_masked_set_n_head(t, n_head);
    ut_attention_masked_set_causal(t, causal);
    ut_attention_masked_set_head0(t, head0);
    ut_attention_masked_set_heads_all(t, heads_all);
    float p = ctx->training ? dropout : 0.0f;
    ut_attention_masked_set_p(t, p);
    ut_attention_masked_set_keep_scale(t, 1.0f / (1.0f - p));
    return ut_op_run(t);
}

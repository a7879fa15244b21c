/* Fused causal multi-head self-attention, as nanoGPT's CausalSelfAttention
 * before its output projection:
 *   q, k, v = qkv.split(C, dim=2), each viewed (B, NH, T, hs), hs = C / NH
 *   out = softmax(mask(q k^T / sqrt(hs))) v, heads concatenated -> (B, T, C).
 * Saves the probabilities P (B, NH, T, T) (ut_attention_probs) (zero above the diagonal).
 * Parameter: ut_attention_n_head (src/ops/params.h).
 * Kernels: src/backend/cpu/attention.c. */
#include "internal.h"
#include "params.h"

ut_tensor *ut_attention(ut_ctx *ctx, ut_tensor *qkv, int n_head) {
    if (!ut_op_check(ctx, "attention", 1, &qkv, 0)) return NULL;
    if (qkv->ndim != 3 || qkv->ne[2] % 3 != 0 || qkv->ne[2] < 3) {
        ut_op_error(ctx, "attention", 1, &qkv, "expected qkv (B, T, 3C) with C >= 1");
        return NULL;
    }
    int64_t C = qkv->ne[2] / 3;
    if (n_head < 1 || C % n_head != 0) {
        ut_op_error(ctx, "attention", 1, &qkv,
                    ut_fmt("C = %lld is not divisible by n_head = %d", (long long)C, n_head));
        return NULL;
    }
    qkv = ut_contiguous(ctx, qkv);
    int64_t ne[3] = {qkv->ne[0], qkv->ne[1], C};
    ut_tensor *t = ut_op_new(ctx, UT_OP_ATTENTION, UT_F32, 3, ne, 1, &qkv);
    if (!t) return NULL;
    ut_attention_set_n_head(t, n_head);
    return ut_op_run(t);
}

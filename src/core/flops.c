/* Model FLOPs: the floating-point operations of the matrix products a
 * forward and backward pass computes, counted op by op as they run, for the
 * trainer's throughput and MFU (model FLOPs utilization) and the op
 * profile's TFLOP/s.
 *
 * What counts (the convention of PaLM's MFU, llm.c's and FlashAttention's):
 * the products only, 2 FLOPs per multiply-add; elementwise ops, norms,
 * softmax and the optimizer are left out. Per op, with M the rows:
 *   linear     x (M, K), W (N, K): forward 2MKN; backward 2MKN for x's
 *              gradient and 2MKN for W's, each where that source takes one
 *   matmul     a (.., M, K) @ b (.., K, N): the same per batch entry
 *   conv2d     forward 2 B OC OH OW C KH KW (OH, OW before a fused pool);
 *              backward that again per source with a gradient
 *   attention  forward 4 x (query-key pairs attended) x C over the heads
 *              (q k^T and p v: C is the width of the heads this op
 *              computes); a causal pair count is T (T + 1) / 2 per sequence,
 *              padding keys count (the kernels compute them); backward
 *              twice the forward (dV, dP, dQ, dK; the recomputed scores
 *              of a flash kernel are not model FLOPs)
 * Packed sequences count each sequence's own pairs, from the offsets'
 * values: a copy kept when they were uploaded from the host
 * (ut_tensor_from_async), or the tensor itself in host memory; offsets
 * made on a device are counted as S sequences of equal length.
 * A checkpointed block's recompute is not counted (its forward was), its
 * backward is. */
#include <string.h>

#include "internal.h"
#include "../ops/params.h"

/* A copy of small int32 uploads that can be packed-sequence offsets (from 0,
 * never decreasing), keyed by their device data, for counting pairs without
 * reading device memory. */
void ut_flops_note_upload(ut_ctx *ctx, const ut_tensor *t, const void *host) {
    if (!t || !host || t->dtype != UT_I32 || t->ndim != 1 || t->ne[0] < 2 || t->ne[0] > UT_FLOPS_SHADOW_MAX) return;
    const int32_t *v = host;
    if (v[0] != 0) return;
    for (int64_t i = 1; i < t->ne[0]; i++)
        if (v[i] < v[i - 1]) return;
    int i = ctx->nshadow < UT_FLOPS_SHADOWS ? ctx->nshadow++ : ctx->shadow_next++ % UT_FLOPS_SHADOWS;
    ctx->shadow[i].data = t->data;
    ctx->shadow[i].n = t->ne[0];
    memcpy(ctx->shadow[i].v, host, (size_t)t->ne[0] * sizeof(int32_t));
}

void ut_flops_forget_uploads(ut_ctx *ctx) { ctx->nshadow = ctx->shadow_next = 0; }

static const int32_t *offsets_host(const ut_tensor *off) {
    const ut_ctx *ctx = off->ctx;
    if (ctx)
        for (int i = 0; i < ctx->nshadow; i++)
            if (ctx->shadow[i].data == off->data && ctx->shadow[i].n == off->ne[0]) return ctx->shadow[i].v;
    const ut_backend *be = ut_backend_get(off->device);
    return be && be->host_memory && off->data ? off->data : NULL;
}

static double pairs(double L, bool causal) { return causal ? L * (L + 1) / 2 : L * L; }

/* query-key pairs over the sequences of a packed batch of N rows */
static double varlen_pairs(const ut_tensor *t) {
    const ut_tensor *off = t->src[3];
    bool causal = ut_attention_varlen_causal(t) != 0;
    int64_t S = off->ne[0] - 1, N = t->ne[0];
    const int32_t *o = offsets_host(off);
    if (!o) return (double)S * pairs((double)N / (double)S, causal);
    double p = 0;
    for (int64_t s = 0; s < S; s++) {
        int64_t L = (int64_t)o[s + 1] - o[s]; /* bad offsets are the kernels' to refuse: count none */
        if (L > 0 && L <= N) p += pairs((double)L, causal);
    }
    return p;
}

static bool grad_of(const ut_tensor *t, int k) { return t->src[k] && t->src[k]->requires_grad; }

double ut_op_flops(const ut_tensor *t, bool backward) {
    double f = 0, per = 1; /* per: the backward's multiple of the forward */
    switch (t->op) {
    case UT_OP_LINEAR:
    case UT_OP_LINEAR_CE: { /* with cross-entropy: its products (the loss's row passes are not counted) */
        const ut_tensor *x = t->src[0], *w = t->src[1];
        f = 2.0 * (double)ut_nelem(x) * (double)w->ne[0];
        per = grad_of(t, 0) + grad_of(t, 1);
        break;
    }
    case UT_OP_MATMUL: {
        const ut_tensor *a = t->src[0], *b = t->src[1];
        f = 2.0 * (double)ut_nelem(a) * (double)b->ne[b->ndim - 1];
        per = grad_of(t, 0) + grad_of(t, 1);
        break;
    }
    case UT_OP_CONV2D: {
        const ut_tensor *x = t->src[0], *w = t->src[1];
        int64_t hw[2];
        ut_conv2d_out_hw(t, hw);
        f = 2.0 * (double)x->ne[0] * (double)w->ne[0] * (double)(hw[0] * hw[1]) *
            (double)(w->ne[1] * w->ne[2] * w->ne[3]);
        per = grad_of(t, 0) + grad_of(t, 1);
        break;
    }
    case UT_OP_ATTENTION: /* causal over one length: out (B, T, C) */
        f = 4.0 * (double)t->ne[0] * pairs((double)t->ne[1], true) * (double)t->ne[2];
        per = grad_of(t, 0) ? 2 : 0;
        break;
    case UT_OP_ATTENTION_MASKED: /* q (B, Tq, C), k (B, Tk, C) */
        f = 4.0 * (double)t->ne[0] * (double)t->ne[2] *
            (ut_attention_masked_causal(t) ? pairs((double)t->ne[1], true)
                                           : (double)t->ne[1] * (double)t->src[1]->ne[1]);
        per = grad_of(t, 0) || grad_of(t, 1) || grad_of(t, 2) ? 2 : 0;
        break;
    case UT_OP_ATTENTION_VARLEN: /* q (N, C) */
        f = 4.0 * varlen_pairs(t) * (double)t->ne[1];
        per = grad_of(t, 0) || grad_of(t, 1) || grad_of(t, 2) ? 2 : 0;
        break;
    default:
        return 0;
    }
    return backward ? per * f : f;
}

void ut_flops_count(ut_ctx *ctx, const ut_tensor *t, bool backward) {
    if (!backward && ctx->recomputing) return;
    double f = ut_op_flops(t, backward);
    if (f > 0) ctx->flops += f;
}

double ut_ctx_flops(const ut_ctx *ctx) { return ctx ? ctx->flops : 0; }

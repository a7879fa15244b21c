/* CUDA glue of ATTENTION_MASKED: multi-head attention with separate q (B, Tq, C),
 * k, v (B, Tk, C), an additive key mask (B, Tk) or none, optionally causal,
 * with dropout of the probabilities (semantics: src/backend/cpu/attention_masked.c).
 * Two paths, chosen alike by forward and backward (ut_cuda_flash_attn_masked_ok):
 *  - fused (flash_attention.h; head size <= 128; under autocast with head
 *    size 64 on the tensor cores): P and the keep mask are never
 *    materialised. Saved: each query row's log-sum-exp L (B, NH, Tq) (and
 *    under autocast a float32 copy of out after it) in the probs slot,
 *    and with dropout the launch's window of draws (k->rng, host memory) in
 *    the rng slot, from which the backward's kernels draw every keep decision
 *    again, each the draw the CPU takes for that element.
 *  - materialised (larger heads, a device short of shared memory, or
 *    UT_CUDA_ATTN=unfused): per pair (b, h) the products are sgemm calls on
 *    the head's columns (row stride C); P (B, NH, Tq, Tk) and, with dropout,
 *    the keep mask (drawn from the context's generator as the CPU draws it:
 *    N = B NH Tq Tk draws, in P's order) are saved for backward. */
#include <math.h>

#include "cuda.h"
#include "attention.h"
#include "ew.h"
#include "flash_attention.h"
#include "../../ops/params.h"

static bool fused(const ut_masked_dims *d) { return ut_cuda_flash_attn_masked_ok(d->B, d->Tq, d->Tk, d->C, d->NH); }
/* the fused path on the tensor cores: under autocast (q, k, v's float32
 * values are then exact in its dtype), head size 64 */
static bool tensor_cores(const ut_tensor *t, const ut_masked_dims *d) {
    return ut_dtype_is16(t->autocast) && ut_cuda_flash_attn_tc_masked_ok(d->B, d->Tq, d->Tk, d->C, d->NH);
}

/* The fused kernels' masking: t's mask, causal flag and dropout, its draws
 * from the window rng (NULL: no dropout) */
static ut_flash_masking masking_of(const ut_tensor *t, const ut_masked_dims *d, const ut_philox *rng) {
    ut_flash_masking mk = {.mask = t->src[3] ? t->src[3]->data : NULL, .causal = d->causal};
    float p = ut_attention_masked_p(t);
    if (rng && p > 0.0f) { /* as ut_cuda_dropout_mask's arguments in the materialised path */
        int64_t blk = d->Tq * d->Tk, all = ut_attention_masked_heads_all(t);
        bool whole = all == d->NH;
        mk.drop = (ut_flash_drop){.p = p, .ks = d->ks, .key = rng->key, .stream = rng->stream, .offset = rng->offset,
                                  .all = whole ? 0 : all * blk, .cols = whole ? 0 : d->NH * blk,
                                  .c0 = whole ? 0 : ut_attention_masked_head0(t) * blk};
    }
    return mk;
}

/* The fused path's saved buffer: L (B, NH, Tq), then, under autocast, a
 * float32 copy of out (B, Tq, C) from a multiple of 4 floats (its backward
 * needs out in float32, and under autocast t->data is 16-bit) */
static bool keeps_out(const ut_tensor *t) { return t->autocast != UT_F32; }
static int64_t l_floats(const ut_masked_dims *d) { return (d->B * d->NH * d->Tq + 3) / 4 * 4; }

/* x (B, T, C) (q or its gradient: T = Tq; k, v: T = Tk) as a pair operand (T x hs) */
static ut_attn_mat heads(const float *x, int64_t T, const ut_masked_dims *d) {
    return (ut_attn_mat){.p = x, .ld = d->C, .sb = T * d->C, .sh = d->hs};
}

/* P-shaped x (B, NH, Tq, Tk) as a pair operand (Tq x Tk) */
static ut_attn_mat probs_mat(const float *x, const ut_masked_dims *d) {
    return (ut_attn_mat){.p = x, .ld = d->Tk, .sb = d->NH * d->Tq * d->Tk, .sh = d->Tq * d->Tk};
}

static ut_attn_rows rows_of(const ut_masked_dims *d, const float *mask) {
    return (ut_attn_rows){.rows = d->B * d->NH * d->Tq, .Tq = d->Tq, .Tk = d->Tk, .NH = d->NH, .mask = mask,
                          .scale = d->scale, .causal = d->causal};
}

/* P = softmax(scale Q K^T + mask [+ causal]); out = Pd V, Pd = P * keep / (1 - p)
 * with dropout, P without. On float32 tensors (autocast's copies included). */
static void fwd_f32(ut_tensor *t, UT_KCTX) {
    ut_masked_dims d = ut_attention_masked_dims(t);
    const float *q = t->src[0]->data, *kd = t->src[1]->data, *v = t->src[2]->data;
    const float *mask = t->src[3] ? t->src[3]->data : NULL;
    int64_t N = d.B * d.NH * d.Tq * d.Tk;
    float p = ut_attention_masked_p(t);
    ut_attention_masked_set_keep(t, NULL);
    ut_attention_masked_set_rng(t, NULL);
    bool tc = tensor_cores(t, &d);
    if (tc || fused(&d)) {
        int64_t nL = l_floats(&d), nO = keeps_out(t) ? d.B * d.Tq * d.C : 0;
        float *L = ut_kalloc(k, (size_t)(nL + nO) * sizeof(float));
        ut_attention_masked_set_probs(t, L);
        ut_philox *rng = NULL;
        if (p > 0.0f) {
            rng = ut_khost(k, sizeof *rng);
            *rng = k->rng;
            ut_attention_masked_set_rng(t, rng);
        }
        ut_flash_masking mk = masking_of(t, &d, rng);
        if (tc)
            ut_cuda_flash_attn_tc_masked_fwd(t->data, nO ? L + nL : NULL, L, q, kd, v, d.B, d.Tq, d.Tk, d.C, d.NH, &mk,
                                             (int)t->autocast);
        else ut_cuda_flash_attn_masked_fwd(t->data, nO ? L + nL : NULL, L, q, kd, v, d.B, d.Tq, d.Tk, d.C, d.NH, &mk);
        return;
    }
    float *P = ut_kalloc(k, (size_t)N * sizeof(float));
    ut_attention_masked_set_probs(t, P);
    uint8_t *keep = NULL;
    if (p > 0.0f) { /* N draws from the context's stream, in P's order, as the CPU; a part of the heads
                       * (tensor parallelism) takes the whole tensor's draws of its heads: each batch row's
                       * NH x Tq x Tk of the whole row's NHall x Tq x Tk, from head head0 on */
        keep = ut_kalloc(k, (size_t)N);
        int64_t blk = d.Tq * d.Tk, all = ut_attention_masked_heads_all(t);
        bool whole = all == d.NH;
        ut_cuda_dropout_mask(keep, N, k->rng.key, k->rng.stream, k->rng.offset, whole ? 0 : all * blk,
                             whole ? 0 : d.NH * blk, whole ? 0 : ut_attention_masked_head0(t) * blk, p);
        ut_attention_masked_set_keep(t, keep);
    }
    ut_cuda_attn_gemm(false, true, d.Tq, d.Tk, d.hs, 1.0f, heads(q, d.Tq, &d), heads(kd, d.Tk, &d), 0.0f, P, d.Tk,
                      d.NH * d.Tq * d.Tk, d.Tq * d.Tk, d.B, d.NH);
    ut_cuda_attn_softmax_fwd(P, rows_of(&d, mask));
    const float *A = P;
    if (keep) {
        float *pd = ut_kalloc(k, (size_t)N * sizeof(float));
        ut_cuda_attn_drop(pd, P, keep, d.ks, N);
        A = pd;
    }
    ut_cuda_attn_gemm(false, false, d.Tq, d.hs, d.Tk, 1.0f, probs_mat(A, &d), heads(v, d.Tk, &d), 0.0f, t->data,
                      d.C, d.Tq * d.C, d.hs, d.B, d.NH);
}

/* dv += Pd^T g; dPd = g V^T; dP = dPd * keep * ks; dS = P (dP - rowsum(P dP));
 * dq += scale dS K; dk += scale dS^T Q (each gradient only when asked for).
 * On float32 tensors. */
static void bwd_f32(ut_tensor *t, UT_KCTX) {
    ut_tensor *qt = t->src[0], *kt = t->src[1], *vt = t->src[2];
    float *dq = qt->requires_grad ? qt->grad : NULL, *dk = kt->requires_grad ? kt->grad : NULL,
          *dv = vt->requires_grad ? vt->grad : NULL;
    if (!dq && !dk && !dv) return;
    ut_masked_dims d = ut_attention_masked_dims(t);
    const float *q = qt->data, *kd = kt->data, *v = vt->data, *P = ut_attention_masked_probs(t);
    bool tc = tensor_cores(t, &d);
    if (tc || fused(&d)) { /* the probs slot holds L; D (B, NH, Tq): each row's sum of g * out */
        const float *out = keeps_out(t) ? P + l_floats(&d) : t->data;
        float *D = ut_kalloc(k, (size_t)(d.B * d.NH * d.Tq) * sizeof(float));
        ut_flash_masking mk = masking_of(t, &d, ut_attention_masked_rng(t));
        if (tc)
            ut_cuda_flash_attn_tc_masked_bwd(dq, dk, dv, D, t->grad, out, q, kd, v, P, d.B, d.Tq, d.Tk, d.C, d.NH, &mk,
                                             (int)t->autocast);
        else ut_cuda_flash_attn_masked_bwd(dq, dk, dv, D, t->grad, out, q, kd, v, P, d.B, d.Tq, d.Tk, d.C, d.NH, &mk);
        return;
    }
    const uint8_t *keep = ut_attention_masked_keep(t);
    int64_t N = d.B * d.NH * d.Tq * d.Tk;
    ut_attn_mat g = heads(t->grad, d.Tq, &d);
    if (dv) {
        const float *Pd = P;
        if (keep) {
            float *w = ut_kalloc(k, (size_t)N * sizeof(float));
            ut_cuda_attn_drop(w, P, keep, d.ks, N);
            Pd = w;
        }
        ut_cuda_attn_gemm(true, false, d.Tk, d.hs, d.Tq, 1.0f, probs_mat(Pd, &d), g, 1.0f, dv, d.C, d.Tk * d.C,
                          d.hs, d.B, d.NH);
    }
    if (!dq && !dk) return;
    float *gP = ut_kalloc(k, (size_t)N * sizeof(float));
    ut_cuda_attn_gemm(false, true, d.Tq, d.Tk, d.hs, 1.0f, g, heads(v, d.Tk, &d), 0.0f, gP, d.Tk,
                      d.NH * d.Tq * d.Tk, d.Tq * d.Tk, d.B, d.NH);
    ut_cuda_attn_softmax_bwd(gP, P, keep, d.ks, rows_of(&d, NULL));
    if (dq)
        ut_cuda_attn_gemm(false, false, d.Tq, d.hs, d.Tk, d.scale, probs_mat(gP, &d), heads(kd, d.Tk, &d), 1.0f, dq,
                          d.C, d.Tq * d.C, d.hs, d.B, d.NH);
    if (dk)
        ut_cuda_attn_gemm(true, false, d.Tk, d.hs, d.Tq, d.scale, probs_mat(gP, &d), heads(q, d.Tq, &d), 1.0f, dk,
                          d.C, d.Tk * d.C, d.hs, d.B, d.NH);
}

/* The op table gives ATTENTION_MASKED UT_KCAP_NATIVE_16 (table.c), as
 * ATTENTION (attention.c): the mma.sync kernels take the tensors as stored
 * under autocast with head size 64 when out is stored in the autocast type,
 * q, k and v are three tensors stored alike (all in it or all float32: each
 * is a product's output in BERT and BART) and the mask is float32 (rounded
 * as it is read, as autocast's copy of it would be): the bits of the
 * float32 copies, without them (flash_attention.h,
 * ut_cuda_flash_attn_tc_masked_fwd16). Everything else runs the float32
 * forms above through core's copies, as without the capability. */
static bool native(const ut_tensor *t, const ut_masked_dims *d) {
    return ut_cuda_attn_qkv_alike(t) && (!t->src[3] || t->src[3]->dtype == UT_F32) &&
           ut_cuda_flash_attn_tc_native() && tensor_cores(t, d);
}

void ut_attention_masked_fwd_cuda(ut_tensor *t, UT_KCTX) {
    ut_masked_dims d = ut_attention_masked_dims(t);
    if (!native(t, &d)) {
        if (ut_cuda_attn_copies(t)) ut_lowp_forward(t, fwd_f32, k);
        else fwd_f32(t, k);
        return;
    }
    /* saved: L, then out's float32 values, as fwd_f32 under autocast */
    ut_attention_masked_set_keep(t, NULL);
    ut_attention_masked_set_rng(t, NULL);
    int64_t nL = l_floats(&d), nO = d.B * d.Tq * d.C;
    float *L = ut_kalloc(k, (size_t)(nL + nO) * sizeof(float));
    ut_attention_masked_set_probs(t, L);
    ut_philox *rng = NULL;
    if (ut_attention_masked_p(t) > 0.0f) {
        rng = ut_khost(k, sizeof *rng);
        *rng = k->rng;
        ut_attention_masked_set_rng(t, rng);
    }
    ut_flash_masking mk = masking_of(t, &d, rng);
    ut_cuda_flash_attn_tc_masked_fwd16(t->data, 1, L + nL, L, t->src[0]->data, t->src[1]->data, t->src[2]->data,
                                       t->src[0]->dtype != UT_F32, d.B, d.Tq, d.Tk, d.C, d.NH, &mk,
                                       (int)t->autocast);
}

void ut_attention_masked_bwd_cuda(ut_tensor *t, UT_KCTX) {
    ut_tensor *qt = t->src[0], *kt = t->src[1], *vt = t->src[2];
    if (!qt->requires_grad && !kt->requires_grad && !vt->requires_grad) return;
    ut_masked_dims d = ut_attention_masked_dims(t);
    if (!native(t, &d)) {
        if (ut_cuda_attn_copies(t)) ut_lowp_backward(t, bwd_f32, k);
        else bwd_f32(t, k);
        return;
    }
    /* t->grad is stored as t (16-bit), each source's gradient as the source */
    const float *L = ut_attention_masked_probs(t);
    float *D = ut_kalloc(k, (size_t)(d.B * d.NH * d.Tq) * sizeof(float));
    ut_flash_masking mk = masking_of(t, &d, ut_attention_masked_rng(t));
    bool x16 = qt->dtype != UT_F32;
    ut_cuda_flash_attn_tc_masked_bwd16(qt->requires_grad ? qt->grad : NULL, kt->requires_grad ? kt->grad : NULL,
                                       vt->requires_grad ? vt->grad : NULL, x16, D, t->grad, 1, L + l_floats(&d),
                                       qt->data, kt->data, vt->data, x16, L, d.B, d.Tq, d.Tk, d.C, d.NH, &mk,
                                       (int)t->autocast);
}

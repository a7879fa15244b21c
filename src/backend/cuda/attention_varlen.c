/* CUDA glue of ATTENTION_VARLEN: multi-head attention over packed sequences,
 * q, k, v, out (N, C), sequence s the rows [off[s], off[s + 1]) of the int32
 * offsets (semantics: src/backend/cpu/attention_varlen.c).
 * Two paths, chosen alike by forward and backward (ut_cuda_flash_attn_varlen_ok):
 *  - fused (flash_attention.h; head size <= 128; under autocast with head
 *    size 64 on the tensor cores): tiles of 64 packed rows, the pairs of
 *    different sequences masked; the offsets stay on the device
 *    (a plan kernel checks them and raises the device error flag, reported
 *    at the next host read, if they are bad), so nothing waits. Saved in the
 *    probs slot: L (NH, N), under autocast a float32 copy of out, then the
 *    plan (poff, S + 1 int64, and the bad flag); with dropout the launch's
 *    window of draws in the rng slot, from which the kernels draw every keep
 *    decision where the CPU draws it.
 *  - materialised (larger heads, a device short of shared memory, or
 *    UT_CUDA_ATTN=unfused): P holds, per sequence and then head, an L x L
 *    block (causal: zero above the diagonal); with dropout the keep mask has
 *    P's layout and is drawn as the CPU draws it (one pass over all of P, in
 *    P's order). The products' sizes are the sequences' lengths, so the host
 *    plans them: the offsets are copied to the host with a synchronous copy
 *    (a wait on the compute stream) in forward, and the plan is kept for
 *    backward (ut_attention_varlen_plan), which waits for nothing. Per
 *    sequence, each product is one sgemm batched over the heads. */
#include <math.h>

#include "cuda.h"
#include "attention.h"
#include "ew.h"
#include "flash_attention.h"
#include "../../ops/params.h"

/* ---- fused ---- */

typedef struct {
    int64_t N, C, NH, S;
    float ks;
    bool causal;
} fused_dims;

static fused_dims fused_dims_of(const ut_tensor *t) {
    fused_dims d = {.N = t->ne[0], .C = t->ne[1], .NH = ut_attention_varlen_n_head(t), .S = t->src[3]->ne[0] - 1,
                    .ks = ut_attention_varlen_keep_scale(t), .causal = ut_attention_varlen_causal(t) != 0};
    return d;
}

static bool fused(const fused_dims *d) { return ut_cuda_flash_attn_varlen_ok(d->N, d->S, d->C, d->NH); }
/* the fused path on the tensor cores: under autocast, head size 64 */
static bool tensor_cores(const ut_tensor *t, const fused_dims *d) {
    return ut_dtype_is16(t->autocast) && ut_cuda_flash_attn_tc_varlen_ok(d->N, d->S, d->C, d->NH);
}

/* The saved buffer, in floats: L (NH, N), the float32 copy of out (N, C;
 * under autocast, where t->data is 16-bit), poff (S + 1 int64), bad (an
 * int), each part from a multiple of 4 floats */
typedef struct {
    int64_t l, out, poff, bad, total;
} saved_layout;

static int64_t round4(int64_t n) { return (n + 3) / 4 * 4; }

static saved_layout layout_of(const ut_tensor *t, const fused_dims *d) {
    saved_layout s = {.l = 0, .out = round4(d->NH * d->N)};
    s.poff = s.out + (t->autocast != UT_F32 ? round4(d->N * d->C) : 0);
    s.bad = s.poff + round4(2 * (d->S + 1));
    s.total = s.bad + 4;
    return s;
}

static ut_flash_masking masking_of(const ut_tensor *t, const fused_dims *d, float *saved, const saved_layout *s,
                                   const ut_philox *rng) {
    ut_flash_masking mk = {.causal = d->causal, .off = t->src[3]->data, .poff = (const int64_t *)(saved + s->poff),
                           .bad = (const int *)(saved + s->bad), .S = d->S};
    float p = ut_attention_varlen_p(t);
    if (rng && p > 0.0f) { /* a part of the heads draws the whole tensor's draws of its heads */
        int64_t all = ut_attention_varlen_heads_all(t);
        mk.drop = (ut_flash_drop){.p = p, .ks = d->ks, .key = rng->key, .stream = rng->stream, .offset = rng->offset,
                                  .all = all == d->NH ? 0 : all, .c0 = ut_attention_varlen_head0(t)};
    }
    return mk;
}

/* nat: the tensors as stored (native(), below); else float32 ones */
static void fused_fwd(ut_tensor *t, const fused_dims *d, bool nat, const ut_kctx *k) {
    saved_layout s = layout_of(t, d);
    float *saved = ut_kalloc(k, (size_t)s.total * sizeof(float));
    ut_attention_varlen_set_probs(t, saved);
    ut_cuda_flash_attn_varlen_plan((int64_t *)(saved + s.poff), (int *)(saved + s.bad), t->src[3]->data, d->S, d->N,
                                   d->NH);
    ut_philox *rng = NULL;
    if (ut_attention_varlen_p(t) > 0.0f) {
        rng = ut_khost(k, sizeof *rng);
        *rng = k->rng;
        ut_attention_varlen_set_rng(t, rng);
    }
    ut_flash_masking mk = masking_of(t, d, saved, &s, rng);
    float *copy = s.out < s.poff ? saved + s.out : NULL;
    const float *q = t->src[0]->data, *kd = t->src[1]->data, *v = t->src[2]->data;
    if (nat)
        ut_cuda_flash_attn_tc_masked_fwd16(t->data, 1, copy, saved, q, kd, v, t->src[0]->dtype != UT_F32, 1, d->N,
                                           d->N, d->C, d->NH, &mk, (int)t->autocast);
    else if (tensor_cores(t, d))
        ut_cuda_flash_attn_tc_masked_fwd(t->data, copy, saved, q, kd, v, 1, d->N, d->N, d->C, d->NH, &mk,
                                         (int)t->autocast);
    else ut_cuda_flash_attn_masked_fwd(t->data, copy, saved, q, kd, v, 1, d->N, d->N, d->C, d->NH, &mk);
}

/* nat: the tensors as stored, the gradients dq, dk, dv as their sources */
static void fused_bwd(ut_tensor *t, const fused_dims *d, void *dq, void *dk, void *dv, bool nat, const ut_kctx *k) {
    saved_layout s = layout_of(t, d);
    float *saved = ut_attention_varlen_probs(t);
    const float *out = s.out < s.poff ? saved + s.out : t->data;
    float *D = ut_kalloc(k, (size_t)(d->NH * d->N) * sizeof(float));
    ut_flash_masking mk = masking_of(t, d, saved, &s, ut_attention_varlen_rng(t));
    const float *q = t->src[0]->data, *kd = t->src[1]->data, *v = t->src[2]->data;
    bool x16 = t->src[0]->dtype != UT_F32;
    if (nat)
        ut_cuda_flash_attn_tc_masked_bwd16(dq, dk, dv, x16, D, t->grad, 1, out, q, kd, v, x16, saved, 1, d->N, d->N,
                                           d->C, d->NH, &mk, (int)t->autocast);
    else if (tensor_cores(t, d))
        ut_cuda_flash_attn_tc_masked_bwd(dq, dk, dv, D, t->grad, out, q, kd, v, saved, 1, d->N, d->N, d->C, d->NH,
                                         &mk, (int)t->autocast);
    else ut_cuda_flash_attn_masked_bwd(dq, dk, dv, D, t->grad, out, q, kd, v, saved, 1, d->N, d->N, d->C, d->NH, &mk);
}

/* ---- materialised ---- */

/* The dimensions, the offsets on the host and P's block starts (host and
 * device; host buffers from the context's host arena); -1 with the context's
 * error set when the offsets are not 0 = off[0] < off[1] < ... < off[S] = N. */
static int plan_of(ut_tensor *t, ut_varlen_dims *d, const ut_kctx *k) {
    ut_tensor *offs = t->src[3];
    int64_t S = offs->ne[0] - 1;
    int32_t *off = ut_khost(k, (size_t)(S + 1) * sizeof *off);
    ut_cuda_attn_offsets_to_host(off, offs->data, S + 1); /* synchronous: see the file's comment */
    int64_t *poff = ut_khost(k, (size_t)(S + 1) * sizeof *poff);
    if (ut_attention_varlen_dims(t, off, S, poff, d)) return -1;
    int64_t *dpoff = ut_kalloc(k, (size_t)(S + 1) * sizeof *dpoff);
    ut_cuda_upload(dpoff, poff, (size_t)(S + 1) * sizeof *poff);
    d->poff_dev = dpoff;
    return 0;
}

static ut_attn_rows rows_of(const ut_varlen_dims *d, const ut_tensor *t) {
    return (ut_attn_rows){.rows = d->NH * d->N, .Tk = d->maxL, .NH = d->NH, .off = t->src[3]->data,
                          .poff = d->poff_dev, .S = d->S, .scale = d->scale, .causal = d->causal};
}

/* Per sequence s (L rows from off[s]) and head h: P = softmax(causal(scale Q K^T));
 * out = Pd V, Pd = P * keep / (1 - p) with dropout, P without. On float32
 * tensors (autocast's copies included). */
static void fwd_f32(ut_tensor *t, UT_KCTX) {
    ut_varlen_dims d;
    ut_attention_varlen_set_probs(t, NULL);
    ut_attention_varlen_set_keep(t, NULL);
    ut_attention_varlen_set_rng(t, NULL);
    fused_dims fd = fused_dims_of(t);
    if (tensor_cores(t, &fd) || fused(&fd)) {
        fused_fwd(t, &fd, false, k);
        return;
    }
    if (plan_of(t, &d, k)) return;
    ut_varlen_dims *kept = ut_khost(k, sizeof *kept); /* its pointers are the context's arenas', as long-lived */
    *kept = d;
    ut_attention_varlen_set_plan(t, kept);
    const float *q = t->src[0]->data, *kd = t->src[1]->data, *v = t->src[2]->data;
    float *out = t->data;
    int64_t np = d.poff[d.S], C = d.C, hs = d.hs;
    float p = ut_attention_varlen_p(t);
    float *P = ut_kalloc(k, (size_t)np * sizeof(float));
    ut_attention_varlen_set_probs(t, P);
    uint8_t *keep = NULL;
    if (p > 0.0f) { /* np draws from the context's stream, in P's order, as the CPU (a part of the heads:
                       * the whole tensor's draws of its heads), computed on the device */
        keep = ut_kalloc(k, (size_t)np);
        int64_t all = ut_attention_varlen_heads_all(t);
        if (all == d.NH)
            ut_cuda_dropout_mask(keep, np, k->rng.key, k->rng.stream, k->rng.offset, 0, 0, 0, p);
        else
            ut_cuda_varlen_dropout_mask(keep, np, d.poff_dev, d.S, d.NH, all, ut_attention_varlen_head0(t), k->rng.key,
                                        k->rng.stream, k->rng.offset, p);
        ut_attention_varlen_set_keep(t, keep);
    }
    for (int64_t s = 0; s < d.S; s++) {
        int64_t L = (int64_t)d.off[s + 1] - d.off[s], rows = (int64_t)d.off[s] * C;
        ut_cuda_sgemm(false, true, L, L, hs, 1.0f, q + rows, C, hs, kd + rows, C, hs, 0.0f, P + d.poff[s], L, L * L,
                      d.NH);
    }
    ut_cuda_attn_softmax_fwd(P, rows_of(&d, t));
    const float *A = P;
    if (keep) {
        float *pd = ut_kalloc(k, (size_t)np * sizeof(float));
        ut_cuda_attn_drop(pd, P, keep, d.ks, np);
        A = pd;
    }
    for (int64_t s = 0; s < d.S; s++) {
        int64_t L = (int64_t)d.off[s + 1] - d.off[s], rows = (int64_t)d.off[s] * C;
        ut_cuda_sgemm(false, false, L, hs, L, 1.0f, A + d.poff[s], L, L * L, v + rows, C, hs, 0.0f, out + rows, C,
                      hs, d.NH);
    }
}

/* Per sequence and head: dv += Pd^T g; dPd = g V^T; dP = dPd * keep * ks;
 * dS = P (dP - rowsum(P dP)); dq += scale dS K; dk += scale dS^T Q (each
 * gradient only when asked for). On float32 tensors. */
static void bwd_f32(ut_tensor *t, UT_KCTX) {
    ut_tensor *qt = t->src[0], *kt = t->src[1], *vt = t->src[2];
    float *dq = qt->requires_grad ? qt->grad : NULL, *dk = kt->requires_grad ? kt->grad : NULL,
          *dv = vt->requires_grad ? vt->grad : NULL;
    if (!dq && !dk && !dv) return;
    fused_dims fd = fused_dims_of(t);
    if (tensor_cores(t, &fd) || fused(&fd)) {
        fused_bwd(t, &fd, dq, dk, dv, false, k);
        return;
    }
    ut_varlen_dims d = *ut_attention_varlen_plan(t); /* the forward's */
    const float *q = qt->data, *kd = kt->data, *v = vt->data, *g = t->grad, *P = ut_attention_varlen_probs(t);
    const uint8_t *keep = ut_attention_varlen_keep(t);
    int64_t np = d.poff[d.S], C = d.C, hs = d.hs;
    if (dv) {
        const float *Pd = P;
        if (keep) {
            float *w = ut_kalloc(k, (size_t)np * sizeof(float));
            ut_cuda_attn_drop(w, P, keep, d.ks, np);
            Pd = w;
        }
        for (int64_t s = 0; s < d.S; s++) {
            int64_t L = (int64_t)d.off[s + 1] - d.off[s], rows = (int64_t)d.off[s] * C;
            ut_cuda_sgemm(true, false, L, hs, L, 1.0f, Pd + d.poff[s], L, L * L, g + rows, C, hs, 1.0f, dv + rows,
                          C, hs, d.NH);
        }
    }
    if (!dq && !dk) return;
    float *gP = ut_kalloc(k, (size_t)np * sizeof(float));
    for (int64_t s = 0; s < d.S; s++) {
        int64_t L = (int64_t)d.off[s + 1] - d.off[s], rows = (int64_t)d.off[s] * C;
        ut_cuda_sgemm(false, true, L, L, hs, 1.0f, g + rows, C, hs, v + rows, C, hs, 0.0f, gP + d.poff[s], L, L * L,
                      d.NH);
    }
    ut_cuda_attn_softmax_bwd(gP, P, keep, d.ks, rows_of(&d, t));
    for (int64_t s = 0; s < d.S; s++) {
        int64_t L = (int64_t)d.off[s + 1] - d.off[s], rows = (int64_t)d.off[s] * C;
        if (dq)
            ut_cuda_sgemm(false, false, L, hs, L, d.scale, gP + d.poff[s], L, L * L, kd + rows, C, hs, 1.0f,
                          dq + rows, C, hs, d.NH);
        if (dk)
            ut_cuda_sgemm(true, false, L, hs, L, d.scale, gP + d.poff[s], L, L * L, q + rows, C, hs, 1.0f,
                          dk + rows, C, hs, d.NH);
    }
}

/* The op table gives ATTENTION_VARLEN UT_KCAP_NATIVE_16 (table.c), as
 * ATTENTION_MASKED (attention_masked.c): the mma.sync kernels take the
 * tensors as stored under autocast with head size 64 when out is stored in
 * the autocast type and q, k and v are three tensors stored alike (all in it
 * or all float32), with the bits of the float32 copies; everything else runs
 * the float32 forms above through core's copies. (The offsets are int32:
 * autocast never copies them.) */
static bool native(const ut_tensor *t, const fused_dims *d) {
    return ut_cuda_attn_qkv_alike(t) && ut_cuda_flash_attn_tc_native() && tensor_cores(t, d);
}

void ut_attention_varlen_fwd_cuda(ut_tensor *t, UT_KCTX) {
    fused_dims fd = fused_dims_of(t);
    if (native(t, &fd)) {
        ut_attention_varlen_set_keep(t, NULL);
        ut_attention_varlen_set_rng(t, NULL);
        fused_fwd(t, &fd, true, k);
    } else if (ut_cuda_attn_copies(t)) {
        ut_lowp_forward(t, fwd_f32, k);
    } else {
        fwd_f32(t, k);
    }
}

void ut_attention_varlen_bwd_cuda(ut_tensor *t, UT_KCTX) {
    ut_tensor *qt = t->src[0], *kt = t->src[1], *vt = t->src[2];
    if (!qt->requires_grad && !kt->requires_grad && !vt->requires_grad) return;
    fused_dims fd = fused_dims_of(t);
    if (native(t, &fd))
        fused_bwd(t, &fd, qt->requires_grad ? qt->grad : NULL, kt->requires_grad ? kt->grad : NULL,
                  vt->requires_grad ? vt->grad : NULL, true, k);
    else if (ut_cuda_attn_copies(t)) ut_lowp_backward(t, bwd_f32, k);
    else bwd_f32(t, k);
}

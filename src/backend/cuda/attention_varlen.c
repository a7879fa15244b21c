/* CUDA glue of ATTENTION_VARLEN: multi-head attention over packed sequences,
 * q, k, v, out (N, C), sequence s the rows [off[s], off[s + 1]) of the int32
 * offsets (semantics: src/backend/cpu/attention_varlen.c). P holds, per
 * sequence and then head, an L x L block (causal: zero above the diagonal);
 * with dropout the keep mask has P's layout and is drawn as the CPU draws it
 * (one pass over all of P, in P's order).
 * The products' sizes are the sequences' lengths, so the host plans them: the
 * offsets (device memory) are copied to the host with a synchronous copy (a
 * wait on the compute stream) in forward and again in backward. This is the
 * one op that waits on the device; acceptable for now. Per sequence, each
 * product is one sgemm batched over the heads. */
#include <math.h>

#include "cuda.h"
#include "attention.h"
#include "ew.h"
#include "../../ops/params.h"

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
 * out = Pd V, Pd = P * keep / (1 - p) with dropout, P without */
void ut_attention_varlen_fwd_cuda(ut_tensor *t, UT_KCTX) {
    ut_varlen_dims d;
    ut_attention_varlen_set_probs(t, NULL);
    ut_attention_varlen_set_keep(t, NULL);
    if (plan_of(t, &d, k)) return;
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
 * gradient only when asked for) */
void ut_attention_varlen_bwd_cuda(ut_tensor *t, UT_KCTX) {
    ut_tensor *qt = t->src[0], *kt = t->src[1], *vt = t->src[2];
    float *dq = qt->requires_grad ? qt->grad : NULL, *dk = kt->requires_grad ? kt->grad : NULL,
          *dv = vt->requires_grad ? vt->grad : NULL;
    if (!dq && !dk && !dv) return;
    ut_varlen_dims d;
    if (plan_of(t, &d, k)) return;
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

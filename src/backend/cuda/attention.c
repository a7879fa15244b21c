/* CUDA glue of ATTENTION, fused causal self-attention over packed qkv (B, T, 3C)
 * (semantics: src/backend/cpu/attention.c), and ut_cuda_attn_gemm, the
 * per-(batch, head) products that the attention ops share (attention.h).
 * Two paths, chosen alike by forward and backward (ut_cuda_flash_attn_ok):
 *  - fused (flash_attention.h; head size <= 128): P is never materialised;
 *    under autocast with head size 64 its products run on the tensor cores
 *    (flash_attention_tc.cu; UT_CUDA_ATTN=fp32: the float32 kernels).
 *    Saved buffer ut_attention_probs (aux slot 0, a void *) then holds, on
 *    CUDA, each query row's log-sum-exp L (B, NH, T) in float32 (and under
 *    autocast a float32 copy of out after it), NOT the probabilities P:
 *    nothing on CUDA but this file's backward reads it.
 *  - materialised (larger heads, or a device short of shared memory): per
 *    pair (b, h) the scores Q K^T and the products with P are sgemm calls on
 *    the head's columns of qkv (row stride 3C); P (B, NH, T, T) is saved in
 *    float32, zero above the diagonal.
 * And a third, cuDNN's fused flash attention (cudnn_attn.h), for 16-bit
 * attention under autocast in training by default, or always with
 * UT_CUDA_ATTN=cudnn (below, cudnn_wanted). */
#include <math.h>


#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cuda.h"
#include "attention.h"
#include "cudnn_attn.h"
#include "ew.h"
#include "flash_attention.h"
#include "flat.h"
#include "../../ops/params.h"

void ut_cuda_attn_gemm(bool transA, bool transB, int64_t m, int64_t n, int64_t k, float alpha, ut_attn_mat A,
                       ut_attn_mat B, float beta, float *c, int64_t ldc, int64_t csb, int64_t csh, int64_t nb,
                       int64_t nh) {
    if (nb <= nh) {
        for (int64_t b = 0; b < nb; b++)
            ut_cuda_sgemm(transA, transB, m, n, k, alpha, A.p + b * A.sb, A.ld, A.sh, B.p + b * B.sb, B.ld, B.sh,
                          beta, c + b * csb, ldc, csh, nh);
    } else {
        for (int64_t h = 0; h < nh; h++)
            ut_cuda_sgemm(transA, transB, m, n, k, alpha, A.p + h * A.sh, A.ld, A.sb, B.p + h * B.sh, B.ld, B.sb,
                          beta, c + h * csh, ldc, csb, nb);
    }
}

typedef struct {
    int64_t B, T, C, NH, hs;
    float scale;
} attn_dims;

static attn_dims dims_of(const ut_tensor *t) {
    attn_dims d = {.B = t->ne[0], .T = t->ne[1], .C = t->ne[2], .NH = ut_attention_n_head(t)};
    d.hs = d.C / d.NH;
    d.scale = 1.0f / sqrtf((float)d.hs);
    return d;
}

/* q, k or v (which = 0, 1, 2) of qkv x (B, T, 3C) as a pair operand (T x hs) */
static ut_attn_mat qkv_part(const float *x, int which, const attn_dims *d) {
    return (ut_attn_mat){.p = x + which * d->C, .ld = 3 * d->C, .sb = d->T * 3 * d->C, .sh = d->hs};
}

/* P (B, NH, T, T) as a pair operand */
static ut_attn_mat probs_mat(const float *P, const attn_dims *d) {
    return (ut_attn_mat){.p = P, .ld = d->T, .sb = d->NH * d->T * d->T, .sh = d->T * d->T};
}

static ut_attn_rows rows_of(const attn_dims *d) {
    return (ut_attn_rows){.rows = d->B * d->NH * d->T, .Tq = d->T, .Tk = d->T, .NH = d->NH, .scale = d->scale,
                          .causal = 1};
}

static bool fused(const attn_dims *d) { return ut_cuda_flash_attn_ok(d->B, d->T, d->C, d->NH); }
/* the fused path on the tensor cores: under autocast (qkv's float32 values
 * are then exact in its dtype), head size 64, unless UT_CUDA_ATTN=fp32 */
static bool tensor_cores(const ut_tensor *t, const attn_dims *d) {
    return ut_dtype_is16(t->autocast) && ut_cuda_flash_attn_tc_ok(d->B, d->T, d->C, d->NH);
}

/* The fused path's saved buffer: L (B, NH, T), then, under autocast, a
 * float32 copy of out (B, T, C) from a multiple of 4 floats. Its backward
 * needs out in float32, and under autocast it sees t->data in 16 bits (the
 * op's output is stored in the autocast dtype; src/core/autocast.c converts
 * only its gradient for backward). */
static bool keeps_out(const ut_tensor *t) { return t->autocast != UT_F32; }
static int64_t l_floats(const attn_dims *d) { return (d->B * d->NH * d->T + 3) / 4 * 4; }

/* P = softmax(causal(scale Q K^T)); out (B, T, C) = P V, head h in columns
 * [h hs, (h + 1) hs). Fused: saves L (B, NH, T) (and under autocast out's
 * float32 copy); else P. On float32 tensors (autocast's copies included). */
static void fwd_f32(ut_tensor *t, UT_KCTX) {
    attn_dims d = dims_of(t);
    int64_t T = d.T, nP = d.B * d.NH * T * T;
    const float *qkv = t->src[0]->data;
    bool tc = tensor_cores(t, &d);
    if (tc || fused(&d)) {
        int64_t nL = l_floats(&d), nO = keeps_out(t) ? d.B * T * d.C : 0;
        float *L = ut_kalloc(k, (size_t)(nL + nO) * sizeof(float));
        ut_attention_set_probs(t, L);
        if (tc) ut_cuda_flash_attn_tc_fwd(t->data, nO ? L + nL : NULL, L, qkv, d.B, T, d.C, d.NH, (int)t->autocast);
        else ut_cuda_flash_attn_fwd(t->data, nO ? L + nL : NULL, L, qkv, d.B, T, d.C, d.NH);
        return;
    }
    float *P = ut_kalloc(k, (size_t)nP * sizeof(float));
    ut_attention_set_probs(t, P);
    ut_cuda_attn_gemm(false, true, T, T, d.hs, 1.0f, qkv_part(qkv, 0, &d), qkv_part(qkv, 1, &d), 0.0f, P, T,
                      d.NH * T * T, T * T, d.B, d.NH);
    ut_cuda_attn_softmax_fwd(P, rows_of(&d));
    ut_cuda_attn_gemm(false, false, T, d.hs, T, 1.0f, probs_mat(P, &d), qkv_part(qkv, 2, &d), 0.0f, t->data, d.C,
                      T * d.C, d.hs, d.B, d.NH);
}

/* dqkv += the gradient through P: dv += P^T g; dP = g V^T; dS = P (dP - rowsum(P dP));
 * dq += scale dS K; dk += scale dS^T Q (g: t->grad's head columns). Fused:
 * the same sums tile by tile, P recomputed from L and rowsum(P dP) taken as
 * rowsum(g out) (out: the forward's float32 result, t->data or its saved
 * copy). On float32 tensors. */
static void bwd_f32(ut_tensor *t, UT_KCTX) {
    ut_tensor *qkv = t->src[0];
    if (!qkv->requires_grad) return;
    attn_dims d = dims_of(t);
    int64_t T = d.T, nP = d.B * d.NH * T * T;
    const float *x = qkv->data, *P = ut_attention_probs(t);
    float *dx = qkv->grad;
    bool tc = tensor_cores(t, &d);
    if (tc || fused(&d)) { /* the saved slot holds L; D (B, NH, T): each row's sum of g * out */
        const float *out = keeps_out(t) ? P + l_floats(&d) : t->data;
        float *D = ut_kalloc(k, (size_t)(d.B * d.NH * T) * sizeof(float));
        if (tc) ut_cuda_flash_attn_tc_bwd(dx, D, t->grad, out, x, P, d.B, T, d.C, d.NH, (int)t->autocast);
        else ut_cuda_flash_attn_bwd(dx, D, t->grad, out, x, P, d.B, T, d.C, d.NH);
        return;
    }
    ut_attn_mat g = {.p = t->grad, .ld = d.C, .sb = T * d.C, .sh = d.hs};
    float *gP = ut_kalloc(k, (size_t)nP * sizeof(float));
    /* dq, dk, dv: the head columns of dx (B, T, 3C) */
    float *dq = dx, *dk = dx + d.C, *dv = dx + 2 * d.C;
    int64_t ld = 3 * d.C, sb = T * 3 * d.C;
    /* dv (T x hs) += P^T (T x T) g (T x hs) */
    ut_cuda_attn_gemm(true, false, T, d.hs, T, 1.0f, probs_mat(P, &d), g, 1.0f, dv, ld, sb, d.hs, d.B, d.NH);
    /* gP (T x T) = g V^T, then the scores' gradient in place */
    ut_cuda_attn_gemm(false, true, T, T, d.hs, 1.0f, g, qkv_part(x, 2, &d), 0.0f, gP, T, d.NH * T * T, T * T, d.B,
                      d.NH);
    ut_cuda_attn_softmax_bwd(gP, P, NULL, 1.0f, rows_of(&d));
    ut_attn_mat dS = probs_mat(gP, &d);
    ut_cuda_attn_gemm(false, false, T, d.hs, T, d.scale, dS, qkv_part(x, 1, &d), 1.0f, dq, ld, sb, d.hs, d.B, d.NH);
    ut_cuda_attn_gemm(true, false, T, d.hs, T, d.scale, dS, qkv_part(x, 0, &d), 1.0f, dk, ld, sb, d.hs, d.B, d.NH);
}

/* The op table gives ATTENTION UT_KCAP_NATIVE_16 (table.c): core hands the
 * kernels its tensors as stored, and autocast's copies are made here only
 * where the mma.sync kernels cannot take them. They can under autocast with
 * head size 64 when out is stored in the autocast type and qkv in it or in
 * float32 (a 16-bit product's output, as GPT-2's c_attn gives): then no
 * float32 copy of qkv, out, their gradients or dqkv is made, and the bits
 * are those of the copies (flash_attention.h, ut_cuda_flash_attn_tc_fwd16).
 * Everything else (float32, UT_CUDA_ATTN=wmma, fp32 or unfused, other head
 * sizes) runs the float32 forms above through core's copies
 * (ut_lowp_forward / ut_lowp_backward), as it did without the capability. */
static bool stored_16(const ut_tensor *t) { /* under 16-bit autocast: out in it, src 0 in it or float32 */
    ut_dtype a = t->autocast, x = t->src[0]->dtype;
    return ut_dtype_is16(a) && t->dtype == a && (x == UT_F32 || x == a);
}

static bool native(const ut_tensor *t, const attn_dims *d) {
    return stored_16(t) && ut_cuda_flash_attn_tc_native() && tensor_cores(t, d);
}

bool ut_cuda_attn_copies(const ut_tensor *t) {
    bool c = t->autocast != UT_F32 || ut_dtype_is16(t->dtype);
    for (int i = 0; i < UT_MAX_SRC; i++) c = c || (t->src[i] && ut_dtype_is16(t->src[i]->dtype));
    return c;
}

bool ut_cuda_attn_qkv_alike(const ut_tensor *t) {
    const ut_tensor *q = t->src[0], *kt = t->src[1], *v = t->src[2];
    return stored_16(t) && kt->dtype == q->dtype && v->dtype == q->dtype && q != kt && q != v && kt != v;
}

static ut_cudnn_attn cudnn_shape(const ut_tensor *t, const attn_dims *d) {
    return (ut_cudnn_attn){.B = d->B, .T = d->T, .C = d->C, .NH = d->NH, .dt = (int)t->autocast};
}

/* cuDNN's fused attention (cudnn_attn.h) runs causal attention under
 * bf16/fp16 autocast whose output is stored in the autocast type and qkv in
 * it or in float32 (rounded to it first, as core's copies would be), with
 * head sizes a multiple of 8 (cuDNN's rule):
 *  - by default, in training (qkv takes a gradient), where this build has
 *    the cuDNN frontend, cuDNN opens and takes both passes of the shape: on
 *    an H200 it ran GPT-2 124M's bf16 step 15-20% faster than utrain's
 *    mma.sync kernels (docs/gpu.md). The first DEFAULT_SHAPES shapes are
 *    tried (each builds two graphs); later ones keep utrain's kernels, so
 *    no run builds graphs without end. A forward without a gradient
 *    (evaluation, generation) takes cuDNN only for a shape taken for
 *    training (a third graph; evaluation at the training batch's shape),
 *    else utrain's kernels (generation's lengths vary);
 *  - with UT_CUDA_ATTN=cudnn, every such attention, and there it is
 *    required: when cuDNN is missing or refuses the shape the step stops
 *    saying why (unset UT_CUDA_ATTN for utrain's kernels);
 *  - never with another UT_CUDA_ATTN (mma: utrain's kernels).
 * Forward and backward decide alike (the same answers: a shape, once
 * decided, stays so). The saved slot holds cuDNN's statistics (B, NH, T) in
 * float32; the backward writes qkv's gradient into scratch and adds it
 * (each as stored). */
#define DEFAULT_SHAPES 8
static struct {
    pthread_mutex_t mu;
    int n;
    struct {
        ut_cudnn_attn s;
        bool ok;
    } tried[DEFAULT_SHAPES];
} g_default = {.mu = PTHREAD_MUTEX_INITIALIZER};

static bool same_shape(const ut_cudnn_attn *a, const ut_cudnn_attn *b) {
    return a->B == b->B && a->T == b->T && a->C == b->C && a->NH == b->NH && a->dt == b->dt;
}

/* the default's answer for shape s: in training, cuDNN takes its training
 * forward and its backward, decided once per shape (the first
 * DEFAULT_SHAPES); without a gradient, the shape was taken for training and
 * cuDNN takes its forward without statistics (no backward follows, so each
 * such call may decide alone) */
static bool cudnn_default(const ut_cudnn_attn *s, bool train) {
    pthread_mutex_lock(&g_default.mu);
    bool ok = false, found = false;
    for (int i = 0; i < g_default.n && !found; i++)
        if (same_shape(&g_default.tried[i].s, s)) found = true, ok = g_default.tried[i].ok;
    if (!train) {
        char err[768];
        size_t ws;
        ok = ok && !ut_cuda_cudnn_attn_plan(s, UT_CUDNN_ATTN_INFER, &ws, err, sizeof err);
    } else if (!found && g_default.n < DEFAULT_SHAPES && ut_cuda_cudnn_attn_built()) {
        char err[768];
        size_t ws;
        ok = !ut_cuda_cudnn_attn_plan(s, UT_CUDNN_ATTN_TRAIN, &ws, err, sizeof err) &&
             !ut_cuda_cudnn_attn_plan(s, UT_CUDNN_ATTN_BWD, &ws, err, sizeof err);
        g_default.tried[g_default.n].s = *s;
        g_default.tried[g_default.n++].ok = ok;
    }
    pthread_mutex_unlock(&g_default.mu);
    return ok;
}

static bool cudnn_wanted(const ut_tensor *t, const attn_dims *d) {
    const char *e = getenv("UT_CUDA_ATTN");
    bool asked = e && !strcmp(e, "cudnn");
    if ((e && *e && !asked) || !stored_16(t) || d->NH <= 0 || d->hs % 8) return false;
    if (asked) return true;
    ut_cudnn_attn s = cudnn_shape(t, d);
    return cudnn_default(&s, t->src[0]->requires_grad);
}

bool ut_cuda_cudnn_attn_default(char *why, size_t n) {
    void *dl, *h;
    if (!ut_cuda_cudnn_attn_built()) {
        size_t ws;
        ut_cuda_cudnn_attn_plan(&(ut_cudnn_attn){1, 64, 64, 1, 1}, UT_CUDNN_ATTN_TRAIN, &ws, why, n);
        return false;
    }
    return ut_cuda_cudnn_lib(&dl, &h, why, n) == 0;
}

/* qkv as the autocast type: itself, or a rounded copy in scratch */
static const void *qkv16(const ut_tensor *t, const attn_dims *d, UT_KCTX) {
    const ut_tensor *x = t->src[0];
    if (x->dtype == t->autocast) return x->data;
    int64_t n = d->B * d->T * 3 * d->C;
    void *c = ut_kscratch(k, (size_t)n * 2);
    utk_convert(c, (int)t->autocast, x->data, (int)x->dtype, n);
    return c;
}

/* the workspace of pass on shape s in scratch, NULL when none; false (the
 * step stopped) when cuDNN cannot run it */
static bool cudnn_ws(const ut_cudnn_attn *s, int pass, void **ws, UT_KCTX) {
    char err[768];
    size_t n = 0;
    if (ut_cuda_cudnn_attn_plan(s, pass, &n, err, sizeof err)) {
        const char *e = getenv("UT_CUDA_ATTN");
        if (e && !strcmp(e, "cudnn"))
            ut_kfail(k, "UT_CUDA_ATTN=cudnn: %s (unset UT_CUDA_ATTN for utrain's own attention kernels)", err);
        else /* a graph taken before, refused when built again */
            ut_kfail(k, "cuDNN's fused attention (the default in training): %s (UT_CUDA_ATTN=mma runs utrain's "
                        "own attention kernels)", err);
        return false;
    }
    *ws = n ? ut_kscratch(k, n) : NULL;
    return true;
}

/* The workspaces, a rounded qkv and the backward's dqkv live in the op's
 * scratch (given back when it ends, the work queued on the one stream in
 * order); only the statistics stay for backward. */
static void cudnn_fwd(ut_tensor *t, const attn_dims *d, UT_KCTX) {
    ut_cudnn_attn s = cudnn_shape(t, d);
    bool train = t->src[0]->requires_grad;
    void *ws;
    float *L = train ? ut_kalloc(k, (size_t)l_floats(d) * sizeof(float)) : NULL;
    ut_attention_set_probs(t, L);
    if (cudnn_ws(&s, train ? UT_CUDNN_ATTN_TRAIN : UT_CUDNN_ATTN_INFER, &ws, k)) {
        char err[768];
        if (ut_cuda_cudnn_attn_fwd(&s, qkv16(t, d, k), t->data, L, ws, err, sizeof err))
            ut_kfail(k, "cuDNN's fused attention: %s", err);
    }
    ut_kscratch_release(k);
}

static void cudnn_bwd(ut_tensor *t, const attn_dims *d, UT_KCTX) {
    ut_tensor *qkv = t->src[0];
    ut_cudnn_attn s = cudnn_shape(t, d);
    void *ws;
    if (cudnn_ws(&s, UT_CUDNN_ATTN_BWD, &ws, k)) {
        int64_t n = d->B * d->T * 3 * d->C;
        /* a fresh gradient stored in the product's dtype takes cuDNN's dqkv
         * itself; another is written or added to from scratch */
        bool direct = ut_kfresh(k, 0) && qkv->dtype == t->autocast;
        void *dqkv = direct ? qkv->grad : ut_kscratch(k, (size_t)n * 2);
        char err[768];
        if (ut_cuda_cudnn_attn_bwd(&s, qkv16(t, d, k), t->data, t->grad, ut_attention_probs(t), dqkv, ws, err,
                                   sizeof err))
            ut_kfail(k, "cuDNN's fused attention: %s", err);
        else if (ut_kfresh(k, 0) && !direct)
            ut_cuda_put_dt(qkv->grad, (int)qkv->dtype, dqkv, (int)t->autocast, n);
        else if (!direct)
            ut_cuda_acc_dt(qkv->grad, (int)qkv->dtype, dqkv, (int)t->autocast, n);
    }
    ut_kscratch_release(k);
}

void ut_attention_fwd_cuda(ut_tensor *t, UT_KCTX) {
    attn_dims d = dims_of(t);
    if (cudnn_wanted(t, &d)) {
        cudnn_fwd(t, &d, k);
    } else if (native(t, &d)) { /* saved: L, then out's float32 values, as fwd_f32 under autocast */
        int64_t nL = l_floats(&d), nO = d.B * d.T * d.C;
        float *L = ut_kalloc(k, (size_t)(nL + nO) * sizeof(float));
        ut_attention_set_probs(t, L);
        ut_cuda_flash_attn_tc_fwd16(t->data, 1, L + nL, L, t->src[0]->data, t->src[0]->dtype != UT_F32, d.B, d.T,
                                    d.C, d.NH, (int)t->autocast);
    } else if (ut_cuda_attn_copies(t)) {
        ut_lowp_forward(t, fwd_f32, k);
    } else {
        fwd_f32(t, k);
    }
}

void ut_attention_bwd_cuda(ut_tensor *t, UT_KCTX) {
    ut_tensor *qkv = t->src[0];
    if (!qkv->requires_grad) return;
    attn_dims d = dims_of(t);
    if (cudnn_wanted(t, &d)) {
        cudnn_bwd(t, &d, k);
        return;
    }
    ut_kzero_fresh(k, t, 1u, ut_backend_cuda.memset); /* utrain's kernels add into qkv's gradient */
    if (native(t, &d)) { /* t->grad is stored as t (16-bit), qkv's gradient as qkv */
        const float *L = ut_attention_probs(t);
        float *D = ut_kalloc(k, (size_t)(d.B * d.NH * d.T) * sizeof(float));
        bool x16 = qkv->dtype != UT_F32;
        ut_cuda_flash_attn_tc_bwd16(qkv->grad, x16, D, t->grad, 1, L + l_floats(&d), qkv->data, x16, L, d.B, d.T,
                                    d.C, d.NH, (int)t->autocast);
    } else if (ut_cuda_attn_copies(t)) {
        ut_lowp_backward(t, bwd_f32, k);
    } else {
        bwd_f32(t, k);
    }
}

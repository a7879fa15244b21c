/* Matrix products on the GPU: linear (x W^T + b) and batched matmul, through
 * cuBLASLt (gemm.cu), with the CPU backend's semantics
 * (src/backend/cpu/matmul.c); the bias gradient is a fixed-order column sum.
 * Under autocast, matmul's operands arrive as float32 copies rounded to
 * bf16/fp16 (src/core/autocast.c) and its products run on the 16-bit tensor
 * cores (ut_cuda_gemm_rounded); linear does autocast itself (below). */
#include <stdlib.h>
#include <string.h>

#include "cuda.h"
#include "../../ops/params.h"
#include "ew.h"
#include "flat.h"
#include "softmax.h"

static float *f32(const ut_tensor *t) { return (float *)t->data; }

/* ---- linear: x (N, C), w (OC, C), b (OC) -> out (N, OC) ----
 * Under autocast the linear takes its tensors as they are stored (the
 * op table's UT_KCAP_NATIVE_16): x in 16 bits (or float32, rounded here), w float32
 * with its rounded 16-bit copy kept from forward to backward by autocast
 * (ut_autocast_round16), the output and its gradient in 16 bits. The
 * products run on the 16-bit tensor cores; cuBLASLt writes the 16-bit
 * output with the bias added in float32 (its bias epilogue), rounded once,
 * and adds the input gradient into a 16-bit one; where it has no
 * algorithm for that (or UT_CUDA_LT_FUSED=0) the product goes into float32
 * scratch and the output is bias-added and rounded in one pass of ours. The
 * results are those the wrapped path gives (rounded operands, float32 sums,
 * rounded output). */

/* x's values in dt: x itself when stored in dt, else a rounded copy in scratch */
static const void *as16(ut_tensor *x, ut_dtype dt, int64_t n, const ut_kctx *k) {
    if (x->dtype == dt) return x->data;
    void *c = ut_kscratch(k, (size_t)n * 2);
    ut_backend_cuda.convert(c, dt, x->data, x->dtype, n);
    return c;
}

/* w's rounded copy: the one autocast keeps for backward, or (gradients off)
 * one in scratch */
static const void *weight16(ut_tensor *t, ut_tensor *w, bool backward, const ut_kctx *k) {
    int64_t n = ut_nelem(w);
    const void *r = w->dtype == UT_F32 ? ut_kround16(k, w, n, t->autocast, backward) : NULL;
    return r ? r : as16(w, t->autocast, n, k);
}

/* The row stride, in elements of size el, that cuBLASLt's fast kernels take
 * for an (N, OC) result or gradient: rows 16 bytes apart. Where OC is not a
 * multiple of that, the product runs on an OC-wide copy at this stride in
 * scratch. (For GPT-2's 50257-token head the stride alone was not enough:
 * only the weight gradient sped up, 144 to 425 TFLOP/s on an H200; the
 * width itself had to grow, padded_oc below.) */
static int64_t ld16(int64_t cols, size_t el) {
    int64_t per = 16 / (int64_t)el;
    return (cols + per - 1) / per * per;
}

/* The output width the products run at: a wide one (4096 or more)
 * that is not a multiple of 128 goes up to the next one, the weight's extra
 * rows (and the bias's, and the incoming gradient's extra columns) zero, so
 * the sums are those of the unpadded product. On an H200 GPT-2's head over
 * 50257 tokens ran its forward and input-gradient products at 95 and 131
 * TFLOP/s, rows 16 bytes apart or not, against 480-700 for the step's
 * other shapes; llm.c and nanoGPT pad the vocabulary itself to 50304 for
 * this (padded, 577 and 670 TFLOP/s). Here the model keeps its 50257 rows
 * and the op pads copies: one pass over the rounded weight (77 MB for
 * GPT-2) and over the incoming gradient, the output moved to its OC-wide
 * rows, and the weight gradient's OCp rows summed in scratch and the first
 * OC added (at OC rows it ran at 425 TFLOP/s, padded 669). The float32
 * products (TF32 or exact) are padded alike (the weight's copy 154 MB for
 * GPT-2; not yet timed on a GPU). UT_CUDA_LT_PAD=0 runs the products at OC
 * (rows ld16 apart) instead. */
static int64_t padded_oc(int64_t OC) { /* a multiple of 128 when padded, so ld16(OCp, el) is OCp */
    const char *e = getenv("UT_CUDA_LT_PAD");
    if ((e && !strcmp(e, "0")) || OC < 4096 || OC % 128 == 0) return OC;
    return (OC + 127) / 128 * 128;
}

/* the bias (OC) with zeros up to OCp, in scratch (b itself when OCp == OC) */
static const float *padded_bias(const ut_tensor *b, int64_t OC, int64_t OCp, const ut_kctx *k) {
    if (!b || OCp == OC) return b ? f32(b) : NULL;
    float *c = ut_kscratch(k, (size_t)OCp * sizeof(float));
    utk_rows_pad(c, 0, OCp, b->data, 0, OC, 1, OC, 1);
    return c;
}

/* w (OC, C) stored in dt (0 float32, else 16-bit) with zero rows up to
 * OCp, in scratch (w itself when OCp == OC) */
static const void *padded_weight(const void *w, int dt, int64_t OC, int64_t OCp, int64_t C, const ut_kctx *k) {
    if (OCp == OC) return w;
    void *c = ut_kscratch(k, (size_t)(OCp * C) * (dt ? 2 : sizeof(float)));
    utk_rows_pad(c, dt, C, w, dt, C, OC, C, OCp);
    return c;
}

/* ---- linear with GELU (ut_linear_gelu; the act parameter, src/ops/params.h) ----
 * Forward: the product (bias added) goes to the saved pre-activation
 * buffer in the output's dtype, and GELU reads it; where cuBLASLt has a
 * GELU epilogue for the product (16-bit output on rows a multiple of 8
 * elements, unpadded), it writes both the output and the pre-activation
 * in the product's own pass, GELU taken of the float32 sum before either is
 * rounded (the two ops round the pre-activation first). Without a
 * backward to come the pre-activation is not kept (scratch, or the
 * epilogue alone). Backward: dpre = dout gelu'(pre) in scratch (the gelu
 * kernel's arithmetic, rounded to the output's dtype as the separate
 * gelu's gradient of a 16-bit tensor is), then linear's backward on it. */
static bool act_gelu(const ut_tensor *t) { return ut_linear_act(t) == UT_LINEAR_GELU; }

/* where the product goes: the output, or with GELU the pre-activation:
 * saved for backward where one will come, else in scratch (the GELU
 * kernels take no output in place of their input) */
static void *product_dst(ut_tensor *t, const ut_kctx *k) {
    if (!act_gelu(t)) return t->data;
    size_t bytes = (size_t)ut_nelem(t) * ut_dtype_size(t->dtype);
    void *y = t->requires_grad ? ut_kalloc(k, bytes) : ut_kscratch(k, bytes);
    ut_linear_set_pre(t, t->requires_grad ? y : NULL);
    return y;
}

/* the output from the pre-activation y */
static void gelu_out(ut_tensor *t, const void *y) {
    if (act_gelu(t)) ut_cuda_gelu_fwd(t->data, (int)t->dtype, y, (int)t->dtype, ut_nelem(t));
}

/* the gradient linear's products take: t's own, or dpre in scratch; with
 * a 16-bit dpre in the products' dtype the bias gradient is added in the
 * same pass (*db_done) */
static const void *grad_in(ut_tensor *t, const ut_kctx *k, bool *db_done) {
    *db_done = false;
    if (!act_gelu(t)) return t->grad;
    int64_t n = ut_nelem(t), OC = t->ne[t->ndim - 1];
    void *d = ut_kscratch(k, (size_t)n * ut_dtype_size(t->dtype));
    ut_tensor *b = t->src[2];
    if (b && b->requires_grad && t->dtype == t->autocast &&
        utk_gelu_bwd_col_sum(d, t->grad, ut_linear_pre(t), (int)t->dtype, b->grad, n / OC, OC))
        *db_done = true;
    else
        ut_cuda_gelu_bwd(d, (int)t->dtype, t->grad, (int)t->dtype, ut_linear_pre(t), (int)t->dtype, n, false);
    return d;
}

static void linear_fwd16(ut_tensor *t, const ut_kctx *k) {
    ut_tensor *x = t->src[0], *w = t->src[1], *b = t->src[2];
    int64_t C = w->ne[1], OC = w->ne[0], N = ut_nelem(x) / C, OCp = padded_oc(OC);
    int dt = (int)t->autocast;
    const void *x16 = as16(x, t->autocast, N * C, k);
    const void *wp = padded_weight(weight16(t, w, false, k), dt, OC, OCp, C, k);
    const float *bp = padded_bias(b, OC, OCp, k); /* the bias epilogue reads OCp values */
    void *y = product_dst(t, k);
    /* cuBLASLt writes the 16-bit output itself, the bias added in float32
     * (into aligned or padded rows in scratch, then moved, where OC needs it) */
    if (t->dtype == t->autocast) {
        int64_t ldo = ld16(OCp, 2);
        if (act_gelu(t) && ldo == OC &&
            ut_cuda_gemm16_gelu(false, true, N, OC, C, x16, C, wp, C, t->data, OC, dt, bp, ut_linear_pre(t))) {
            ut_kscratch_release(k);
            return;
        }
        void *out = ldo == OC ? y : ut_kscratch(k, (size_t)(N * ldo) * 2);
        if (ut_cuda_gemm16_out(false, true, N, OCp, C, 1.0f, x16, C, wp, C, 0.0f, out, ldo, dt, bp)) {
            if (out != y) utk_rows_convert(y, dt, OC, out, dt, ldo, N, OC);
            gelu_out(t, y);
            ut_kscratch_release(k);
            return;
        }
    }
    int64_t ldt = ld16(OCp, sizeof(float));
    float *tmp = ut_kscratch(k, (size_t)(N * ldt) * sizeof(float));
    ut_cuda_gemm16(false, true, N, OCp, C, 1.0f, x16, C, wp, C, 0.0f, tmp, ldt, dt);
    /* the output in its storage: t's dtype (16-bit; float32 if the constructor asked) */
    utk_bias_round(y, (int)t->dtype, tmp, ldt, b ? f32(b) : NULL, N, OC);
    gelu_out(t, y);
    ut_kscratch_release(k);
}

/* x's and w's gradients of a 16-bit linear from the incoming gradient gp
 * (N, OCp in dt; rows ldg apart, zero in the columns from OC): dx (N, C) =
 * (fresh) or += gp @ w over OCp (the padding adds zeros), dw (OC, C) +=
 * gp^T @ x (with OCp > OC all OCp rows into scratch, the first OC added) */
static void products_bwd16(ut_tensor *t, const void *gp, int64_t ldg, int64_t N, int64_t OCp, const ut_kctx *k) {
    ut_tensor *x = t->src[0], *w = t->src[1];
    int64_t C = w->ne[1], OC = w->ne[0];
    int dt = (int)t->autocast;
    if (x->requires_grad) { /* a fresh dx written */
        const void *w16 = padded_weight(weight16(t, w, true, k), dt, OC, OCp, C, k);
        float beta = ut_kbeta(k, 0);
        if (x->dtype == t->autocast &&
            ut_cuda_gemm16_out(false, false, N, C, OCp, 1.0f, gp, ldg, w16, C, beta, x->grad, C, dt, NULL)) {
            /* cuBLASLt added it to the 16-bit gradient (the product rounded to dt
             * first on Hopper, as PyTorch's accumulation does) */
        } else if (ut_dtype_is16(x->dtype)) { /* a 16-bit gradient: float32 sum, added and rounded */
            float *tmp = ut_kscratch(k, (size_t)(N * C) * sizeof(float));
            ut_cuda_gemm16(false, false, N, C, OCp, 1.0f, gp, ldg, w16, C, 0.0f, tmp, C, dt);
            if (beta != 0.0f) utk_add_round(x->grad, (int)x->dtype, tmp, N * C);
            else ut_backend_cuda.convert(x->grad, x->dtype, tmp, UT_F32, N * C);
        } else {
            ut_cuda_gemm16(false, false, N, C, OCp, 1.0f, gp, ldg, w16, C, beta, x->grad, C, dt);
        }
    }
    if (w->requires_grad) { /* dw (OC, C) += dout^T @ x */
        const void *x16 = as16(x, t->autocast, N * C, k);
        if (OCp != OC) {
            float *tmp = ut_kscratch(k, (size_t)(OCp * C) * sizeof(float));
            ut_cuda_gemm16(true, false, OCp, C, N, 1.0f, gp, ldg, x16, C, 0.0f, tmp, C, dt);
            utk_add_into(w->grad, tmp, OC * C, false);
        } else {
            ut_cuda_gemm16(true, false, OC, C, N, 1.0f, gp, ldg, x16, C, 1.0f, w->grad, C, dt);
        }
    }
}

/* the same in float32 (TF32 or exact products) */
static void products_bwd32(ut_tensor *t, const float *Gp, int64_t ldg, int64_t N, int64_t OCp, const ut_kctx *k) {
    ut_tensor *x = t->src[0], *w = t->src[1];
    int64_t C = w->ne[1], OC = w->ne[0];
    if (x->requires_grad) /* fresh: = */
        ut_cuda_sgemm(false, false, N, C, OCp, 1.0f, Gp, ldg, 0, padded_weight(f32(w), 0, OC, OCp, C, k), C, 0,
                      ut_kbeta(k, 0), x->grad, C, 0, 1);
    if (w->requires_grad) {
        if (OCp != OC) {
            float *tmp = ut_kscratch(k, (size_t)(OCp * C) * sizeof(float));
            ut_cuda_sgemm(true, false, OCp, C, N, 1.0f, Gp, ldg, 0, f32(x), C, 0, 0.0f, tmp, C, 0, 1);
            utk_add_into(w->grad, tmp, OC * C, false);
        } else {
            ut_cuda_sgemm(true, false, OC, C, N, 1.0f, Gp, ldg, 0, f32(x), C, 0, 1.0f, w->grad, C, 0, 1);
        }
    }
}

static void linear_bwd16(ut_tensor *t, const ut_kctx *k) {
    ut_tensor *x = t->src[0], *w = t->src[1], *b = t->src[2];
    int64_t C = w->ne[1], OC = w->ne[0], N = ut_nelem(x) / C;
    int dt = (int)t->autocast;
    ut_kzero_fresh(k, t, 6u, ut_backend_cuda.memset); /* dw, db are added into (x's is written: below) */
    /* the incoming gradient (dpre with GELU) in dt: as stored, or rounded (autocast rounds it) */
    bool db_done;
    const void *gin = grad_in(t, k, &db_done);
    const void *g16 = t->dtype == t->autocast ? gin : NULL;
    if (!g16) {
        void *c = ut_kscratch(k, (size_t)(N * OC) * 2);
        ut_backend_cuda.convert(c, t->autocast, gin, ut_dtype_is16(t->dtype) ? t->dtype : UT_F32, N * OC);
        g16 = c;
    }
    /* the products read it with rows 16 bytes apart (ld16), or padded with
     * zero columns to OCp: a copy where OC needs one */
    int64_t OCp = padded_oc(OC), ldg = ld16(OCp, 2);
    const void *gp = g16;
    if (ldg != OC) {
        void *c = ut_kscratch(k, (size_t)(N * ldg) * 2);
        utk_rows_pad(c, dt, ldg, g16, dt, OC, N, OC, N);
        gp = c;
    }
    products_bwd16(t, gp, ldg, N, OCp, k);
    if (b && b->requires_grad && !db_done) utk_col_sum_add(b->grad, g16, dt, N, OC);
    ut_kscratch_release(k);
}

void ut_linear_fwd_cuda(ut_tensor *t, UT_KCTX) {
    if (t->autocast != UT_F32) {
        linear_fwd16(t, k);
        return;
    }
    ut_tensor *x = t->src[0], *w = t->src[1], *b = t->src[2];
    int64_t C = w->ne[1], OC = w->ne[0], N = ut_nelem(x) / C, OCp = padded_oc(OC);
    int64_t ldo = ld16(OCp, sizeof(float));
    const float *wp = padded_weight(f32(w), 0, OC, OCp, C, k);
    float *y = product_dst(t, k);
    /* the product's rows 16 bytes apart (ld16) or OCp wide: in scratch, then
     * moved, where OC needs it; the bias first (zero in the padding) */
    float *out = ldo == OC ? y : ut_kscratch(k, (size_t)(N * ldo) * sizeof(float));
    if (b) utk_rows_fill(out, ldo, padded_bias(b, OC, OCp, k), N, OCp);
    ut_cuda_sgemm(false, true, N, OCp, C, 1.0f, f32(x), C, 0, wp, C, 0, b ? 1.0f : 0.0f, out, ldo, 0, 1);
    if (out != y) utk_rows_convert(y, 0, OC, out, 0, ldo, N, OC);
    gelu_out(t, y);
    ut_kscratch_release(k);
}

void ut_linear_bwd_cuda(ut_tensor *t, UT_KCTX) {
    if (t->autocast != UT_F32) {
        linear_bwd16(t, k);
        return;
    }
    ut_tensor *x = t->src[0], *w = t->src[1], *b = t->src[2];
    int64_t C = w->ne[1], OC = w->ne[0], N = ut_nelem(x) / C, OCp = padded_oc(OC);
    int64_t ldg = ld16(OCp, sizeof(float));
    ut_kzero_fresh(k, t, 6u, ut_backend_cuda.memset); /* dw, db are added into (x's is written: below) */
    bool db_done; /* (a float32 dpre: never) */
    const float *G = grad_in(t, k, &db_done), *Gp = G;
    if (ldg != OC && (x->requires_grad || w->requires_grad)) { /* rows 16 bytes apart (ld16), or zero-padded to OCp */
        float *c = ut_kscratch(k, (size_t)(N * ldg) * sizeof(float));
        utk_rows_pad(c, 0, ldg, G, 0, OC, N, OC, N);
        Gp = c;
    }
    products_bwd32(t, Gp, ldg, N, OCp, k);
    if (b && b->requires_grad && !db_done) utk_col_sum_add(b->grad, G, 0, N, OC);
    ut_kscratch_release(k);
}

/* ---- linear with cross-entropy (ut_linear_cross_entropy): x (N, C), w
 * (V, C), targets (N), b (V) or none -> the mean loss ----
 * The logits are the product's output in a buffer of the op's own, in the
 * autocast dtype (or float32), with the rows the products run at: ld16
 * apart, or padded to Vp as linear pads them (zero columns from V, since
 * the padded weight's and bias's rows are zero). Cross-entropy reads them
 * there (softmax.cu, rows ld apart), backward writes their gradient over
 * them in place and the products read that as it lies: no copy of the
 * logits out of the padded rows, none of their gradient into them, and one
 * N x ld buffer for both (GPT-2 at 8 x 1024 in bf16: 3.3 GB of copies and
 * 0.8 GB of memory a step fewer than linear then cross_entropy). The
 * values are the two ops' kernels' on the same inputs. */
static void linear_ce_logits(ut_tensor *t, void *logits, int64_t ld, int64_t N, int64_t C, int64_t V, int64_t Vp,
                             const ut_kctx *k) {
    ut_tensor *x = t->src[0], *w = t->src[1], *b = t->src[3];
    int dt = (int)t->autocast;
    const float *bp = padded_bias(b, V, Vp, k);
    if (dt) {
        const void *x16 = as16(x, t->autocast, N * C, k);
        const void *wp = padded_weight(weight16(t, w, false, k), dt, V, Vp, C, k);
        if (ut_cuda_gemm16_out(false, true, N, Vp, C, 1.0f, x16, C, wp, C, 0.0f, logits, ld, dt, bp)) return;
        /* no cuBLASLt algorithm for the 16-bit output: float32 sums, the bias
         * added and rounded once */
        float *tmp = ut_kscratch(k, (size_t)(N * ld) * sizeof(float));
        if (bp) utk_rows_fill(tmp, ld, bp, N, Vp);
        ut_cuda_gemm16(false, true, N, Vp, C, 1.0f, x16, C, wp, C, bp ? 1.0f : 0.0f, tmp, ld, dt);
        utk_rows_convert(logits, dt, ld, tmp, 0, ld, N, Vp);
        return;
    }
    if (bp) utk_rows_fill(logits, ld, bp, N, Vp);
    ut_cuda_sgemm(false, true, N, Vp, C, 1.0f, f32(x), C, 0, padded_weight(f32(w), 0, V, Vp, C, k), C, 0,
                  bp ? 1.0f : 0.0f, logits, ld, 0, 1);
}

void ut_linear_ce_fwd_cuda(ut_tensor *t, UT_KCTX) {
    ut_tensor *x = t->src[0], *w = t->src[1], *tg = t->src[2];
    int64_t C = w->ne[1], V = w->ne[0], N = ut_nelem(x) / C, Vp = padded_oc(V);
    int dt = (int)t->autocast;
    size_t el = dt ? 2 : sizeof(float);
    int64_t ld = ld16(Vp, el);
    size_t bytes = (size_t)(N * ld) * el + 1;
    void *logits = t->requires_grad ? ut_kalloc(k, bytes) : ut_kscratch(k, bytes);
    linear_ce_logits(t, logits, ld, N, C, V, Vp, k);
    int ignore = (int)ut_loss_ignore_index(t);
    double *rowloss = (double *)(void *)ut_kscratch(k, (size_t)(N > 0 ? N : 1) * sizeof(double));
    int64_t *count = ut_kalloc(k, sizeof(int64_t));
    float *mx = NULL, *inv = NULL;
    if (t->requires_grad) {
        mx = ut_kalloc(k, (size_t)(N > 0 ? N : 1) * sizeof(float));
        inv = ut_kalloc(k, (size_t)(N > 0 ? N : 1) * sizeof(float));
    }
    const int32_t *T = (const int32_t *)tg->data;
    ut_cuda_cross_entropy_fwd(rowloss, mx, inv, logits, dt, T, ignore, ut_loss_smoothing(t), N, V, ld,
                              ut_cuda_error_flag());
    ut_cuda_loss_mean(f32(t), count, rowloss, T, ignore, N, V);
    ut_linear_ce_set_logits(t, t->requires_grad ? logits : NULL);
    ut_linear_ce_set_ld(t, ld);
    ut_cross_entropy_set_row_max(t, mx);
    ut_cross_entropy_set_inv_sum(t, inv);
    ut_loss_set_dcount(t, count);
    ut_kscratch_release(k);
}

void ut_linear_ce_bwd_cuda(ut_tensor *t, UT_KCTX) {
    ut_tensor *x = t->src[0], *w = t->src[1], *tg = t->src[2], *b = t->src[3];
    int64_t C = w->ne[1], V = w->ne[0], N = ut_nelem(x) / C, Vp = padded_oc(V), ld = ut_linear_ce_ld(t);
    int dt = (int)t->autocast;
    ut_kzero_fresh(k, t, 0xau, ut_backend_cuda.memset); /* dw, db are added into (x's is written) */
    void *g = ut_linear_ce_logits(t); /* the gradient written over the logits; the padding stays zero */
    ut_cuda_cross_entropy_bwd(g, 1, g, dt, ut_cross_entropy_row_max(t), ut_cross_entropy_inv_sum(t),
                              (const int32_t *)tg->data, (int)ut_loss_ignore_index(t), ut_loss_smoothing(t), t->grad,
                              ut_loss_dcount(t), N, V, ld);
    if (dt) products_bwd16(t, g, ld, N, Vp, k);
    else products_bwd32(t, g, ld, N, Vp, k);
    if (b && b->requires_grad) { /* db (V) += column sums: over all ld columns into scratch, the first V added */
        float *db = ut_kscratch(k, (size_t)ld * sizeof(float));
        ut_backend_cuda.memset(db, 0, (size_t)ld * sizeof(float));
        utk_col_sum_add(db, g, dt, N, ld);
        utk_add_into(b->grad, db, V, false);
    }
    ut_kscratch_release(k);
}

/* ---- matmul: a (..., M, K) @ b (K, N) or (..., K, N) ---- */
void ut_matmul_fwd_cuda(ut_tensor *t, UT_KCTX) {
    ut_mm_dims d = ut_matmul_dims(t);
    const float *A = f32(t->src[0]), *B = f32(t->src[1]);
    if (d.shared_b) /* one product over all rows */
        ut_cuda_sgemm(false, false, d.batch * d.M, d.N, d.K, 1.0f, A, d.K, 0, B, d.N, 0, 0.0f, f32(t), d.N, 0, 1);
    else
        ut_cuda_sgemm(false, false, d.M, d.N, d.K, 1.0f, A, d.K, d.M * d.K, B, d.N, d.K * d.N, 0.0f, f32(t), d.N,
                      d.M * d.N, d.batch);
}

void ut_matmul_bwd_cuda(ut_tensor *t, UT_KCTX) {
    ut_mm_dims d = ut_matmul_dims(t);
    ut_tensor *a = t->src[0], *b = t->src[1];
    const float *A = f32(a), *B = f32(b), *G = t->grad;
    if (d.shared_b) {
        int64_t R = d.batch * d.M;
        if (a->requires_grad) /* dA (R, K) += G (R, N) @ B^T */
            ut_cuda_sgemm(false, true, R, d.K, d.N, 1.0f, G, d.N, 0, B, d.N, 0, 1.0f, a->grad, d.K, 0, 1);
        if (b->requires_grad) /* dB (K, N) += A^T @ G */
            ut_cuda_sgemm(true, false, d.K, d.N, R, 1.0f, A, d.K, 0, G, d.N, 0, 1.0f, b->grad, d.N, 0, 1);
        return;
    }
    if (a->requires_grad)
        ut_cuda_sgemm(false, true, d.M, d.K, d.N, 1.0f, G, d.N, d.M * d.N, B, d.N, d.K * d.N, 1.0f, a->grad, d.K,
                      d.M * d.K, d.batch);
    if (b->requires_grad)
        ut_cuda_sgemm(true, false, d.K, d.N, d.M, 1.0f, A, d.K, d.M * d.K, G, d.N, d.M * d.N, 1.0f, b->grad, d.N,
                      d.K * d.N, d.batch);
}

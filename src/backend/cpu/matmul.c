/* Matrix products: linear (x W^T + b) and batched matmul, through OpenBLAS
 * sgemm, or (autocast bf16 on a CPU with bf16 instructions) oneDNN's bf16
 * matmul (dnnl_matmul.c). */
#include <omp.h>

#include "gemm.h"
#include "cpu.h"
#include "../../ops/params.h"

/* How an op's products run: scratch for oneDNN's bf16 operands (the largest
 * product's), or NULL for sgemm. The scratch is autocast's (an autocast op's
 * kernel takes it, and it is free again when the op ends), not the step's
 * arena: taken from the arena, every product's operands would stay until
 * the step ends, and a bf16 step would hold more than a float32 one. */
typedef struct { uint16_t *bf16; } mm_path;

static mm_path path_of(const ut_tensor *t, int64_t max_operands, const ut_kctx *k) {
    mm_path p = {NULL};
    if (t->autocast == UT_BF16 && ut_bf16_use_dnnl())
        p.bf16 = (uint16_t *)(void *)ut_kscratch(k, (size_t)max_operands * sizeof(uint16_t));
    return p;
}

/* C (M,N) = op(A) @ op(B) + beta C (layouts as ut_gemm) on path p; a product
 * oneDNN refuses runs on sgemm. */
static void gemm(const mm_path *p, bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float *A,
                 const float *B, float beta, float *C) {
    if (p->bf16 && ut_dnnl_gemm_bf16(ta, tb, M, N, K, A, B, beta, C, p->bf16) == 0) return;
    ut_gemm(ta, tb, M, N, K, 1.0f, A, B, beta, C);
}

/* ---- linear: x (N, C), w (OC, C), b (OC) -> out (N, OC) ---- */
static void linear_forward(const mm_path *p, float *out, const float *x, const float *w, const float *b,
                           int64_t N, int64_t C, int64_t OC) {
    if (b) {
#pragma omp parallel for schedule(static)
        for (int64_t n = 0; n < N; n++) memcpy(out + n * OC, b, (size_t)OC * sizeof(float));
    }
    gemm(p, false, true, N, OC, C, x, w, b ? 1.0f : 0.0f, out);
}

/* Columns summed per block: a block's partial sums stay in registers / L1. */
#define BIAS_BLOCK 256

/* db (OC) += column sums of dout (N, OC). Each column is summed over rows in
 * order from 0, then added to db, whatever the thread count. Threads own
 * contiguous slices of columns (on 16-float boundaries, so no two write the
 * same cache line) and stream dout row by row, vectorised over columns. */
static void bias_grad(float *db, const float *dout, int64_t N, int64_t OC) {
#pragma omp parallel if (N * OC >= 32768)
    {
        int t = omp_get_thread_num(), nt = omp_get_num_threads();
        int64_t o0 = OC * t / nt / 16 * 16, o1 = t + 1 == nt ? OC : OC * (t + 1) / nt / 16 * 16;
        for (int64_t b = o0; b < o1; b += BIAS_BLOCK) {
            int64_t len = o1 - b < BIAS_BLOCK ? o1 - b : BIAS_BLOCK;
            float acc[BIAS_BLOCK] = {0};
            for (int64_t n = 0; n < N; n++) {
                const float *row = dout + n * OC + b;
#pragma omp simd
                for (int64_t o = 0; o < len; o++) acc[o] += row[o];
            }
#pragma omp simd
            for (int64_t o = 0; o < len; o++) db[b + o] += acc[o];
        }
    }
}

/* dx (N, C) += dout @ w; dw (OC, C) += dout^T @ x; db (OC) += column sums of dout */
/* dx_beta 0: dx holds nothing yet and is written (backend.h, UT_KCAP_FRESH_GRAD) */
static void linear_backward(const mm_path *p, float *dx, float dx_beta, float *dw, float *db, const float *dout,
                            const float *x, const float *w, int64_t N, int64_t C, int64_t OC) {
    if (dx) gemm(p, false, false, N, C, OC, dout, w, dx_beta, dx);
    if (dw) gemm(p, true, false, OC, C, N, dout, x, 1.0f, dw);
    if (db) bias_grad(db, dout, N, OC);
}

/* ---- a 16-bit output, a block at a time ----
 * Under autocast a linear's output is stored in 16 bits, and ut_lowp_forward
 * / ut_lowp_backward leave it (and its gradient) in that storage for these
 * kernels (src/core/autocast.c). A large output is computed a block of rows
 * at a time into float32 scratch and rounded block by block, and backward
 * widens its 16-bit gradient a block of rows (for dx) or of columns (for dw,
 * db) at a time, so neither exists whole in float32 (GPT-2's logits: 196 MiB
 * at 1024 x 50257). Rounding a block rounds its elements as rounding the
 * whole does. A block is a whole number of 48 rows (or columns of dw):
 * OpenBLAS's Zen/Haswell sgemm kernels tile a product's rows by 24 from its
 * first row (48 is also a whole number of 8- or 16-row tiles), so on one
 * thread a block's elements are the bits of the whole product
 * (bench/sgemm_blocks checks a CPU) as long as the block's product is over
 * 10^6 multiply-adds (OpenBLAS's SkylakeX kernels take smaller ones through
 * small-matrix kernels that sum in another order; blocked outputs are at
 * least 16 MiB, so their blocks are far larger); on several threads OpenBLAS divides a
 * product between them by its shape, and bits differ by an ulp here and
 * there (as they already differ between thread counts). Each block packs
 * the weight again: 192 rows cost the product about 13% (docs/performance.md). */
static int64_t block_rows_max = 192, block_min_bytes = 16 << 20;

void ut_cpu_lowp_block_set(int64_t rows, int64_t min_bytes) {
    UT_ASSERT(rows > 0 && rows % 48 == 0 && min_bytes >= 0);
    block_rows_max = rows, block_min_bytes = min_bytes;
}

/* Rows per block of an (N, OC) output: all N when its float32 is small. */
static int64_t block_rows(int64_t N, int64_t OC) {
    bool whole = N * OC * (int64_t)sizeof(float) <= block_min_bytes || N <= block_rows_max;
    return whole ? N : block_rows_max;
}

/* Columns per block of dout for dw (OC, C) += dout^T @ x: as many bytes as a
 * block of rows, in whole 48s. */
static int64_t block_cols(int64_t N, int64_t OC) {
    int64_t R = block_rows(N, OC), cols = R * OC / N / 48 * 48;
    return R == N || cols >= OC ? OC : cols > 48 ? cols : 48;
}

static void *row_ptr(void *base, ut_dtype dt, int64_t elems) { return (char *)base + (size_t)elems * ut_dtype_size(dt); }

/* out (N, OC) in 16-bit storage of dt = x @ w^T + b, R rows at a time */
static void linear_forward_16(const mm_path *p, void *out, ut_dtype dt, const float *x, const float *w,
                              const float *b, int64_t N, int64_t C, int64_t OC, const ut_kctx *k) {
    int64_t R = block_rows(N, OC);
    float *buf = ut_kscratch(k, (size_t)(R * OC) * sizeof(float));
    for (int64_t r0 = 0; r0 < N; r0 += R) {
        int64_t n = N - r0 < R ? N - r0 : R;
        linear_forward(p, buf, x + r0 * C, w, b, n, C, OC);
        ut_cpu_convert(row_ptr(out, dt, r0 * OC), dt, buf, UT_F32, n * OC);
    }
}

/* linear_backward with dout g (N, OC) in 16-bit storage of dt: dx by blocks
 * of dout's rows, dw and db by blocks of its columns (one block when small). */
static void linear_backward_16(const mm_path *p, const void *g, ut_dtype dt, float *dx, float dx_beta, float *dw,
                               float *db, const float *x, const float *w, int64_t N, int64_t C, int64_t OC,
                               const ut_kctx *k) {
    int64_t R = block_rows(N, OC), B = block_cols(N, OC);
    float *buf = ut_kscratch(k, (size_t)(R * OC > N * B ? R * OC : N * B) * sizeof(float));
    if (R == N) { /* the whole gradient widened once */
        ut_cpu_convert(buf, UT_F32, g, dt, N * OC);
        linear_backward(p, dx, dx_beta, dw, db, buf, x, w, N, C, OC);
        return;
    }
    for (int64_t r0 = 0; dx && r0 < N; r0 += R) { /* dx[r0:] += dout[r0:] @ w */
        int64_t n = N - r0 < R ? N - r0 : R;
        ut_cpu_convert(buf, UT_F32, row_ptr((void *)g, dt, r0 * OC), dt, n * OC);
        gemm(p, false, false, n, C, OC, buf, w, dx_beta, dx + r0 * C);
    }
    for (int64_t o0 = 0; (dw || db) && o0 < OC; o0 += B) { /* dw[o0:] += dout[:, o0:]^T @ x */
        int64_t m = OC - o0 < B ? OC - o0 : B;
        ut_cpu_convert_rows(buf, UT_F32, m, row_ptr((void *)g, dt, o0), dt, OC, N, m);
        if (dw) gemm(p, true, false, m, C, N, buf, x, 1.0f, dw + o0 * C);
        if (db) bias_grad(db + o0, buf, N, m);
    }
}

/* ---- linear with GELU (ut_linear_gelu; the act parameter, src/ops/params.h) ----
 * The product goes to the saved pre-activation buffer in the output's
 * storage dtype (a 16-bit one rounded, as the separate linear's output is)
 * and GELU reads it from there; backward writes dpre = dout * gelu'(pre)
 * (rounded to a 16-bit output's dtype, as the separate gelu's gradient of a
 * 16-bit tensor is) and runs linear's backward on it. Each step is the
 * separate ops' arithmetic on the same values (a 16-bit tensor widened,
 * computed in float32, rounded), so the values and gradients are theirs
 * to the bit. */
#define GELU_BLOCK ((int64_t)1 << 18) /* elements widened at a time */

static void gelu_out(ut_tensor *t, const void *pre, const ut_kctx *k) {
    int64_t n = ut_nelem(t);
    if (t->dtype == UT_F32) {
        ut_gelu_forward_cpu(ut_f32(t), pre, n);
        return;
    }
    float *buf = ut_kscratch(k, (size_t)(n < GELU_BLOCK ? n : GELU_BLOCK) * sizeof(float));
    for (int64_t i0 = 0; i0 < n; i0 += GELU_BLOCK) {
        int64_t m = n - i0 < GELU_BLOCK ? n - i0 : GELU_BLOCK;
        ut_cpu_convert(buf, UT_F32, row_ptr((void *)pre, t->dtype, i0), t->dtype, m);
        ut_gelu_forward_cpu(buf, buf, m);
        ut_cpu_convert(row_ptr(t->data, t->dtype, i0), t->dtype, buf, UT_F32, m);
    }
}

/* dpre (arena memory, the output's storage dtype) from t's gradient */
static const void *gelu_grad(ut_tensor *t, const ut_kctx *k) {
    int64_t n = ut_nelem(t);
    const void *pre = ut_linear_pre(t);
    void *d = ut_kalloc(k, (size_t)n * ut_dtype_size(t->dtype));
    if (t->dtype == UT_F32) {
        ut_gelu_backward_cpu(d, t->grad, pre, n, false);
        return d;
    }
    size_t block = (size_t)(n < GELU_BLOCK ? n : GELU_BLOCK) * sizeof(float);
    float *g = ut_kscratch(k, block), *x = ut_kscratch(k, block);
    for (int64_t i0 = 0; i0 < n; i0 += GELU_BLOCK) {
        int64_t m = n - i0 < GELU_BLOCK ? n - i0 : GELU_BLOCK;
        ut_cpu_convert(g, UT_F32, row_ptr(t->grad, t->dtype, i0), t->dtype, m);
        ut_cpu_convert(x, UT_F32, row_ptr((void *)pre, t->dtype, i0), t->dtype, m);
        ut_gelu_backward_cpu(g, g, x, m, false);
        ut_cpu_convert(row_ptr(d, t->dtype, i0), t->dtype, g, UT_F32, m);
    }
    return d;
}

void ut_linear_fwd_cpu(ut_tensor *t, UT_KCTX) {
    ut_tensor *x = t->src[0], *w = t->src[1], *b = t->src[2];
    int64_t C = w->ne[1], OC = w->ne[0], N = ut_nelem(x) / C;
    mm_path p = path_of(t, N * C + C * OC, k);
    bool gelu = ut_linear_act(t) == UT_LINEAR_GELU;
    /* the pre-activation kept where a backward will read it, else GELU in place */
    void *y = gelu && t->requires_grad ? ut_kalloc(k, (size_t)(N * OC) * ut_dtype_size(t->dtype)) : t->data;
    if (t->dtype != UT_F32) linear_forward_16(&p, y, t->dtype, ut_f32(x), ut_f32(w), b ? ut_f32(b) : NULL, N, C, OC, k);
    else linear_forward(&p, y, ut_f32(x), ut_f32(w), b ? ut_f32(b) : NULL, N, C, OC);
    if (gelu) {
        ut_linear_set_pre(t, y != t->data ? y : NULL);
        gelu_out(t, y, k);
    }
}

void ut_linear_bwd_cpu(ut_tensor *t, UT_KCTX) {
    ut_tensor *x = t->src[0], *w = t->src[1], *b = t->src[2];
    int64_t C = w->ne[1], OC = w->ne[0], N = ut_nelem(x) / C;
    mm_path p = path_of(t, N * OC + (N > OC ? N : OC) * C, k);
    float *dx = x->requires_grad ? x->grad : NULL, *dw = w->requires_grad ? w->grad : NULL;
    float *db = b && b->requires_grad ? b->grad : NULL;
    ut_kzero_fresh(k, t, 6u, ut_cpu_memset); /* dw, db are added into; dx is written when fresh */
    const void *g = ut_linear_act(t) == UT_LINEAR_GELU ? gelu_grad(t, k) : t->grad;
    if (t->dtype != UT_F32)
        linear_backward_16(&p, g, t->dtype, dx, ut_kbeta(k, 0), dw, db, ut_f32(x), ut_f32(w), N, C, OC, k);
    else linear_backward(&p, dx, ut_kbeta(k, 0), dw, db, g, ut_f32(x), ut_f32(w), N, C, OC);
}

/* ---- linear with cross-entropy (ut_linear_cross_entropy): x (N, C), w
 * (V, C), targets (N), b (V) or none -> the mean loss ----
 * The logits are linear's output (float32, or in the autocast dtype as a
 * 16-bit linear's output is stored) in a buffer of the op's own; the loss is
 * cross_entropy's of them (softmax.c, ut_ce_buf_*); backward writes the
 * logits' gradient over the buffer and runs linear's backward on it. So one
 * buffer of N x V stands where the two ops hold the logits and their
 * gradient, and the values are the two ops' bits. */
void ut_linear_ce_fwd_cpu(ut_tensor *t, UT_KCTX) {
    ut_tensor *x = t->src[0], *w = t->src[1], *tg = t->src[2], *b = t->src[3];
    int64_t C = w->ne[1], V = w->ne[0], N = ut_nelem(x) / C;
    int ignore = (int)ut_loss_ignore_index(t);
    int64_t count = ut_ce_buf_count_cpu(tg, V, ignore, k);
    if (count < 0) return;
    ut_dtype dt = t->autocast; /* the logits' storage: 16-bit under autocast, else float32 */
    size_t bytes = (size_t)(N * V) * ut_dtype_size(dt) + 1;
    bool grad = t->requires_grad;
    /* kept for backward in the arena; without one, in autocast's scratch
     * where core gives it back after the kernel (a 16-bit linear) */
    void *logits = grad || dt == UT_F32 ? ut_kalloc(k, bytes) : ut_kscratch(k, bytes);
    float *mx = NULL, *inv = NULL;
    if (grad) {
        inv = ut_kalloc(k, (size_t)(N ? N : 1) * sizeof(float));
        if (dt != UT_F32) mx = ut_kalloc(k, (size_t)(N ? N : 1) * sizeof(float));
    }
    mm_path p = path_of(t, N * C + C * V, k);
    if (dt != UT_F32) linear_forward_16(&p, logits, dt, ut_f32(x), ut_f32(w), b ? ut_f32(b) : NULL, N, C, V, k);
    else linear_forward(&p, logits, ut_f32(x), ut_f32(w), b ? ut_f32(b) : NULL, N, C, V);
    ut_f32(t)[0] = ut_ce_buf_fwd_cpu(logits, dt, mx, inv, ut_i32(tg), ignore, ut_loss_smoothing(t), N, V, count,
                                     grad, k);
    ut_loss_set_count(t, count);
    ut_linear_ce_set_logits(t, grad ? logits : NULL);
    ut_cross_entropy_set_row_max(t, mx);
    ut_cross_entropy_set_inv_sum(t, inv);
}

void ut_linear_ce_bwd_cpu(ut_tensor *t, UT_KCTX) {
    ut_tensor *x = t->src[0], *w = t->src[1], *tg = t->src[2], *b = t->src[3];
    int64_t C = w->ne[1], V = w->ne[0], N = ut_nelem(x) / C, count = ut_loss_count(t);
    float *dx = x->requires_grad ? x->grad : NULL, *dw = w->requires_grad ? w->grad : NULL;
    float *db = b && b->requires_grad ? b->grad : NULL;
    ut_kzero_fresh(k, t, 0xau, ut_cpu_memset); /* dw, db are added into; dx is written when fresh */
    if (count == 0) { /* every target ignored: the gradient is 0 */
        if (dx && ut_kbeta(k, 0) == 0.0f) ut_cpu_memset(dx, 0, (size_t)ut_nelem(x) * sizeof(float));
        return;
    }
    ut_dtype dt = t->autocast;
    void *g = ut_linear_ce_logits(t);
    ut_ce_buf_bwd_cpu(g, dt, ut_cross_entropy_row_max(t), ut_cross_entropy_inv_sum(t), ut_i32(tg),
                      (int)ut_loss_ignore_index(t), ut_loss_smoothing(t), t->grad[0] / (float)count, N, V, k);
    mm_path p = path_of(t, N * V + (N > V ? N : V) * C, k);
    if (dt != UT_F32) linear_backward_16(&p, g, dt, dx, ut_kbeta(k, 0), dw, db, ut_f32(x), ut_f32(w), N, C, V, k);
    else linear_backward(&p, dx, ut_kbeta(k, 0), dw, db, g, ut_f32(x), ut_f32(w), N, C, V);
}

void ut_matmul_fwd_cpu(ut_tensor *t, UT_KCTX) {
    ut_mm_dims d = ut_matmul_dims(t);
    const float *A = ut_f32(t->src[0]), *B = ut_f32(t->src[1]);
    if (d.shared_b) { /* one big gemm over all rows */
        mm_path p = path_of(t, d.batch * d.M * d.K + d.K * d.N, k);
        gemm(&p, false, false, d.batch * d.M, d.N, d.K, A, B, 0.0f, ut_f32(t));
        return;
    }
    mm_path p = path_of(t, d.M * d.K + d.K * d.N, k);
    for (int64_t i = 0; i < d.batch; i++)
        gemm(&p, false, false, d.M, d.N, d.K, A + i * d.M * d.K, B + i * d.K * d.N, 0.0f,
             ut_f32(t) + i * d.M * d.N);
}

/* The most operand elements one backward product of t reads. */
static int64_t bwd_operands(const ut_mm_dims *d) {
    int64_t rows = d->shared_b ? d->batch * d->M : d->M;
    int64_t da = rows * d->N + d->K * d->N, db = rows * d->K + rows * d->N;
    return da > db ? da : db;
}

void ut_matmul_bwd_cpu(ut_tensor *t, UT_KCTX) {
    ut_mm_dims d = ut_matmul_dims(t);
    ut_tensor *a = t->src[0], *b = t->src[1];
    const float *A = ut_f32(a), *B = ut_f32(b), *G = t->grad;
    mm_path p = path_of(t, bwd_operands(&d), k);
    if (d.shared_b) {
        if (a->requires_grad) gemm(&p, false, true, d.batch * d.M, d.K, d.N, G, B, 1.0f, a->grad);
        if (b->requires_grad) gemm(&p, true, false, d.K, d.N, d.batch * d.M, A, G, 1.0f, b->grad);
        return;
    }
    for (int64_t i = 0; i < d.batch; i++) {
        const float *g = G + i * d.M * d.N;
        if (a->requires_grad)  /* dA (M,K) += G (M,N) @ B^T */
            gemm(&p, false, true, d.M, d.K, d.N, g, B + i * d.K * d.N, 1.0f, a->grad + i * d.M * d.K);
        if (b->requires_grad)  /* dB (K,N) += A^T @ G */
            gemm(&p, true, false, d.K, d.N, d.M, A + i * d.M * d.K, g, 1.0f, b->grad + i * d.K * d.N);
    }
}

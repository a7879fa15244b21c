/* Matrix products on the GPU: linear (x W^T + b) and batched matmul, through
 * cuBLASLt (gemm.cu), with the CPU backend's semantics
 * (src/backend/cpu/matmul.c); the bias gradient is a fixed-order column sum.
 * Under autocast the operands arrive as float32 copies rounded to bf16/fp16
 * (src/core/autocast.c) and the products run on the 16-bit tensor cores
 * (ut_cuda_gemm_rounded). */
#include "cuda.h"
#include "flat.h"

static float *f32(const ut_tensor *t) { return (float *)t->data; }

/* ---- linear: x (N, C), w (OC, C), b (OC) -> out (N, OC) ---- */
void ut_linear_fwd_cuda(ut_tensor *t) {
    ut_cuda_gemm_rounded((int)t->autocast);
    ut_tensor *x = t->src[0], *w = t->src[1], *b = t->src[2];
    int64_t C = w->ne[1], OC = w->ne[0], N = ut_nelem(x) / C;
    if (b) utk_rows_fill(f32(t), f32(b), N, OC);
    ut_cuda_sgemm(false, true, N, OC, C, 1.0f, f32(x), C, 0, f32(w), C, 0, b ? 1.0f : 0.0f, f32(t), OC, 0, 1);
}

void ut_linear_bwd_cuda(ut_tensor *t) {
    ut_cuda_gemm_rounded((int)t->autocast);
    ut_tensor *x = t->src[0], *w = t->src[1], *b = t->src[2];
    int64_t C = w->ne[1], OC = w->ne[0], N = ut_nelem(x) / C;
    const float *G = t->grad;
    if (x->requires_grad) /* dx (N, C) += dout (N, OC) @ w (OC, C) */
        ut_cuda_sgemm(false, false, N, C, OC, 1.0f, G, OC, 0, f32(w), C, 0, 1.0f, x->grad, C, 0, 1);
    if (w->requires_grad) /* dw (OC, C) += dout^T @ x */
        ut_cuda_sgemm(true, false, OC, C, N, 1.0f, G, OC, 0, f32(x), C, 0, 1.0f, w->grad, C, 0, 1);
    if (b && b->requires_grad) utk_col_sum_add(b->grad, G, N, OC);
}

/* ---- matmul: a (..., M, K) @ b (K, N) or (..., K, N) ---- */
typedef struct { int64_t batch, M, K, N; bool shared_b; } mm_dims;

static mm_dims dims_of(const ut_tensor *t) {
    const ut_tensor *a = t->src[0], *b = t->src[1];
    mm_dims d = {.M = a->ne[a->ndim - 2], .K = a->ne[a->ndim - 1], .N = b->ne[b->ndim - 1]};
    d.batch = ut_nelem(a) / (d.M * d.K);
    d.shared_b = b->ndim == 2;
    return d;
}

void ut_matmul_fwd_cuda(ut_tensor *t) {
    ut_cuda_gemm_rounded((int)t->autocast);
    mm_dims d = dims_of(t);
    const float *A = f32(t->src[0]), *B = f32(t->src[1]);
    if (d.shared_b) /* one product over all rows */
        ut_cuda_sgemm(false, false, d.batch * d.M, d.N, d.K, 1.0f, A, d.K, 0, B, d.N, 0, 0.0f, f32(t), d.N, 0, 1);
    else
        ut_cuda_sgemm(false, false, d.M, d.N, d.K, 1.0f, A, d.K, d.M * d.K, B, d.N, d.K * d.N, 0.0f, f32(t), d.N,
                      d.M * d.N, d.batch);
}

void ut_matmul_bwd_cuda(ut_tensor *t) {
    ut_cuda_gemm_rounded((int)t->autocast);
    mm_dims d = dims_of(t);
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

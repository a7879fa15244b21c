/* Row-major float32 matrix products through cuBLASLt (cuda.h, ut_cuda_sgemm).
 *
 * cuBLASLt is column-major. A row-major matrix stored r x c with row stride
 * ld is the column-major c x r matrix with leading dimension ld, so the
 * row-major C = opA(A) opB(B) is computed as the column-major
 * C^T = opB(B)^T opA(A)^T: cuBLASLt's first operand is our B, its second our
 * A, with the same transpose flags. */
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda.h"
#include "flat.h"

static cublasLtHandle_t g_lt;
static void *g_ws;
static const size_t WS_BYTES = 32u << 20;
static bool g_tf32, g_tf32_given; /* TF32 products; set by ut_cuda_set_tf32 (else UT_CUDA_TF32) */
/* UT_CUDA_GEMM=cublas: the products through cuBLAS's classic strided-batched
 * SGEMM instead of cuBLASLt (both are deterministic); for comparing the two
 * libraries' kernel choice (docs/gpu.md) */
static bool g_classic;
static cublasHandle_t g_blas;
/* UT_CUDA_LT_FUSED=0: 16-bit outputs through float32 scratch and a rounding
 * pass instead of cuBLASLt writing them (for comparing; docs/gpu.md) */
static bool g_no_fused;

/* autocast's dtype for the products queued now (0: none, 1: bf16, 2: fp16,
 * as ut_dtype), and the 16-bit copies of their operands: process-wide
 * buffers that only grow (work on the one stream runs in order, so a copy is
 * not overwritten before the product that reads it has run) */
static int g_round_dt;
static void *g_op16[2];
static size_t g_op16_cap[2];
/* (UT_CUDA_TF32=1 turns TF32 on at the first product unless this was called) */
extern "C" void ut_cuda_set_tf32(bool on) {
    g_tf32 = on;
    g_tf32_given = true;
    if (g_blas) cublasSetMathMode(g_blas, on ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_PEDANTIC_MATH);
}
extern "C" void ut_cuda_gemm_rounded(int dt) { g_round_dt = dt == 1 || dt == 2 ? dt : 0; }

static void lt_check(cublasStatus_t s, const char *what) {
    if (s != CUBLAS_STATUS_SUCCESS) {
        char msg[160];
        snprintf(msg, sizeof msg, "cuBLASLt %s failed (status %d)", what, (int)s);
        ut_cuda_launched(msg);  /* reports a pending CUDA error if there is one */
        fprintf(stderr, "utrain: %s\n", msg);
        abort();
    }
}

static void lt_init(void) {
    if (g_lt) return;
    const char *e = getenv("UT_CUDA_TF32"); /* 1: TF32 products (docs/gpu.md) */
    if (e && e[0] == '1' && !g_tf32_given) g_tf32 = true;
    e = getenv("UT_CUDA_GEMM");
    g_classic = e && !strcmp(e, "cublas");
    e = getenv("UT_CUDA_LT_FUSED");
    g_no_fused = e && e[0] == '0';
    if (g_classic) {
        if (cublasCreate(&g_blas) != CUBLAS_STATUS_SUCCESS) lt_check(CUBLAS_STATUS_NOT_INITIALIZED, "cuBLAS create");
        cublasSetStream(g_blas, (cudaStream_t)ut_cuda_stream());
        cublasSetMathMode(g_blas, g_tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_PEDANTIC_MATH);
        /* (the classic path keeps its math mode for autocast's rounded operands too: a comparison tool) */
    }
    lt_check(cublasLtCreate(&g_lt), "create");
    g_ws = ut_cuda_malloc(WS_BYTES, "the cuBLASLt workspace");
}

extern "C" bool ut_cuda_tf32(void) {
    lt_init(); /* reads UT_CUDA_TF32 */
    return g_tf32;
}
extern "C" int ut_cuda_gemm_rounding(void) { return g_round_dt; }

/* column-major layout of a row-major matrix stored rows x cols (row stride ld) */
static cublasLtMatrixLayout_t layout(int64_t rows, int64_t cols, int64_t ld, int64_t stride, int64_t batch,
                                     cudaDataType_t dt = CUDA_R_32F) {
    cublasLtMatrixLayout_t l;
    lt_check(cublasLtMatrixLayoutCreate(&l, dt, (uint64_t)cols, (uint64_t)rows, ld), "layout");
    if (batch > 1) {
        int32_t b = (int32_t)batch;
        lt_check(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &b, sizeof b), "batch");
        lt_check(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
                                                  sizeof stride), "batch stride");
    }
    return l;
}

/* the same product through cuBLAS's classic API (column-major, operands swapped as above) */
static void classic_product(bool transA, bool transB, int64_t m, int64_t n, int64_t k, float alpha, const float *A,
                            int64_t lda, int64_t sA, const float *B, int64_t ldb, int64_t sB, float beta, float *C,
                            int64_t ldc, int64_t sC, int64_t batch) {
    cublasOperation_t ta = transB ? CUBLAS_OP_T : CUBLAS_OP_N, tb = transA ? CUBLAS_OP_T : CUBLAS_OP_N;
    lt_check(cublasSgemmStridedBatched(g_blas, ta, tb, (int)n, (int)m, (int)k, &alpha, B, (int)ldb, sB, A, (int)lda,
                                       sA, &beta, C, (int)ldc, sC, (int)batch),
             "cuBLAS sgemm");
}

/* The 16-bit copy (dt) of the elements a strided batch of row-major
 * matrices spans (rows x cols, row stride ld, batch stride s), in buffer
 * slot; its values are already rounded to dt, so the copy is exact. */
static const void *copy16(int slot, const float *x, int64_t rows, int64_t cols, int64_t ld, int64_t s,
                          int64_t batch, int dt) {
    int64_t n = (batch > 1 ? (batch - 1) * s : 0) + (rows - 1) * ld + cols;
    size_t bytes = (size_t)n * 2;
    if (bytes > g_op16_cap[slot]) {
        if (g_op16[slot]) {
            cudaStreamSynchronize((cudaStream_t)ut_cuda_stream());
            cudaFree(g_op16[slot]);
        }
        g_op16[slot] = ut_cuda_malloc(bytes, "16-bit copies of a product's operands");
        g_op16_cap[slot] = bytes;
    }
    utk_convert(g_op16[slot], dt, x, 0, n);
    return g_op16[slot];
}

/* p's alignment in bytes, at most 256 */
static uint32_t alignment(const void *p) {
    uint32_t a = 256;
    while (a > 1 && (uintptr_t)p % a) a >>= 1;
    return a;
}

/* The operation op of the row-major operands (the layouts made from their
 * stored shapes, swapped as above) queued with the heuristic's first
 * algorithm; frees op and the layouts. false when there is none; with
 * optional, also when the heuristic rejects the combination outright (else
 * that is fatal).
 * The heuristic is told how the operands are aligned: it assumes 256 bytes
 * unless told, and an algorithm chosen for that may refuse a pointer into
 * the middle of a tensor (a head's columns, a parameter in the flat
 * buffer). */
static bool lt_run(cublasLtMatmulDesc_t op, cublasLtMatrixLayout_t la, cublasLtMatrixLayout_t lb,
                   cublasLtMatrixLayout_t lc, float alpha, const void *A, const void *B, float beta, void *C,
                   bool optional) {
    cublasLtMatmulPreference_t pref;
    lt_check(cublasLtMatmulPreferenceCreate(&pref), "preference");
    uint64_t ws = WS_BYTES;
    lt_check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws),
             "workspace");
    /* cuBLASLt's A is our B (swapped as above); C is D */
    const void *by_lt[4] = {B, A, C, C};
    for (int i = 0; i < 4; i++) {
        uint32_t al = alignment(by_lt[i]);
        lt_check(cublasLtMatmulPreferenceSetAttribute(
                     pref, (cublasLtMatmulPreferenceAttributes_t)(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES + i), &al,
                     sizeof al),
                 "alignment");
    }
    cublasLtMatmulHeuristicResult_t heur;
    int found = 0;
    cublasStatus_t hs = cublasLtMatmulAlgoGetHeuristic(g_lt, op, lb, la, lc, lc, pref, 1, &heur, &found);
    if (hs != CUBLAS_STATUS_SUCCESS) {
        if (!optional) lt_check(hs, "heuristic");
        found = 0;
    }
    if (found >= 1)
        lt_check(cublasLtMatmul(g_lt, op, &alpha, B, lb, A, la, &beta, C, lc, C, lc, &heur.algo, g_ws, WS_BYTES,
                                (cudaStream_t)ut_cuda_stream()),
                 "matmul");
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(lc);
    cublasLtMatmulDescDestroy(op);
    return found >= 1;
}

/* A product's descriptor: compute type, float32 scalars, the transposes
 * (swapped as above) */
static cublasLtMatmulDesc_t lt_desc(bool transA, bool transB, cublasComputeType_t compute) {
    cublasLtMatmulDesc_t op;
    lt_check(cublasLtMatmulDescCreate(&op, compute, CUDA_R_32F), "desc");
    cublasOperation_t ta = transB ? CUBLAS_OP_T : CUBLAS_OP_N, tb = transA ? CUBLAS_OP_T : CUBLAS_OP_N;
    lt_check(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta), "transa");
    lt_check(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb), "transb");
    return op;
}

/* One cuBLASLt product (row-major operands swapped as above) with operands
 * of type in_t and float32 C; false when cuBLASLt has no algorithm for it. */
static bool lt_product(bool transA, bool transB, int64_t m, int64_t n, int64_t k, float alpha, const void *A,
                       int64_t lda, int64_t sA, const void *B, int64_t ldb, int64_t sB, float beta, float *C,
                       int64_t ldc, int64_t sC, int64_t batch, cudaDataType_t in_t, cublasComputeType_t compute) {
    cublasLtMatmulDesc_t op = lt_desc(transA, transB, compute);
    /* stored shapes (row-major): B is k x n or n x k, A is m x k or k x m */
    cublasLtMatrixLayout_t lb = transB ? layout(n, k, ldb, sB, batch, in_t) : layout(k, n, ldb, sB, batch, in_t);
    cublasLtMatrixLayout_t la = transA ? layout(k, m, lda, sA, batch, in_t) : layout(m, k, lda, sA, batch, in_t);
    return lt_run(op, la, lb, layout(m, n, ldc, sC, batch), alpha, A, B, beta, C, false);
}

static void one_product(bool transA, bool transB, int64_t m, int64_t n, int64_t k, float alpha,
                        const float *A, int64_t lda, int64_t sA, const float *B, int64_t ldb, int64_t sB,
                        float beta, float *C, int64_t ldc, int64_t sC, int64_t batch) {
    if (g_classic) {
        classic_product(transA, transB, m, n, k, alpha, A, lda, sA, B, ldb, sB, beta, C, ldc, sC, batch);
        return;
    }
    /* autocast: the operands' 16-bit copies on the 16-bit tensor cores, float32
     * accumulation and output (TF32, which holds the rounded values exactly,
     * where cuBLASLt has no 16-bit kernel for the layout) */
    int dt16 = g_round_dt;
    if (dt16) {
        const void *a16 = transA ? copy16(0, A, k, m, lda, sA, batch, dt16) : copy16(0, A, m, k, lda, sA, batch, dt16);
        const void *b16 = transB ? copy16(1, B, n, k, ldb, sB, batch, dt16) : copy16(1, B, k, n, ldb, sB, batch, dt16);
        if (lt_product(transA, transB, m, n, k, alpha, a16, lda, sA, b16, ldb, sB, beta, C, ldc, sC, batch,
                       dt16 == 1 ? CUDA_R_16BF : CUDA_R_16F, CUBLAS_COMPUTE_32F))
            return;
    }
    if (!lt_product(transA, transB, m, n, k, alpha, A, lda, sA, B, ldb, sB, beta, C, ldc, sC, batch, CUDA_R_32F,
                    g_tf32 || dt16 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F))
        lt_check(CUBLAS_STATUS_NOT_SUPPORTED, "heuristic (no algorithm)");
}

/* A product with an empty inner dimension: C = beta C (the ops pass beta 0
 * or 1). */
static void empty_product(int64_t m, int64_t n, float beta, float *C, int64_t ldc, int64_t sC, int64_t batch) {
    if (beta != 0.0f && beta != 1.0f) lt_check(CUBLAS_STATUS_INVALID_VALUE, "a product with k = 0 and beta not 0 or 1");
    for (int64_t b = 0; beta == 0.0f && b < batch; b++)
        cudaMemset2DAsync(C + b * sC, (size_t)ldc * sizeof(float), 0, (size_t)n * sizeof(float), (size_t)m,
                          (cudaStream_t)ut_cuda_stream());
}

/* A 16-bit product with a 16-bit result written by cuBLASLt itself:
 * D (dt) = alpha opA(A) opB(B) + beta D, plus bias (float32, one value per
 * column of the row-major result) when given, computed in float32 and
 * rounded once to dt; with gelu, GELU of that (cuBLASLt's GELU epilogue),
 * and with aux the value before GELU stored there too (dt, rows ldd apart,
 * as D's). false when cuBLASLt has no algorithm for it (or
 * UT_CUDA_LT_FUSED=0): nothing was queued. */
static bool gemm16_out(bool transA, bool transB, int64_t m, int64_t n, int64_t k, float alpha, const void *A,
                       int64_t lda, const void *B, int64_t ldb, float beta, void *D, int64_t ldd, int dt,
                       const float *bias, bool gelu, void *aux) {
    if (m <= 0 || n <= 0 || k <= 0) return false;
    lt_init();
    if (g_no_fused || g_classic) return false;
    cudaDataType_t t16 = dt == 2 ? CUDA_R_16F : CUDA_R_16BF;
    cublasLtMatmulDesc_t op = lt_desc(transA, transB, CUBLAS_COMPUTE_32F);
    if (bias || gelu) { /* the column-major result is our row-major one transposed: a bias value per its row */
        cublasLtEpilogue_t epi = !gelu ? CUBLASLT_EPILOGUE_BIAS
                                 : aux  ? (bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX)
                                        : (bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU);
        lt_check(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi), "epilogue");
    }
    if (bias) {
        cudaDataType_t bt = CUDA_R_32F;
        lt_check(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias), "bias");
        lt_check(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt),
                 "bias type");
    }
    if (aux) { /* the pre-GELU values in D's type and layout */
        int64_t ld = ldd;
        lt_check(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux),
                 "GELU's aux pointer");
        lt_check(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof ld),
                 "GELU's aux leading dimension");
    }
    cublasLtMatrixLayout_t lb = transB ? layout(n, k, ldb, 0, 1, t16) : layout(k, n, ldb, 0, 1, t16);
    cublasLtMatrixLayout_t la = transA ? layout(k, m, lda, 0, 1, t16) : layout(m, k, lda, 0, 1, t16);
    return lt_run(op, la, lb, layout(m, n, ldd, 0, 1, t16), alpha, A, B, beta, D, true);
}

extern "C" bool ut_cuda_gemm16_out(bool transA, bool transB, int64_t m, int64_t n, int64_t k, float alpha,
                                   const void *A, int64_t lda, const void *B, int64_t ldb, float beta, void *D,
                                   int64_t ldd, int dt, const float *bias) {
    return gemm16_out(transA, transB, m, n, k, alpha, A, lda, B, ldb, beta, D, ldd, dt, bias, false, NULL);
}

extern "C" bool ut_cuda_gemm16_gelu(bool transA, bool transB, int64_t m, int64_t n, int64_t k, const void *A,
                                    int64_t lda, const void *B, int64_t ldb, void *D, int64_t ldd, int dt,
                                    const float *bias, void *aux) {
    if (aux && ldd % 8) return false; /* cuBLASLt's rule for the aux matrix's leading dimension */
    return gemm16_out(transA, transB, m, n, k, 1.0f, A, lda, B, ldb, 0.0f, D, ldd, dt, bias, true, aux);
}

extern "C" void ut_cuda_gemm16(bool transA, bool transB, int64_t m, int64_t n, int64_t k, float alpha,
                               const void *A, int64_t lda, const void *B, int64_t ldb, float beta, float *C,
                               int64_t ldc, int dt) {
    if (m <= 0 || n <= 0) return;
    if (k <= 0) {
        empty_product(m, n, beta, C, ldc, 0, 1);
        return;
    }
    lt_init();
    if (!lt_product(transA, transB, m, n, k, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc, 0, 1,
                    dt == 2 ? CUDA_R_16F : CUDA_R_16BF, CUBLAS_COMPUTE_32F))
        lt_check(CUBLAS_STATUS_NOT_SUPPORTED, "heuristic for a 16-bit product (no algorithm)");
}

extern "C" void ut_cuda_sgemm(bool transA, bool transB, int64_t m, int64_t n, int64_t k, float alpha,
                              const float *A, int64_t lda, int64_t sA, const float *B, int64_t ldb,
                              int64_t sB, float beta, float *C, int64_t ldc, int64_t sC, int64_t batch) {
    if (m <= 0 || n <= 0 || batch <= 0) return;
    lt_init();
    if (k <= 0) {
        empty_product(m, n, beta, C, ldc, sC, batch);
        return;
    }
    if (batch > 1 && (sA == 0 || sB == 0)) { /* a shared operand: one product per entry */
        for (int64_t b = 0; b < batch; b++)
            one_product(transA, transB, m, n, k, alpha, A + b * sA, lda, 0, B + b * sB, ldb, 0, beta,
                        C + b * sC, ldc, 0, 1);
        return;
    }
    one_product(transA, transB, m, n, k, alpha, A, lda, sA, B, ldb, sB, beta, C, ldc, sC, batch);
}

/* Matrix products of the CPU backend: OpenBLAS sgemm glue (gemm.c), and bf16
 * products through oneDNN where the CPU has bf16 instructions (dnnl_matmul.c).
 * defines: ut_gemm (row-major C = alpha op(A) op(B) + beta C), ut_gemm_ld, ut_bf16_isa,
 *          ut_cpu_bf16_isa, ut_dnnl_gemm_bf16, ut_bf16_use_dnnl, ut_bf16_force_dnnl,
 *          ut_cpu_matmul_path. */
#ifndef UTRAIN_CPU_GEMM_H
#define UTRAIN_CPU_GEMM_H
#include <stdbool.h>
#include <stdint.h>

#include "utrain/tensor.h"

/* C (M,N) = alpha * op(A) (M,K) @ op(B) (K,N) + beta * C, all row-major and
 * contiguous; ta/tb say A is stored (K,M) / B is stored (N,K). */
void ut_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
             const float *B, float beta, float *C);
/* The same on blocks of larger row-major matrices: leading dimensions lda,
 * ldb, ldc (elements between rows as stored). */
void ut_gemm_ld(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
                const float *B, int64_t ldb, float beta, float *C, int64_t ldc);

/* The bf16 instructions of this CPU that the OS has enabled (cpuid, XCR0). */
typedef enum { UT_BF16_ISA_NONE = 0, UT_BF16_ISA_AVX512, UT_BF16_ISA_AMX } ut_bf16_isa;
ut_bf16_isa ut_cpu_bf16_isa(void);

/* C (M,N) = op(A) @ op(B) + beta C (beta 0 or 1) through oneDNN's bf16
 * matmul, layouts as ut_gemm: A and B are float32 holding bf16 values, stored
 * as bf16 in scratch (M*K + K*N elements), fp32 accumulation and output.
 * 0, or -1 when oneDNN has no bf16 matmul on this CPU (C untouched). */
int ut_dnnl_gemm_bf16(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float *A, const float *B,
                      float beta, float *C, uint16_t *scratch);

/* Whether autocast's bf16 products go through ut_dnnl_gemm_bf16: the CPU has
 * bf16 instructions and oneDNN creates a bf16 matmul on it (decided once).
 * ut_bf16_force_dnnl(1) makes them try it whatever the CPU (a product oneDNN
 * refuses then falls back to sgemm), 0 never, -1 back to the detection:
 * for tests. */
bool ut_bf16_use_dnnl(void);
void ut_bf16_force_dnnl(int on);

/* What products of autocast dtype dt run on, for the log: "oneDNN AMX",
 * "fp32 sgemm on bf16-rounded inputs (CPU has no bf16 instructions)", ... */
const char *ut_cpu_matmul_path(ut_dtype dt);
#endif

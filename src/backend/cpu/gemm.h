/* OpenBLAS sgemm glue for the CPU backend.
 * defines: ut_gemm (row-major C = alpha op(A) op(B) + beta C). */
#ifndef UTRAIN_CPU_GEMM_H
#define UTRAIN_CPU_GEMM_H
#include <stdbool.h>
#include <stdint.h>

/* C (M,N) = alpha * op(A) (M,K) @ op(B) (K,N) + beta * C, all row-major and
 * contiguous; ta/tb say A is stored (K,M) / B is stored (N,K). */
void ut_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
             const float *B, float beta, float *C);
#endif

/* OpenBLAS sgemm glue. */
#include "gemm.h"

#include <cblas.h>

void ut_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
             const float *B, float beta, float *C) {
    if (M == 0 || N == 0) return;
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                (int)M, (int)N, (int)K, alpha, A, ta ? (int)M : (int)K, B, tb ? (int)K : (int)N,
                beta, C, (int)N);
}

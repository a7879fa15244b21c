/* The CUDA backend's matrix products (the API of src/backend/cuda/gemm.cu,
 * declared in cuda.h) on the CUDA emulator, in place of cuBLASLt: plain
 * loops summing in double, the operands rounded as the GPU's tensor cores
 * would take them (TF32 when ut_cuda_set_tf32 or UT_CUDA_TF32=1 asks for
 * it; autocast's operands are exact in their 16-bit type already), a 16-bit
 * result rounded once. UT_CUDA_LT_FUSED=0 refuses ut_cuda_gemm16_out as
 * gemm.cu does, so the caller's own rounding path runs. */
#include "cuda_emu.h"

#include "cuda.h"

#include <vector>

namespace {

bool g_tf32, g_init;
int g_round_dt;

void init() {
    if (g_init) return;
    g_init = true;
    const char *e = getenv("UT_CUDA_TF32");
    if (e && e[0] == '1') g_tf32 = true;
}

/* x rounded to TF32 (10 mantissa bits, nearest even), as the tensor cores read float32 */
float tf32(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7f800000u) == 0x7f800000u) return x;
    u = (u + 0xfffu + ((u >> 13) & 1u)) & ~0x1fffu;
    memcpy(&x, &u, 4);
    return x;
}

float load(const void *p, int dt, int64_t i) {
    if (dt == 1) return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
    if (dt == 2) return __half2float(((const __half *)p)[i]);
    return ((const float *)p)[i];
}

/* element (r, c) of op(X), X stored row-major with row stride ld */
inline int64_t at(bool trans, int64_t r, int64_t c, int64_t ld) { return trans ? c * ld + r : r * ld + c; }

/* C (m x n, row stride ldc) = alpha op(A) op(B) + beta C, operands in adt,
 * result through put: op(A) and op(B) copied into contiguous float rows
 * first (rounded to TF32 when asked), then each entry summed along k in
 * order with fused multiply-adds, as the GPU's and OpenBLAS's kernels
 * accumulate (other orders drift from the CPU's results by float rounding,
 * which a few AdamW steps amplify); vectorised across a row's columns */
template <typename PUT>
void product(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const void *A, int adt, int64_t lda,
             const void *B, int bdt, int64_t ldb, bool round_tf32, PUT put) {
    std::vector<float> a((size_t)(m * k)), b((size_t)(k * n)), acc((size_t)n);
    for (int64_t i = 0; i < m; i++)
        for (int64_t p = 0; p < k; p++) {
            float v = load(A, adt, at(ta, i, p, lda));
            a[(size_t)(i * k + p)] = round_tf32 ? tf32(v) : v;
        }
    for (int64_t p = 0; p < k; p++)
        for (int64_t j = 0; j < n; j++) {
            float v = load(B, bdt, at(tb, p, j, ldb));
            b[(size_t)(p * n + j)] = round_tf32 ? tf32(v) : v;
        }
    for (int64_t i = 0; i < m; i++) {
        float *c = acc.data();
        for (int64_t j = 0; j < n; j++) c[j] = 0.0f;
        for (int64_t p = 0; p < k; p++) {
            const float x = a[(size_t)(i * k + p)], *y = &b[(size_t)(p * n)];
            for (int64_t j = 0; j < n; j++) c[j] = fmaf(x, y[j], c[j]);
        }
        for (int64_t j = 0; j < n; j++) put(i, j, alpha * c[j]);
    }
}

} // namespace

extern "C" {
void ut_cuda_set_tf32(bool on) {
    init();
    g_tf32 = on;
}
bool ut_cuda_tf32(void) {
    init();
    return g_tf32;
}
void ut_cuda_gemm_rounded(int dt) { g_round_dt = dt == 1 || dt == 2 ? dt : 0; }
int ut_cuda_gemm_rounding(void) { return g_round_dt; }

void ut_cuda_sgemm(bool transA, bool transB, int64_t m, int64_t n, int64_t k, float alpha, const float *A, int64_t lda,
                   int64_t sA, const float *B, int64_t ldb, int64_t sB, float beta, float *C, int64_t ldc, int64_t sC,
                   int64_t batch) {
    init();
    bool r = g_tf32 || g_round_dt; /* autocast's rounded operands: exact in TF32 */
    for (int64_t b = 0; b < batch; b++) {
        float *c = C + b * sC;
        product(transA, transB, m, n, k, alpha, A + b * sA, 0, lda, B + b * sB, 0, ldb, r,
                [&](int64_t i, int64_t j, float v) { c[i * ldc + j] = beta == 0.0f ? v : v + beta * c[i * ldc + j]; });
    }
}

void ut_cuda_gemm16(bool transA, bool transB, int64_t m, int64_t n, int64_t k, float alpha, const void *A, int64_t lda,
                    const void *B, int64_t ldb, float beta, float *C, int64_t ldc, int dt) {
    product(transA, transB, m, n, k, alpha, A, dt, lda, B, dt, ldb, false,
            [&](int64_t i, int64_t j, float v) { C[i * ldc + j] = beta == 0.0f ? v : v + beta * C[i * ldc + j]; });
}

bool ut_cuda_gemm16_out(bool transA, bool transB, int64_t m, int64_t n, int64_t k, float alpha, const void *A,
                        int64_t lda, const void *B, int64_t ldb, float beta, void *D, int64_t ldd, int dt,
                        const float *bias) {
    const char *e = getenv("UT_CUDA_LT_FUSED");
    if (e && e[0] == '0') return false;
    product(transA, transB, m, n, k, alpha, A, dt, lda, B, dt, ldb, false, [&](int64_t i, int64_t j, float v) {
        int64_t o = i * ldd + j;
        float d = v + (beta == 0.0f ? 0.0f : beta * load(D, dt, o)) + (bias ? bias[j] : 0.0f);
        if (dt == 1) ((__nv_bfloat16 *)D)[o] = __float2bfloat16_rn(d);
        else ((__half *)D)[o] = __float2half_rn(d);
    });
    return true;
}
}

/* CUDA kernels of the reductions to a scalar, SUM, MEAN and MSE, and their
 * backward. The forward sums in double, in two passes with an order fixed by
 * n alone: block b's threads take elements b * 256 + t, then every
 * grid-width further, a fixed tree sums each block, and one block sums the
 * blocks' partials the same way. The CPU sums serially in double, so the
 * float results agree but for the rare last-bit tie. */
#include <cuda_runtime.h>
#include <stdint.h>

#include "cuda.h"
#include "launch.cuh"
#include "ew.h"

namespace {

using utk::blocks_for;
using utk::kThreads;

constexpr int64_t kMaxParts = 1024;   /* blocks of the first pass */
constexpr int64_t kPerBlock = 4096;   /* elements per block below kMaxParts blocks */

int64_t parts_for(int64_t n) {
    int64_t p = (n + kPerBlock - 1) / kPerBlock;
    return p < kMaxParts ? p : kMaxParts;
}

/* the sum of v over a block of kThreads threads, in a fixed order; valid in thread 0 */
__device__ double block_sum(double v) {
    __shared__ double warp_sums[kThreads / 32];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    if (lane == 0) warp_sums[w] = v;
    __syncthreads();
    if (w == 0) {
        v = lane < kThreads / 32 ? warp_sums[lane] : 0.0;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    }
    return v;
}

/* part[blockIdx.x] = this block's share of the sum of x (n), or with SQDIFF
 * of (x - y)^2, in double */
template <bool SQDIFF>
__global__ void __launch_bounds__(kThreads)
    partial_kernel(double *__restrict__ part, const float *__restrict__ x,
                   const float *__restrict__ y, int64_t n) {
    int64_t step = (int64_t)gridDim.x * kThreads;
    double acc = 0.0;
    for (int64_t i = (int64_t)blockIdx.x * kThreads + threadIdx.x; i < n; i += step) {
        if (SQDIFF) {
            double d = (double)x[i] - (double)y[i];
            acc += d * d;
        } else {
            acc += (double)x[i];
        }
    }
    acc = block_sum(acc);
    if (threadIdx.x == 0) part[blockIdx.x] = acc;
}

/* out[0] = the sum of part (nparts), divided by n when divide (0 when n == 0) */
__global__ void __launch_bounds__(kThreads)
    final_kernel(float *__restrict__ out, const double *__restrict__ part, int64_t nparts,
                 int64_t n, bool divide) {
    double acc = 0.0;
    for (int64_t i = threadIdx.x; i < nparts; i += kThreads) acc += part[i];
    acc = block_sum(acc);
    if (threadIdx.x == 0) {
        if (!divide) out[0] = (float)acc;
        else out[0] = n ? (float)(acc / (double)n) : 0.0f;
    }
}

void sum_launch(float *out, const float *x, const float *y, int64_t n, bool sqdiff, bool divide,
                void *scratch, const char *what) {
    cudaStream_t s = (cudaStream_t)ut_cuda_stream();
    double *part = (double *)scratch;
    int64_t np = n > 0 ? parts_for(n) : 0;
    if (np > 0) {
        if (sqdiff) partial_kernel<true><<<(unsigned)np, kThreads, 0, s>>>(part, x, y, n);
        else partial_kernel<false><<<(unsigned)np, kThreads, 0, s>>>(part, x, y, n);
        ut_cuda_launched(what);
    }
    final_kernel<<<1, kThreads, 0, s>>>(out, part, np, n, divide);
    ut_cuda_launched(what);
}

/* dx (n) += g[0], or g[0] / n with mean */
__global__ void spread_kernel(float *__restrict__ dx, const float *__restrict__ g, int64_t n,
                              bool mean) {
    float v = mean ? __fdiv_rn(g[0], (float)n) : g[0];
    int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step)
        dx[i] = __fadd_rn(dx[i], v);
}

/* d = (2 g[0] / n) (a - b): da (n) += d, db (n) -= d; either may be NULL */
__global__ void mse_bwd_kernel(float *da, float *db, /* the same buffer for mse(x, x) */
                               const float *__restrict__ a, const float *__restrict__ b,
                               const float *__restrict__ g, int64_t n) {
    float k = __fdiv_rn(__fmul_rn(2.0f, g[0]), (float)n);
    int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {
        float d = __fmul_rn(k, __fsub_rn(a[i], b[i]));
        if (da) da[i] = __fadd_rn(da[i], d);
        if (db) db[i] = __fsub_rn(db[i], d);
    }
}

} // namespace

extern "C" size_t ut_cuda_sum_scratch(int64_t n) {
    int64_t np = n > 0 ? parts_for(n) : 1;
    return (size_t)np * sizeof(double);
}

extern "C" void ut_cuda_sum(float *out, const float *x, int64_t n, bool mean, void *scratch) {
    sum_launch(out, x, nullptr, n, false, mean, scratch, mean ? "mean_fwd" : "sum_fwd");
}

extern "C" void ut_cuda_spread(float *dx, const float *g, int64_t n, bool mean) {
    if (n <= 0) return;
    spread_kernel<<<blocks_for(n), kThreads, 0, (cudaStream_t)ut_cuda_stream()>>>(dx, g, n, mean);
    ut_cuda_launched(mean ? "mean_bwd" : "sum_bwd");
}

extern "C" void ut_cuda_mse_fwd(float *out, const float *a, const float *b, int64_t n,
                                void *scratch) {
    sum_launch(out, a, b, n, true, true, scratch, "mse_fwd");
}

extern "C" void ut_cuda_mse_bwd(float *da, float *db, const float *a, const float *b,
                                const float *g, int64_t n) {
    if (n <= 0 || (!da && !db)) return;
    mse_bwd_kernel<<<blocks_for(n), kThreads, 0, (cudaStream_t)ut_cuda_stream()>>>(da, db, a, b,
                                                                                    g, n);
    ut_cuda_launched("mse_bwd");
}

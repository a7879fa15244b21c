/* CUDA kernels of the views and copies (RESHAPE, PERMUTE, SLICE, CONTIGUOUS):
 * strided gathers into contiguous memory (float32 and int32), strided adds of
 * a contiguous gradient into a source's gradient, and the flat dst += src.
 * One thread per element; the strided adds write distinct elements, so no two
 * threads touch the same one and the result does not depend on scheduling. */
#include <cuda_runtime.h>
#include <stdint.h>

#include "cuda.h"
#include "launch.cuh"
#include "ew.h"

namespace {

using utk::blocks_for;
using utk::kThreads;


/* A shape of up to 4 dims (innermost last) with strides, after merging. */
struct Dims {
    int nd;
    int64_t ne[4], st[4];
};

/* Drops size-1 dims and merges each dim into the one outside it when the
 * strides allow (st[k-1] == st[k] * ne[k]): the same positions, fewer
 * divisions per element. At least one dim remains. */
Dims collapse(int ndim, const int64_t *ne, const int64_t *st) {
    Dims d;
    d.nd = 0;
    for (int k = 0; k < ndim; k++) {
        if (ne[k] == 1) continue;
        if (d.nd > 0 && d.st[d.nd - 1] == st[k] * ne[k]) {
            d.ne[d.nd - 1] *= ne[k];
            d.st[d.nd - 1] = st[k];
        } else {
            d.ne[d.nd] = ne[k];
            d.st[d.nd] = st[k];
            d.nd++;
        }
    }
    if (d.nd == 0) {
        d.nd = 1;
        d.ne[0] = 1;
        d.st[0] = 0;
    }
    return d;
}

int64_t count(int ndim, const int64_t *ne) {
    int64_t n = 1;
    for (int k = 0; k < ndim; k++) n *= ne[k];
    return n;
}

/* whether every index and offset of the walk fits 31 bits (unsigned 32-bit
 * arithmetic then: cheaper divisions, and i + grid step cannot wrap) */
bool fits32(const Dims &d, int64_t n) {
    int64_t span = 0;
    for (int k = 0; k < d.nd; k++) {
        if (d.st[k] < 0) return false;
        span += (d.ne[k] - 1) * d.st[k];
    }
    return n < (int64_t(1) << 31) && span < (int64_t(1) << 31);
}

/* offset of the element at contiguous position i of the shape d */
template <typename I>
__device__ __forceinline__ I offset_of(const Dims &d, I i) {
    I off = 0;
#pragma unroll
    for (int k = 3; k > 0; k--) {
        if (k < d.nd) {
            I e = (I)d.ne[k];
            off += (i % e) * (I)d.st[k];
            i /= e;
        }
    }
    return off + i * (I)d.st[0];
}

/* ADD false: dst[i] = src[offset(i)] (gather into contiguous dst);
 * ADD true:  dst[offset(i)] += src[i] (scatter-add from contiguous src). */
template <typename T, typename I, bool ADD>
__global__ void strided_kernel(T *__restrict__ dst, const T *__restrict__ src, Dims d, I n) {
    I step = (I)gridDim.x * (I)blockDim.x;
    for (I i = (I)blockIdx.x * (I)blockDim.x + (I)threadIdx.x; i < n; i += step) {
        I off = offset_of<I>(d, i);
        if (ADD) dst[off] = dst[off] + src[i];
        else dst[i] = src[off];
    }
}

template <typename T, bool ADD>
void strided(T *dst, const T *src, int ndim, const int64_t *ne, const int64_t *st,
             const char *what) {
    int64_t n = count(ndim, ne);
    if (n <= 0) return;
    Dims d = collapse(ndim, ne, st);
    cudaStream_t s = (cudaStream_t)ut_cuda_stream();
    if (fits32(d, n))
        strided_kernel<T, uint32_t, ADD>
            <<<blocks_for(n), kThreads, 0, s>>>(dst, src, d, (uint32_t)n);
    else
        strided_kernel<T, int64_t, ADD><<<blocks_for(n), kThreads, 0, s>>>(dst, src, d, n);
    ut_cuda_launched(what);
}

/* dst (n) += src (n); VEC: both 16-byte aligned, four floats per load */
template <bool VEC>
__global__ void acc_kernel(float *__restrict__ dst, const float *__restrict__ src, int64_t n) {
    int64_t step = (int64_t)gridDim.x * blockDim.x;
    int64_t i0 = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (VEC) {
        int64_t n4 = n / 4;
        float4 *d4 = reinterpret_cast<float4 *>(dst);
        const float4 *s4 = reinterpret_cast<const float4 *>(src);
        for (int64_t v = i0; v < n4; v += step) {
            float4 a = d4[v], b = s4[v];
            a.x = __fadd_rn(a.x, b.x);
            a.y = __fadd_rn(a.y, b.y);
            a.z = __fadd_rn(a.z, b.z);
            a.w = __fadd_rn(a.w, b.w);
            d4[v] = a;
        }
        for (int64_t i = n4 * 4 + i0; i < n; i += step) dst[i] = __fadd_rn(dst[i], src[i]);
    } else {
        for (int64_t i = i0; i < n; i += step) dst[i] = __fadd_rn(dst[i], src[i]);
    }
}

} // namespace

extern "C" void ut_cuda_strided_gather_f32(float *dst, const float *src, int ndim,
                                           const int64_t *ne, const int64_t *st) {
    strided<float, false>(dst, src, ndim, ne, st, "strided_gather_f32");
}

extern "C" void ut_cuda_strided_gather_i32(int32_t *dst, const int32_t *src, int ndim,
                                           const int64_t *ne, const int64_t *st) {
    strided<int32_t, false>(dst, src, ndim, ne, st, "strided_gather_i32");
}

extern "C" void ut_cuda_strided_add(float *dst, const float *src, int ndim, const int64_t *ne,
                                    const int64_t *st) {
    strided<float, true>(dst, src, ndim, ne, st, "strided_add");
}

extern "C" void ut_cuda_acc(float *dst, const float *src, int64_t n) {
    if (n <= 0) return;
    cudaStream_t s = (cudaStream_t)ut_cuda_stream();
    bool vec = (((uintptr_t)dst | (uintptr_t)src) & 15) == 0;
    if (vec) acc_kernel<true><<<blocks_for((n + 3) / 4), kThreads, 0, s>>>(dst, src, n);
    else acc_kernel<false><<<blocks_for(n), kThreads, 0, s>>>(dst, src, n);
    ut_cuda_launched("acc");
}

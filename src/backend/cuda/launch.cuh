/* What the CUDA kernel files share (CUDA C++ only): the compute stream, the
 * grid of a grid-stride loop, and 16-bit loads and stores as float.
 * defines: utk::kThreads, utk::kMaxBlocks, utk::stream, utk::blocks_for,
 *          utk::check, utk::allow_smem, UTK_GRID_STRIDE, utk_load_f32,
 *          utk_store_f32, utk_vec4_ok, utk_load4, utk_store4, utk_ew_loop, utk_load, utk_store. */
#ifndef UTRAIN_CUDA_LAUNCH_CUH
#define UTRAIN_CUDA_LAUNCH_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda.h"

namespace utk {

constexpr int kThreads = 256;           /* threads per block of the elementwise kernels */
constexpr int64_t kMaxBlocks = 1 << 20; /* a grid-stride loop covers the rest */

inline cudaStream_t stream() { return (cudaStream_t)ut_cuda_stream(); }

/* blocks of kThreads for a grid-stride loop over n items (at least one) */
inline unsigned blocks_for(int64_t n) {
    int64_t b = (n + kThreads - 1) / kThreads;
    return (unsigned)(b < 1 ? 1 : b < kMaxBlocks ? b : kMaxBlocks);
}

/* a CUDA call that cannot fail but for a bug: aborts, naming it */
inline void check(cudaError_t e, const char *what) {
    if (e != cudaSuccess) {
        fprintf(stderr, "utrain: %s failed: %s\n", what, cudaGetErrorString(e));
        abort();
    }
}

/* lets kernel use bytes of dynamic shared memory (past the default 48 KiB),
 * preferring shared memory over L1 */
template <typename F>
void allow_smem(F *kernel, size_t bytes) {
    check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes),
          "setting a kernel's shared memory size");
    check(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                               (int)cudaSharedmemCarveoutMaxShared),
          "setting a kernel's shared memory carveout");
}

} // namespace utk

/* for (i = this thread's first item; i < n; i += the grid's width) */
#define UTK_GRID_STRIDE(i, n) \
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < (n); i += (int64_t)gridDim.x * blockDim.x)

/* element i of p stored in dt (0 float32, 1 bf16, 2 fp16, as ut_dtype) */
__device__ __forceinline__ float utk_load_f32(const void *p, int dt, int64_t i) {
    if (dt == 1) return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
    if (dt == 2) return __half2float(((const __half *)p)[i]);
    return ((const float *)p)[i];
}

/* element i of p stored in dt = v, rounded to nearest even */
__device__ __forceinline__ void utk_store_f32(void *p, int dt, int64_t i, float v) {
    if (dt == 1) ((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn(v);
    else if (dt == 2) ((__half *)p)[i] = __float2half_rn(v);
    else ((float *)p)[i] = v;
}

/* Four consecutive elements at once (elements 4 i4 .. 4 i4 + 3 of p, stored
 * in dt): one 16-byte access for float32, one 8-byte access for 16 bits,
 * so p must be aligned to that (utk_vec4_ok); the values are those of
 * utk_load_f32 / utk_store_f32 element by element. Elementwise kernels take
 * this path where every pointer allows: a warp's 16-bit loads then fetch
 * 256 bytes, not 64. */
inline bool utk_vec4_ok(const void *p, int dt) { return ((uintptr_t)p & (dt ? 7u : 15u)) == 0; }

__device__ __forceinline__ float utk_from16(unsigned u, int dt) {
    return dt == 1 ? __uint_as_float(u << 16) : __half2float(__ushort_as_half((unsigned short)u));
}
__device__ __forceinline__ unsigned utk_to16(float v, int dt) {
    return dt == 1 ? (unsigned)__bfloat16_as_ushort(__float2bfloat16_rn(v))
                   : (unsigned)__half_as_ushort(__float2half_rn(v));
}
__device__ __forceinline__ float4 utk_load4(const void *p, int dt, int64_t i4) {
    if (dt == 0) return reinterpret_cast<const float4 *>(p)[i4];
    uint2 u = reinterpret_cast<const uint2 *>(p)[i4]; /* element 0 in the low half of u.x */
    return make_float4(utk_from16(u.x & 0xffffu, dt), utk_from16(u.x >> 16, dt), utk_from16(u.y & 0xffffu, dt),
                       utk_from16(u.y >> 16, dt));
}
__device__ __forceinline__ void utk_store4(void *p, int dt, int64_t i4, float4 v) {
    if (dt == 0) {
        reinterpret_cast<float4 *>(p)[i4] = v;
        return;
    }
    uint2 u;
    u.x = utk_to16(v.x, dt) | (utk_to16(v.y, dt) << 16);
    u.y = utk_to16(v.z, dt) | (utk_to16(v.w, dt) << 16);
    reinterpret_cast<uint2 *>(p)[i4] = u;
}

/* The elementwise kernels' grid-stride loop over n elements: where VEC,
 * body4(v) for each group v of four (elements 4v .. 4v + 3) first, then
 * body1(i) for the tail; otherwise body1(i) for every element. I: the index
 * type (32 bits where n allows). */
template <bool VEC, typename I = int64_t, class B4, class B1>
__device__ __forceinline__ void utk_ew_loop(I n, B4 body4, B1 body1) {
    const I step = (I)gridDim.x * (I)blockDim.x, i0 = (I)blockIdx.x * (I)blockDim.x + (I)threadIdx.x;
    I tail = 0;
    if (VEC) {
        const I n4 = n / 4;
        for (I v = i0; v < n4; v += step) body4(v);
        tail = n4 * 4;
    }
    for (I i = tail + i0; i < n; i += step) body1(i);
}

/* the same for a pointer whose type says the dtype (kernels templated on it) */
__device__ __forceinline__ float utk_load(const float *p) { return *p; }
__device__ __forceinline__ float utk_load(const __nv_bfloat16 *p) { return __bfloat162float(*p); }
__device__ __forceinline__ float utk_load(const __half *p) { return __half2float(*p); }
__device__ __forceinline__ void utk_store(float *p, float v) { *p = v; }
__device__ __forceinline__ void utk_store(__nv_bfloat16 *p, float v) { *p = __float2bfloat16_rn(v); }
__device__ __forceinline__ void utk_store(__half *p, float v) { *p = __float2half_rn(v); }

/* ---- a row of T read 16 bytes at a time ----
 * The elements of a row xr (V of them) before its first 16-byte boundary:
 * the rest is read as whole 16-byte groups (uint4), then a tail. */
template <typename T> __device__ __forceinline__ int utk_row_head(const T *xr, int V) {
    int h = (int)(((16u - ((unsigned)(uintptr_t)xr & 15u)) & 15u) / sizeof(T));
    return h < V ? h : V;
}

/* f(v, x[v]) for the elements of a row that thread tid of nt takes: the
 * head and tail one by one, the middle 16 / sizeof(T) elements a thread at
 * a time from one 16-byte load (a warp's loads then fetch 512 bytes, not
 * 32 sizeof(T): a row of 16-bit logits is read at the memory's rate rather
 * than at the rate its loads can be issued). Which thread takes which
 * element, and in what order, depends on the row's address, V, tid and nt
 * only. */
template <typename T, class F>
__device__ __forceinline__ void utk_row_each(const T *__restrict__ xr, int V, int tid, int nt, F f) {
    constexpr int P = 16 / (int)sizeof(T);
    int head = utk_row_head(xr, V), nv = (V - head) / P;
    for (int v = tid; v < head; v += nt) f(v, utk_load(xr + v));
    const uint4 *body = reinterpret_cast<const uint4 *>(xr + head);
    for (int i = tid; i < nv; i += nt) {
        uint4 raw = body[i];
        T e[P];
        memcpy(e, &raw, sizeof raw);
#pragma unroll
        for (int j = 0; j < P; j++) f(head + i * P + j, utk_load(e + j));
    }
    for (int v = head + nv * P + tid; v < V; v += nt) f(v, utk_load(xr + v));
}

#endif

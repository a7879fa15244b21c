/* CUDA kernels of the elementwise unary ops: scale, relu, gelu (tanh form),
 * exact gelu (erf), tanh, sigmoid and dropout, forward (out = f(x)) and
 * backward (dx += f'(...) dy), flat over n contiguous elements, four per
 * thread with 16-byte loads when every pointer allows.
 * The arithmetic is the CPU's (src/backend/cpu/unary.c, gelu_erf.c) operation
 * for operation, with explicit round-to-nearest intrinsics so that nvcc fuses
 * no multiply-add the CPU does not; the exps and erf of both gelus are the
 * CPU's vmath.h polynomials, so relu, scale, dropout and both gelus give the
 * CPU's bits. tanh and sigmoid use CUDA's tanhf / expf (within 2 ulp). */
#include <cuda_runtime.h>
#include <stdint.h>

#include "cuda.h"
#include "launch.cuh"
#include "ew.h"
#include "gelu.cuh"
#include "../../core/philox.h"

namespace {

using utk::blocks_for;
using utk::exp_poly;
using utk::GeluB;
using utk::GeluF;
using utk::kGeluK0;
using utk::kThreads;


/* erf(z) given e = e^(-z^2): z P(z^2) below |z| = 1, else 1 - e R(1 / (1 + |z|))
 * (see ut_erff_fast_e in src/backend/cpu/vmath.h) */
__device__ __forceinline__ float erf_poly(float z, float e) {
    float a = fabsf(z), s = __fmul_rn(a, a);
    float p = 7.933422441e-05f;
    p = __fmaf_rn(p, s, -8.034827988e-04f);
    p = __fmaf_rn(p, s, 5.191216608e-03f);
    p = __fmaf_rn(p, s, -2.685539872e-02f);
    p = __fmaf_rn(p, s, 1.128362571e-01f);
    p = __fmaf_rn(p, s, -3.761262988e-01f);
    p = __fmaf_rn(p, s, 1.128379167e+00f);
    float t = __fdiv_rn(1.0f, __fadd_rn(1.0f, a));
    float r = 1.032603026e+00f;
    r = __fmaf_rn(r, t, -3.492248214e+00f);
    r = __fmaf_rn(r, t, 4.792138032e+00f);
    r = __fmaf_rn(r, t, -2.991974411e+00f);
    r = __fmaf_rn(r, t, 3.648416537e-01f);
    r = __fmaf_rn(r, t, 1.644386198e-01f);
    r = __fmaf_rn(r, t, 5.776960734e-01f);
    r = __fmaf_rn(r, t, 5.632953435e-01f);
    r = __fmaf_rn(r, t, 2.608263824e-05f);
    float y = a < 1.0f ? __fmul_rn(a, p) : __fmaf_rn(-e, r, 1.0f);
    return copysignf(y, z);
}

/* ---- the ops: forward functors f(x), backward functors f(dy, z) (z = x or
 * the saved output y), the backward kernel adding the result into dx ---- */
constexpr float kRsqrt2 = 0.70710678118654752f;
constexpr float kRsqrt2Pi = 0.39894228040143268f;

struct ScaleF {
    float s;
    __device__ float operator()(float x) const { return __fmul_rn(s, x); }
};
struct ScaleB {
    float s;
    __device__ float operator()(float dy, float) const { return __fmul_rn(s, dy); }
};

struct ReluF {
    __device__ float operator()(float x) const { return x > 0.0f ? x : 0.0f; }
};
struct ReluB { /* the gradient at 0 is 0 */
    __device__ float operator()(float dy, float x) const { return x > 0.0f ? dy : 0.0f; }
};

/* exact gelu: 0.5 x (1 + erf(x / sqrt 2)) */
struct GeluErfF {
    __device__ float operator()(float x) const {
        float z = __fmul_rn(x, kRsqrt2);
        float e = exp_poly(__fmul_rn(-z, z));
        return __fmul_rn(__fmul_rn(0.5f, x), __fadd_rn(1.0f, erf_poly(z, e)));
    }
};
struct GeluErfB { /* dy (Phi(x) + x phi(x)) */
    __device__ float operator()(float dy, float x) const {
        float z = __fmul_rn(x, kRsqrt2);
        float e = exp_poly(__fmul_rn(-z, z));
        float cdf = __fmul_rn(0.5f, __fadd_rn(1.0f, erf_poly(z, e)));
        return __fmul_rn(dy, __fadd_rn(cdf, __fmul_rn(__fmul_rn(x, kRsqrt2Pi), e)));
    }
};

struct TanhF {
    __device__ float operator()(float x) const { return tanhf(x); }
};
struct TanhB { /* dy (1 - y^2) */
    __device__ float operator()(float dy, float y) const {
        return __fmul_rn(dy, __fsub_rn(1.0f, __fmul_rn(y, y)));
    }
};

struct SigmoidF { /* exp overflows to inf for very negative x: the limit 0 */
    __device__ float operator()(float x) const {
        return __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-x)));
    }
};
struct SigmoidB { /* dy y (1 - y) */
    __device__ float operator()(float dy, float y) const {
        return __fmul_rn(__fmul_rn(dy, y), __fsub_rn(1.0f, y));
    }
};

/* ---- generic kernels ---- */

/* BWD false: out (n) = keep ? x * scale : 0;
 * BWD true:  out (n) += keep ? x * scale : 0 (x the incoming gradient; acc
 *            false: out holds nothing yet, 0 + that is written);
 * out and x each in its dtype (0 float32, 1 bf16, 2 fp16): a 16-bit tensor's
 * dropout reads and writes its 16 bits, with the values float32 copies
 * around the float kernel would give. VEC: four elements a thread (the
 * mask's four bytes in one load), then the tail. */
template <bool BWD, bool VEC>
__global__ void dropout_kernel(void *__restrict__ out, int dto, const void *__restrict__ x, int dtx,
                               const uint8_t *__restrict__ keep, float scale, int64_t n, bool acc) {
    utk_ew_loop<VEC>(
        n,
        [&](int64_t v) {
            float4 a = utk_load4(x, dtx, v);
            uchar4 k = reinterpret_cast<const uchar4 *>(keep)[v];
            float4 r = make_float4(k.x ? __fmul_rn(a.x, scale) : 0.0f, k.y ? __fmul_rn(a.y, scale) : 0.0f,
                                   k.z ? __fmul_rn(a.z, scale) : 0.0f, k.w ? __fmul_rn(a.w, scale) : 0.0f);
            if (BWD) {
                float4 d = acc ? utk_load4(out, dto, v) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                r = make_float4(__fadd_rn(d.x, r.x), __fadd_rn(d.y, r.y), __fadd_rn(d.z, r.z), __fadd_rn(d.w, r.w));
            }
            utk_store4(out, dto, v, r);
        },
        [&](int64_t i) {
            float r = keep[i] ? __fmul_rn(utk_load_f32(x, dtx, i), scale) : 0.0f;
            utk_store_f32(out, dto, i, BWD ? __fadd_rn(acc ? utk_load_f32(out, dto, i) : 0.0f, r) : r);
        });
}

/* ---- any storage dtype (the ops marked UT_KCAP_NATIVE_16 in table.c): each
 * pointer's elements of its dt, read and written through launch.cuh's
 * utk_load_f32 / utk_store_f32 (widened exactly, rounded to nearest even):
 * the bits float32 copies around the float kernels would give ---- */
/* VEC: four elements a thread at a time (launch.cuh, utk_load4), then the
 * tail one by one */
template <class F, bool VEC>
__global__ void fwd_any_kernel(void *__restrict__ out, int dto, const void *__restrict__ x, int dtx, int64_t n, F f) {
    utk_ew_loop<VEC>(
        n,
        [&](int64_t v) {
            float4 a = utk_load4(x, dtx, v);
            utk_store4(out, dto, v, make_float4(f(a.x), f(a.y), f(a.z), f(a.w)));
        },
        [&](int64_t i) { utk_store_f32(out, dto, i, f(utk_load_f32(x, dtx, i))); });
}

/* acc false: dx holds nothing yet (a gradient written whole, backend.h's
 * UT_KCAP_FRESH_GRAD) and is not read: the terms are added to zero, the bits
 * adding into a zeroed gradient gives */
template <class F, bool VEC>
__global__ void bwd_any_kernel(void *__restrict__ dx, int dtd, const void *__restrict__ dy, int dtg,
                               const void *__restrict__ z, int dtz, int64_t n, F f, bool acc) {
    utk_ew_loop<VEC>(
        n,
        [&](int64_t v) {
            float4 d = acc ? utk_load4(dx, dtd, v) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            float4 g = utk_load4(dy, dtg, v), a = utk_load4(z, dtz, v);
            utk_store4(dx, dtd, v,
                       make_float4(__fadd_rn(d.x, f(g.x, a.x)), __fadd_rn(d.y, f(g.y, a.y)),
                                   __fadd_rn(d.z, f(g.z, a.z)), __fadd_rn(d.w, f(g.w, a.w))));
        },
        [&](int64_t i) {
            utk_store_f32(dx, dtd, i,
                          __fadd_rn(acc ? utk_load_f32(dx, dtd, i) : 0.0f,
                                    f(utk_load_f32(dy, dtg, i), utk_load_f32(z, dtz, i))));
        });
}

/* out (n) = f(x), each buffer in its dtype */
template <class F>
void fwd_any(void *out, int dto, const void *x, int dtx, int64_t n, F f, const char *what) {
    if (n <= 0) return;
    cudaStream_t s = (cudaStream_t)ut_cuda_stream();
    if (utk_vec4_ok(out, dto) && utk_vec4_ok(x, dtx))
        fwd_any_kernel<F, true><<<blocks_for((n + 3) / 4), kThreads, 0, s>>>(out, dto, x, dtx, n, f);
    else
        fwd_any_kernel<F, false><<<blocks_for(n), kThreads, 0, s>>>(out, dto, x, dtx, n, f);
    ut_cuda_launched(what);
}

/* dx (n) += f(dy, z) (acc false: dx = 0 + f(dy, z), dx not read), each
 * buffer in its dtype */
template <class F>
void bwd_any(void *dx, int dtd, const void *dy, int dtg, const void *z, int dtz, int64_t n, F f, bool acc,
             const char *what) {
    if (n <= 0) return;
    cudaStream_t s = (cudaStream_t)ut_cuda_stream();
    if (utk_vec4_ok(dx, dtd) && utk_vec4_ok(dy, dtg) && utk_vec4_ok(z, dtz))
        bwd_any_kernel<F, true><<<blocks_for((n + 3) / 4), kThreads, 0, s>>>(dx, dtd, dy, dtg, z, dtz, n, f, acc);
    else
        bwd_any_kernel<F, false><<<blocks_for(n), kThreads, 0, s>>>(dx, dtd, dy, dtg, z, dtz, n, f, acc);
    ut_cuda_launched(what);
}

/* the float32 ops */
template <class F>
void fwd(float *out, const float *x, int64_t n, F f, const char *what) {
    fwd_any(out, 0, x, 0, n, f, what);
}
template <class F>
void bwd(float *dx, const float *dy, const float *z, int64_t n, F f, bool acc, const char *what) {
    bwd_any(dx, 0, dy, 0, z, 0, n, f, acc, what);
}

template <bool BWD>
void dropout(void *out, int dto, const void *x, int dtx, const uint8_t *keep, float scale, int64_t n, bool acc,
             const char *what) {
    if (n <= 0) return;
    cudaStream_t s = (cudaStream_t)ut_cuda_stream();
    if (utk_vec4_ok(out, dto) && utk_vec4_ok(x, dtx) && ((uintptr_t)keep & 3) == 0)
        dropout_kernel<BWD, true><<<blocks_for((n + 3) / 4), kThreads, 0, s>>>(out, dto, x, dtx, keep, scale, n, acc);
    else
        dropout_kernel<BWD, false><<<blocks_for(n), kThreads, 0, s>>>(out, dto, x, dtx, keep, scale, n, acc);
    ut_cuda_launched(what);
}

/* keep (n) = dropout's keep decisions, each element's draw computed here
 * as the CPU computes it (ut_dropout_draw, ut_philox_keep): one Philox
 * block per element, so no mask crosses from the host */
__global__ void dropout_mask_kernel(uint8_t *__restrict__ keep, int64_t n, uint64_t key, uint64_t stream,
                                    uint64_t offset, int64_t all, int64_t cols, int64_t c0, float p) {
    int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += step)
        keep[e] = ut_philox_keep(key, stream, ut_dropout_draw(offset, e, all, cols, c0), p) ? 1 : 0;
}

/* the same for packed attention's probabilities, a part of the heads:
 * each element finds its sequence in poff (S + 1 offsets, device memory) */
__global__ void varlen_mask_kernel(uint8_t *__restrict__ keep, int64_t n, const int64_t *__restrict__ poff, int64_t S,
                                   int64_t NH, int64_t NHall, int64_t h0, uint64_t key, uint64_t stream,
                                   uint64_t offset, float p) {
    int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += step) {
        int64_t lo = 0, hi = S; /* the s with poff[s] <= e < poff[s + 1] */
        while (hi - lo > 1) {
            int64_t mid = (lo + hi) / 2;
            if (poff[mid] <= e) lo = mid;
            else hi = mid;
        }
        int64_t L2 = (poff[lo + 1] - poff[lo]) / NH;
        keep[e] = ut_philox_keep(key, stream, ut_varlen_draw(offset, e, poff[lo], L2, NH, NHall, h0), p) ? 1 : 0;
    }
}

/* out = x + mag * (2u - 1), u element e's draw (offset + e, the draws of
 * dropout's whole-tensor mask) as the CPU's uniform; the product and the sum
 * rounded one at a time (no fused multiply-add), the CPU kernel's bits */
__global__ void uniform_noise_kernel(float *__restrict__ out, const float *__restrict__ x, int64_t n, uint64_t key,
                                     uint64_t stream, uint64_t offset, float mag) {
    int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += step) {
        uint64_t d = ut_dropout_draw(offset, e, 0, 0, 0), block = d / 4;
        uint32_t c[4] = {(uint32_t)block, (uint32_t)(block >> 32), (uint32_t)stream, (uint32_t)(stream >> 32)};
        ut_philox10(c, (uint32_t)key, (uint32_t)(key >> 32));
        float u = ut_philox_top24(c[d % 4]);
        out[e] = __fadd_rn(x[e], __fmul_rn(mag, 2.0f * u - 1.0f));
    }
}

} // namespace

extern "C" void ut_cuda_varlen_dropout_mask(uint8_t *keep, int64_t n, const int64_t *poff, int64_t S, int64_t NH,
                                            int64_t NHall, int64_t h0, uint64_t key, uint64_t stream, uint64_t offset,
                                            float p) {
    if (n <= 0) return;
    cudaStream_t s = (cudaStream_t)ut_cuda_stream();
    varlen_mask_kernel<<<blocks_for(n), kThreads, 0, s>>>(keep, n, poff, S, NH, NHall, h0, key, stream, offset, p);
    ut_cuda_launched("varlen_dropout_mask");
}

extern "C" void ut_cuda_uniform_noise_fwd(float *out, const float *x, int64_t n, uint64_t key, uint64_t stream,
                                          uint64_t offset, float mag) {
    if (n <= 0) return;
    cudaStream_t s = (cudaStream_t)ut_cuda_stream();
    uniform_noise_kernel<<<blocks_for(n), kThreads, 0, s>>>(out, x, n, key, stream, offset, mag);
    ut_cuda_launched("uniform_noise_fwd");
}

extern "C" void ut_cuda_dropout_mask(uint8_t *keep, int64_t n, uint64_t key, uint64_t stream, uint64_t offset,
                                     int64_t all, int64_t cols, int64_t c0, float p) {
    if (n <= 0) return;
    cudaStream_t s = (cudaStream_t)ut_cuda_stream();
    dropout_mask_kernel<<<blocks_for(n), kThreads, 0, s>>>(keep, n, key, stream, offset, all, cols, c0, p);
    ut_cuda_launched("dropout_mask");
}

extern "C" void ut_cuda_scale_fwd(float *out, const float *x, float s, int64_t n) {
    fwd(out, x, n, ScaleF{s}, "scale_fwd");
}
extern "C" void ut_cuda_scale_bwd(float *dx, const float *dy, float s, int64_t n, bool acc) {
    bwd(dx, dy, dy, n, ScaleB{s}, acc, "scale_bwd");
}
extern "C" void ut_cuda_relu_fwd(float *out, const float *x, int64_t n) {
    fwd(out, x, n, ReluF{}, "relu_fwd");
}
extern "C" void ut_cuda_relu_bwd(float *dx, const float *dy, const float *x, int64_t n, bool acc) {
    bwd(dx, dy, x, n, ReluB{}, acc, "relu_bwd");
}
extern "C" void ut_cuda_gelu_fwd(void *out, int dto, const void *x, int dtx, int64_t n) {
    fwd_any(out, dto, x, dtx, n, GeluF{}, "gelu_fwd");
}
extern "C" void ut_cuda_gelu_bwd(void *dx, int dtd, const void *dy, int dtg, const void *x, int dtx, int64_t n,
                                 bool acc) {
    bwd_any(dx, dtd, dy, dtg, x, dtx, n, GeluB{}, acc, "gelu_bwd");
}
extern "C" void ut_cuda_gelu_erf_fwd(void *out, int dto, const void *x, int dtx, int64_t n) {
    fwd_any(out, dto, x, dtx, n, GeluErfF{}, "gelu_erf_fwd");
}
extern "C" void ut_cuda_gelu_erf_bwd(void *dx, int dtd, const void *dy, int dtg, const void *x, int dtx,
                                     int64_t n, bool acc) {
    bwd_any(dx, dtd, dy, dtg, x, dtx, n, GeluErfB{}, acc, "gelu_erf_bwd");
}
extern "C" void ut_cuda_tanh_fwd(float *out, const float *x, int64_t n) {
    fwd(out, x, n, TanhF{}, "tanh_fwd");
}
extern "C" void ut_cuda_tanh_bwd(float *dx, const float *dy, const float *y, int64_t n, bool acc) {
    bwd(dx, dy, y, n, TanhB{}, acc, "tanh_bwd");
}
extern "C" void ut_cuda_sigmoid_fwd(float *out, const float *x, int64_t n) {
    fwd(out, x, n, SigmoidF{}, "sigmoid_fwd");
}
extern "C" void ut_cuda_sigmoid_bwd(float *dx, const float *dy, const float *y, int64_t n, bool acc) {
    bwd(dx, dy, y, n, SigmoidB{}, acc, "sigmoid_bwd");
}
extern "C" void ut_cuda_dropout_fwd(void *out, int dto, const void *x, int dtx, const uint8_t *keep, float scale,
                                    int64_t n) {
    dropout<false>(out, dto, x, dtx, keep, scale, n, false, "dropout_fwd");
}
extern "C" void ut_cuda_dropout_bwd(void *dx, int dtd, const void *dy, int dtg, const uint8_t *keep, float scale,
                                    int64_t n, bool acc) {
    dropout<true>(dx, dtd, dy, dtg, keep, scale, n, acc, "dropout_bwd");
}

/* CUDA kernels of the attention ops (ATTENTION, ATTENTION_MASKED,
 * ATTENTION_VARLEN) and their launchers, declared in attention.h: the row
 * softmax of the probabilities P and its backward (one block per row, fixed
 * reduction order, so the same bits on every run), the dropout of P, and the
 * synchronous copy of varlen's offsets to the host. The matrix products are
 * ut_cuda_sgemm calls made by the glue. */
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>


#include "cuda.h"
#include "attention.h"

namespace {

/* One row of P: its first element, its length, how many of its entries lie
 * inside the softmax (the others are 0), and its mask row (or nullptr). */
struct row_geom {
    int64_t start, len, valid;
    const float *mask;
};

/* Row r's geometry (see ut_attn_rows). Varlen rows find their sequence by a
 * binary search over the offsets: the largest s with off[s] <= r / NH. */
__device__ row_geom row_of(const ut_attn_rows &g, int64_t r) {
    row_geom w;
    if (!g.off) {
        int64_t i = r % g.Tq;
        w.start = r * g.Tk;
        w.len = g.Tk;
        w.valid = g.causal ? (i + 1 < g.Tk ? i + 1 : g.Tk) : g.Tk;
        w.mask = g.mask ? g.mask + (r / (g.NH * g.Tq)) * g.Tk : nullptr;
        return w;
    }
    int64_t tok = r / g.NH, lo = 0, hi = g.S - 1;
    while (lo < hi) {
        int64_t mid = (lo + hi + 1) / 2;
        if (g.off[mid] <= tok)
            lo = mid;
        else
            hi = mid - 1;
    }
    int64_t L = (int64_t)g.off[lo + 1] - g.off[lo];
    int64_t local = r - g.NH * (int64_t)g.off[lo], h = local / L, i = local % L;
    w.start = g.poff[lo] + h * L * L + i * L;
    w.len = L;
    w.valid = g.causal ? i + 1 : L;
    w.mask = nullptr;
    return w;
}

/* The block's maximum (is_max) or sum (!is_max) of v, returned to every thread:
 * each warp folds its lanes in a fixed tree, then warp 0 folds the warps'
 * results in a fixed tree. red: 32 floats of shared memory; the call begins
 * and ends with a barrier, so consecutive calls may share red. */
__device__ float block_reduce(float v, bool is_max, float *red) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    for (int o = 16; o > 0; o >>= 1) {
        float u = __shfl_down_sync(0xffffffffu, v, o);
        v = is_max ? fmaxf(v, u) : v + u;
    }
    __syncthreads(); /* red's previous contents have been read */
    if (lane == 0) red[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < nw ? red[lane] : (is_max ? -INFINITY : 0.0f);
        for (int o = 16; o > 0; o >>= 1) {
            float u = __shfl_down_sync(0xffffffffu, v, o);
            v = is_max ? fmaxf(v, u) : v + u;
        }
        if (lane == 0) red[0] = v;
    }
    __syncthreads();
    return red[0];
}

/* In place, one block per row: P = softmax(scale * P + mask) over the row's
 * valid entries, 0 elsewhere; all-(-inf) rows give 0. Every thread reads back
 * only the entries it wrote itself between the passes. */
__global__ void softmax_fwd_kernel(float *P, ut_attn_rows g) {
    __shared__ float red[32];
    for (int64_t r = blockIdx.x; r < g.rows; r += gridDim.x) {
        row_geom w = row_of(g, r);
        float *p = P + w.start;
        float m = -INFINITY;
        for (int64_t j = threadIdx.x; j < w.valid; j += blockDim.x) {
            float s = p[j] * g.scale;
            if (w.mask) s += w.mask[j];
            p[j] = s;
            m = fmaxf(m, s);
        }
        m = block_reduce(m, true, red);
        if (m == -INFINITY) m = 0.0f; /* every exp below is then 0 */
        float sum = 0.0f;
        for (int64_t j = threadIdx.x; j < w.valid; j += blockDim.x) {
            float e = expf(p[j] - m);
            p[j] = e;
            sum += e;
        }
        sum = block_reduce(sum, false, red);
        float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
        for (int64_t j = threadIdx.x; j < w.len; j += blockDim.x) p[j] = j < w.valid ? p[j] * inv : 0.0f;
    }
}

/* In place, one block per row: G = G * keep * ks (with keep), then
 * G = P * (G - sum_j P G) over the whole row. */
__global__ void softmax_bwd_kernel(float *G, const float *P, const uint8_t *keep, float ks, ut_attn_rows g) {
    __shared__ float red[32];
    for (int64_t r = blockIdx.x; r < g.rows; r += gridDim.x) {
        row_geom w = row_of(g, r);
        float *d = G + w.start;
        const float *p = P + w.start;
        const uint8_t *kp = keep ? keep + w.start : nullptr;
        float s = 0.0f;
        for (int64_t j = threadIdx.x; j < w.len; j += blockDim.x) {
            float v = d[j];
            if (kp) {
                v = kp[j] ? v * ks : 0.0f;
                d[j] = v;
            }
            s += p[j] * v;
        }
        s = block_reduce(s, false, red);
        for (int64_t j = threadIdx.x; j < w.len; j += blockDim.x) d[j] = p[j] * (d[j] - s);
    }
}

/* dst = keep ? P * ks : 0, elementwise */
__global__ void drop_kernel(float *dst, const float *P, const uint8_t *keep, float ks, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        dst[i] = keep[i] ? P[i] * ks : 0.0f;
}

/* Threads per row block: a power of two from 32 to 256, about 4 entries or
 * more per thread on the longest row. */
int row_threads(int64_t len) {
    int bs = 32;
    while (bs < 256 && (int64_t)bs * 4 < len) bs *= 2;
    return bs;
}

unsigned row_blocks(int64_t rows) { return (unsigned)(rows < (1LL << 30) ? rows : (1LL << 30)); }

cudaStream_t stream() { return (cudaStream_t)ut_cuda_stream(); }

}  // namespace

extern "C" void ut_cuda_attn_softmax_fwd(float *P, ut_attn_rows g) {
    if (g.rows <= 0) return;
    softmax_fwd_kernel<<<row_blocks(g.rows), row_threads(g.Tk), 0, stream()>>>(P, g);
    ut_cuda_launched("attention softmax forward");
}

extern "C" void ut_cuda_attn_softmax_bwd(float *G, const float *P, const uint8_t *keep, float ks, ut_attn_rows g) {
    if (g.rows <= 0) return;
    softmax_bwd_kernel<<<row_blocks(g.rows), row_threads(g.Tk), 0, stream()>>>(G, P, keep, ks, g);
    ut_cuda_launched("attention softmax backward");
}

extern "C" void ut_cuda_attn_drop(float *dst, const float *P, const uint8_t *keep, float ks, int64_t n) {
    if (n <= 0) return;
    int64_t blocks = (n + 255) / 256;
    drop_kernel<<<(unsigned)(blocks < 65536 ? blocks : 65536), 256, 0, stream()>>>(dst, P, keep, ks, n);
    ut_cuda_launched("attention dropout");
}

extern "C" void ut_cuda_attn_offsets_to_host(int32_t *host, const int32_t *dev, int64_t n) {
    cudaError_t e = cudaMemcpyAsync(host, dev, (size_t)n * sizeof(int32_t), cudaMemcpyDeviceToHost, stream());
    if (e == cudaSuccess) e = cudaStreamSynchronize(stream());
    if (e != cudaSuccess) {
        fprintf(stderr, "utrain: attention_varlen: copying the offsets to the host failed: %s\n",
                cudaGetErrorString(e));
        abort();
    }
}

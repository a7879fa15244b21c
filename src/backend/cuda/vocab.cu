/* CUDA kernels of the vocabulary-parallel cross-entropy (vocab.h): a block
 * per row for the partials (a tree max and a tree sum in double), a thread
 * per row for the combination over the parts, and one thread adding the
 * rows' losses in order (the same order every run). */
#include "vocab.h"
#include "launch.cuh"

using utk::blocks_for;
using utk::kThreads;
using utk::stream;

#define VP_THREADS 256

static __device__ bool counted(int32_t t, int64_t vocab, int ignore, int *err) {
    if (t == ignore) return false;
    if (t < 0 || t >= vocab) {
        if (err) atomicCAS(err, 0, (int)UT_CUDA_ERR_VOCAB_TARGET);
        return false;
    }
    return true;
}

__global__ void k_vocab_partials_fwd(float *out, const float *x, const int32_t *tg, int64_t Vp, int64_t v0,
                                     int64_t vocab, int64_t r, int64_t P, int ignore, int *err) {
    __shared__ float smax[VP_THREADS];
    __shared__ double ssum[VP_THREADS];
    int64_t n = blockIdx.x;
    const float *row = x + n * Vp;
    float m = -INFINITY;
    for (int64_t j = threadIdx.x; j < Vp; j += blockDim.x) m = fmaxf(m, row[j]);
    smax[threadIdx.x] = m;
    __syncthreads();
    for (int w = blockDim.x / 2; w > 0; w >>= 1) {
        if ((int)threadIdx.x < w) smax[threadIdx.x] = fmaxf(smax[threadIdx.x], smax[threadIdx.x + w]);
        __syncthreads();
    }
    m = smax[0];
    double s = 0.0;
    for (int64_t j = threadIdx.x; j < Vp; j += blockDim.x) s += exp((double)row[j] - (double)m);
    ssum[threadIdx.x] = s;
    __syncthreads();
    for (int w = blockDim.x / 2; w > 0; w >>= 1) {
        if ((int)threadIdx.x < w) ssum[threadIdx.x] += ssum[threadIdx.x + w];
        __syncthreads();
    }
    float *o = out + n * P * 2;
    for (int64_t k = threadIdx.x; k < P * 2; k += blockDim.x) o[k] = 0.0f;
    __syncthreads();
    if (threadIdx.x == 0) {
        int32_t t = tg[n];
        int64_t own = (int64_t)t - v0;
        bool ok = counted(t, vocab, ignore, err);
        o[r * 2] = (float)((double)m + log(ssum[0]));
        o[r * 2 + 1] = ok && own >= 0 && own < Vp ? row[own] : 0.0f;
    }
}

__global__ void k_vocab_partials_bwd(float *dx, const float *g, const float *out, const float *x,
                                     const int32_t *tg, int64_t N, int64_t Vp, int64_t v0, int64_t r, int64_t P,
                                     int ignore) {
    UTK_GRID_STRIDE(i, N * Vp) {
        int64_t n = i / Vp, j = i % Vp;
        float gl = g[(n * P + r) * 2], gt = g[(n * P + r) * 2 + 1], lse = out[(n * P + r) * 2];
        float d = gl != 0.0f ? __fmul_rn(gl, expf(__fsub_rn(x[i], lse))) : 0.0f;
        int32_t t = tg[n];
        if (t != ignore && (int64_t)t - v0 == j) d = __fadd_rn(d, gt);
        dx[i] = __fadd_rn(dx[i], d);
    }
}

static __device__ double row_lse(const float *p, int64_t P) {
    double m = p[0];
    for (int64_t r = 1; r < P; r++) m = fmax(m, (double)p[2 * r]);
    double s = 0.0;
    for (int64_t r = 0; r < P; r++) s += exp((double)p[2 * r] - m);
    return m + log(s);
}

__global__ void k_vocab_ce_rows(double *rowloss, const float *p, const int32_t *tg, int64_t N, int64_t P,
                                int64_t vocab, int ignore, int *err) {
    UTK_GRID_STRIDE(n, N) {
        const float *q = p + n * P * 2;
        if (!counted(tg[n], vocab, ignore, err)) {
            rowloss[n] = 0.0;
            continue;
        }
        double tl = 0.0;
        for (int64_t r = 0; r < P; r++) tl += q[2 * r + 1];
        rowloss[n] = row_lse(q, P) - tl;
    }
}

__global__ void k_vocab_ce_mean(float *out, int64_t *count, const double *rowloss, const int32_t *tg, int64_t N,
                                int64_t vocab, int ignore) {
    double s = 0.0;
    int64_t c = 0;
    for (int64_t n = 0; n < N; n++)
        if (tg[n] != ignore && tg[n] >= 0 && tg[n] < vocab) s += rowloss[n], c++;
    out[0] = c ? (float)(s / (double)c) : 0.0f;
    if (count) *count = c;
}

__global__ void k_vocab_ce_bwd(float *dp, const float *p, const int32_t *tg, const float *dloss,
                               const int64_t *count, int64_t N, int64_t P, int64_t vocab, int ignore) {
    UTK_GRID_STRIDE(n, N) {
        int32_t t = tg[n];
        if (t == ignore || t < 0 || t >= vocab || *count == 0) continue;
        float g = __fdiv_rn(dloss[0], (float)*count);
        const float *q = p + n * P * 2;
        double lse = row_lse(q, P);
        for (int64_t r = 0; r < P; r++) {
            float *d = dp + (n * P + r) * 2;
            d[0] = __fadd_rn(d[0], __fmul_rn(g, (float)exp((double)q[2 * r] - lse)));
            d[1] = __fsub_rn(d[1], g);
        }
    }
}

extern "C" void ut_cuda_vocab_partials_fwd(float *out, const float *x, const int32_t *tg, int64_t N, int64_t Vp,
                                           int64_t v0, int64_t vocab, int64_t r, int64_t P, int ignore, int *err) {
    if (N <= 0) return;
    k_vocab_partials_fwd<<<(unsigned)N, VP_THREADS, 0, stream()>>>(out, x, tg, Vp, v0, vocab, r, P, ignore, err);
    ut_cuda_launched("vocab_partials_fwd");
}

extern "C" void ut_cuda_vocab_partials_bwd(float *dx, const float *g, const float *out, const float *x,
                                           const int32_t *tg, int64_t N, int64_t Vp, int64_t v0, int64_t r,
                                           int64_t P, int ignore) {
    if (N * Vp <= 0) return;
    k_vocab_partials_bwd<<<blocks_for(N * Vp), kThreads, 0, stream()>>>(dx, g, out, x, tg, N, Vp, v0, r, P, ignore);
    ut_cuda_launched("vocab_partials_bwd");
}

extern "C" void ut_cuda_vocab_ce_fwd(float *out, int64_t *count, double *rowloss, const float *p, const int32_t *tg,
                                     int64_t N, int64_t P, int64_t vocab, int ignore, int *err) {
    if (N > 0) {
        k_vocab_ce_rows<<<blocks_for(N), kThreads, 0, stream()>>>(rowloss, p, tg, N, P, vocab, ignore, err);
        ut_cuda_launched("vocab_ce_rows");
    }
    k_vocab_ce_mean<<<1, 1, 0, stream()>>>(out, count, rowloss, tg, N, vocab, ignore);
    ut_cuda_launched("vocab_ce_mean");
}

extern "C" void ut_cuda_vocab_ce_bwd(float *dp, const float *p, const int32_t *tg, const float *dloss,
                                     const int64_t *count, int64_t N, int64_t P, int64_t vocab, int ignore) {
    if (N <= 0) return;
    k_vocab_ce_bwd<<<blocks_for(N), kThreads, 0, stream()>>>(dp, p, tg, dloss, count, N, P, vocab, ignore);
    ut_cuda_launched("vocab_ce_bwd");
}

/* CUDA kernels of the softmax family: softmax, log_softmax, cross_entropy and
 * nll_loss over N rows of V floats (launchers declared in softmax.h).
 * A row belongs to one warp (V <= 1024) or to one whole block (larger V);
 * its max and exp-sum come from one online pass (a running max and a sum
 * rescaled when the max grows), per-thread sums of exps in double, combined
 * by a fixed shuffle/shared-memory tree: the launch shape depends on V only,
 * so every result is the same from run to run. The losses keep one double
 * per row and one block adds the rows in a fixed order. */
#include <cuda_runtime.h>
#include <math.h>

#include "cuda.h"
#include "launch.cuh"
#include "softmax.h"

#define FULL_MASK 0xffffffffu

static cudaStream_t stream() { return (cudaStream_t)ut_cuda_stream(); }

/* ---- reductions over a row's threads: a warp, or (BLOCK) the whole block;
 * every thread of the group gets the result (xor shuffles: the same bits in
 * every lane). sh: 32 slots of shared memory. ---- */
struct MaxOp {
    template <typename T> __device__ T operator()(T a, T b) const { return a > b ? a : b; }
};
struct SumOp {
    template <typename T> __device__ T operator()(T a, T b) const { return a + b; }
};

template <typename T, typename Op> __device__ __forceinline__ T warp_reduce(T v, Op op) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(FULL_MASK, v, o));
    return v;
}

template <bool BLOCK, typename T, typename Op>
__device__ __forceinline__ T group_reduce(T v, Op op, T identity, T *sh) {
    v = warp_reduce(v, op);
    if (!BLOCK) return v;
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    __syncthreads(); /* sh may still be read by a previous reduction */
    if (lane == 0) sh[w] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : identity;
    return warp_reduce(v, op);
}

/* This thread's row (false: past the last row), its index in the row's
 * group and the group's size. */
template <bool BLOCK>
__device__ __forceinline__ bool row_slot(int64_t N, int64_t &row, int &tid, int &nt) {
    if (BLOCK) {
        row = blockIdx.x;
        tid = threadIdx.x;
        nt = blockDim.x;
    } else {
        row = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
        tid = threadIdx.x & 31;
        nt = 32;
    }
    return row < N;
}

/* The row's max M and S = sum(exp(x - M)) (double), in one pass over x. */
template <bool BLOCK, typename T>
__device__ __forceinline__ void row_max_sum(const T *__restrict__ x, int V, int tid, int nt,
                                            float *shf, double *shd, float &M, double &S) {
    float m = -INFINITY;
    double s = 0.0;
    utk_row_each(x, V, tid, nt, [&](int, float xv) {
        if (xv > m) {
            s = s * (double)expf(m - xv) + 1.0; /* m = -inf: s = 1 */
            m = xv;
        } else if (xv > -INFINITY) {
            s += (double)expf(xv - m);
        }
    });
    M = group_reduce<BLOCK>(m, MaxOp(), -INFINITY, shf);
    double part = m > -INFINITY ? s * (double)expf(m - M) : 0.0;
    S = group_reduce<BLOCK>(part, SumOp(), 0.0, shd);
}

/* Launch shape of a row kernel: a warp per row (8 rows a block) up to V =
 * 1024, else a block per row. */
struct RowLaunch {
    bool block;
    unsigned grid;
    int threads;
};
static RowLaunch row_launch(int64_t N, int64_t V) {
    RowLaunch L;
    if (V <= 1024) {
        L.block = false;
        L.threads = 256;
        L.grid = (unsigned)((N + 7) / 8);
    } else {
        L.block = true;
        L.threads = V <= 4096 ? 128 : V <= 16384 ? 256 : 512;
        L.grid = (unsigned)N;
    }
    return L;
}

/* ---- softmax / log_softmax forward: y = exp(x - M) * (1 / S), or
 * (LOG) y = (x - M) - log(S) ---- */
template <bool BLOCK, bool LOG>
__global__ void softmax_fwd_k(float *__restrict__ y, const float *__restrict__ x, int64_t N, int V) {
    __shared__ float shf[32];
    __shared__ double shd[32];
    int64_t row;
    int tid, nt;
    if (!row_slot<BLOCK>(N, row, tid, nt)) return;
    const float *xr = x + row * V;
    float *yr = y + row * V;
    float M;
    double S;
    row_max_sum<BLOCK>(xr, V, tid, nt, shf, shd, M, S);
    if (LOG) {
        float ls = (float)log(S);
        for (int v = tid; v < V; v += nt) yr[v] = (xr[v] - M) - ls;
    } else {
        float inv = (float)(1.0 / S);
        for (int v = tid; v < V; v += nt) yr[v] = expf(xr[v] - M) * inv;
    }
}

/* ---- softmax backward: dx += y * (g - sum(g * y)) ---- */
template <bool BLOCK>
__global__ void softmax_bwd_k(float *__restrict__ dx, const float *__restrict__ g,
                              const float *__restrict__ y, int64_t N, int V) {
    __shared__ double shd[32];
    int64_t row;
    int tid, nt;
    if (!row_slot<BLOCK>(N, row, tid, nt)) return;
    const float *gr = g + row * V, *yr = y + row * V;
    float *dr = dx + row * V;
    double d = 0.0;
    for (int v = tid; v < V; v += nt) d += (double)gr[v] * yr[v];
    float dd = (float)group_reduce<BLOCK>(d, SumOp(), 0.0, shd);
    for (int v = tid; v < V; v += nt) dr[v] += yr[v] * (gr[v] - dd);
}

/* ---- log_softmax backward: dx += g - exp(y) * sum(g) ---- */
template <bool BLOCK>
__global__ void log_softmax_bwd_k(float *__restrict__ dx, const float *__restrict__ g,
                                  const float *__restrict__ y, int64_t N, int V) {
    __shared__ double shd[32];
    int64_t row;
    int tid, nt;
    if (!row_slot<BLOCK>(N, row, tid, nt)) return;
    const float *gr = g + row * V, *yr = y + row * V;
    float *dr = dx + row * V;
    double gs = 0.0;
    for (int v = tid; v < V; v += nt) gs += gr[v];
    float s = (float)group_reduce<BLOCK>(gs, SumOp(), 0.0, shd);
    for (int v = tid; v < V; v += nt) dr[v] += gr[v] - expf(yr[v]) * s;
}

/* Whether target t counts (neither ignored nor out of range); a bad target
 * raises code in err (first writer wins). */
__device__ __forceinline__ bool target_counts(int t, int ignore, int V, int *err, int code,
                                              bool report) {
    if (t == ignore) return false;
    if (t < 0 || t >= V) {
        if (report && err) atomicCAS(err, 0, code);
        return false;
    }
    return true;
}

/* A row's loss from its logsumexp lse, its target's value xt and (label
 * smoothing eps > 0) the sum sx of its V values: (1 - eps) (lse - xt) +
 * eps (lse - sx / V), as the CPU's smoothed_row */
__device__ __forceinline__ double smoothed_row(double lse, double xt, double sx, float eps, int V) {
    if (eps == 0.0f) return lse - xt;
    return lse - (1.0 - (double)eps) * xt - (double)eps * sx / (double)V;
}

/* ---- cross_entropy forward: rowloss = M + log(S) - x[target] (label
 * smoothing eps: smoothed_row's); saves M and 1 / S (mx, inv may be NULL);
 * logits of T (float, bf16, fp16) ---- */
template <bool BLOCK, typename T>
__global__ void cross_entropy_fwd_k(double *__restrict__ rowloss, float *__restrict__ mx,
                                    float *__restrict__ inv, const T *__restrict__ logits,
                                    const int32_t *__restrict__ targets, int ignore, float eps, int64_t N,
                                    int V, int64_t ld, int *err) {
    __shared__ float shf[32];
    __shared__ double shd[32];
    int64_t row;
    int tid, nt;
    if (!row_slot<BLOCK>(N, row, tid, nt)) return;
    int t = targets[row];
    if (!target_counts(t, ignore, V, err, UT_CUDA_ERR_CROSS_ENTROPY_TARGET, tid == 0)) {
        if (tid == 0) rowloss[row] = 0.0;
        return; /* the whole group leaves: no reduction pending */
    }
    const T *xr = logits + row * ld;
    float M;
    double S;
    row_max_sum<BLOCK>(xr, V, tid, nt, shf, shd, M, S);
    double sx = 0.0;
    if (eps > 0.0f) { /* the whole group takes this branch */
        double part = 0.0;
        utk_row_each(xr, V, tid, nt, [&](int, float xv) { part += (double)xv; });
        sx = group_reduce<BLOCK>(part, SumOp(), 0.0, shd);
    }
    if (tid == 0) {
        if (mx) {
            mx[row] = M;
            inv[row] = (float)(1.0 / S);
        }
        rowloss[row] = smoothed_row((double)M + log(S), (double)utk_load(xr + t), sx, eps, V);
    }
}

/* ---- cross_entropy backward: d = exp(x - M) * inv * g, minus g at the
 * target (label smoothing eps: minus g eps / V everywhere, then g (1 - eps)
 * at the target); written (overwrite) or added; ignored rows: 0 / nothing. With
 * 16-bit logits (T) the gradient is stored in T too: each element widened,
 * added to in float, rounded once (what float copies around the kernel
 * would give). ---- */
template <bool BLOCK, typename T>
__global__ void cross_entropy_bwd_k(T *dx, int overwrite,
                                    const T *logits, const float *__restrict__ mx,
                                    const float *__restrict__ inv,
                                    const int32_t *__restrict__ targets, int ignore, float eps,
                                    const float *__restrict__ dloss,
                                    const int64_t *__restrict__ count, int64_t N, int V, int64_t ld) {
    int64_t row;
    int tid, nt;
    if (!row_slot<BLOCK>(N, row, tid, nt)) return;
    int t = targets[row];
    T *dr = dx + row * ld;
    if (!target_counts(t, ignore, V, nullptr, 0, false)) {
        if (overwrite)
            for (int v = tid; v < V; v += nt) utk_store(dr + v, 0.0f);
        return;
    }
    float g = dloss[0] / (float)count[0]; /* count >= 1: this row counts */
    float m = mx[row], r = inv[row];
    float gs = eps > 0.0f ? g * eps / (float)V : 0.0f, gt = eps > 0.0f ? g * (1.0f - eps) : g;
    const T *xr = logits + row * ld;
    /* element v's gradient, added to a (0 when overwriting) */
    auto grad = [&](int v, float x, float a) {
        a += expf(x - m) * r * g;
        if (eps > 0.0f) a -= gs;
        return v == t ? a - gt : a;
    };
    /* 16 bytes at a time where both rows start as far from a 16-byte
     * boundary (the same buffer layout: always but for odd pointers) */
    constexpr int P = 16 / (int)sizeof(T);
    int head = utk_row_head(xr, V);
    if (head != utk_row_head((const T *)dr, V)) head = V;
    int nv = (V - head) / P;
    for (int v = tid; v < head; v += nt) utk_store(dr + v, grad(v, utk_load(xr + v), overwrite ? 0.0f : utk_load(dr + v)));
    const uint4 *xb = reinterpret_cast<const uint4 *>(xr + head);
    uint4 *db = reinterpret_cast<uint4 *>(dr + head);
    for (int i = tid; i < nv; i += nt) {
        uint4 xraw = xb[i], draw = overwrite ? uint4{0u, 0u, 0u, 0u} : db[i];
        T xe[P], de[P];
        memcpy(xe, &xraw, sizeof xraw);
        memcpy(de, &draw, sizeof draw);
#pragma unroll
        for (int j = 0; j < P; j++)
            utk_store(de + j, grad(head + i * P + j, utk_load(xe + j), overwrite ? 0.0f : utk_load(de + j)));
        memcpy(&draw, de, sizeof draw);
        db[i] = draw;
    }
    for (int v = head + nv * P + tid; v < V; v += nt)
        utk_store(dr + v, grad(v, utk_load(xr + v), overwrite ? 0.0f : utk_load(dr + v)));
}

/* ---- nll_loss: rowloss = -logp[target] (label smoothing eps:
 * smoothed_row's, the row summed in order as on the CPU), one thread a row ---- */
__global__ void nll_loss_fwd_k(double *__restrict__ rowloss, const float *__restrict__ logp,
                               const int32_t *__restrict__ targets, int ignore, float eps, int64_t N, int V,
                               int *err) {
    int64_t n = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= N) return;
    int t = targets[n];
    const float *x = logp + n * V;
    double sx = 0.0;
    if (eps > 0.0f)
        for (int v = 0; v < V; v++) sx += x[v];
    rowloss[n] = target_counts(t, ignore, V, err, UT_CUDA_ERR_NLL_LOSS_TARGET, true)
                     ? smoothed_row(0.0, (double)x[t], sx, eps, V)
                     : 0.0;
}

/* dlogp[target] -= dloss / count (label smoothing eps: dloss / count eps / V
 * from every element first, then dloss / count (1 - eps) from the
 * target's), one thread a row (rows are distinct) */
__global__ void nll_loss_bwd_k(float *__restrict__ dlogp, const int32_t *__restrict__ targets,
                               int ignore, float eps, const float *__restrict__ dloss,
                               const int64_t *__restrict__ count, int64_t N, int V) {
    int64_t n = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= N) return;
    int t = targets[n];
    if (!target_counts(t, ignore, V, nullptr, 0, false)) return;
    float g = dloss[0] / (float)count[0];
    float *d = dlogp + n * V;
    if (eps > 0.0f) {
        float gs = g * eps / (float)V;
        for (int v = 0; v < V; v++) d[v] -= gs;
        d[t] -= g * (1.0f - eps);
    } else {
        d[t] -= g;
    }
}

/* ---- the mean over counted rows: one block; thread i takes rows i, i + nt,
 * ... then a fixed tree ---- */
#define LOSS_MEAN_THREADS 1024
__global__ void loss_mean_k(float *out, int64_t *count, const double *__restrict__ rowloss,
                            const int32_t *__restrict__ targets, int ignore, int64_t N, int V) {
    __shared__ double shd[32];
    __shared__ long long shl[32];
    double s = 0.0;
    long long c = 0;
    for (int64_t n = threadIdx.x; n < N; n += blockDim.x) {
        s += rowloss[n];
        c += target_counts(targets[n], ignore, V, nullptr, 0, false) ? 1 : 0;
    }
    s = group_reduce<true>(s, SumOp(), 0.0, shd);
    c = group_reduce<true>(c, SumOp(), 0LL, shl);
    if (threadIdx.x == 0) {
        out[0] = c ? (float)(s / (double)c) : 0.0f;
        if (count) count[0] = (int64_t)c;
    }
}

/* ---- launchers ---- */
#define LAUNCH_ROWS(L, kernel_true, kernel_false, ...)                              \
    do {                                                                            \
        if ((L).block)                                                              \
            kernel_true<<<(L).grid, (L).threads, 0, stream()>>>(__VA_ARGS__);       \
        else                                                                        \
            kernel_false<<<(L).grid, (L).threads, 0, stream()>>>(__VA_ARGS__);      \
    } while (0)

extern "C" void ut_cuda_softmax_fwd(float *y, const float *x, int64_t N, int64_t V) {
    if (N <= 0 || V <= 0) return;
    RowLaunch L = row_launch(N, V);
    LAUNCH_ROWS(L, (softmax_fwd_k<true, false>), (softmax_fwd_k<false, false>), y, x, N, (int)V);
    ut_cuda_launched("softmax_fwd");
}

extern "C" void ut_cuda_log_softmax_fwd(float *y, const float *x, int64_t N, int64_t V) {
    if (N <= 0 || V <= 0) return;
    RowLaunch L = row_launch(N, V);
    LAUNCH_ROWS(L, (softmax_fwd_k<true, true>), (softmax_fwd_k<false, true>), y, x, N, (int)V);
    ut_cuda_launched("log_softmax_fwd");
}

extern "C" void ut_cuda_softmax_bwd(float *dx, const float *dy, const float *y, int64_t N,
                                    int64_t V) {
    if (N <= 0 || V <= 0) return;
    RowLaunch L = row_launch(N, V);
    LAUNCH_ROWS(L, softmax_bwd_k<true>, softmax_bwd_k<false>, dx, dy, y, N, (int)V);
    ut_cuda_launched("softmax_bwd");
}

extern "C" void ut_cuda_log_softmax_bwd(float *dx, const float *dy, const float *y, int64_t N,
                                        int64_t V) {
    if (N <= 0 || V <= 0) return;
    RowLaunch L = row_launch(N, V);
    LAUNCH_ROWS(L, log_softmax_bwd_k<true>, log_softmax_bwd_k<false>, dx, dy, y, N, (int)V);
    ut_cuda_launched("log_softmax_bwd");
}

template <typename T>
static void ce_fwd(double *rowloss, float *row_max, float *inv_sum, const void *logits, const int32_t *targets,
                   int ignore_index, float eps, int64_t N, int64_t V, int64_t ld, int *err) {
    RowLaunch L = row_launch(N, V);
    LAUNCH_ROWS(L, (cross_entropy_fwd_k<true, T>), (cross_entropy_fwd_k<false, T>), rowloss, row_max, inv_sum,
                (const T *)logits, targets, ignore_index, eps, N, (int)V, ld, err);
}

extern "C" void ut_cuda_cross_entropy_fwd(double *rowloss, float *row_max, float *inv_sum,
                                          const void *logits, int dt, const int32_t *targets,
                                          int ignore_index, float eps, int64_t N, int64_t V, int64_t ld, int *err) {
    if (N <= 0) return;
    if (dt == 1) ce_fwd<__nv_bfloat16>(rowloss, row_max, inv_sum, logits, targets, ignore_index, eps, N, V, ld, err);
    else if (dt == 2) ce_fwd<__half>(rowloss, row_max, inv_sum, logits, targets, ignore_index, eps, N, V, ld, err);
    else ce_fwd<float>(rowloss, row_max, inv_sum, logits, targets, ignore_index, eps, N, V, ld, err);
    ut_cuda_launched("cross_entropy_fwd");
}

template <typename T>
static void ce_bwd(void *dlogits, int overwrite, const void *logits, const float *row_max, const float *inv_sum,
                   const int32_t *targets, int ignore_index, float eps, const float *dloss, const int64_t *count,
                   int64_t N, int64_t V, int64_t ld) {
    RowLaunch L = row_launch(N, V);
    LAUNCH_ROWS(L, (cross_entropy_bwd_k<true, T>), (cross_entropy_bwd_k<false, T>), (T *)dlogits, overwrite,
                (const T *)logits, row_max, inv_sum, targets, ignore_index, eps, dloss, count, N, (int)V, ld);
}

extern "C" void ut_cuda_cross_entropy_bwd(void *dlogits, int overwrite, const void *logits, int dt,
                                          const float *row_max, const float *inv_sum,
                                          const int32_t *targets, int ignore_index, float eps,
                                          const float *dloss, const int64_t *count, int64_t N,
                                          int64_t V, int64_t ld) {
    if (N <= 0 || V <= 0) return;
    if (dt == 1)
        ce_bwd<__nv_bfloat16>(dlogits, overwrite, logits, row_max, inv_sum, targets, ignore_index, eps, dloss, count,
                              N, V, ld);
    else if (dt == 2)
        ce_bwd<__half>(dlogits, overwrite, logits, row_max, inv_sum, targets, ignore_index, eps, dloss, count, N, V,
                       ld);
    else
        ce_bwd<float>(dlogits, overwrite, logits, row_max, inv_sum, targets, ignore_index, eps, dloss, count, N, V,
                      ld);
    ut_cuda_launched("cross_entropy_bwd");
}

extern "C" void ut_cuda_nll_loss_fwd(double *rowloss, const float *logp, const int32_t *targets,
                                     int ignore_index, float eps, int64_t N, int64_t V, int *err) {
    if (N <= 0) return;
    nll_loss_fwd_k<<<(unsigned)((N + 255) / 256), 256, 0, stream()>>>(rowloss, logp, targets, ignore_index, eps, N,
                                                                      (int)V, err);
    ut_cuda_launched("nll_loss_fwd");
}

extern "C" void ut_cuda_nll_loss_bwd(float *dlogp, const int32_t *targets, int ignore_index, float eps,
                                     const float *dloss, const int64_t *count, int64_t N,
                                     int64_t V) {
    if (N <= 0 || V <= 0) return;
    nll_loss_bwd_k<<<(unsigned)((N + 255) / 256), 256, 0, stream()>>>(dlogp, targets, ignore_index, eps,
                                                                      dloss, count, N, (int)V);
    ut_cuda_launched("nll_loss_bwd");
}

extern "C" void ut_cuda_loss_mean(float *out, int64_t *count, const double *rowloss,
                                  const int32_t *targets, int ignore_index, int64_t N, int64_t V) {
    loss_mean_k<<<1, LOSS_MEAN_THREADS, 0, stream()>>>(out, count, rowloss, targets, ignore_index,
                                                       N < 0 ? 0 : N, (int)V);
    ut_cuda_launched("loss_mean");
}

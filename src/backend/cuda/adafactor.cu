/* Adafactor's step on the GPU over every parameter of an optimizer at
 * once, as the CPU's (src/backend/cpu/adafactor.c) per parameter: the same
 * rows (a matrix's rows, a vector's blocks of UT_ADAFACTOR_BLOCK), double
 * sums per row and per column. Six launches a step, whatever the number of
 * parameters, all on the compute stream, none waiting for the host:
 *   rows     per row: sum p^2, sum (g^2 + eps1)         (a block a row)
 *   colparts per column and chunk of CH rows: sum (g^2 + eps1) down them
 *                                                      (a thread each)
 *   factors  per parameter: the rate, the running means and the factors
 *   usq      per row: sum u^2 (a vector's v updated here) (a block a row)
 *   clip     per parameter: the update's divisor
 *   apply    the update, the first moment, weight decay, the 16-bit copy
 * A launch's blocks (or threads) are the parameters' rows (columns, blocks
 * of elements) one parameter after the other; each finds its parameter by
 * a binary search of where each one's start (af_dev). The per-parameter
 * kernels run a block a parameter, so every parameter's work runs at once.
 *
 * Every sum is a fixed order: a block's sum a fixed tree over its threads'
 * strided partial sums, a column's sum its chunks added in order. Two runs
 * give the same bits; the CPU adds ranges in order (and a row in 8 lanes),
 * so CPU and GPU agree to rounding.
 *
 * The parameters' table and the sums' scratch live in device memory kept
 * per optimizer (a parameter list seen before reuses its table: a few are
 * kept): made and uploaded at an optimizer's first step, on the stream. */
#include <stdlib.h>
#include <string.h>

#include "flat.h"
#include "launch.cuh"

using utk::blocks_for;
using utk::kThreads;
using utk::stream;

namespace {

constexpr int64_t CH = 256; /* rows per partial column sum */

/* a parameter as the step walks it: nb leading entries of nr rows of nc
 * elements (a vector: blocks as rows, nb 1), rows = nb nr in all */
struct af_shape {
    int64_t numel, nb, nr, nc, rows;
    bool factored;
};

/* One parameter on the device: its buffers, its shape, its scratch, and
 * where its items start in each launch. scratch: [0] the rate a, [1] the
 * update's divisor, then psum (a sum per row: p^2, then u^2), rsum (per row:
 * g^2 + eps1, then the row factor), csum (nb nc: the column factors) and
 * cpart (nb x nch x nc: the partial column sums). */
struct af_dev {
    af_shape h;
    float *p, *st, *m;
    const float *g;
    void *p16;
    bool decay;
    double *scratch;
    int64_t nch;  /* chunks of CH rows (a matrix; 0 for a vector) */
    int64_t row0; /* its first block in rows and usq */
    int64_t cp0;  /* its first thread in colparts */
    int64_t blk0; /* its first block in apply, and its number of blocks */
    int64_t nblk;
};

__device__ inline double *psum_of(const af_dev &a) { return a.scratch + 2; }
__device__ inline double *rsum_of(const af_dev &a) { return a.scratch + 2 + a.h.rows; }
__device__ inline double *csum_of(const af_dev &a) { return a.scratch + 2 + 2 * a.h.rows; }
__device__ inline double *cpart_of(const af_dev &a) { return a.scratch + 2 + 2 * a.h.rows + a.h.nb * a.h.nc; }

/* the last parameter whose start (field F: row0, cp0 or blk0) is at or
 * before x: the one x belongs to (a parameter with no items there has the
 * next one's start) */
enum { AT_ROW, AT_CP, AT_BLK };
template <int F>
__device__ inline const af_dev &owner(const af_dev *ps, int n, int64_t x) {
    int lo = 0, hi = n - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        int64_t s = F == AT_ROW ? ps[mid].row0 : F == AT_CP ? ps[mid].cp0 : ps[mid].blk0;
        if (s <= x) lo = mid;
        else hi = mid - 1;
    }
    return ps[lo];
}

__device__ inline bool skipped(const float *sc) { return sc && sc[1] != 0.0f; }
__device__ inline float gmul_of(const float *sc) { return sc ? sc[0] : 1.0f; }

/* sh[0] = the sum of every thread's v (a fixed tree over kThreads) */
__device__ double block_sum(double v, double *sh) {
    sh[threadIdx.x] = v;
    __syncthreads();
    for (int w = kThreads / 2; w > 0; w >>= 1) {
        if ((int)threadIdx.x < w) sh[threadIdx.x] += sh[threadIdx.x + w];
        __syncthreads();
    }
    double t = sh[0];
    __syncthreads();
    return t;
}

/* the sum of x[0, n) by the block: each thread's strided part, then the tree */
__device__ double block_total(const double *x, int64_t n, double *sh) {
    double s = 0;
    for (int64_t i = threadIdx.x; i < n; i += kThreads) s += x[i];
    return block_sum(s, sh);
}

__device__ inline float g2_eps(const float *g, int64_t i, float gm, float eps1) {
    float gi = __fmul_rn(g[i], gm);
    return __fadd_rn(__fmul_rn(gi, gi), eps1);
}

__global__ void k_rows(const af_dev *ps, int n, const float *sc, float eps1, bool need_p) {
    if (skipped(sc)) return;
    __shared__ double sh[kThreads];
    const af_dev &a = owner<AT_ROW>(ps, n, blockIdx.x);
    const af_shape &h = a.h;
    int64_t k = blockIdx.x - a.row0, b = k * h.nc, e = b + h.nc < h.numel ? b + h.nc : h.numel;
    float gm = gmul_of(sc);
    double s_p = 0, s_g = 0;
    for (int64_t i = b + threadIdx.x; i < e; i += kThreads) {
        if (need_p) s_p += (double)a.p[i] * (double)a.p[i];
        if (h.factored) s_g += (double)g2_eps(a.g, i, gm, eps1);
    }
    s_p = block_sum(s_p, sh);
    if (h.factored) s_g = block_sum(s_g, sh);
    if (threadIdx.x == 0) {
        psum_of(a)[k] = s_p;
        if (h.factored) rsum_of(a)[k] = s_g;
    }
}

/* thread j: one column of one leading entry over one chunk of CH rows */
__global__ void k_colparts(const af_dev *ps, int n, int64_t total, const float *sc, float eps1) {
    if (skipped(sc)) return;
    float gm = gmul_of(sc);
    UTK_GRID_STRIDE(j, total) {
        const af_dev &a = owner<AT_CP>(ps, n, j);
        const af_shape &h = a.h;
        int64_t x = j - a.cp0, c = x % h.nc, rest = x / h.nc, ch = rest % a.nch, lb = rest / a.nch;
        int64_t r0 = ch * CH, r1 = r0 + CH < h.nr ? r0 + CH : h.nr;
        const float *gb = a.g + lb * h.nr * h.nc + c;
        double s = 0;
        for (int64_t r = r0; r < r1; r++) s += (double)g2_eps(gb, r * h.nc, gm, eps1);
        cpart_of(a)[x] = s;
    }
}

/* A block a parameter: the rate from the weights' RMS, then per leading
 * entry the running means (state: nr row means, nc column means) and the
 * factors in rsum's and csum's places. */
__global__ void k_factors(const af_dev *ps, const float *sc, float lr, float eps2, bool scale_parameter, float rho,
                          float one_m_rho) {
    if (skipped(sc)) return;
    __shared__ double sh[kThreads];
    const af_dev &a = ps[blockIdx.x];
    const af_shape &h = a.h;
    double pt = scale_parameter ? block_total(psum_of(a), h.rows, sh) : 0.0; /* (k_rows summed p^2 only then) */
    if (threadIdx.x == 0) {
        float rms = (float)(sqrt(pt) / sqrt((double)h.numel));
        a.scratch[0] = scale_parameter ? __fmul_rn(rms > eps2 ? rms : eps2, lr) : lr;
    }
    if (!h.factored) return;
    for (int64_t lb = 0; lb < h.nb; lb++) {
        float *r = a.st + lb * (h.nr + h.nc), *c = r + h.nr;
        double *s1 = rsum_of(a) + lb * h.nr, *s2 = csum_of(a) + lb * h.nc;
        const double *cp = cpart_of(a) + lb * a.nch * h.nc;
        for (int64_t i = threadIdx.x; i < h.nr; i += kThreads)
            r[i] = __fadd_rn(__fmul_rn(r[i], rho), __fmul_rn(one_m_rho, (float)(s1[i] / (double)h.nc)));
        for (int64_t j = threadIdx.x; j < h.nc; j += kThreads) {
            double s = 0;
            for (int64_t ch = 0; ch < a.nch; ch++) s += cp[ch * h.nc + j];
            c[j] = __fadd_rn(__fmul_rn(c[j], rho), __fmul_rn(one_m_rho, (float)(s / (double)h.nr)));
        }
        __syncthreads();
        double t = 0;
        for (int64_t i = threadIdx.x; i < h.nr; i += kThreads) t += r[i];
        t = block_sum(t, sh);
        float rmean = (float)(t / (double)h.nr);
        for (int64_t i = threadIdx.x; i < h.nr; i += kThreads)
            s1[i] = (double)__fdiv_rn(1.0f, __fsqrt_rn(__fdiv_rn(r[i], rmean)));
        for (int64_t j = threadIdx.x; j < h.nc; j += kThreads) s2[j] = (double)__fdiv_rn(1.0f, __fsqrt_rn(c[j]));
        __syncthreads();
    }
}

/* Element i's update before clipping; store: bring a vector's v up to date. */
__device__ inline float update_at(const af_dev &a, float gm, float eps1, float rho, float one_m_rho, int64_t i,
                                  bool store) {
    const af_shape &h = a.h;
    float gi = __fmul_rn(a.g[i], gm);
    if (h.factored) {
        int64_t c = i % h.nc, rr = i / h.nc, lb = rr / h.nr;
        return __fmul_rn(__fmul_rn((float)rsum_of(a)[rr], (float)csum_of(a)[lb * h.nc + c]), gi);
    }
    float vi = a.st[i];
    if (store) {
        vi = __fadd_rn(__fmul_rn(vi, rho), __fmul_rn(one_m_rho, __fadd_rn(__fmul_rn(gi, gi), eps1)));
        a.st[i] = vi;
    }
    return __fmul_rn(__fdiv_rn(1.0f, __fsqrt_rn(vi)), gi);
}

__global__ void k_usq(const af_dev *ps, int n, const float *sc, float eps1, float rho, float one_m_rho) {
    if (skipped(sc)) return;
    __shared__ double sh[kThreads];
    const af_dev &a = owner<AT_ROW>(ps, n, blockIdx.x);
    const af_shape &h = a.h;
    int64_t k = blockIdx.x - a.row0, b = k * h.nc, e = b + h.nc < h.numel ? b + h.nc : h.numel;
    float gm = gmul_of(sc);
    double us = 0;
    for (int64_t i = b + threadIdx.x; i < e; i += kThreads) {
        float u = update_at(a, gm, eps1, rho, one_m_rho, i, true);
        us += (double)u * (double)u;
    }
    us = block_sum(us, sh);
    if (threadIdx.x == 0) psum_of(a)[k] = us;
}

/* a block a parameter: the update's divisor from its RMS */
__global__ void k_clip(const af_dev *ps, const float *sc, float clip) {
    if (skipped(sc)) return;
    __shared__ double sh[kThreads];
    const af_dev &a = ps[blockIdx.x];
    double t = block_total(psum_of(a), a.h.rows, sh);
    if (threadIdx.x == 0) {
        float q = __fdiv_rn((float)(sqrt(t) / sqrt((double)a.h.numel)), clip);
        a.scratch[1] = q > 1.0f ? q : 1.0f;
    }
}

__global__ void k_apply(const af_dev *ps, int n, const float *sc, float eps1, float rho, float one_m_rho,
                        float beta1, float one_m_b1, float wd, int p16_dt) {
    const af_dev &a = owner<AT_BLK>(ps, n, blockIdx.x);
    bool skip = skipped(sc);
    float gm = gmul_of(sc);
    float rate = skip ? 0.0f : (float)a.scratch[0], denom = skip ? 1.0f : (float)a.scratch[1];
    float wd_a = a.decay ? __fmul_rn(-wd, rate) : 0.0f;
    for (int64_t i = (blockIdx.x - a.blk0) * kThreads + threadIdx.x; i < a.h.numel; i += a.nblk * kThreads) {
        if (!skip) {
            float u = __fmul_rn(__fdiv_rn(update_at(a, gm, eps1, rho, one_m_rho, i, false), denom), rate);
            if (a.m) {
                a.m[i] = __fadd_rn(__fmul_rn(a.m[i], beta1), __fmul_rn(one_m_b1, u));
                u = a.m[i];
            }
            float pi = a.p[i];
            if (wd_a != 0.0f) pi = __fadd_rn(pi, __fmul_rn(wd_a, pi));
            a.p[i] = __fsub_rn(pi, u);
        }
        if (a.p16) {
            if (p16_dt == 1) ((__nv_bfloat16 *)a.p16)[i] = __float2bfloat16_rn(a.p[i]);
            else ((__half *)a.p16)[i] = __float2half_rn(a.p[i]);
        }
    }
}

/* An optimizer's table on the device: the parameters it was made from (to
 * know it again), the table and scratch (dev), the launches' sizes. */
struct plan {
    utk_af_param *from = nullptr;
    int n = 0;
    int64_t block = 0;
    void *dev = nullptr;
    af_dev *host = nullptr; /* the table uploaded (kept: the copy reads it on the stream) */
    int64_t rows = 0, cps = 0, blks = 0;
};

constexpr int NKEEP = 8;
plan g_plans[NKEEP];
int g_next;

af_shape shape_of(const utk_af_param &q, int64_t block) {
    af_shape h = {q.numel, 1, 0, 0, 0, q.rows > 0 && q.cols > 0};
    if (h.factored) h.nr = q.rows, h.nc = q.cols, h.nb = q.numel / (q.rows * q.cols);
    else h.nr = (q.numel + block - 1) / block, h.nc = block;
    h.rows = h.nb * h.nr;
    return h;
}

bool same(const utk_af_param *a, const utk_af_param *b, int n) {
    for (int i = 0; i < n; i++)
        if (a[i].p != b[i].p || a[i].g != b[i].g || a[i].st != b[i].st || a[i].m != b[i].m || a[i].p16 != b[i].p16 ||
            a[i].numel != b[i].numel || a[i].rows != b[i].rows || a[i].cols != b[i].cols || a[i].decay != b[i].decay)
            return false;
    return true;
}

/* the plan of params ps[0, n) (each with elements), made and uploaded when new */
const plan &plan_of(const utk_af_param *ps, int n, int64_t block) {
    for (const plan &p : g_plans)
        if (p.dev && p.n == n && p.block == block && same(p.from, ps, n)) return p;
    plan &p = g_plans[g_next];
    g_next = (g_next + 1) % NKEEP;
    if (p.dev) utk::check(cudaFree(p.dev), "freeing an Adafactor table"); /* (waits for the device) */
    free(p.from);
    free(p.host);
    p = plan{};
    p.from = (utk_af_param *)malloc(sizeof *ps * (size_t)n);
    p.host = (af_dev *)malloc(sizeof(af_dev) * (size_t)n);
    if (!p.from || !p.host) {
        fprintf(stderr, "utrain: out of host memory for Adafactor's table of %d parameters\n", n);
        abort();
    }
    memcpy(p.from, ps, sizeof *ps * (size_t)n);
    p.n = n;
    p.block = block;
    size_t table = ((sizeof(af_dev) * (size_t)n + 255) / 256) * 256;
    int64_t doubles = 0;
    for (int i = 0; i < n; i++) {
        const utk_af_param &q = ps[i];
        af_dev &a = p.host[i];
        a = af_dev{};
        a.h = shape_of(q, block);
        a.p = q.p, a.g = q.g, a.st = q.st, a.m = q.m, a.p16 = q.p16, a.decay = q.decay;
        a.nch = a.h.factored ? (a.h.nr + CH - 1) / CH : 0;
        a.row0 = p.rows, p.rows += a.h.rows;
        a.cp0 = p.cps, p.cps += a.h.factored ? a.h.nb * a.nch * a.h.nc : 0;
        a.nblk = blocks_for(a.h.numel);
        a.blk0 = p.blks, p.blks += a.nblk;
        a.scratch = (double *)(intptr_t)doubles; /* an offset until the buffer exists */
        doubles += 2 + 2 * a.h.rows + a.h.nb * a.h.nc + a.h.nb * a.nch * a.h.nc;
    }
    p.dev = ut_cuda_malloc(table + sizeof(double) * (size_t)doubles, "Adafactor's table and sums");
    double *base = (double *)((char *)p.dev + table);
    for (int i = 0; i < n; i++) p.host[i].scratch = base + (intptr_t)p.host[i].scratch;
    utk::check(cudaMemcpyAsync(p.dev, p.host, sizeof(af_dev) * (size_t)n, cudaMemcpyHostToDevice, stream()),
               "uploading Adafactor's table");
    return p;
}

} // namespace

extern "C" void utk_adafactor(const utk_af_param *params, int n, int64_t block, const float *sc, float lr,
                              float eps1, float eps2, float clip, float rho, float one_m_rho, float beta1,
                              float one_m_b1, float wd, bool scale_parameter, int p16_dt) {
    if (n <= 0) return;
    const plan &p = plan_of(params, n, block);
    const af_dev *ps = (const af_dev *)p.dev;
    k_rows<<<(unsigned)p.rows, kThreads, 0, stream()>>>(ps, n, sc, eps1, scale_parameter);
    if (p.cps) k_colparts<<<blocks_for(p.cps), kThreads, 0, stream()>>>(ps, n, p.cps, sc, eps1);
    k_factors<<<(unsigned)n, kThreads, 0, stream()>>>(ps, sc, lr, eps2, scale_parameter, rho, one_m_rho);
    k_usq<<<(unsigned)p.rows, kThreads, 0, stream()>>>(ps, n, sc, eps1, rho, one_m_rho);
    k_clip<<<(unsigned)n, kThreads, 0, stream()>>>(ps, sc, clip);
    k_apply<<<(unsigned)p.blks, kThreads, 0, stream()>>>(ps, n, sc, eps1, rho, one_m_rho, beta1, one_m_b1, wd,
                                                         p16_dt);
    ut_cuda_launched("adafactor");
}

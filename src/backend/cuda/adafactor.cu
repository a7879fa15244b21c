/* Adafactor's step on the GPU, a parameter at a time, as the CPU's
 * (src/backend/cpu/adafactor.c): the same rows (a matrix's rows, a
 * vector's blocks of UT_ADAFACTOR_BLOCK), double sums per row and per
 * column, the same order wherever a sum runs over rows. Six launches
 * per parameter, all on the compute stream, none waiting for the host:
 *   rows     per row: sum p^2, sum (g^2 + eps1)          (a block a row)
 *   cols     per column: sum (g^2 + eps1) down the rows   (a thread a column)
 *   factors  the rate, the running means and the factors (one block)
 *   usq      per row: sum u^2 (a vector's v updated here) (a block a row)
 *   clip     the update's divisor                         (one thread)
 *   apply    the update, the first moment, weight decay, the 16-bit copy
 * Block sums are a fixed tree, so two runs give the same bits; the CPU sums
 * a row in 8 lanes, so CPU and GPU agree to rounding. */
#include "flat.h"
#include "launch.cuh"

using utk::blocks_for;
using utk::kThreads;
using utk::stream;

namespace {

/* scratch: [0] the rate a, [1] the update's divisor, then a sum per row
 * (psum: p^2, then u^2), per row (rsum: g^2 + eps1, then the row factor)
 * and per leading entry and column (csum: the same, then the column factor) */
struct af_shape {
    int64_t numel, nb, nr, nc, rows;
    bool factored;
};

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

__global__ void k_rows(af_shape h, const float *p, const float *g, const float *sc, float eps1, bool need_p,
                       double *psum, double *rsum) {
    if (skipped(sc)) return;
    __shared__ double sh[kThreads];
    int64_t k = blockIdx.x, b = k * h.nc, e = b + h.nc < h.numel ? b + h.nc : h.numel;
    float gm = gmul_of(sc);
    double ps = 0, rs = 0;
    for (int64_t i = b + threadIdx.x; i < e; i += kThreads) {
        if (need_p) ps += (double)p[i] * (double)p[i];
        if (h.factored) {
            float gi = __fmul_rn(g[i], gm);
            rs += (double)__fadd_rn(__fmul_rn(gi, gi), eps1);
        }
    }
    ps = block_sum(ps, sh);
    if (h.factored) rs = block_sum(rs, sh);
    if (threadIdx.x == 0) {
        psum[k] = ps;
        if (h.factored) rsum[k] = rs;
    }
}

__global__ void k_cols(af_shape h, const float *g, const float *sc, float eps1, double *csum) {
    if (skipped(sc)) return;
    float gm = gmul_of(sc);
    UTK_GRID_STRIDE(j, h.nb * h.nc) {
        int64_t lb = j / h.nc, c = j % h.nc;
        const float *gb = g + lb * h.nr * h.nc + c;
        double s = 0;
        for (int64_t r = 0; r < h.nr; r++) {
            float gi = __fmul_rn(gb[r * h.nc], gm);
            s += (double)__fadd_rn(__fmul_rn(gi, gi), eps1);
        }
        csum[j] = s;
    }
}

/* One block: the rate from the weights' RMS, then per leading entry the
 * running means (state: nr row means, nc column means) and the factors in
 * the sums' places. Sums over rows are thread 0's, in order. */
__global__ void k_factors(af_shape h, float *st, double *scratch, const double *psum, double *rsum, double *csum,
                          const float *sc, float lr, float eps2, bool scale_parameter, float rho, float one_m_rho) {
    if (skipped(sc)) return;
    __shared__ double tot;
    if (threadIdx.x == 0) {
        double pt = 0;
        for (int64_t r = 0; r < h.rows; r++) pt += psum[r];
        float rms = (float)(sqrt(pt) / sqrt((double)h.numel));
        float a = scale_parameter ? __fmul_rn(rms > eps2 ? rms : eps2, lr) : lr;
        scratch[0] = a;
    }
    if (!h.factored) return;
    for (int64_t lb = 0; lb < h.nb; lb++) {
        float *r = st + lb * (h.nr + h.nc), *c = r + h.nr;
        double *s1 = rsum + lb * h.nr, *s2 = csum + lb * h.nc;
        for (int64_t i = threadIdx.x; i < h.nr; i += blockDim.x)
            r[i] = __fadd_rn(__fmul_rn(r[i], rho), __fmul_rn(one_m_rho, (float)(s1[i] / (double)h.nc)));
        for (int64_t j = threadIdx.x; j < h.nc; j += blockDim.x)
            c[j] = __fadd_rn(__fmul_rn(c[j], rho), __fmul_rn(one_m_rho, (float)(s2[j] / (double)h.nr)));
        __syncthreads();
        if (threadIdx.x == 0) {
            double t = 0;
            for (int64_t i = 0; i < h.nr; i++) t += r[i];
            tot = t;
        }
        __syncthreads();
        float rmean = (float)(tot / (double)h.nr);
        for (int64_t i = threadIdx.x; i < h.nr; i += blockDim.x)
            s1[i] = (double)__fdiv_rn(1.0f, __fsqrt_rn(__fdiv_rn(r[i], rmean)));
        for (int64_t j = threadIdx.x; j < h.nc; j += blockDim.x) s2[j] = (double)__fdiv_rn(1.0f, __fsqrt_rn(c[j]));
        __syncthreads();
    }
}

/* Element i's update before clipping; store: bring a vector's v up to date. */
__device__ inline float update_at(const af_shape &h, const double *fr, const double *fc, float *v, const float *g,
                                  float gm, float eps1, float rho, float one_m_rho, int64_t i, bool store) {
    float gi = __fmul_rn(g[i], gm);
    if (h.factored) {
        int64_t c = i % h.nc, rr = i / h.nc, lb = rr / h.nr;
        return __fmul_rn(__fmul_rn((float)fr[rr], (float)fc[lb * h.nc + c]), gi);
    }
    float vi = v[i];
    if (store) {
        vi = __fadd_rn(__fmul_rn(vi, rho), __fmul_rn(one_m_rho, __fadd_rn(__fmul_rn(gi, gi), eps1)));
        v[i] = vi;
    }
    return __fmul_rn(__fdiv_rn(1.0f, __fsqrt_rn(vi)), gi);
}

__global__ void k_usq(af_shape h, const double *fr, const double *fc, float *v, const float *g, const float *sc,
                      float eps1, float rho, float one_m_rho, double *usum) {
    if (skipped(sc)) return;
    __shared__ double sh[kThreads];
    int64_t k = blockIdx.x, b = k * h.nc, e = b + h.nc < h.numel ? b + h.nc : h.numel;
    float gm = gmul_of(sc);
    double us = 0;
    for (int64_t i = b + threadIdx.x; i < e; i += kThreads) {
        float u = update_at(h, fr, fc, v, g, gm, eps1, rho, one_m_rho, i, true);
        us += (double)u * (double)u;
    }
    us = block_sum(us, sh);
    if (threadIdx.x == 0) usum[k] = us;
}

__global__ void k_clip(af_shape h, const double *usum, double *scratch, const float *sc, float clip) {
    if (skipped(sc) || threadIdx.x != 0) return;
    double t = 0;
    for (int64_t r = 0; r < h.rows; r++) t += usum[r];
    float q = __fdiv_rn((float)(sqrt(t) / sqrt((double)h.numel)), clip);
    scratch[1] = q > 1.0f ? q : 1.0f;
}

__global__ void k_apply(af_shape h, float *p, const float *g, float *m, const double *fr, const double *fc,
                        float *v, const double *scratch, const float *sc, float eps1, float rho, float one_m_rho,
                        float beta1, float one_m_b1, float wd, void *p16, int p16_dt) {
    bool skip = skipped(sc);
    float gm = gmul_of(sc);
    float a = skip ? 0.0f : (float)scratch[0], denom = skip ? 1.0f : (float)scratch[1];
    float wd_a = __fmul_rn(-wd, a);
    UTK_GRID_STRIDE(i, h.numel) {
        if (!skip) {
            float u = __fmul_rn(__fdiv_rn(update_at(h, fr, fc, v, g, gm, eps1, rho, one_m_rho, i, false), denom), a);
            if (m) {
                m[i] = __fadd_rn(__fmul_rn(m[i], beta1), __fmul_rn(one_m_b1, u));
                u = m[i];
            }
            float pi = p[i];
            if (wd_a != 0.0f) pi = __fadd_rn(pi, __fmul_rn(wd_a, pi));
            p[i] = __fsub_rn(pi, u);
        }
        if (p16) {
            if (p16_dt == 1) ((__nv_bfloat16 *)p16)[i] = __float2bfloat16_rn(p[i]);
            else ((__half *)p16)[i] = __float2half_rn(p[i]);
        }
    }
}

} // namespace

extern "C" void utk_adafactor(float *p, const float *g, float *st, float *m, int64_t numel, int64_t rows,
                              int64_t cols, int64_t block, double *scratch, const float *sc, float lr, float eps1,
                              float eps2, float clip, float rho, float one_m_rho, float beta1, float one_m_b1,
                              float wd, bool scale_parameter, void *p16, int p16_dt) {
    if (numel <= 0) return;
    af_shape h = {numel, 1, 0, 0, 0, rows > 0 && cols > 0};
    if (h.factored) h.nr = rows, h.nc = cols, h.nb = numel / (rows * cols);
    else h.nr = (numel + block - 1) / block, h.nc = block;
    h.rows = h.nb * h.nr;
    double *psum = scratch + 2, *rsum = psum + h.rows, *csum = rsum + h.rows;
    k_rows<<<(unsigned)h.rows, kThreads, 0, stream()>>>(h, p, g, sc, eps1, scale_parameter, psum, rsum);
    if (h.factored) k_cols<<<blocks_for(h.nb * h.nc), kThreads, 0, stream()>>>(h, g, sc, eps1, csum);
    k_factors<<<1, kThreads, 0, stream()>>>(h, st, scratch, psum, rsum, csum, sc, lr, eps2, scale_parameter, rho,
                                            one_m_rho);
    const double *fr = h.factored ? rsum : NULL, *fc = h.factored ? csum : NULL;
    float *v = h.factored ? NULL : st;
    k_usq<<<(unsigned)h.rows, kThreads, 0, stream()>>>(h, fr, fc, v, g, sc, eps1, rho, one_m_rho, psum);
    k_clip<<<1, 32, 0, stream()>>>(h, psum, scratch, sc, clip);
    k_apply<<<blocks_for(numel), kThreads, 0, stream()>>>(h, p, g, m, fr, fc, v, scratch, sc, eps1, rho, one_m_rho,
                                                          beta1, one_m_b1, wd, p16, p16_dt);
    ut_cuda_launched("adafactor");
}

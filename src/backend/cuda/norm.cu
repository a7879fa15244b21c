/* CUDA kernels of layernorm and rms_norm over the last dimension (launchers
 * declared in norm.h), with the CPU kernels' formulas (src/backend/cpu/norm.c):
 * layernorm's two-pass mean and biased variance in float, rstd = 1 / sqrt(var
 * + eps); rms_norm's rstd = 1 / sqrt(mean(x^2) + eps), in float.
 * A row of C <= 1024 belongs to one warp that keeps it in registers (K values
 * a lane); a longer row to one block, re-reading it from cache. The weight and
 * bias gradients are column sums over the rows: per chunk of rows a partial
 * sum, then the chunks added in order. Every reduction has a fixed shape that
 * depends on N and C only, so results are the same from run to run.
 * Layernorm's x and out (and so dx and dy) may be stored in 16 bits (dtype
 * codes xdt, odt as ut_dtype: 0 float32, 1 bf16, 2 fp16): values are widened
 * as read, computed in float, and rounded once as written; a 16-bit dx is
 * read, added to in float and rounded back, the bits float32 copies give. */
#include <cuda_runtime.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cuda.h"
#include "launch.cuh"
#include "norm.h"

#define FULL_MASK 0xffffffffu
#define LN_WARP_ROWS 8   /* rows (warps) per block of the warp kernels */
#define LN_COLS 32       /* columns per block of the dw/db partial sums */
#define LN_ROW_LANES 8   /* threads down the rows in those blocks */
#define LN_ROW_CHUNK 128 /* rows per partial sum (at least) */
#define LN_FUSED_ROWS 32 /* rows per block of the fused backward (4 a warp) */

static cudaStream_t stream() { return (cudaStream_t)ut_cuda_stream(); }

/* Sum over a warp; every lane gets the same bits. */
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(FULL_MASK, v, o);
    return v;
}

/* Sum over the block (a multiple of 32 threads); every thread gets it. */
__device__ __forceinline__ float block_sum(float v, float *sh) {
    v = warp_sum(v);
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    __syncthreads(); /* sh may still be read by a previous sum */
    if (lane == 0) sh[w] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : 0.0f;
    return warp_sum(v);
}

/* ---- forward, a warp per row, lane holding columns lane + 32k (k < K) ---- */
template <int K>
__global__ void ln_fwd_warp_k(void *__restrict__ out, int odt, float *__restrict__ mean,
                              float *__restrict__ rstd, const void *__restrict__ x, int xdt,
                              const float *__restrict__ w, const float *__restrict__ b, int64_t N,
                              int C, float eps) {
    int64_t row = (int64_t)blockIdx.x * LN_WARP_ROWS + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (row >= N) return;
    int64_t base = row * C;
    float xv[K];
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < K; k++) {
        int c = lane + 32 * k;
        xv[k] = c < C ? utk_load_f32(x, xdt, base + c) : 0.0f;
        s += xv[k];
    }
    float m = warp_sum(s) / (float)C;
    float v = 0.0f;
#pragma unroll
    for (int k = 0; k < K; k++) {
        int c = lane + 32 * k;
        if (c < C) v += (xv[k] - m) * (xv[k] - m);
    }
    float r = 1.0f / sqrtf(warp_sum(v) / (float)C + eps);
#pragma unroll
    for (int k = 0; k < K; k++) {
        int c = lane + 32 * k;
        if (c < C) utk_store_f32(out, odt, base + c, (xv[k] - m) * r * w[c] + b[c]);
    }
    if (lane == 0) {
        mean[row] = m;
        rstd[row] = r;
    }
}

/* ---- forward, a block per row ---- */
__global__ void ln_fwd_block_k(void *__restrict__ out, int odt, float *__restrict__ mean,
                               float *__restrict__ rstd, const void *__restrict__ x, int xdt,
                               const float *__restrict__ w, const float *__restrict__ b, int C,
                               float eps) {
    __shared__ float sh[32];
    int64_t row = blockIdx.x, base = row * C;
    float s = 0.0f;
    for (int c = threadIdx.x; c < C; c += blockDim.x) s += utk_load_f32(x, xdt, base + c);
    float m = block_sum(s, sh) / (float)C;
    float v = 0.0f;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float d = utk_load_f32(x, xdt, base + c) - m;
        v += d * d;
    }
    float r = 1.0f / sqrtf(block_sum(v, sh) / (float)C + eps);
    for (int c = threadIdx.x; c < C; c += blockDim.x)
        utk_store_f32(out, odt, base + c, (utk_load_f32(x, xdt, base + c) - m) * r * w[c] + b[c]);
    if (threadIdx.x == 0) {
        mean[row] = m;
        rstd[row] = r;
    }
}

/* ---- input gradient, a warp per row:
 * dx += r * (dn - mean(dn) - (x - m) * r * mean(dn * (x - m) * r)), dn = g * w;
 * with SUMS the lane also adds g (x - m) r and g of its columns to aw, ab
 * (the weight's and bias's gradients) ---- */
template <int K, bool SUMS>
__device__ __forceinline__ void ln_dx_row(void *__restrict__ dx, const void *__restrict__ g, int odt,
                                          const void *__restrict__ x, int xdt, const float *__restrict__ w,
                                          int64_t row, float m, float r, int C, bool acc, float *aw, float *ab) {
    int lane = threadIdx.x & 31;
    int64_t base = row * C;
    float dn[K], xm[K];
    float sdn = 0.0f, sdnx = 0.0f;
#pragma unroll
    for (int k = 0; k < K; k++) {
        int c = lane + 32 * k;
        dn[k] = 0.0f;
        xm[k] = 0.0f;
        if (c < C) {
            float gv = utk_load_f32(g, odt, base + c);
            dn[k] = gv * w[c];
            xm[k] = utk_load_f32(x, xdt, base + c) - m;
            sdn += dn[k];
            sdnx += dn[k] * xm[k] * r;
            if (SUMS) {
                aw[k] += gv * xm[k] * r;
                ab[k] += gv;
            }
        }
    }
    sdn = warp_sum(sdn) / (float)C;
    sdnx = warp_sum(sdnx) / (float)C;
#pragma unroll
    for (int k = 0; k < K; k++) {
        int c = lane + 32 * k;
        if (c < C)
            utk_store_f32(dx, xdt, base + c,
                          (acc ? utk_load_f32(dx, xdt, base + c) : 0.0f) + r * (dn[k] - sdn - xm[k] * r * sdnx));
    }
}

template <int K>
__global__ void ln_bwd_dx_warp_k(void *__restrict__ dx, const void *__restrict__ g, int odt,
                                 const void *__restrict__ x, int xdt, const float *__restrict__ w,
                                 const float *__restrict__ mean, const float *__restrict__ rstd,
                                 int64_t N, int C, bool acc) {
    int64_t row = (int64_t)blockIdx.x * LN_WARP_ROWS + (threadIdx.x >> 5);
    if (row >= N) return;
    ln_dx_row<K, false>(dx, g, odt, x, xdt, w, row, mean[row], rstd[row], C, acc, nullptr, nullptr);
}

/* ---- dx and the dw, db partial sums in one pass (a warp per row, C <=
 * 1024): block b takes rows [LN_FUSED_ROWS b, +LN_FUSED_ROWS), its warp w
 * rows w, w + LN_WARP_ROWS, ... of them; dx as ln_bwd_dx_warp_k's, and each
 * lane keeps its columns' sums of g (x - m) r and of g over its warp's rows
 * in registers; the warps' sums are then added in warp order into pw[b],
 * pb[b], which ln_dwdb_final_k adds in block order. g and x are read once,
 * where the dx kernel and ln_dwdb_partial_k read them twice (GPT-2 124M at
 * 8 x 1024 in bf16: 37 MB a layer norm, 0.9 GB a step). ---- */
template <int K>
__global__ void ln_bwd_fused_warp_k(void *__restrict__ dx, const void *__restrict__ g, int odt,
                                    const void *__restrict__ x, int xdt, const float *__restrict__ w,
                                    const float *__restrict__ mean, const float *__restrict__ rstd, int64_t N,
                                    int C, bool acc, float *__restrict__ pw, float *__restrict__ pb) {
    __shared__ float sw[32 * 32], sb[32 * 32];
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    float aw[K], ab[K];
#pragma unroll
    for (int k = 0; k < K; k++) aw[k] = ab[k] = 0.0f;
    int64_t r0 = (int64_t)blockIdx.x * LN_FUSED_ROWS, r1 = r0 + LN_FUSED_ROWS < N ? r0 + LN_FUSED_ROWS : N;
    for (int64_t row = r0 + warp; row < r1; row += LN_WARP_ROWS)
        ln_dx_row<K, true>(dx, g, odt, x, xdt, w, row, mean[row], rstd[row], C, acc, aw, ab);
    for (int wi = 0; wi < LN_WARP_ROWS; wi++) { /* the warps' sums, in warp order */
        if (warp == wi) {
#pragma unroll
            for (int k = 0; k < K; k++) {
                int c = lane + 32 * k;
                if (c < C) {
                    sw[c] = (wi ? sw[c] : 0.0f) + aw[k];
                    sb[c] = (wi ? sb[c] : 0.0f) + ab[k];
                }
            }
        }
        __syncthreads();
    }
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        pw[(int64_t)blockIdx.x * C + c] = sw[c];
        pb[(int64_t)blockIdx.x * C + c] = sb[c];
    }
}

/* ---- input gradient, a block per row ---- */
__global__ void ln_bwd_dx_block_k(void *__restrict__ dx, const void *__restrict__ g, int odt,
                                  const void *__restrict__ x, int xdt, const float *__restrict__ w,
                                  const float *__restrict__ mean, const float *__restrict__ rstd,
                                  int C, bool acc) {
    __shared__ float sh[32];
    int64_t row = blockIdx.x, base = row * C;
    float m = mean[row], r = rstd[row];
    float sdn = 0.0f, sdnx = 0.0f;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float dn = utk_load_f32(g, odt, base + c) * w[c];
        sdn += dn;
        sdnx += dn * (utk_load_f32(x, xdt, base + c) - m) * r;
    }
    sdn = block_sum(sdn, sh) / (float)C;
    sdnx = block_sum(sdnx, sh) / (float)C;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float dn = utk_load_f32(g, odt, base + c) * w[c], xm = utk_load_f32(x, xdt, base + c) - m;
        utk_store_f32(dx, xdt, base + c, (acc ? utk_load_f32(dx, xdt, base + c) : 0.0f) + r * (dn - sdn - xm * r * sdnx));
    }
}

/* ---- dw, db partial sums: block (LN_COLS, LN_ROW_LANES) takes columns
 * [LN_COLS * blockIdx.x, +LN_COLS) of rows [rc * blockIdx.y, +rc);
 * pw[chunk, c] = sum g * (x - m) * r, pb[chunk, c] = sum g ---- */
__global__ void ln_dwdb_partial_k(float *__restrict__ pw, float *__restrict__ pb,
                                  const void *__restrict__ g, int odt, const void *__restrict__ x,
                                  int xdt, const float *__restrict__ mean,
                                  const float *__restrict__ rstd, int64_t N, int C, int64_t rc) {
    __shared__ float sw[LN_ROW_LANES][LN_COLS + 1], sb[LN_ROW_LANES][LN_COLS + 1];
    int tx = threadIdx.x, ty = threadIdx.y;
    int c = blockIdx.x * LN_COLS + tx;
    int64_t r0 = (int64_t)blockIdx.y * rc, r1 = r0 + rc < N ? r0 + rc : N;
    float aw = 0.0f, ab = 0.0f;
    if (c < C) {
        /* unrolled so that four rows' loads are in flight at once (the sums
         * still run in row order) */
#pragma unroll 4
        for (int64_t n = r0 + ty; n < r1; n += LN_ROW_LANES) {
            float gv = utk_load_f32(g, odt, n * C + c);
            aw += gv * (utk_load_f32(x, xdt, n * C + c) - mean[n]) * rstd[n];
            ab += gv;
        }
    }
    sw[ty][tx] = aw;
    sb[ty][tx] = ab;
    __syncthreads();
    if (ty == 0 && c < C) {
        float s = 0.0f, t = 0.0f;
#pragma unroll
        for (int k = 0; k < LN_ROW_LANES; k++) {
            s += sw[k][tx];
            t += sb[k][tx];
        }
        pw[(int64_t)blockIdx.y * C + c] = s;
        pb[(int64_t)blockIdx.y * C + c] = t;
    }
}

/* dw[c] += sum over chunks of pw[chunk, c]; db likewise (pb NULL: dw only,
 * rms_norm's). A block takes LN_COLS columns; its LN_ROW_LANES rows of
 * threads each every LN_ROW_LANES-th chunk (in chunk order, four loads in
 * flight), then the lanes' sums in lane order: an order fixed by N and C
 * alone (one thread a column walking all 512 chunks of 64 x 1024 rows kept
 * one load in flight) */
__global__ void ln_dwdb_final_k(float *dw, float *db, const float *__restrict__ pw,
                                const float *__restrict__ pb, int64_t nchunks, int C) {
    __shared__ float sw[LN_ROW_LANES][LN_COLS + 1], sb[LN_ROW_LANES][LN_COLS + 1];
    int tx = threadIdx.x, ty = threadIdx.y;
    int c = blockIdx.x * LN_COLS + tx;
    float s = 0.0f, t = 0.0f;
    if (c < C) {
#pragma unroll 4
        for (int64_t p = ty; p < nchunks; p += LN_ROW_LANES) {
            s += pw[p * C + c];
            if (pb) t += pb[p * C + c];
        }
    }
    sw[ty][tx] = s;
    sb[ty][tx] = t;
    __syncthreads();
    if (ty == 0 && c < C) {
        float a = 0.0f, b = 0.0f;
#pragma unroll
        for (int k = 0; k < LN_ROW_LANES; k++) {
            a += sw[k][tx];
            b += sb[k][tx];
        }
        if (dw) dw[c] += a;
        if (db) db[c] += b;
    }
}

/* ---- launchers ---- */
/* Values per lane of the warp kernels (C <= 32 * K), 0: use the block kernels. */
static int warp_k(int64_t C) {
    static const int ks[] = {1, 2, 4, 8, 12, 16, 24, 32};
    for (int i = 0; i < (int)(sizeof ks / sizeof ks[0]); i++)
        if (C <= 32 * ks[i]) return ks[i];
    return 0;
}

static int block_threads(int64_t C) { return C <= 2048 ? 128 : C <= 8192 ? 256 : 512; }

/* Rows per dw/db chunk: at least LN_ROW_CHUNK, and few enough chunks for gridDim.y. */
static int64_t row_chunk(int64_t N) {
    int64_t rc = LN_ROW_CHUNK;
    if ((N + rc - 1) / rc > 65535) rc = (N + 65534) / 65535;
    return rc;
}

#define LN_WARP_CASES(X) X(1) X(2) X(4) X(8) X(12) X(16) X(24) X(32)

extern "C" void ut_cuda_layernorm_fwd(void *out, int odt, float *mean, float *rstd, const void *x,
                                      int xdt, const float *w, const float *b, int64_t N, int64_t C,
                                      float eps) {
    if (N <= 0 || C <= 0) return;
    unsigned grid = (unsigned)((N + LN_WARP_ROWS - 1) / LN_WARP_ROWS);
    switch (warp_k(C)) {
#define X(K)                                                                                   \
    case K:                                                                                    \
        ln_fwd_warp_k<K><<<grid, 32 * LN_WARP_ROWS, 0, stream()>>>(out, odt, mean, rstd, x, xdt, w, \
                                                                   b, N, (int)C, eps);         \
        break;
        LN_WARP_CASES(X)
#undef X
    default:
        ln_fwd_block_k<<<(unsigned)N, block_threads(C), 0, stream()>>>(out, odt, mean, rstd, x, xdt, w,
                                                                       b, (int)C, eps);
    }
    ut_cuda_launched("layernorm_fwd");
}

/* blocks of the fused backward over N rows */
static int64_t fused_blocks(int64_t N) { return (N + LN_FUSED_ROWS - 1) / LN_FUSED_ROWS; }

extern "C" size_t ut_cuda_layernorm_bwd_scratch_bytes(int64_t N, int64_t C) {
    if (N <= 0 || C <= 0) return 64;
    int64_t rc = row_chunk(N), nchunks = (N + rc - 1) / rc;
    if (warp_k(C) && fused_blocks(N) > nchunks) nchunks = fused_blocks(N); /* the fused backward's partials */
    return 2 * (size_t)nchunks * (size_t)C * sizeof(float);
}

/* UT_CUDA_LN_BWD=two: the dx kernel and the partial sums' kernel where the
 * one-pass backward would run (docs/gpu.md; values checked in backend.c).
 * Read at each call, so a test can run both. */
static bool ln_bwd_two(void) {
    const char *e = getenv("UT_CUDA_LN_BWD");
    return e && !strcmp(e, "two");
}

extern "C" void ut_cuda_layernorm_bwd(void *dx, bool dx_acc, float *dw, float *db, void *scratch, const void *dy,
                                      int odt, const void *x, int xdt, const float *w,
                                      const float *mean, const float *rstd, int64_t N, int64_t C) {
    if (N <= 0 || C <= 0) return;
    if (dx && dw && db && warp_k(C) && !ln_bwd_two()) { /* one pass over g and x, then the blocks' partial sums added */
        int64_t nb = fused_blocks(N);
        float *pw = (float *)scratch, *pb = pw + nb * C;
        switch (warp_k(C)) {
#define X(K)                                                                                                   \
    case K:                                                                                                    \
        ln_bwd_fused_warp_k<K><<<(unsigned)nb, 32 * LN_WARP_ROWS, 0, stream()>>>(dx, dy, odt, x, xdt, w, mean,  \
                                                                                 rstd, N, (int)C, dx_acc, pw, \
                                                                                 pb);                         \
        break;
            LN_WARP_CASES(X)
#undef X
        }
        ut_cuda_launched("layernorm_bwd_fused");
        ln_dwdb_final_k<<<(unsigned)((C + LN_COLS - 1) / LN_COLS), dim3(LN_COLS, LN_ROW_LANES), 0, stream()>>>(
            dw, db, pw, pb, nb, (int)C);
        ut_cuda_launched("layernorm_bwd_dwdb_final");
        return;
    }
    if (dx) {
        unsigned grid = (unsigned)((N + LN_WARP_ROWS - 1) / LN_WARP_ROWS);
        switch (warp_k(C)) {
#define X(K)                                                                                 \
    case K:                                                                                  \
        ln_bwd_dx_warp_k<K><<<grid, 32 * LN_WARP_ROWS, 0, stream()>>>(dx, dy, odt, x, xdt, w, mean, \
                                                                      rstd, N, (int)C, dx_acc); \
        break;
            LN_WARP_CASES(X)
#undef X
        default:
            ln_bwd_dx_block_k<<<(unsigned)N, block_threads(C), 0, stream()>>>(dx, dy, odt, x, xdt, w,
                                                                              mean, rstd, (int)C, dx_acc);
        }
        ut_cuda_launched("layernorm_bwd_dx");
    }
    if (dw || db) {
        int64_t rc = row_chunk(N), nchunks = (N + rc - 1) / rc;
        float *pw = (float *)scratch, *pb = pw + nchunks * C;
        dim3 grid((unsigned)((C + LN_COLS - 1) / LN_COLS), (unsigned)nchunks);
        ln_dwdb_partial_k<<<grid, dim3(LN_COLS, LN_ROW_LANES), 0, stream()>>>(pw, pb, dy, odt, x, xdt,
                                                                             mean, rstd, N, (int)C, rc);
        ut_cuda_launched("layernorm_bwd_dwdb_partial");
        ln_dwdb_final_k<<<(unsigned)((C + LN_COLS - 1) / LN_COLS), dim3(LN_COLS, LN_ROW_LANES), 0, stream()>>>(
            dw, db, pw, pb, nchunks, (int)C);
        ut_cuda_launched("layernorm_bwd_dwdb_final");
    }
}

/* ==== rms_norm: the same shapes as layernorm's (a warp per row for
 * C <= 1024, a block per row beyond; dw as per-chunk partial sums in
 * scratch, added in chunk order) ==== */

/* ---- forward, a warp per row, lane holding columns lane + 32k (k < K) ---- */
template <int K>
__global__ void rms_fwd_warp_k(float *__restrict__ out, float *__restrict__ rstd, const float *__restrict__ x,
                               const float *__restrict__ w, int64_t N, int C, float eps) {
    int64_t row = (int64_t)blockIdx.x * LN_WARP_ROWS + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (row >= N) return; /* the whole warp: one row per warp */
    const float *xr = x + row * C;
    float xv[K];
    float ss = 0.0f;
#pragma unroll
    for (int k = 0; k < K; k++) {
        int c = lane + 32 * k;
        xv[k] = c < C ? xr[c] : 0.0f;
        ss += xv[k] * xv[k];
    }
    float r = 1.0f / sqrtf(warp_sum(ss) / (float)C + eps);
    float *o = out + row * C;
#pragma unroll
    for (int k = 0; k < K; k++) {
        int c = lane + 32 * k;
        if (c < C) o[c] = xv[k] * r * w[c];
    }
    if (lane == 0) rstd[row] = r;
}

/* ---- forward, a block per row ---- */
__global__ void rms_fwd_block_k(float *__restrict__ out, float *__restrict__ rstd, const float *__restrict__ x,
                                const float *__restrict__ w, int C, float eps) {
    __shared__ float sh[32];
    int64_t row = blockIdx.x;
    const float *xr = x + row * C;
    float ss = 0.0f;
    for (int c = threadIdx.x; c < C; c += blockDim.x) ss += xr[c] * xr[c];
    float r = 1.0f / sqrtf(block_sum(ss, sh) / (float)C + eps);
    float *o = out + row * C;
    for (int c = threadIdx.x; c < C; c += blockDim.x) o[c] = xr[c] * r * w[c];
    if (threadIdx.x == 0) rstd[row] = r;
}

/* ---- input gradient, a warp per row:
 * dx += r * (dn - x * r * mean(dn * x * r)), dn = g * w ---- */
template <int K>
__global__ void rms_bwd_dx_warp_k(float *__restrict__ dx, const float *__restrict__ g,
                                  const float *__restrict__ x, const float *__restrict__ w,
                                  const float *__restrict__ rstd, int64_t N, int C) {
    int64_t row = (int64_t)blockIdx.x * LN_WARP_ROWS + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (row >= N) return;
    const float *xr = x + row * C, *gr = g + row * C;
    float r = rstd[row];
    float dn[K], xv[K];
    float sdnx = 0.0f;
#pragma unroll
    for (int k = 0; k < K; k++) {
        int c = lane + 32 * k;
        dn[k] = 0.0f;
        xv[k] = 0.0f;
        if (c < C) {
            dn[k] = gr[c] * w[c];
            xv[k] = xr[c];
            sdnx += dn[k] * xv[k] * r;
        }
    }
    sdnx = warp_sum(sdnx) / (float)C;
    float *d = dx + row * C;
#pragma unroll
    for (int k = 0; k < K; k++) {
        int c = lane + 32 * k;
        if (c < C) d[c] += r * (dn[k] - xv[k] * r * sdnx);
    }
}

/* ---- input gradient, a block per row ---- */
__global__ void rms_bwd_dx_block_k(float *__restrict__ dx, const float *__restrict__ g,
                                   const float *__restrict__ x, const float *__restrict__ w,
                                   const float *__restrict__ rstd, int C) {
    __shared__ float sh[32];
    int64_t row = blockIdx.x;
    const float *xr = x + row * C, *gr = g + row * C;
    float r = rstd[row];
    float sdnx = 0.0f;
    for (int c = threadIdx.x; c < C; c += blockDim.x) sdnx += gr[c] * w[c] * xr[c] * r;
    sdnx = block_sum(sdnx, sh) / (float)C;
    float *d = dx + row * C;
    for (int c = threadIdx.x; c < C; c += blockDim.x) d[c] += r * (gr[c] * w[c] - xr[c] * r * sdnx);
}

/* ---- dw partial sums: block (LN_COLS, LN_ROW_LANES) takes columns
 * [LN_COLS * blockIdx.x, +LN_COLS) of rows [rc * blockIdx.y, +rc);
 * pw[chunk, c] = sum g * x * r ---- */
__global__ void rms_dw_partial_k(float *__restrict__ pw, const float *__restrict__ g, const float *__restrict__ x,
                                 const float *__restrict__ rstd, int64_t N, int C, int64_t rc) {
    __shared__ float sw[LN_ROW_LANES][LN_COLS + 1];
    int tx = threadIdx.x, ty = threadIdx.y;
    int c = blockIdx.x * LN_COLS + tx;
    int64_t r0 = (int64_t)blockIdx.y * rc, r1 = r0 + rc < N ? r0 + rc : N;
    float aw = 0.0f;
    if (c < C)
        for (int64_t n = r0 + ty; n < r1; n += LN_ROW_LANES) aw += g[n * C + c] * x[n * C + c] * rstd[n];
    sw[ty][tx] = aw;
    __syncthreads();
    if (ty == 0 && c < C) {
        float s = 0.0f;
#pragma unroll
        for (int k = 0; k < LN_ROW_LANES; k++) s += sw[k][tx];
        pw[(int64_t)blockIdx.y * C + c] = s;
    }
}

/* ---- rms_norm launchers ---- */
extern "C" void ut_cuda_rms_norm_fwd(float *out, float *rstd, const float *x, const float *w, int64_t N,
                                     int64_t C, float eps) {
    if (N <= 0 || C <= 0) return;
    unsigned grid = (unsigned)((N + LN_WARP_ROWS - 1) / LN_WARP_ROWS);
    switch (warp_k(C)) {
#define X(K)                                                                                             \
    case K:                                                                                              \
        rms_fwd_warp_k<K><<<grid, 32 * LN_WARP_ROWS, 0, stream()>>>(out, rstd, x, w, N, (int)C, eps); \
        break;
        LN_WARP_CASES(X)
#undef X
    default:
        rms_fwd_block_k<<<(unsigned)N, block_threads(C), 0, stream()>>>(out, rstd, x, w, (int)C, eps);
    }
    ut_cuda_launched("rms_norm_fwd");
}

extern "C" size_t ut_cuda_rms_norm_bwd_scratch_bytes(int64_t N, int64_t C) {
    if (N <= 0 || C <= 0) return 64;
    int64_t rc = row_chunk(N), nchunks = (N + rc - 1) / rc;
    return (size_t)nchunks * (size_t)C * sizeof(float);
}

extern "C" void ut_cuda_rms_norm_bwd(float *dx, float *dw, void *scratch, const float *dy, const float *x,
                                     const float *w, const float *rstd, int64_t N, int64_t C) {
    if (N <= 0 || C <= 0) return;
    if (dx) {
        unsigned grid = (unsigned)((N + LN_WARP_ROWS - 1) / LN_WARP_ROWS);
        switch (warp_k(C)) {
#define X(K)                                                                                              \
    case K:                                                                                               \
        rms_bwd_dx_warp_k<K><<<grid, 32 * LN_WARP_ROWS, 0, stream()>>>(dx, dy, x, w, rstd, N, (int)C); \
        break;
            LN_WARP_CASES(X)
#undef X
        default:
            rms_bwd_dx_block_k<<<(unsigned)N, block_threads(C), 0, stream()>>>(dx, dy, x, w, rstd, (int)C);
        }
        ut_cuda_launched("rms_norm_bwd_dx");
    }
    if (dw) {
        int64_t rc = row_chunk(N), nchunks = (N + rc - 1) / rc;
        float *pw = (float *)scratch;
        dim3 grid((unsigned)((C + LN_COLS - 1) / LN_COLS), (unsigned)nchunks);
        rms_dw_partial_k<<<grid, dim3(LN_COLS, LN_ROW_LANES), 0, stream()>>>(pw, dy, x, rstd, N, (int)C, rc);
        ut_cuda_launched("rms_norm_bwd_dw_partial");
        ln_dwdb_final_k<<<(unsigned)((C + LN_COLS - 1) / LN_COLS), dim3(LN_COLS, LN_ROW_LANES), 0, stream()>>>(
            dw, nullptr, pw, nullptr, nchunks, (int)C);
        ut_cuda_launched("rms_norm_bwd_dw_final");
    }
}

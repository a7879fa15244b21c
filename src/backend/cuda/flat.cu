/* CUDA conversions (float32, bf16, fp16, round to nearest even) and the
 * flat-buffer math of the optimizers, clipping and the dist strategies: the
 * CPU backend's formulas in the same operation order (src/backend/cpu/flat.c,
 * optim.c), one thread per element. */
#include "flat.h"
#include "launch.cuh"
#include "gelu.cuh"

using utk::blocks_for;
using utk::kThreads;
using utk::stream;


/* VEC: four elements a thread (launch.cuh's utk_load4 / utk_store4: one
 * 16- or 8-byte access each side), then the tail */
template <bool VEC>
__global__ void k_convert(void *dst, int to, const void *src, int from, int64_t n) {
    utk_ew_loop<VEC>(
        n, [&](int64_t v) { utk_store4(dst, to, v, utk_load4(src, from, v)); },
        [&](int64_t i) { utk_store_f32(dst, to, i, utk_load_f32(src, from, i)); });
}

__global__ void k_round(float *dst, const float *src, int64_t n, int dt) {
    UTK_GRID_STRIDE(i, n) {
        float v = src[i];
        if (dt == 1) v = __bfloat162float(__float2bfloat16_rn(v));
        else if (dt == 2) v = __half2float(__float2half_rn(v));
        dst[i] = v;
    }
}

extern "C" void utk_convert(void *dst, int to, const void *src, int from, int64_t n) {
    if (n <= 0) return;
    if (utk_vec4_ok(dst, to) && utk_vec4_ok(src, from))
        k_convert<true><<<blocks_for((n + 3) / 4), kThreads, 0, stream()>>>(dst, to, src, from, n);
    else
        k_convert<false><<<blocks_for(n), kThreads, 0, stream()>>>(dst, to, src, from, n);
    ut_cuda_launched("convert");
}

extern "C" void utk_round(float *dst, const float *src, int64_t n, int dt) {
    if (n <= 0) return;
    k_round<<<blocks_for(n), kThreads, 0, stream()>>>(dst, src, n, dt);
    ut_cuda_launched("round");
}

/* ---- sum of squares: NB fixed blocks (by n alone), each summed by one
 * thread block in a fixed tree, then the block sums added in order ---- */
#define SSQ_BLOCKS 1024
__global__ void k_sum_sq_part(const float *x, int64_t n, int64_t bs, double *part) {
    __shared__ double sh[256];
    int64_t s = blockIdx.x * bs, e = s + bs < n ? s + bs : n;
    double acc = 0.0;
    for (int64_t i = s + threadIdx.x; i < e; i += blockDim.x) acc += (double)x[i] * (double)x[i];
    sh[threadIdx.x] = acc;
    __syncthreads();
    for (int w = blockDim.x / 2; w > 0; w >>= 1) {
        if ((int)threadIdx.x < w) sh[threadIdx.x] += sh[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0) part[blockIdx.x] = sh[0];
}
__global__ void k_sum_parts(const double *part, int nb, double *out) {
    double t = 0.0;
    for (int b = 0; b < nb; b++) t += part[b];
    *out = t;
}

/* the sum into device memory at out, in stream order */
extern "C" void utk_sum_sq_to(double *out, const float *x, int64_t n) {
    static double *part; /* SSQ_BLOCKS + 1 doubles, kept for the process */
    if (!part) part = (double *)ut_cuda_malloc((SSQ_BLOCKS + 1) * sizeof(double), "the gradient norm's partial sums");
    int64_t bs = (n + SSQ_BLOCKS - 1) / SSQ_BLOCKS;
    if (bs < 4096) bs = 4096;
    int nb = n > 0 ? (int)((n + bs - 1) / bs) : 0;
    if (nb > 0) {
        k_sum_sq_part<<<nb, 256, 0, stream()>>>(x, n, bs, part);
        ut_cuda_launched("sum_sq");
    }
    k_sum_parts<<<1, 1, 0, stream()>>>(part, nb, out);
    ut_cuda_launched("sum_sq parts");
}

extern "C" double utk_sum_sq(const float *x, int64_t n) {
    if (n <= 0) return 0.0;
    static double *res; /* one double, kept for the process */
    if (!res) res = (double *)ut_cuda_malloc(sizeof(double), "a sum of squares");
    utk_sum_sq_to(res, x, n);
    double r = 0.0;
    cudaMemcpyAsync(&r, res, sizeof r, cudaMemcpyDeviceToHost, stream());
    cudaStreamSynchronize(stream());
    return r;
}

__global__ void k_scale(float *x, int64_t n, float s) { UTK_GRID_STRIDE(i, n) x[i] *= s; }
extern "C" void utk_scale(float *x, int64_t n, float s) {
    if (n <= 0) return;
    k_scale<<<blocks_for(n), kThreads, 0, stream()>>>(x, n, s);
    ut_cuda_launched("scale");
}

__global__ void k_add_into(float *dst, float *src, int64_t n, bool zero_src) {
    UTK_GRID_STRIDE(i, n) {
        dst[i] += src[i];
        if (zero_src) src[i] = 0.0f;
    }
}
extern "C" void utk_add_into(float *dst, float *src, int64_t n, bool zero_src) {
    if (n <= 0) return;
    k_add_into<<<blocks_for(n), kThreads, 0, stream()>>>(dst, src, n, zero_src);
    ut_cuda_launched("accumulate");
}

/* The step's device scalars (backend.h, step_scalars): the CPU's rule
 * (ut_step_scalars_rule) in the same double operations. */
__global__ void k_step_scalars(float *dst, const double *sq, double max_norm, float scale) {
    double nrm = sqrt(*sq);
    if (!isfinite(nrm)) {
        dst[0] = 0.0f;
        dst[1] = 1.0f;
        return;
    }
    nrm = nrm / (double)scale;
    float unscale = __fdiv_rn(1.0f, scale);
    float coef = unscale;
    if (max_norm > 0 && nrm > max_norm) coef = __fmul_rn((float)(max_norm / (nrm + 1e-6)), unscale);
    dst[0] = coef;
    dst[1] = 0.0f;
}
extern "C" void utk_step_scalars(float *dst, const double *sq, double max_norm, float scale) {
    k_step_scalars<<<1, 1, 0, stream()>>>(dst, sq, max_norm, scale);
    ut_cuda_launched("step_scalars");
}

/* the 16-bit copy of an updated parameter (dt 1 BF16, 2 F16) */
__device__ inline void put16(void *p16, int dt, int64_t i, float v) {
    if (dt == 1) ((__nv_bfloat16 *)p16)[i] = __float2bfloat16_rn(v);
    else ((__half *)p16)[i] = __float2half_rn(v);
}

/* AdamW as torch's single-tensor step (and the CPU backend's order); sc:
 * the step's scalars (NULL: multiplier 1, no skip); p16: the parameters'
 * 16-bit copies (NULL: none). Where every buffer allows (utk_vec4_ok), four
 * elements a thread with 16-byte loads and stores: the update moves 34
 * bytes an element (p, g, m, v read and written, the copy written), 4.2 GB
 * for GPT-2 124M, and one 4-byte load a thread in flight kept it at two
 * thirds of an H200's bandwidth. Each element's arithmetic is the same
 * either way. */
struct adamw_c {
    float gmul, decay_mul, one_m_b1, beta2, one_m_b2, step_size, inv_bc2_sqrt, eps;
};

/* one element: m and v updated, the new p returned */
__device__ __forceinline__ float adamw_el(float pi, float gi, float &mi, float &vi, const adamw_c &c) {
    gi = __fmul_rn(gi, c.gmul);
    mi = __fadd_rn(mi, __fmul_rn(c.one_m_b1, __fsub_rn(gi, mi)));
    vi = __fadd_rn(__fmul_rn(vi, c.beta2), __fmul_rn(__fmul_rn(c.one_m_b2, gi), gi));
    float denom = __fadd_rn(__fmul_rn(__fsqrt_rn(vi), c.inv_bc2_sqrt), c.eps);
    return __fsub_rn(__fmul_rn(pi, c.decay_mul), __fdiv_rn(__fmul_rn(c.step_size, mi), denom));
}

template <bool VEC>
__global__ void k_adamw(float *p, float *g, float *m, float *v, int64_t n, adamw_c c, bool zero, const float *sc,
                        void *p16, int p16_dt) {
    if (sc) c.gmul = sc[0];
    bool skip = sc && sc[1] != 0.0f;
    utk_ew_loop<VEC>(
        n,
        [&](int64_t i4) {
            float4 P = reinterpret_cast<float4 *>(p)[i4];
            if (!skip) {
                float4 G = reinterpret_cast<const float4 *>(g)[i4], M = reinterpret_cast<float4 *>(m)[i4],
                       V = reinterpret_cast<float4 *>(v)[i4];
                P.x = adamw_el(P.x, G.x, M.x, V.x, c);
                P.y = adamw_el(P.y, G.y, M.y, V.y, c);
                P.z = adamw_el(P.z, G.z, M.z, V.z, c);
                P.w = adamw_el(P.w, G.w, M.w, V.w, c);
                reinterpret_cast<float4 *>(m)[i4] = M;
                reinterpret_cast<float4 *>(v)[i4] = V;
                reinterpret_cast<float4 *>(p)[i4] = P;
            }
            if (zero) reinterpret_cast<float4 *>(g)[i4] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            if (p16) utk_store4(p16, p16_dt, i4, P);
        },
        [&](int64_t i) {
            if (!skip) p[i] = adamw_el(p[i], g[i], m[i], v[i], c);
            if (zero) g[i] = 0.0f;
            if (p16) put16(p16, p16_dt, i, p[i]);
        });
}
extern "C" void utk_adamw(float *p, float *g, float *m, float *v, int64_t n, float decay_mul,
                          float one_m_b1, float beta2, float one_m_b2, float step_size,
                          float inv_bc2_sqrt, float eps, bool zero, const float *sc, void *p16, int p16_dt) {
    if (n <= 0) return;
    adamw_c c = {1.0f, decay_mul, one_m_b1, beta2, one_m_b2, step_size, inv_bc2_sqrt, eps};
    bool vec = utk_vec4_ok(p, 0) && utk_vec4_ok(g, 0) && utk_vec4_ok(m, 0) && utk_vec4_ok(v, 0) &&
               (!p16 || utk_vec4_ok(p16, p16_dt));
    if (vec)
        k_adamw<true><<<blocks_for(n / 4 > 0 ? n / 4 : n), kThreads, 0, stream()>>>(p, g, m, v, n, c, zero, sc, p16,
                                                                                    p16_dt);
    else
        k_adamw<false><<<blocks_for(n), kThreads, 0, stream()>>>(p, g, m, v, n, c, zero, sc, p16, p16_dt);
    ut_cuda_launched("adamw");
}

/* Lion as the CPU's ut_cpu_lion_update, each operation rounded as there. */
__global__ void k_lion(float *p, float *g, float *m, int64_t n, float decay_mul, float beta1, float one_m_b1,
                       float beta2, float one_m_b2, float lr, bool zero, const float *sc, void *p16, int p16_dt) {
    float gmul = sc ? sc[0] : 1.0f;
    bool skip = sc && sc[1] != 0.0f;
    UTK_GRID_STRIDE(i, n) {
        if (!skip) {
            float gi = __fmul_rn(g[i], gmul);
            float c = __fadd_rn(__fmul_rn(m[i], beta1), __fmul_rn(one_m_b1, gi));
            float s = c > 0.0f ? 1.0f : c < 0.0f ? -1.0f : c;
            p[i] = __fsub_rn(__fmul_rn(p[i], decay_mul), __fmul_rn(lr, s));
            m[i] = __fadd_rn(__fmul_rn(m[i], beta2), __fmul_rn(one_m_b2, gi));
        }
        if (zero) g[i] = 0.0f;
        if (p16) put16(p16, p16_dt, i, p[i]);
    }
}
extern "C" void utk_lion(float *p, float *g, float *m, int64_t n, float decay_mul, float beta1, float one_m_b1,
                         float beta2, float one_m_b2, float lr, bool zero, const float *sc, void *p16, int p16_dt) {
    if (n <= 0) return;
    k_lion<<<blocks_for(n), kThreads, 0, stream()>>>(p, g, m, n, decay_mul, beta1, one_m_b1, beta2, one_m_b2, lr,
                                                     zero, sc, p16, p16_dt);
    ut_cuda_launched("lion");
}

__global__ void k_sgd(float *p, float *g, float *buf, int64_t n, float wd, float lr, float mom,
                      float one_m_damp, bool use_momentum, bool first, bool nesterov, bool zero,
                      const float *sc, void *p16, int p16_dt) {
    float gmul = sc ? sc[0] : 1.0f;
    bool skip = sc && sc[1] != 0.0f;
    UTK_GRID_STRIDE(i, n) {
        if (!skip) {
            float d = __fadd_rn(__fmul_rn(g[i], gmul), __fmul_rn(wd, p[i]));
            if (use_momentum) {
                float b = first ? d : __fadd_rn(__fmul_rn(buf[i], mom), __fmul_rn(one_m_damp, d));
                buf[i] = b;
                d = nesterov ? __fadd_rn(d, __fmul_rn(mom, b)) : b;
            }
            p[i] = __fsub_rn(p[i], __fmul_rn(lr, d));
        }
        if (zero) g[i] = 0.0f;
        if (p16) put16(p16, p16_dt, i, p[i]);
    }
}
extern "C" void utk_sgd(float *p, float *g, float *buf, int64_t n, float wd, float lr, float momentum,
                        float one_m_damp, bool use_momentum, bool first, bool nesterov, bool zero,
                        const float *sc, void *p16, int p16_dt) {
    if (n <= 0) return;
    k_sgd<<<blocks_for(n), kThreads, 0, stream()>>>(p, g, buf, n, wd, lr, momentum, one_m_damp, use_momentum,
                                          first, nesterov, zero, sc, p16, p16_dt);
    ut_cuda_launched("sgd");
}

/* Row-strided kernels walk rows on the grid's y axis and each row's columns
 * on x (no division per element); the grid covers at most 65535 rows at a
 * time and its rows step on. */
#define UTK_ROWS(r, rows, c, cols)                                                        \
    for (int64_t r = blockIdx.y; r < (rows); r += gridDim.y)                              \
        for (int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; c < (cols);      \
             c += (int64_t)gridDim.x * blockDim.x)
static int rows_threads(int64_t cols) { /* narrow rows: a warp or a few, not kThreads mostly idle */
    return cols >= kThreads ? kThreads : (int)((cols + 31) / 32 * 32);
}
static dim3 rows_grid(int64_t rows, int64_t cols) {
    int64_t t = rows_threads(cols), bx = (cols + t - 1) / t, by = rows < 65535 ? rows : 65535;
    return dim3((unsigned)(bx < 64 ? bx : 64), (unsigned)by);
}

__global__ void k_rows_fill(float *out, int64_t ld, const float *bias, int64_t rows, int64_t cols) {
    UTK_ROWS(r, rows, c, cols) out[r * ld + c] = bias[c];
}
extern "C" void utk_rows_fill(float *out, int64_t ld, const float *bias, int64_t rows, int64_t cols) {
    if (rows <= 0 || cols <= 0) return;
    k_rows_fill<<<rows_grid(rows, cols), rows_threads(cols), 0, stream()>>>(out, ld, bias, rows, cols);
    ut_cuda_launched("bias rows");
}

/* Rows copied where source and destination share a dtype (the bits moved
 * as they are): a thread takes 16 bytes of a destination row, read in one
 * load where the source row allows it (16-byte aligned there), else element
 * by element (all of them in flight at once), and written in one store where
 * the destination allows it. The padded head's copies (GPT-2's logits into
 * and out of 50304-wide rows) have one side aligned and the other not.
 * dst: rows_out rows of width elements, ldd apart; src: rows rows of cols,
 * lds apart; zero beyond them. */
template <typename E>
__global__ void k_rows_copy(E *dst, int64_t ldd, int64_t width, const E *src, int64_t lds, int64_t rows,
                            int64_t cols, int64_t rows_out, bool svec, bool dvec) {
    constexpr int P = 16 / (int)sizeof(E);
    int64_t groups = (width + P - 1) / P;
    UTK_ROWS(r, rows_out, g, groups) {
        int64_t c0 = g * P;
        E v[P];
        if (r < rows && svec && c0 + P <= cols) {
            uint4 raw = *reinterpret_cast<const uint4 *>(src + r * lds + c0);
            memcpy(v, &raw, sizeof raw);
        } else {
#pragma unroll
            for (int j = 0; j < P; j++) v[j] = r < rows && c0 + j < cols ? src[r * lds + c0 + j] : (E)0;
        }
        if (dvec && c0 + P <= width) {
            uint4 raw;
            memcpy(&raw, v, sizeof raw);
            *reinterpret_cast<uint4 *>(dst + r * ldd + c0) = raw;
        } else {
#pragma unroll
            for (int j = 0; j < P; j++)
                if (c0 + j < width) dst[r * ldd + c0 + j] = v[j];
        }
    }
}
static void rows_copy(void *dst, int dt, int64_t ldd, int64_t width, const void *src, int64_t lds, int64_t rows,
                      int64_t cols, int64_t rows_out) {
    int64_t per = dt ? 8 : 4, groups = (width + per - 1) / per;
    bool svec = ((uintptr_t)src & 15) == 0 && lds % per == 0, dvec = ((uintptr_t)dst & 15) == 0 && ldd % per == 0;
    dim3 grid = rows_grid(rows_out, groups);
    if (dt)
        k_rows_copy<uint16_t><<<grid, rows_threads(groups), 0, stream()>>>((uint16_t *)dst, ldd, width,
                                                                          (const uint16_t *)src, lds, rows, cols,
                                                                          rows_out, svec, dvec);
    else
        k_rows_copy<uint32_t><<<grid, rows_threads(groups), 0, stream()>>>((uint32_t *)dst, ldd, width,
                                                                          (const uint32_t *)src, lds, rows, cols,
                                                                          rows_out, svec, dvec);
}

__global__ void k_rows_convert(void *dst, int ddt, int64_t ldd, const void *src, int sdt, int64_t lds, int64_t rows,
                               int64_t cols) {
    UTK_ROWS(r, rows, c, cols) utk_store_f32(dst, ddt, r * ldd + c, utk_load_f32(src, sdt, r * lds + c));
}
extern "C" void utk_rows_convert(void *dst, int ddt, int64_t ldd, const void *src, int sdt, int64_t lds,
                                 int64_t rows, int64_t cols) {
    if (rows <= 0 || cols <= 0) return;
    if (ddt == sdt) rows_copy(dst, ddt, ldd, cols, src, lds, rows, cols, rows);
    else
        k_rows_convert<<<rows_grid(rows, cols), rows_threads(cols), 0, stream()>>>(dst, ddt, ldd, src, sdt, lds,
                                                                                   rows, cols);
    ut_cuda_launched("rows convert");
}

__global__ void k_rows_pad(void *dst, int ddt, int64_t ldd, const void *src, int sdt, int64_t lds, int64_t rows,
                           int64_t cols, int64_t rows_out) {
    UTK_ROWS(r, rows_out, c, ldd)
    utk_store_f32(dst, ddt, r * ldd + c, r < rows && c < cols ? utk_load_f32(src, sdt, r * lds + c) : 0.0f);
}
extern "C" void utk_rows_pad(void *dst, int ddt, int64_t ldd, const void *src, int sdt, int64_t lds, int64_t rows,
                             int64_t cols, int64_t rows_out) {
    if (rows_out <= 0 || ldd <= 0) return;
    if (ddt == sdt) rows_copy(dst, ddt, ldd, ldd, src, lds, rows, cols, rows_out);
    else
        k_rows_pad<<<rows_grid(rows_out, ldd), rows_threads(ldd), 0, stream()>>>(dst, ddt, ldd, src, sdt, lds, rows,
                                                                               cols, rows_out);
    ut_cuda_launched("rows pad");
}

/* Column sums in two passes with no atomics, so the same bits every run: each
 * block of COL_ROWS rows is summed per column in row order (reads coalesced
 * across the warp), then each column adds its block sums in block order.
 * Where a row is whole 16-byte groups (cols a multiple of 16 / element size,
 * g aligned) a thread sums the columns of one group, 16 bytes a load, four
 * rows' loads in flight (a warp then fetches 512 bytes a row: a linear's
 * bias gradient over 8 x 1024 rows runs at the memory's rate, where one
 * thread a column, 64 bytes a warp, kept too few loads in flight); else one
 * thread a column. Both add each column's rows in the same order. The
 * partial sums live in a process-wide device buffer that only grows; work
 * on the one stream runs in order, so it is not reused before the kernel
 * that reads it has run. */
#define COL_ROWS 64
__global__ void k_col_part(float *part, const void *g, int g_dt, int64_t rows, int64_t cols, int64_t rp) {
    int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x, r0 = blockIdx.y * rp;
    if (c >= cols) return;
    int64_t r1 = r0 + rp < rows ? r0 + rp : rows;
    float acc = 0.0f;
#pragma unroll 4
    for (int64_t r = r0; r < r1; r++) acc += utk_load_f32(g, g_dt, r * cols + c);
    part[blockIdx.y * cols + c] = acc;
}
template <typename T>
__global__ void k_col_part16(float *part, const T *g, int64_t rows, int64_t cols, int64_t rp) {
    constexpr int P = 16 / (int)sizeof(T);
    int64_t q = blockIdx.x * (int64_t)blockDim.x + threadIdx.x, r0 = blockIdx.y * rp;
    int64_t groups = cols / P;
    if (q >= groups) return;
    int64_t r1 = r0 + rp < rows ? r0 + rp : rows;
    const uint4 *src = reinterpret_cast<const uint4 *>(g) + q;
    float acc[P];
#pragma unroll
    for (int j = 0; j < P; j++) acc[j] = 0.0f;
#pragma unroll 4
    for (int64_t r = r0; r < r1; r++) {
        uint4 raw = src[r * groups];
        T e[P];
        memcpy(e, &raw, sizeof raw);
#pragma unroll
        for (int j = 0; j < P; j++) acc[j] += utk_load(e + j);
    }
#pragma unroll
    for (int j = 0; j < P; j++) part[blockIdx.y * cols + q * P + j] = acc[j];
}
/* db[c] += the sum of the parts' column c: a block takes 32 columns, its 8
 * warps every 8th part each (in part order), then the 8 sums in warp order
 * (a fixed order set by nparts alone: one thread a column had each walk all
 * the parts, 1024 at 64 x 1024 rows, one load in flight at a time) */
#define COL_LANES 8
__global__ void k_col_parts_add(float *db, const float *part, int64_t nparts, int64_t cols) {
    __shared__ float sh[COL_LANES][33];
    int tx = threadIdx.x & 31, ty = threadIdx.x >> 5;
    int64_t c = blockIdx.x * (int64_t)32 + tx;
    float acc = 0.0f;
    if (c < cols) {
#pragma unroll 4
        for (int64_t p = ty; p < nparts; p += COL_LANES) acc += part[p * cols + c];
    }
    sh[ty][tx] = acc;
    __syncthreads();
    if (ty == 0 && c < cols) {
        float s = 0.0f;
#pragma unroll
        for (int k = 0; k < COL_LANES; k++) s += sh[k][tx];
        db[c] += s;
    }
}
/* The partial sums' buffer is kept under this many bytes (utk_col_parts_cap):
 * parts take more rows than COL_ROWS where rows x cols would need more
 * (a biased head's 50304 columns at 64 x 1024 rows: 206 MB at 64 rows a
 * part, held for the process's life outside the arena), and never more
 * than gridDim.y's 65535 parts. */
static size_t col_cap_bytes = (size_t)64 << 20;
extern "C" void utk_col_parts_cap(size_t bytes) { col_cap_bytes = bytes ? bytes : (size_t)64 << 20; }

/* Rows a part sums for rows x cols: COL_ROWS, or more as above. */
static int64_t col_rows_per_part(int64_t rows, int64_t cols) {
    int64_t maxp = (int64_t)(col_cap_bytes / ((size_t)cols * sizeof(float)));
    if (maxp < 1) maxp = 1;
    if (maxp > 65535) maxp = 65535;
    int64_t rp = COL_ROWS;
    if ((rows + rp - 1) / rp > maxp) rp = (rows + maxp - 1) / maxp;
    return rp;
}

/* the partial sums' buffer for nparts x cols */
static float *col_parts(int64_t nparts, int64_t cols) {
    static float *part;
    static size_t cap;
    size_t need = (size_t)(nparts * cols) * sizeof(float);
    if (need > cap) {
        if (part) {
            cudaStreamSynchronize(stream());
            cudaFree(part);
        }
        part = (float *)ut_cuda_malloc(need, "column sums' partial sums");
        cap = need;
    }
    return part;
}

extern "C" void utk_col_sum_add(float *db, const void *g, int g_dt, int64_t rows, int64_t cols) {
    if (cols <= 0 || rows <= 0) return;
    int64_t rp = col_rows_per_part(rows, cols), nparts = (rows + rp - 1) / rp;
    float *part = col_parts(nparts, cols);
    int el = g_dt ? 2 : 4, per = 16 / el;
    if (cols % per == 0 && ((uintptr_t)g & 15) == 0) {
        int64_t groups = cols / per;
        dim3 grid((unsigned)((groups + kThreads - 1) / kThreads), (unsigned)nparts);
        if (g_dt == 1) k_col_part16<__nv_bfloat16><<<grid, kThreads, 0, stream()>>>(part, (const __nv_bfloat16 *)g, rows, cols, rp);
        else if (g_dt == 2) k_col_part16<__half><<<grid, kThreads, 0, stream()>>>(part, (const __half *)g, rows, cols, rp);
        else k_col_part16<float><<<grid, kThreads, 0, stream()>>>(part, (const float *)g, rows, cols, rp);
    } else {
        dim3 grid((unsigned)((cols + kThreads - 1) / kThreads), (unsigned)nparts);
        k_col_part<<<grid, kThreads, 0, stream()>>>(part, g, g_dt, rows, cols, rp);
    }
    ut_cuda_launched("column sums");
    k_col_parts_add<<<(unsigned)((cols + 31) / 32), 32 * COL_LANES, 0, stream()>>>(db, part, nparts, cols);
    ut_cuda_launched("column sums (parts)");
}

/* Linear's fused GELU backward with its bias gradient (matmul.c): dx =
 * 0 + dy gelu'(x) rounded to T (the gelu kernel's arithmetic, unary.cu) is
 * stored, and its column sums taken in the same pass, rows summed as
 * k_col_part16 sums them: dx and db get the bits of the gelu kernel then
 * utk_col_sum_add, without the second read of dx. */
template <typename T>
__global__ void k_gelu_bwd_col_part16(T *dx, float *part, const T *dy, const T *x, int64_t rows, int64_t cols,
                                      int64_t rp) {
    constexpr int P = 16 / (int)sizeof(T);
    int64_t q = blockIdx.x * (int64_t)blockDim.x + threadIdx.x, r0 = blockIdx.y * rp;
    int64_t groups = cols / P;
    if (q >= groups) return;
    int64_t r1 = r0 + rp < rows ? r0 + rp : rows;
    const uint4 *gy = reinterpret_cast<const uint4 *>(dy) + q, *gx = reinterpret_cast<const uint4 *>(x) + q;
    uint4 *gd = reinterpret_cast<uint4 *>(dx) + q;
    float acc[P];
#pragma unroll
    for (int j = 0; j < P; j++) acc[j] = 0.0f;
#pragma unroll 4
    for (int64_t r = r0; r < r1; r++) {
        uint4 ry = gy[r * groups], rx = gx[r * groups], rd;
        T ey[P], ex[P], ed[P];
        memcpy(ey, &ry, sizeof ry);
        memcpy(ex, &rx, sizeof rx);
#pragma unroll
        for (int j = 0; j < P; j++) {
            utk_store(ed + j, __fadd_rn(0.0f, utk::GeluB{}(utk_load(ey + j), utk_load(ex + j))));
            acc[j] += utk_load(ed + j);
        }
        memcpy(&rd, ed, sizeof rd);
        gd[r * groups] = rd;
    }
#pragma unroll
    for (int j = 0; j < P; j++) part[blockIdx.y * cols + q * P + j] = acc[j];
}

extern "C" bool utk_gelu_bwd_col_sum(void *dx, const void *dy, const void *x, int dt, float *db, int64_t rows,
                                     int64_t cols) {
    if ((dt != 1 && dt != 2) || cols <= 0 || rows <= 0 || cols % 8 ||
        (((uintptr_t)dx | (uintptr_t)dy | (uintptr_t)x) & 15))
        return false;
    int64_t rp = col_rows_per_part(rows, cols), nparts = (rows + rp - 1) / rp, groups = cols / 8;
    float *part = col_parts(nparts, cols);
    dim3 grid((unsigned)((groups + kThreads - 1) / kThreads), (unsigned)nparts);
    if (dt == 1)
        k_gelu_bwd_col_part16<__nv_bfloat16><<<grid, kThreads, 0, stream()>>>(
            (__nv_bfloat16 *)dx, part, (const __nv_bfloat16 *)dy, (const __nv_bfloat16 *)x, rows, cols, rp);
    else
        k_gelu_bwd_col_part16<__half><<<grid, kThreads, 0, stream()>>>((__half *)dx, part, (const __half *)dy,
                                                                        (const __half *)x, rows, cols, rp);
    ut_cuda_launched("gelu backward with column sums");
    k_col_parts_add<<<(unsigned)((cols + 31) / 32), 32 * COL_LANES, 0, stream()>>>(db, part, nparts, cols);
    ut_cuda_launched("column sums (parts)");
    return true;
}

__global__ void k_bias_round(void *out, int dt, const float *tmp, int64_t ldt, const float *bias, int64_t rows,
                             int64_t cols) {
    UTK_ROWS(r, rows, c, cols) {
        float v = tmp[r * ldt + c];
        utk_store_f32(out, dt, r * cols + c, bias ? __fadd_rn(v, bias[c]) : v);
    }
}
extern "C" void utk_bias_round(void *out, int dt, const float *tmp, int64_t ldt, const float *bias, int64_t rows,
                               int64_t cols) {
    if (rows <= 0 || cols <= 0) return;
    k_bias_round<<<rows_grid(rows, cols), rows_threads(cols), 0, stream()>>>(out, dt, tmp, ldt, bias, rows, cols);
    ut_cuda_launched("bias and round");
}

template <bool VEC>
__global__ void k_add_round(void *dst, int dt, const float *add, int64_t n) {
    utk_ew_loop<VEC>(
        n,
        [&](int64_t v) {
            float4 d = utk_load4(dst, dt, v), a = reinterpret_cast<const float4 *>(add)[v];
            utk_store4(dst, dt, v,
                       make_float4(__fadd_rn(d.x, a.x), __fadd_rn(d.y, a.y), __fadd_rn(d.z, a.z), __fadd_rn(d.w, a.w)));
        },
        [&](int64_t i) { utk_store_f32(dst, dt, i, __fadd_rn(utk_load_f32(dst, dt, i), add[i])); });
}
extern "C" void utk_add_round(void *dst, int dt, const float *add, int64_t n) {
    if (n <= 0) return;
    if (utk_vec4_ok(dst, dt) && utk_vec4_ok(add, 0))
        k_add_round<true><<<blocks_for((n + 3) / 4), kThreads, 0, stream()>>>(dst, dt, add, n);
    else
        k_add_round<false><<<blocks_for(n), kThreads, 0, stream()>>>(dst, dt, add, n);
    ut_cuda_launched("add and round");
}

/* Fused causal self-attention of ATTENTION on the tensor cores, for autocast
 * (flash_attention.h: ut_cuda_flash_attn_tc_*; semantics:
 * src/backend/cpu/attention.c; the float32 form: flash_attention.cu).
 *
 * Head size D = 64; tiles of 64 queries x 64 keys; a block has 4 warps, and
 * warp w owns tile rows 16 w .. 16 w + 15. The products are WMMA 16x16x16
 * fragments in T16 (bf16 or fp16) with float32 accumulation:
 *   forward, a block per (b, h, query block; heaviest first): S = Q K^T into
 *     shared memory (float), the online softmax by the warp's lanes (two
 *     lanes a row, 32 columns each), P rounded to T16, O += P V with O kept
 *     in shared memory in float32 (a row's rescaling needs its elements,
 *     which a WMMA accumulator does not expose). Writes out (and its copy)
 *     and L = m + log(l) per row, as the float32 form does.
 *   backward, after D = rowsum(dout * out) (ut_cuda_flash_attn_rowdot):
 *     kernel A, a block per (b, h, key block), loops over the query blocks
 *     from the diagonal to T: S^T = K Q^T and dP^T = V dout^T, P^T =
 *     exp(scale S^T - L), dV += P^T dout and dK += dS^T Q (dS = P (dP - D))
 *     in WMMA accumulators; kernel B, a block per (b, h, query block), loops
 *     over the key blocks up to the diagonal: dQ += dS K.
 * Inputs are float32 holding values exact in T16 (autocast's rounded
 * operands), copied into shared memory as T16 (exactly); dK, dQ take the
 * scale at the end; each gradient element is added into dqkv by one thread
 * after a fixed-order sum: no atomics, the same bits on every run.
 * Shared memory: forward 70 KiB, kernel A 80.5 KiB, kernel B 79 KiB (two
 * blocks per H100 SM). */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <mma.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cuda.h"
#include "flash_attention.h"
#include "launch.cuh"

namespace {

using namespace nvcuda;

constexpr int D = 64;         /* head size */
constexpr int BM = 64;        /* queries or keys per tile */
constexpr int NW = 4;         /* warps per block */
constexpr int NT = 32 * NW;   /* threads per block */
constexpr int WR = BM / NW;   /* tile rows per warp (16) */
constexpr int LH = D + 8;     /* row stride of the T16 tiles (64 x D) */
constexpr int LP = BM + 8;    /* row stride of the T16 score tiles (16 x 64 a warp) */
constexpr int LF = BM + 4;    /* row stride of the float score tiles */
constexpr int LO = D + 4;     /* row stride of the float 16 x D results */
static_assert(LF >= D && LO >= BM, "the float tiles hold both shapes");

constexpr size_t H_TILE = (size_t)BM * LH * 2; /* bytes of a 64 x D T16 tile */
constexpr size_t P_TILE = (size_t)BM * LP * 2; /* the four warps' 16 x 64 T16 tiles */
constexpr size_t F_TILE = (size_t)BM * LF * 4; /* the four warps' 16 x 64 float tiles */
constexpr size_t O_TILE = (size_t)BM * LO * 4;
constexpr size_t FWD_BYTES = 3 * H_TILE + F_TILE + P_TILE + O_TILE;
constexpr size_t DKDV_BYTES = 4 * H_TILE + 2 * F_TILE + P_TILE + 2 * BM * 4;
constexpr size_t DQ_BYTES = 4 * H_TILE + 2 * F_TILE + P_TILE;
static_assert(H_TILE % 128 == 0 && P_TILE % 128 == 0 && F_TILE % 128 == 0 && O_TILE % 128 == 0,
              "regions start 128-byte aligned");

template <typename T16>
__device__ __forceinline__ T16 to16(float v);
template <>
__device__ __forceinline__ __nv_bfloat16 to16<__nv_bfloat16>(float v) {
    return __float2bfloat16_rn(v);
}
template <>
__device__ __forceinline__ __half to16<__half>(float v) {
    return __float2half_rn(v);
}

template <typename T16>
using frag_a = wmma::fragment<wmma::matrix_a, 16, 16, 16, T16, wmma::row_major>;
template <typename T16>
using frag_b_row = wmma::fragment<wmma::matrix_b, 16, 16, 16, T16, wmma::row_major>;
template <typename T16>
using frag_b_col = wmma::fragment<wmma::matrix_b, 16, 16, 16, T16, wmma::col_major>;
using frag_c = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

/* dst (64 x D T16, row stride LH) = rows r0 .. r0 + 63 of src (float, row
 * stride ld, columns 0 .. D - 1), zero from row T on; by the whole block */
template <typename T16>
__device__ void load_tile(T16 *dst, const float *src, int64_t ld, int r0, int T, bool vec) {
    constexpr int V4 = D / 4;
    for (int i = (int)threadIdx.x; i < BM * V4; i += NT) {
        const int row = i / V4, c = (i % V4) * 4, r = r0 + row;
        float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (r < T) {
            const float *p = src + (int64_t)r * ld + c;
            if (vec) v = *reinterpret_cast<const float4 *>(p);
            else v = make_float4(p[0], p[1], p[2], p[3]);
        }
        T16 *d = dst + row * LH + c;
        d[0] = to16<T16>(v.x);
        d[1] = to16<T16>(v.y);
        d[2] = to16<T16>(v.z);
        d[3] = to16<T16>(v.w);
    }
}

/* c (16 x 16) = A (16 x D, rows of a T16 tile at a, stride LH) B^T, B's 16
 * rows at b (stride LH): the scores of 16 rows against 16 others */
template <typename T16>
__device__ __forceinline__ void mm_abt(frag_c &c, const frag_a<T16> *a, const T16 *b) {
    wmma::fill_fragment(c, 0.0f);
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++) {
        frag_b_col<T16> fb;
        wmma::load_matrix_sync(fb, b + kk * 16, LH); /* element (d, j) at b[j LH + d] */
        wmma::mma_sync(c, a[kk], fb, c);
    }
}

/* acc[n] (16 x 16, n < D / 16) += P (16 x 64 T16 at p, stride LP) X (64 x D T16 at x, stride LH) */
template <typename T16>
__device__ __forceinline__ void mm_px(frag_c *acc, const T16 *p, const T16 *x) {
#pragma unroll
    for (int kk = 0; kk < BM / 16; kk++) {
        frag_a<T16> fa;
        wmma::load_matrix_sync(fa, p + kk * 16, LP);
#pragma unroll
        for (int n = 0; n < D / 16; n++) {
            frag_b_row<T16> fb;
            wmma::load_matrix_sync(fb, x + kk * 16 * LH + n * 16, LH);
            wmma::mma_sync(acc[n], fa, fb, acc[n]);
        }
    }
}

/* the warp's 16 rows of a T16 tile at t (stride LH) as A fragments */
template <typename T16>
__device__ __forceinline__ void rows_a(frag_a<T16> *a, const T16 *t) {
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++) wmma::load_matrix_sync(a[kk], t + kk * 16, LH);
}

/* the 16 x 64 scores of the warp's rows (A fragments a) against the 64 rows
 * of the tile at b, into the float tile s (stride LF) */
template <typename T16>
__device__ __forceinline__ void scores(float *s, const frag_a<T16> *a, const T16 *b) {
#pragma unroll
    for (int n = 0; n < BM / 16; n++) {
        frag_c c;
        mm_abt<T16>(c, a, b + n * 16 * LH);
        wmma::store_matrix_sync(s + n * 16, c, LF, wmma::mem_row_major);
    }
}

/* ---- forward ---- */
template <typename T16>
__global__ void __launch_bounds__(NT) fwd_kernel(const float *__restrict__ qkv, float *__restrict__ out,
                                                 float *__restrict__ out2, float *__restrict__ L, int T, int C,
                                                 int NH, float scale, bool vec) {
    extern __shared__ __align__(128) unsigned char sm[];
    T16 *Qs = (T16 *)sm, *Ks = (T16 *)(sm + H_TILE), *Vs = (T16 *)(sm + 2 * H_TILE);
    float *Ss = (float *)(sm + 3 * H_TILE);
    T16 *Ps = (T16 *)(sm + 3 * H_TILE + F_TILE);
    float *Os = (float *)(sm + 3 * H_TILE + F_TILE + P_TILE);
    const int bh = (int)blockIdx.x, b = bh / NH, h = bh % NH;
    const int qb = (int)gridDim.y - 1 - (int)blockIdx.y; /* heaviest first */
    const int w = (int)threadIdx.x >> 5, lane = (int)threadIdx.x & 31;
    const int q0 = qb * BM;
    const int64_t ld = 3 * (int64_t)C;
    const float *base = qkv + (int64_t)b * T * ld + (int64_t)h * D;
    float *Sw = Ss + w * WR * LF, *Ow = Os + w * WR * LO;
    T16 *Pw = Ps + w * WR * LP;

    load_tile<T16>(Qs, base, ld, q0, T, vec);
    for (int i = (int)threadIdx.x; i < BM * LO; i += NT) Os[i] = 0.0f;
    __syncthreads();
    frag_a<T16> qa[D / 16];
    rows_a<T16>(qa, Qs + w * WR * LH);

    /* this lane's row of the warp's 16 and its half of the columns */
    const int r = lane >> 1, half = lane & 1, qi = q0 + w * WR + r;
    float m = -INFINITY, l = 0.0f;
    for (int kb = 0; kb <= qb; kb++) {
        const int k0 = kb * BM;
        __syncthreads(); /* every warp is done with the previous Ks, Vs */
        load_tile<T16>(Ks, base + C, ld, k0, T, vec);
        load_tile<T16>(Vs, base + 2 * (int64_t)C, ld, k0, T, vec);
        __syncthreads();
        scores<T16>(Sw, qa, Ks);
        __syncwarp();
        float sv[BM / 2], mx = -INFINITY;
#pragma unroll
        for (int c = 0; c < BM / 2; c++) {
            const int col = half * (BM / 2) + c, key = k0 + col;
            const float s = key <= qi && key < T ? Sw[r * LF + col] * scale : -INFINITY;
            sv[c] = s;
            mx = fmaxf(mx, s);
        }
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        const float mn = fmaxf(m, mx);
        /* a row with no key yet (a padding row past T) keeps zeros */
        const float alpha = mn == -INFINITY ? 1.0f : expf(m - mn);
        float ps = 0.0f;
#pragma unroll
        for (int c = 0; c < BM / 2; c++) {
            const float p = mn == -INFINITY ? 0.0f : expf(sv[c] - mn);
            ps += p;
            Pw[r * LP + half * (BM / 2) + c] = to16<T16>(p);
        }
        ps += __shfl_xor_sync(0xffffffffu, ps, 1);
        l = l * alpha + ps;
        m = mn;
#pragma unroll
        for (int c = 0; c < D / 2; c++) Ow[r * LO + half * (D / 2) + c] *= alpha;
        __syncwarp();
        frag_c acc[D / 16];
#pragma unroll
        for (int n = 0; n < D / 16; n++) wmma::load_matrix_sync(acc[n], Ow + n * 16, LO, wmma::mem_row_major);
        mm_px<T16>(acc, Pw, Vs);
#pragma unroll
        for (int n = 0; n < D / 16; n++) wmma::store_matrix_sync(Ow + n * 16, acc[n], LO, wmma::mem_row_major);
        __syncwarp();
    }
    if (qi < T) {
        const float inv = 1.0f / l;
        const int64_t o = ((int64_t)b * T + qi) * C + (int64_t)h * D + half * (D / 2);
#pragma unroll 4
        for (int c = 0; c < D / 2; c++) {
            const float v = Ow[r * LO + half * (D / 2) + c] * inv;
            out[o + c] = v;
            if (out2) out2[o + c] = v;
        }
        if (half == 0) L[(int64_t)bh * T + qi] = m + logf(l);
    }
}

/* ---- backward ---- */

/* adds the warp's 16 x D results (float tile f, stride LO or LF >= D) into
 * rows r0 .. r0 + 15 of dst (row stride ld), rows below T, times s */
__device__ __forceinline__ void add_rows(float *dst, int64_t ld, const float *f, int lf, int r0, int T, float s) {
    const int lane = (int)threadIdx.x & 31, r = lane >> 1, half = lane & 1;
    if (r0 + r >= T) return;
    float *d = dst + (int64_t)(r0 + r) * ld + half * (D / 2);
#pragma unroll 4
    for (int c = 0; c < D / 2; c++) d[c] += f[r * lf + half * (D / 2) + c] * s;
}

/* What both backward kernels start from: their shared memory (four 64 x D
 * T16 tiles, the warps' two float score tiles and their T16 tile, then 64
 * rows of L and D for kernel A) and their head's place in qkv and dout. */
template <typename T16>
struct bwd_block {
    T16 *tile[4], *Pw;
    float *Sw, *Gw, *Ls, *Ds;
    int bh, b, h, w, lane;
    int64_t ld;
    const float *base, *gbase;
    __device__ bwd_block(unsigned char *sm, const float *qkv, const float *dout, int T, int C, int NH) {
        for (int i = 0; i < 4; i++) tile[i] = (T16 *)(sm + i * H_TILE);
        bh = (int)blockIdx.x, b = bh / NH, h = bh % NH;
        w = (int)threadIdx.x >> 5, lane = (int)threadIdx.x & 31;
        Sw = (float *)(sm + 4 * H_TILE) + w * WR * LF;
        Gw = (float *)(sm + 4 * H_TILE + F_TILE) + w * WR * LF;
        Pw = (T16 *)(sm + 4 * H_TILE + 2 * F_TILE) + w * WR * LP;
        Ls = (float *)(sm + 4 * H_TILE + 2 * F_TILE + P_TILE), Ds = Ls + BM;
        ld = 3 * (int64_t)C;
        base = qkv + (int64_t)b * T * ld + (int64_t)h * D;
        gbase = dout + (int64_t)b * T * C + (int64_t)h * D;
    }
};

/* kernel A: dK, dV of key block blockIdx.y (heaviest, the first, first) */
template <typename T16>
__global__ void __launch_bounds__(NT) dkdv_kernel(const float *__restrict__ qkv, const float *__restrict__ dout,
                                                  const float *__restrict__ L, const float *__restrict__ Dg,
                                                  float *__restrict__ dqkv, int T, int C, int NH, float scale,
                                                  bool vec) {
    extern __shared__ __align__(128) unsigned char sm[];
    bwd_block<T16> k(sm, qkv, dout, T, C, NH);
    T16 *Ks = k.tile[0], *Vs = k.tile[1], *Qs = k.tile[2], *Gs = k.tile[3], *Pw = k.Pw;
    float *Sw = k.Sw, *Gw = k.Gw, *Ls = k.Ls, *Ds = k.Ds;
    const int bh = k.bh, b = k.b, h = k.h, w = k.w, lane = k.lane;
    const int64_t ld = k.ld;
    const float *base = k.base, *gbase = k.gbase;
    const int kb = (int)blockIdx.y, nqb = (int)gridDim.y, k0 = kb * BM;

    load_tile<T16>(Ks, base + C, ld, k0, T, vec);
    load_tile<T16>(Vs, base + 2 * (int64_t)C, ld, k0, T, vec);
    __syncthreads();
    frag_a<T16> ka[D / 16], va[D / 16];
    rows_a<T16>(ka, Ks + w * WR * LH);
    rows_a<T16>(va, Vs + w * WR * LH);
    frag_c dk[D / 16], dv[D / 16];
#pragma unroll
    for (int n = 0; n < D / 16; n++) {
        wmma::fill_fragment(dk[n], 0.0f);
        wmma::fill_fragment(dv[n], 0.0f);
    }
    /* this lane's key (a row of the warp's 16) and its half of the queries */
    const int r = lane >> 1, half = lane & 1, kj = k0 + w * WR + r;
    for (int qb = kb; qb < nqb; qb++) {
        const int q0 = qb * BM;
        __syncthreads(); /* every warp is done with the previous Qs, Gs, Ls, Ds */
        load_tile<T16>(Qs, base, ld, q0, T, vec);
        load_tile<T16>(Gs, gbase, C, q0, T, vec);
        for (int i = (int)threadIdx.x; i < BM; i += NT) {
            const bool ok = q0 + i < T;
            Ls[i] = ok ? L[(int64_t)bh * T + q0 + i] : 0.0f;
            Ds[i] = ok ? Dg[(int64_t)bh * T + q0 + i] : 0.0f;
        }
        __syncthreads();
        scores<T16>(Sw, ka, Qs); /* S^T: the warp's keys against the block's queries */
        scores<T16>(Gw, va, Gs); /* dP^T = V dout^T */
        __syncwarp();
        float ds[BM / 2];
#pragma unroll
        for (int c = 0; c < BM / 2; c++) {
            const int col = half * (BM / 2) + c, q = q0 + col;
            float p = 0.0f;
            if (kj <= q && q < T && kj < T) p = expf(Sw[r * LF + col] * scale - Ls[col]);
            Pw[r * LP + col] = to16<T16>(p);
            ds[c] = p * (Gw[r * LF + col] - Ds[col]);
        }
        __syncwarp();
        mm_px<T16>(dv, Pw, Gs); /* dV += P^T dout */
        __syncwarp();            /* the P^T fragments are loaded: dS^T takes their place */
#pragma unroll
        for (int c = 0; c < BM / 2; c++) Pw[r * LP + half * (BM / 2) + c] = to16<T16>(ds[c]);
        __syncwarp();
        mm_px<T16>(dk, Pw, Qs); /* dK += dS^T Q */
        __syncwarp();
    }
    /* into dqkv's k and v columns, through the warp's float tiles */
#pragma unroll
    for (int n = 0; n < D / 16; n++) {
        wmma::store_matrix_sync(Sw + n * 16, dk[n], LF, wmma::mem_row_major);
        wmma::store_matrix_sync(Gw + n * 16, dv[n], LF, wmma::mem_row_major);
    }
    __syncwarp();
    float *dbase = dqkv + (int64_t)b * T * ld + (int64_t)h * D;
    add_rows(dbase + C, ld, Sw, LF, k0 + w * WR, T, scale);
    add_rows(dbase + 2 * (int64_t)C, ld, Gw, LF, k0 + w * WR, T, 1.0f);
}

/* kernel B: dQ of query block (heaviest first) */
template <typename T16>
__global__ void __launch_bounds__(NT) dq_kernel(const float *__restrict__ qkv, const float *__restrict__ dout,
                                                const float *__restrict__ L, const float *__restrict__ Dg,
                                                float *__restrict__ dqkv, int T, int C, int NH, float scale,
                                                bool vec) {
    extern __shared__ __align__(128) unsigned char sm[];
    bwd_block<T16> k(sm, qkv, dout, T, C, NH);
    T16 *Qs = k.tile[0], *Gs = k.tile[1], *Ks = k.tile[2], *Vs = k.tile[3], *Pw = k.Pw;
    float *Sw = k.Sw, *Gw = k.Gw;
    const int bh = k.bh, b = k.b, h = k.h, w = k.w, lane = k.lane;
    const int64_t ld = k.ld;
    const float *base = k.base, *gbase = k.gbase;
    const int qb = (int)gridDim.y - 1 - (int)blockIdx.y, q0 = qb * BM;

    load_tile<T16>(Qs, base, ld, q0, T, vec);
    load_tile<T16>(Gs, gbase, C, q0, T, vec);
    __syncthreads();
    frag_a<T16> qa[D / 16], ga[D / 16];
    rows_a<T16>(qa, Qs + w * WR * LH);
    rows_a<T16>(ga, Gs + w * WR * LH);
    frag_c dq[D / 16];
#pragma unroll
    for (int n = 0; n < D / 16; n++) wmma::fill_fragment(dq[n], 0.0f);
    const int r = lane >> 1, half = lane & 1, qi = q0 + w * WR + r;
    const float Li = qi < T ? L[(int64_t)bh * T + qi] : 0.0f, Di = qi < T ? Dg[(int64_t)bh * T + qi] : 0.0f;
    for (int kb = 0; kb <= qb; kb++) {
        const int k0 = kb * BM;
        __syncthreads(); /* every warp is done with the previous Ks, Vs */
        load_tile<T16>(Ks, base + C, ld, k0, T, vec);
        load_tile<T16>(Vs, base + 2 * (int64_t)C, ld, k0, T, vec);
        __syncthreads();
        scores<T16>(Sw, qa, Ks); /* S = Q K^T */
        scores<T16>(Gw, ga, Vs); /* dP = dout V^T */
        __syncwarp();
#pragma unroll
        for (int c = 0; c < BM / 2; c++) {
            const int col = half * (BM / 2) + c, key = k0 + col;
            float ds = 0.0f;
            if (key <= qi && qi < T) ds = expf(Sw[r * LF + col] * scale - Li) * (Gw[r * LF + col] - Di);
            Pw[r * LP + col] = to16<T16>(ds);
        }
        __syncwarp();
        mm_px<T16>(dq, Pw, Ks); /* dQ += dS K */
        __syncwarp();
    }
#pragma unroll
    for (int n = 0; n < D / 16; n++) wmma::store_matrix_sync(Sw + n * 16, dq[n], LF, wmma::mem_row_major);
    __syncwarp();
    add_rows(dqkv + (int64_t)b * T * ld + (int64_t)h * D, ld, Sw, LF, q0 + w * WR, T, scale);
}

bool aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

/* what the launchers share: the grid (b h, 64-row blocks) and the checks */
struct launch {
    dim3 grid;
    int T, C, NH;
    float scale;
    bool vec;
};

launch launch_of(int64_t B, int64_t T, int64_t C, int64_t NH) {
    launch g;
    g.grid = dim3((unsigned)(B * NH), (unsigned)((T + BM - 1) / BM));
    g.T = (int)T, g.C = (int)C, g.NH = (int)NH;
    g.scale = 1.0f / sqrtf((float)D);
    g.vec = C % 4 == 0;
    return g;
}

template <typename T16>
void fwd(float *out, float *out2, float *L, const float *qkv, const launch &g) {
    utk::allow_smem(fwd_kernel<T16>, FWD_BYTES);
    fwd_kernel<T16><<<g.grid, NT, FWD_BYTES, utk::stream()>>>(qkv, out, out2, L, g.T, g.C, g.NH, g.scale,
                                                               g.vec && aligned16(qkv));
    ut_cuda_launched("flash attention forward (tensor cores)");
}

template <typename T16>
void bwd(float *dqkv, const float *dout, const float *qkv, const float *L, const float *Dg, const launch &g) {
    bool vec = g.vec && aligned16(qkv) && aligned16(dout);
    utk::allow_smem(dkdv_kernel<T16>, DKDV_BYTES);
    dkdv_kernel<T16><<<g.grid, NT, DKDV_BYTES, utk::stream()>>>(qkv, dout, L, Dg, dqkv, g.T, g.C, g.NH, g.scale,
                                                                 vec);
    ut_cuda_launched("flash attention backward (dk, dv; tensor cores)");
    utk::allow_smem(dq_kernel<T16>, DQ_BYTES);
    dq_kernel<T16><<<g.grid, NT, DQ_BYTES, utk::stream()>>>(qkv, dout, L, Dg, dqkv, g.T, g.C, g.NH, g.scale, vec);
    ut_cuda_launched("flash attention backward (dq; tensor cores)");
}

}  // namespace

extern "C" bool ut_cuda_flash_attn_tc_ok(int64_t B, int64_t T, int64_t C, int64_t NH) {
    const char *e = getenv("UT_CUDA_ATTN");
    if (e && (!strcmp(e, "fp32") || !strcmp(e, "unfused"))) return false;
    if (B < 1 || T < 1 || NH < 1 || C % NH != 0 || C / NH != D) return false;
    if ((T + BM - 1) / BM > 65535 || B * NH > 0x7fffffff || 3 * C > 0x7fffffff || T > 0x7fffffff) return false;
    static int optin[64];
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) return false;
    if (!optin[dev]) {
        int v = 0, major = 0;
        if (cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess ||
            cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess)
            return false;
        /* bf16 WMMA needs sm_80 */
        optin[dev] = major >= 8 && v > 0 ? v : -1;
    }
    size_t need = FWD_BYTES > DKDV_BYTES ? FWD_BYTES : DKDV_BYTES;
    need = need > DQ_BYTES ? need : DQ_BYTES;
    return optin[dev] > 0 && need <= (size_t)optin[dev];
}

extern "C" void ut_cuda_flash_attn_tc_fwd(float *out, float *out_copy, float *L, const float *qkv, int64_t B,
                                          int64_t T, int64_t C, int64_t NH, int dt) {
    if (B <= 0 || T <= 0) return;
    launch g = launch_of(B, T, C, NH);
    if (dt == 2) fwd<__half>(out, out_copy, L, qkv, g);
    else fwd<__nv_bfloat16>(out, out_copy, L, qkv, g);
}

extern "C" void ut_cuda_flash_attn_tc_bwd(float *dqkv, float *Dscratch, const float *dout, const float *out,
                                          const float *qkv, const float *L, int64_t B, int64_t T, int64_t C,
                                          int64_t NH, int dt) {
    if (B <= 0 || T <= 0) return;
    ut_cuda_flash_attn_rowdot(Dscratch, dout, out, B, T, C, NH);
    launch g = launch_of(B, T, C, NH);
    if (dt == 2) bwd<__half>(dqkv, dout, qkv, L, Dscratch, g);
    else bwd<__nv_bfloat16>(dqkv, dout, qkv, L, Dscratch, g);
}

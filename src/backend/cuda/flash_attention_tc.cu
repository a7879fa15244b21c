/* Fused attention on the tensor cores, for autocast (flash_attention.h:
 * ut_cuda_flash_attn_tc_*; the float32 forms: flash_attention.cu), in the
 * float32 forms' three kinds (template MODE, flash_common.cuh): ATTENTION's
 * causal self-attention over packed qkv (semantics:
 * src/backend/cpu/attention.c), ATTENTION_MASKED's (key mask, Tq != Tk,
 * causal or not, dropout) and ATTENTION_VARLEN's packed sequences, with the
 * same loop ranges, masks and dropout draws as the float32 forms.
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
#include "flash_common.cuh"
#include "launch.cuh"

namespace {

using namespace nvcuda;

constexpr int D = 64;         /* head size */
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
template <typename T16, int MODE>
__global__ void __launch_bounds__(NT) fwd_kernel(float *__restrict__ out, float *__restrict__ out2,
                                                 float *__restrict__ L, geom g) {
    extern __shared__ __align__(128) unsigned char sm[];
    T16 *Qs = (T16 *)sm, *Ks = (T16 *)(sm + H_TILE), *Vs = (T16 *)(sm + 2 * H_TILE);
    float *Ss = (float *)(sm + 3 * H_TILE);
    T16 *Ps = (T16 *)(sm + 3 * H_TILE + F_TILE);
    float *Os = (float *)(sm + 3 * H_TILE + F_TILE + P_TILE);
    [[maybe_unused]] float *Bs = (float *)(sm + FWD_BYTES); /* MASKED: the key tile's biases */
    const int bh = (int)blockIdx.x, b = bh / g.NH, h = bh % g.NH;
    const int qb = (int)gridDim.y - 1 - (int)blockIdx.y; /* heaviest first */
    const int w = (int)threadIdx.x >> 5, lane = (int)threadIdx.x & 31;
    const int q0 = qb * BM;
    const int64_t hc = (int64_t)h * D;
    const float *q = (const float *)g.q + b * g.sq + hc, *k = (const float *)g.k + b * g.sk + hc,
                *v = (const float *)g.v + b * g.sk + hc;
    [[maybe_unused]] const float *mrow = MODE == MASKED && g.mask ? g.mask + (int64_t)b * g.Tk : nullptr;
    int kbeg, kstop;
    span_of<MODE>(g, q0, true, &kbeg, &kstop);
    float *Sw = Ss + w * WR * LF, *Ow = Os + w * WR * LO;
    T16 *Pw = Ps + w * WR * LP;

    load_tile<T16>(Qs, q, g.ldq, q0, g.Tq, g.vec);
    for (int i = (int)threadIdx.x; i < BM * LO; i += NT) Os[i] = 0.0f;
    __syncthreads();
    frag_a<T16> qa[D / 16];
    rows_a<T16>(qa, Qs + w * WR * LH);

    /* this lane's row of the warp's 16 and its half of the columns */
    const int r = lane >> 1, half = lane & 1, qi = q0 + w * WR + r;
    [[maybe_unused]] int lo = 0, hi = 0;
    [[maybe_unused]] int64_t pst = 0;
    if constexpr (MODE == VARLEN) seq_range(g, qi, &lo, &hi, &pst);
    float m = -INFINITY, l = 0.0f;
    for (int k0 = kbeg; k0 < kstop; k0 += BM) {
        __syncthreads(); /* every warp is done with the previous Ks, Vs (and Bs) */
        load_tile<T16>(Ks, k, g.ldk, k0, g.Tk, g.vec);
        load_tile<T16>(Vs, v, g.ldv, k0, g.Tk, g.vec);
        if constexpr (MODE == MASKED) {
            for (int i = (int)threadIdx.x; i < BM; i += NT) Bs[i] = key_bias(mrow, k0 + i, g.Tk);
        }
        __syncthreads();
        scores<T16>(Sw, qa, Ks);
        __syncwarp();
        float sv[BM / 2], mx = -INFINITY;
#pragma unroll
        for (int c = 0; c < BM / 2; c++) {
            const int col = half * (BM / 2) + c, key = k0 + col;
            bool ok;
            if constexpr (MODE == PACKED) ok = key <= qi && key < g.Tk;
            else if constexpr (MODE == MASKED) ok = key < g.Tk && (!g.causal || key <= qi);
            else ok = key >= lo && key < hi && (!g.causal || key <= qi);
            float s = ok ? Sw[r * LF + col] * g.scale : -INFINITY;
            if constexpr (MODE == MASKED) s += Bs[col];
            sv[c] = s;
            mx = fmaxf(mx, s);
        }
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        const float mn = fmaxf(m, mx);
        /* a row with no key yet (masked so far, or a padding row past Tq) keeps zeros */
        const float alpha = mn == -INFINITY ? 1.0f : expf(m - mn);
        float ps = 0.0f;
#pragma unroll
        for (int c = 0; c < BM / 2; c++) {
            float p = mn == -INFINITY ? 0.0f : expf(sv[c] - mn);
            ps += p; /* the softmax's sum: before dropout */
            if (MODE != PACKED && g.drop.p > 0.0f && p != 0.0f)
                p = kept<MODE>(g, bh, qi, k0 + half * (BM / 2) + c, lo, hi, pst) ? p * g.drop.ks : 0.0f;
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
    if (qi < g.Tq) {
        /* a row whose keys are all masked attends nowhere: out 0, L = +inf */
        const bool any = MODE == PACKED || l > 0.0f;
        const float inv = any ? 1.0f / l : 0.0f;
        const int64_t o = ((int64_t)b * g.Tq + qi) * g.C + hc + half * (D / 2);
#pragma unroll 4
        for (int c = 0; c < D / 2; c++) {
            const float v = Ow[r * LO + half * (D / 2) + c] * inv;
            out[o + c] = v;
            if (out2) out2[o + c] = v;
        }
        if (half == 0) L[(int64_t)bh * g.Tq + qi] = any ? m + logf(l) : INFINITY;
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
 * rows of L and D for kernel A, or kernel B's key biases) and their head's
 * place in q, k, v and dout. */
template <typename T16>
struct bwd_block {
    T16 *tile[4], *Pw;
    float *Sw, *Gw, *Ls, *Ds;
    int bh, b, h, w, lane;
    int64_t hc;
    const float *q, *k, *v, *gd;
    __device__ bwd_block(unsigned char *sm, const geom &g, const float *dout) {
        for (int i = 0; i < 4; i++) tile[i] = (T16 *)(sm + i * H_TILE);
        bh = (int)blockIdx.x, b = bh / g.NH, h = bh % g.NH;
        w = (int)threadIdx.x >> 5, lane = (int)threadIdx.x & 31;
        Sw = (float *)(sm + 4 * H_TILE) + w * WR * LF;
        Gw = (float *)(sm + 4 * H_TILE + F_TILE) + w * WR * LF;
        Pw = (T16 *)(sm + 4 * H_TILE + 2 * F_TILE) + w * WR * LP;
        Ls = (float *)(sm + 4 * H_TILE + 2 * F_TILE + P_TILE), Ds = Ls + BM;
        hc = (int64_t)h * D;
        q = (const float *)g.q + b * g.sq + hc, k = (const float *)g.k + b * g.sk + hc;
        v = (const float *)g.v + b * g.sk + hc;
        gd = dout + (int64_t)b * g.Tq * g.C + hc;
    }
};

/* p of element (query qq, key kk) from its score s, recomputed from the
 * row's L (0 where masked); bias: the mask's entry for the key (MASKED);
 * lo, hi: the sequence's rows (VARLEN) */
template <int MODE>
__device__ __forceinline__ float prob_at(const geom &g, int qq, int kk, float s, float Lq, float bias, int lo,
                                         int hi) {
    bool ok;
    if constexpr (MODE == PACKED) ok = kk <= qq && qq < g.Tq && kk < g.Tk;
    else if constexpr (MODE == MASKED) ok = qq < g.Tq && kk < g.Tk && (!g.causal || kk <= qq);
    else ok = qq >= lo && qq < hi && kk >= lo && kk < hi && (!g.causal || kk <= qq);
    if (!ok) return 0.0f;
    if constexpr (MODE == MASKED) return expf(s * g.scale + bias - Lq);
    else return expf(s * g.scale - Lq);
}

/* kernel A: dK, dV of key block blockIdx.y, summed over the query blocks
 * that see it (the float32 form's range); dk, dv: either may be NULL */
template <typename T16, int MODE>
__global__ void __launch_bounds__(NT) dkdv_kernel(const float *__restrict__ dout, const float *__restrict__ L,
                                                  const float *__restrict__ Dg, float *dk_out, float *dv_out,
                                                  geom g) {
    extern __shared__ __align__(128) unsigned char sm[];
    if constexpr (MODE == VARLEN) {
        if (*g.bad) return; /* the error flag is raised */
    }
    bwd_block<T16> kb(sm, g, dout);
    T16 *Ks = kb.tile[0], *Vs = kb.tile[1], *Qs = kb.tile[2], *Gs = kb.tile[3], *Pw = kb.Pw;
    float *Sw = kb.Sw, *Gw = kb.Gw, *Ls = kb.Ls, *Ds = kb.Ds;
    const int bh = kb.bh, b = kb.b, w = kb.w, lane = kb.lane;
    const int k0 = (int)blockIdx.y * BM;
    int qbeg, qstop;
    span_of<MODE>(g, k0, false, &qbeg, &qstop);

    load_tile<T16>(Ks, kb.k, g.ldk, k0, g.Tk, g.vec);
    load_tile<T16>(Vs, kb.v, g.ldv, k0, g.Tk, g.vec);
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
    [[maybe_unused]] int lo = 0, hi = 0;
    [[maybe_unused]] int64_t pst = 0;
    if constexpr (MODE == VARLEN) seq_range(g, kj, &lo, &hi, &pst);
    [[maybe_unused]] float bias = 0.0f;
    if constexpr (MODE == MASKED) bias = key_bias(g.mask ? g.mask + (int64_t)b * g.Tk : nullptr, kj, g.Tk);
    for (int q0 = qbeg; q0 < qstop; q0 += BM) {
        __syncthreads(); /* every warp is done with the previous Qs, Gs, Ls, Ds */
        load_tile<T16>(Qs, kb.q, g.ldq, q0, g.Tq, g.vec);
        load_tile<T16>(Gs, kb.gd, g.C, q0, g.Tq, g.vec);
        for (int i = (int)threadIdx.x; i < BM; i += NT) {
            const bool ok = q0 + i < g.Tq;
            Ls[i] = ok ? L[(int64_t)bh * g.Tq + q0 + i] : 0.0f;
            Ds[i] = ok ? Dg[(int64_t)bh * g.Tq + q0 + i] : 0.0f;
        }
        __syncthreads();
        scores<T16>(Sw, ka, Qs); /* S^T: the warp's keys against the block's queries */
        scores<T16>(Gw, va, Gs); /* dP^T = V dout^T */
        __syncwarp();
        float ds[BM / 2];
#pragma unroll
        for (int c = 0; c < BM / 2; c++) {
            const int col = half * (BM / 2) + c, qq = q0 + col;
            const float p = prob_at<MODE>(g, qq, kj, Sw[r * LF + col], Ls[col], bias, lo, hi);
            float pd = p, dp = Gw[r * LF + col];
            if (MODE != PACKED && g.drop.p > 0.0f && p != 0.0f) {
                const bool kp = kept<MODE>(g, bh, qq, kj, lo, hi, pst);
                pd = kp ? p * g.drop.ks : 0.0f;
                dp = kp ? dp * g.drop.ks : 0.0f;
            }
            Pw[r * LP + col] = to16<T16>(pd);
            ds[c] = p * (dp - Ds[col]);
        }
        __syncwarp();
        mm_px<T16>(dv, Pw, Gs); /* dV += Pd^T dout */
        __syncwarp();            /* the P^T fragments are loaded: dS^T takes their place */
#pragma unroll
        for (int c = 0; c < BM / 2; c++) Pw[r * LP + half * (BM / 2) + c] = to16<T16>(ds[c]);
        __syncwarp();
        mm_px<T16>(dk, Pw, Qs); /* dK += dS^T Q */
        __syncwarp();
    }
    /* into dk and dv, through the warp's float tiles */
#pragma unroll
    for (int n = 0; n < D / 16; n++) {
        wmma::store_matrix_sync(Sw + n * 16, dk[n], LF, wmma::mem_row_major);
        wmma::store_matrix_sync(Gw + n * 16, dv[n], LF, wmma::mem_row_major);
    }
    __syncwarp();
    if (dk_out) add_rows(dk_out + b * g.sk + kb.hc, g.ldk, Sw, LF, k0 + w * WR, g.Tk, g.scale);
    if (dv_out) add_rows(dv_out + b * g.sk + kb.hc, g.ldv, Gw, LF, k0 + w * WR, g.Tk, 1.0f);
}

/* kernel B: dQ of query block (heaviest first), over the key blocks the
 * forward visited */
template <typename T16, int MODE>
__global__ void __launch_bounds__(NT) dq_kernel(const float *__restrict__ dout, const float *__restrict__ L,
                                                const float *__restrict__ Dg, float *__restrict__ dq_out, geom g) {
    extern __shared__ __align__(128) unsigned char sm[];
    if constexpr (MODE == VARLEN) {
        if (*g.bad) return; /* the error flag is raised */
    }
    bwd_block<T16> kb(sm, g, dout);
    T16 *Qs = kb.tile[0], *Gs = kb.tile[1], *Ks = kb.tile[2], *Vs = kb.tile[3], *Pw = kb.Pw;
    float *Sw = kb.Sw, *Gw = kb.Gw;
    [[maybe_unused]] float *Bs = (float *)(sm + DQ_BYTES); /* MASKED: the key tile's biases */
    const int bh = kb.bh, b = kb.b, w = kb.w, lane = kb.lane;
    const int qb = (int)gridDim.y - 1 - (int)blockIdx.y, q0 = qb * BM;
    [[maybe_unused]] const float *mrow = MODE == MASKED && g.mask ? g.mask + (int64_t)b * g.Tk : nullptr;
    int kbeg, kstop;
    span_of<MODE>(g, q0, true, &kbeg, &kstop);

    load_tile<T16>(Qs, kb.q, g.ldq, q0, g.Tq, g.vec);
    load_tile<T16>(Gs, kb.gd, g.C, q0, g.Tq, g.vec);
    __syncthreads();
    frag_a<T16> qa[D / 16], ga[D / 16];
    rows_a<T16>(qa, Qs + w * WR * LH);
    rows_a<T16>(ga, Gs + w * WR * LH);
    frag_c dq[D / 16];
#pragma unroll
    for (int n = 0; n < D / 16; n++) wmma::fill_fragment(dq[n], 0.0f);
    const int r = lane >> 1, half = lane & 1, qi = q0 + w * WR + r;
    const float Li = qi < g.Tq ? L[(int64_t)bh * g.Tq + qi] : 0.0f;
    const float Di = qi < g.Tq ? Dg[(int64_t)bh * g.Tq + qi] : 0.0f;
    [[maybe_unused]] int lo = 0, hi = 0;
    [[maybe_unused]] int64_t pst = 0;
    if constexpr (MODE == VARLEN) seq_range(g, qi, &lo, &hi, &pst);
    for (int k0 = kbeg; k0 < kstop; k0 += BM) {
        __syncthreads(); /* every warp is done with the previous Ks, Vs (and Bs) */
        load_tile<T16>(Ks, kb.k, g.ldk, k0, g.Tk, g.vec);
        load_tile<T16>(Vs, kb.v, g.ldv, k0, g.Tk, g.vec);
        if constexpr (MODE == MASKED) {
            for (int i = (int)threadIdx.x; i < BM; i += NT) Bs[i] = key_bias(mrow, k0 + i, g.Tk);
        }
        __syncthreads();
        scores<T16>(Sw, qa, Ks); /* S = Q K^T */
        scores<T16>(Gw, ga, Vs); /* dP = dout V^T */
        __syncwarp();
#pragma unroll
        for (int c = 0; c < BM / 2; c++) {
            const int col = half * (BM / 2) + c, key = k0 + col;
            const float p = prob_at<MODE>(g, qi, key, Sw[r * LF + col], Li, MODE == MASKED ? Bs[col] : 0.0f, lo, hi);
            float dp = Gw[r * LF + col];
            if (MODE != PACKED && g.drop.p > 0.0f && p != 0.0f)
                dp = kept<MODE>(g, bh, qi, key, lo, hi, pst) ? dp * g.drop.ks : 0.0f;
            Pw[r * LP + col] = to16<T16>(p * (dp - Di));
        }
        __syncwarp();
        mm_px<T16>(dq, Pw, Ks); /* dQ += dS K */
        __syncwarp();
    }
#pragma unroll
    for (int n = 0; n < D / 16; n++) wmma::store_matrix_sync(Sw + n * 16, dq[n], LF, wmma::mem_row_major);
    __syncwarp();
    add_rows(dq_out + b * g.sq + kb.hc, g.ldq, Sw, LF, q0 + w * WR, g.Tq, g.scale);
}

/* ==== The same kernels in PTX (namespace mma, the default): mma.sync.m16n8k16
 * (bf16 or fp16 operands, float32 accumulation) fed by ldmatrix from shared
 * memory, with every score, probability and accumulator in registers. The
 * same three kinds (MODE), loop ranges, masks, dropout draws, outputs and
 * fixed summation orders as the WMMA kernels above, whose helpers (geom,
 * load_tile, prob_at, the tile sizes) they use; the two families differ only
 * in the order of the products' float sums. `UT_CUDA_ATTN=wmma` runs the
 * WMMA kernels instead.
 *
 * Why: the WMMA forms pass every 16 x 16 product through shared memory
 * (the scores, the probabilities, the output's rescaling), because a WMMA
 * fragment's elements have no documented place in the lanes. mma.sync's
 * fragments do (the PTX ISA, "Matrix Fragments for mma.m16n8k16"): lane
 * l = 4 g + t holds, of a 16 x 8 float result, rows g and g + 8 at columns
 * 2t and 2t + 1, so the online softmax runs on the accumulators themselves
 * (a row's four lanes reduce by two shuffles), and a 16 x 64 block of
 * probabilities is, packed to 16 bits, already the A operand of the next
 * product (FlashAttention-2's register reuse).
 *
 * A block has 4 warps and 64 rows; warp w owns rows 16 w .. 16 w + 15 of
 * the block's tile, and its partner tiles (64 rows, D = 64 columns, T16, row
 * stride LH = 72: each ldmatrix row address 16-byte aligned, the eight rows
 * of a matrix in distinct banks) are read through ldmatrix: plain for an
 * operand whose reduction runs along a stored row (K for S = Q K^T, dout for
 * dP = dout V^T), transposed where it runs down the rows (V for O = P V).
 *   forward: per key tile S (16 x 64, 32 products), mask, online softmax,
 *     O += P V (32 products); O stays in registers.
 *   kernel A (dK, dV of a key tile; the warp's 16 keys as rows): per query
 *     tile S^T = K Q^T, P^T, dV += P^T dout, dP^T = V dout^T, dS^T, dK +=
 *     dS^T Q (128 products).
 *   kernel B (dQ of a query tile): S = Q K^T, dP = dout V^T, dS, dQ += dS K
 *     (96 products).
 * Shared memory: 27 KiB forward, 37 KiB backward: under the default 48 KiB,
 * so several blocks share an SM. */

namespace mma {

template <typename T16>
struct is_f16 {
    static constexpr bool v = false;
};
template <>
struct is_f16<__half> {
    static constexpr bool v = true;
};

/* d += A (16 x 16, a) B (16 x 8, b0 b1) */
template <typename T16>
__device__ __forceinline__ void mma16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#ifdef UT_CUDA_EMU
    const uint32_t b[2] = {b0, b1};
    utemu::mma_m16n8k16(d, a, b, is_f16<T16>::v);
#else
    if constexpr (is_f16<T16>::v)
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                     "{%8, %9}, {%0, %1, %2, %3};\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    else
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                     "{%8, %9}, {%0, %1, %2, %3};\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

/* four 8 x 8 matrices of 16-bit elements; lane l gives a row address of
 * matrix l / 8; TRANS: each transposed as it is loaded */
template <bool TRANS>
__device__ __forceinline__ void ldsm(uint32_t (&r)[4], const void *p) {
#ifdef UT_CUDA_EMU
    utemu::ldmatrix_x4(r, p, TRANS);
#else
    const unsigned s = (unsigned)__cvta_generic_to_shared(p);
    if constexpr (TRANS)
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(s));
    else
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(s));
#endif
}

template <typename T16>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
    const T16 a = to16<T16>(lo), b = to16<T16>(hi);
    uint16_t x, y;
    memcpy(&x, &a, 2);
    memcpy(&y, &b, 2);
    return (uint32_t)x | (uint32_t)y << 16;
}

/* element i of a tensor stored as dt (0 float32; else T16, the autocast
 * type: the host passes no other) */
__device__ __forceinline__ const void *elem(const void *p, int64_t i, int dt) {
    return (const char *)p + i * (dt ? 2 : 4);
}
template <typename T16>
__device__ __forceinline__ float load_as(const void *p, int64_t i, int dt) {
    return dt ? widen(((const T16 *)p)[i]) : ((const float *)p)[i];
}
/* v stored as dt: rounded once to T16, or float32 */
template <typename T16>
__device__ __forceinline__ void store_as(void *p, int64_t i, int dt, float v) {
    if (dt) ((T16 *)p)[i] = to16<T16>(v);
    else ((float *)p)[i] = v;
}

/* MASKED: what the mask adds to key j's scores, rounded to T16 as
 * autocast's copy of the float32 mask is (fp16 takes Hugging Face's
 * finfo(float32).min to -inf, which makes a row of padding attend nowhere);
 * a mask that is such a copy already is unchanged */
template <typename T16>
__device__ __forceinline__ float bias_as(const float *mrow, int j, int Tk) {
    return widen(to16<T16>(key_bias(mrow, j, Tk)));
}

/* load_tile (a 64 x D T16 tile from rows r0 .. r0 + 63, zero from row T on)
 * from a source stored as dt: float32 values are rounded to T16 (autocast's
 * rounding of a float32 operand), 16-bit ones copied as they are */
template <typename T16>
__device__ void load_tile_as(T16 *dst, const void *src, int64_t ld, int r0, int T, bool vec, int dt) {
    if (!dt) {
        load_tile<T16>(dst, (const float *)src, ld, r0, T, vec);
        return;
    }
    constexpr int V4 = D / 4;
    const uint16_t *s16 = (const uint16_t *)src;
    for (int i = (int)threadIdx.x; i < BM * V4; i += NT) {
        const int row = i / V4, c = (i % V4) * 4, r = r0 + row;
        uint32_t lo = 0, hi = 0;
        if (r < T) {
            const uint16_t *p = s16 + (int64_t)r * ld + c;
            if (vec) {
                lo = reinterpret_cast<const uint32_t *>(p)[0];
                hi = reinterpret_cast<const uint32_t *>(p)[1];
            } else {
                lo = (uint32_t)p[0] | (uint32_t)p[1] << 16;
                hi = (uint32_t)p[2] | (uint32_t)p[3] << 16;
            }
        }
        uint32_t *d = reinterpret_cast<uint32_t *>(dst + row * LH + c);
        d[0] = lo;
        d[1] = hi;
    }
}

/* The A operand (16 x 16) of the warp's rows r0 .. r0 + 15, columns c0 ..
 * c0 + 15 of a tile (stride LH): matrices rows 0-7 / 8-15 x columns 0-7,
 * then the same x columns 8-15 */
template <typename T16>
__device__ __forceinline__ void load_a(uint32_t (&a)[4], const T16 *tile, int r0, int c0) {
    const int lane = (int)threadIdx.x & 31;
    ldsm<false>(a, tile + (r0 + (lane & 7) + ((lane >> 3) & 1) * 8) * LH + c0 + (lane >> 4) * 8);
}

/* acc[j] (16 x 8, j < 8) = A (the warp's 16 rows of D columns, a[kk]) times
 * the transpose of the 64 rows of tile x: the warp's rows against x's, the
 * reduction along the stored rows. ldmatrix's four matrices: x's rows 16 jp
 * .. + 7 and + 8 .. + 15, each at columns 16 kk and 16 kk + 8. */
template <typename T16>
__device__ __forceinline__ void rows_by_rows(float (&acc)[8][4], const uint32_t (&a)[D / 16][4], const T16 *x) {
    const int lane = (int)threadIdx.x & 31;
#pragma unroll
    for (int j = 0; j < 8; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) acc[j][e] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++)
#pragma unroll
        for (int jp = 0; jp < 4; jp++) {
            uint32_t bx[4];
            ldsm<false>(bx, x + (jp * 16 + (lane >> 4) * 8 + (lane & 7)) * LH + kk * 16 + ((lane >> 3) & 1) * 8);
            mma16816<T16>(acc[2 * jp], a[kk], bx[0], bx[1]);
            mma16816<T16>(acc[2 * jp + 1], a[kk], bx[2], bx[3]);
        }
}

/* acc[n] (16 x 8, n < 8: D columns) += P (16 x 64, the registers of a
 * rows_by_rows result p, rounded to T16) times the 64 x D tile x: the
 * reduction down x's rows (transposed ldmatrix: matrices x's rows 16 kc ..
 * + 7 and + 8 .. + 15, at columns 16 np and 16 np + 8) */
template <typename T16>
__device__ __forceinline__ void probs_by_tile(float (&acc)[8][4], const float (&p)[8][4], const T16 *x) {
    const int lane = (int)threadIdx.x & 31;
#pragma unroll
    for (int kc = 0; kc < 4; kc++) {
        const uint32_t pa[4] = {pack2<T16>(p[2 * kc][0], p[2 * kc][1]), pack2<T16>(p[2 * kc][2], p[2 * kc][3]),
                                pack2<T16>(p[2 * kc + 1][0], p[2 * kc + 1][1]),
                                pack2<T16>(p[2 * kc + 1][2], p[2 * kc + 1][3])};
#pragma unroll
        for (int np = 0; np < 4; np++) {
            uint32_t bx[4];
            ldsm<true>(bx, x + (kc * 16 + ((lane >> 3) & 1) * 8 + (lane & 7)) * LH + np * 16 + (lane >> 4) * 8);
            mma16816<T16>(acc[2 * np], pa, bx[0], bx[1]);
            mma16816<T16>(acc[2 * np + 1], pa, bx[2], bx[3]);
        }
    }
}

/* adds the warp's 16 x D accumulators (rows r0 + g and r0 + g + 8) into
 * dst (stored as dt from element at, row stride ld), rows below T, times s:
 * one thread per element; a 16-bit element is widened, added to and
 * rounded once, as a float32 copy of it would be */
template <typename T16>
__device__ __forceinline__ void add_acc(void *dst, int dt, int64_t at, int64_t ld, const float (&acc)[8][4], int r0,
                                        int T, float s) {
    const int lane = (int)threadIdx.x & 31, gr = lane >> 2, t = lane & 3;
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int row = r0 + gr + 8 * r;
        if (row >= T) continue;
        const int64_t d = at + (int64_t)row * ld + 2 * t;
#pragma unroll
        for (int n = 0; n < 8; n++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const int64_t i = d + n * 8 + e;
                store_as<T16>(dst, i, dt, load_as<T16>(dst, i, dt) + acc[n][2 * r + e] * s);
            }
    }
}

/* What every mma.sync kernel starts from: its (batch, head) pair
 * (blockIdx.x), the warp, the lane's place in mma's fragments (group gr =
 * lane / 4 holds a tile's rows gr and gr + 8, t = lane % 4 a pair of
 * columns) and the head's q, k, v. */
struct frame {
    int bh, b, h, w, gr, t;
    int64_t hc;
    const void *q, *k, *v;
};

__device__ __forceinline__ frame frame_of(const geom &g) {
    frame f;
    f.bh = (int)blockIdx.x;
    f.b = f.bh / g.NH;
    f.h = f.bh % g.NH;
    f.w = (int)threadIdx.x >> 5;
    f.gr = ((int)threadIdx.x & 31) >> 2;
    f.t = (int)threadIdx.x & 3;
    f.hc = (int64_t)f.h * D;
    f.q = elem(g.q, f.b * g.sq + f.hc, g.xdt);
    f.k = elem(g.k, f.b * g.sk + f.hc, g.xdt);
    f.v = elem(g.v, f.b * g.sk + f.hc, g.xdt);
    return f;
}

/* the lane's two rows of the tile from r0 (queries, or keys in kernel A):
 * i[r], and under VARLEN each one's sequence (seq_range: lo, hi, pst) */
struct lane_rows {
    int i[2], lo[2], hi[2];
    int64_t pst[2];
};

template <int MODE>
__device__ __forceinline__ lane_rows rows_of(const geom &g, const frame &f, int r0) {
    lane_rows r = {{r0 + f.w * WR + f.gr, r0 + f.w * WR + f.gr + 8}, {0, 0}, {0, 0}, {0, 0}};
    if constexpr (MODE == VARLEN) {
        seq_range(g, r.i[0], &r.lo[0], &r.hi[0], &r.pst[0]);
        seq_range(g, r.i[1], &r.lo[1], &r.hi[1], &r.pst[1]);
    }
    return r;
}

__device__ __forceinline__ void zero(float (&acc)[8][4]) {
#pragma unroll
    for (int n = 0; n < 8; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) acc[n][e] = 0.0f;
}

/* The backward kernels' fixed operands: the 64-row tiles from r0 (rows
 * below T) of x and y (row strides ldx, ldy; stored as xdt, ydt) into xs
 * and ys, and the warp's A operands of both, which stay in registers */
template <typename T16>
__device__ __forceinline__ void fixed_pair(uint32_t (&xa)[D / 16][4], uint32_t (&ya)[D / 16][4], T16 *xs, T16 *ys,
                                           const void *x, int64_t ldx, int xdt, const void *y, int64_t ldy, int ydt,
                                           int r0, int T, bool vec, int w) {
    load_tile_as<T16>(xs, x, ldx, r0, T, vec, xdt);
    load_tile_as<T16>(ys, y, ldy, r0, T, vec, ydt);
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++) {
        load_a<T16>(xa[kk], xs, w * WR, kk * 16);
        load_a<T16>(ya[kk], ys, w * WR, kk * 16);
    }
}

/* ---- forward ---- */
template <typename T16, int MODE>
__global__ void __launch_bounds__(NT) fwd_kernel(void *__restrict__ out, int odt, float *__restrict__ out2,
                                                 float *__restrict__ L, geom g) {
    extern __shared__ __align__(128) unsigned char sm[];
    T16 *Qs = (T16 *)sm, *Ks = (T16 *)(sm + H_TILE), *Vs = (T16 *)(sm + 2 * H_TILE);
    [[maybe_unused]] float *Bs = (float *)(sm + 3 * H_TILE); /* MASKED: the key tile's biases */
    const frame f = frame_of(g);
    const int bh = f.bh, b = f.b, t = f.t;
    const int64_t hc = f.hc;
    const int q0 = ((int)gridDim.y - 1 - (int)blockIdx.y) * BM; /* heaviest first */
    [[maybe_unused]] const float *mrow = MODE == MASKED && g.mask ? g.mask + (int64_t)b * g.Tk : nullptr;
    int kbeg, kstop;
    span_of<MODE>(g, q0, true, &kbeg, &kstop);

    load_tile_as<T16>(Qs, f.q, g.ldq, q0, g.Tq, g.vec, g.xdt);
    __syncthreads();
    uint32_t qa[D / 16][4];
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++) load_a<T16>(qa[kk], Qs, f.w * WR, kk * 16);

    /* this lane's two rows */
    const lane_rows R = rows_of<MODE>(g, f, q0);
    const int(&qi)[2] = R.i;
    [[maybe_unused]] const int(&lo)[2] = R.lo, (&hi)[2] = R.hi;
    [[maybe_unused]] const int64_t(&pst)[2] = R.pst;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    float o[8][4];
    zero(o);
    for (int k0 = kbeg; k0 < kstop; k0 += BM) {
        __syncthreads(); /* every warp is done with the previous Ks, Vs (and Bs) */
        load_tile_as<T16>(Ks, f.k, g.ldk, k0, g.Tk, g.vec, g.xdt);
        load_tile_as<T16>(Vs, f.v, g.ldv, k0, g.Tk, g.vec, g.xdt);
        if constexpr (MODE == MASKED) {
            for (int i = (int)threadIdx.x; i < BM; i += NT) Bs[i] = bias_as<T16>(mrow, k0 + i, g.Tk);
        }
        __syncthreads();
        float s[8][4];
        rows_by_rows<T16>(s, qa, Ks);
        float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int j = 0; j < 8; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int r = e >> 1, col = j * 8 + 2 * t + (e & 1), key = k0 + col;
                bool ok;
                if constexpr (MODE == PACKED) ok = key <= qi[r] && key < g.Tk;
                else if constexpr (MODE == MASKED) ok = key < g.Tk && (!g.causal || key <= qi[r]);
                else ok = key >= lo[r] && key < hi[r] && (!g.causal || key <= qi[r]);
                float x = ok ? s[j][e] * g.scale : -INFINITY;
                if constexpr (MODE == MASKED) x += Bs[col];
                s[j][e] = x;
                mx[r] = fmaxf(mx[r], x);
            }
        float alpha[2], mn[2], ps[2] = {0.0f, 0.0f};
#pragma unroll
        for (int r = 0; r < 2; r++) {
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
            mn[r] = fmaxf(m[r], mx[r]);
            /* a row with no key yet (masked so far, or a padding row past Tq) keeps zeros */
            alpha[r] = mn[r] == -INFINITY ? 1.0f : expf(m[r] - mn[r]);
        }
#pragma unroll
        for (int j = 0; j < 8; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int r = e >> 1;
                float p = mn[r] == -INFINITY ? 0.0f : expf(s[j][e] - mn[r]);
                ps[r] += p; /* the softmax's sum: before dropout */
                if (MODE != PACKED && g.drop.p > 0.0f && p != 0.0f)
                    p = kept<MODE>(g, bh, qi[r], k0 + j * 8 + 2 * t + (e & 1), lo[r], hi[r], pst[r]) ? p * g.drop.ks
                                                                                                   : 0.0f;
                s[j][e] = p;
            }
#pragma unroll
        for (int r = 0; r < 2; r++) {
            ps[r] += __shfl_xor_sync(0xffffffffu, ps[r], 1);
            ps[r] += __shfl_xor_sync(0xffffffffu, ps[r], 2);
            l[r] = l[r] * alpha[r] + ps[r];
            m[r] = mn[r];
        }
#pragma unroll
        for (int n = 0; n < 8; n++) {
            o[n][0] *= alpha[0];
            o[n][1] *= alpha[0];
            o[n][2] *= alpha[1];
            o[n][3] *= alpha[1];
        }
        probs_by_tile<T16>(o, s, Vs);
    }
#pragma unroll
    for (int r = 0; r < 2; r++) {
        if (qi[r] >= g.Tq) continue;
        /* a row whose keys are all masked attends nowhere: out 0, L = +inf */
        const bool any = MODE == PACKED || l[r] > 0.0f;
        const float inv = any ? 1.0f / l[r] : 0.0f;
        const int64_t at = ((int64_t)b * g.Tq + qi[r]) * g.C + hc + 2 * t;
#pragma unroll
        for (int n = 0; n < 8; n++) {
            const float v0 = o[n][2 * r] * inv, v1 = o[n][2 * r + 1] * inv;
            store_as<T16>(out, at + n * 8, odt, v0);
            store_as<T16>(out, at + n * 8 + 1, odt, v1);
            if (out2) {
                out2[at + n * 8] = v0;
                out2[at + n * 8 + 1] = v1;
            }
        }
        if (t == 0) L[(int64_t)bh * g.Tq + qi[r]] = any ? m[r] + logf(l[r]) : INFINITY;
    }
}

/* ---- backward ---- */

/* kernel A: dK, dV of key block blockIdx.y (the warp's 16 keys as rows),
 * summed over the query blocks that see it; dk, dv: either may be NULL */
template <typename T16, int MODE>
__global__ void __launch_bounds__(NT) dkdv_kernel(const void *__restrict__ dout, const float *__restrict__ L,
                                                  const float *__restrict__ Dg, void *dk_out, void *dv_out, int ddt,
                                                  geom g) {
    extern __shared__ __align__(128) unsigned char sm[];
    if constexpr (MODE == VARLEN) {
        if (*g.bad) return; /* the error flag is raised */
    }
    T16 *Ks = (T16 *)sm, *Vs = (T16 *)(sm + H_TILE), *Qs = (T16 *)(sm + 2 * H_TILE), *Gs = (T16 *)(sm + 3 * H_TILE);
    float *Ls = (float *)(sm + 4 * H_TILE), *Ds = Ls + BM;
    const frame f = frame_of(g);
    const int bh = f.bh, b = f.b, w = f.w, t = f.t;
    const int64_t hc = f.hc;
    const void *gd = elem(dout, (int64_t)b * g.Tq * g.C + hc, g.gdt);
    const int k0 = (int)blockIdx.y * BM;
    int qbeg, qstop;
    span_of<MODE>(g, k0, false, &qbeg, &qstop);

    uint32_t ka[D / 16][4], va[D / 16][4];
    fixed_pair<T16>(ka, va, Ks, Vs, f.k, g.ldk, g.xdt, f.v, g.ldv, g.xdt, k0, g.Tk, g.vec, w);
    float dk[8][4], dv[8][4];
    zero(dk);
    zero(dv);
    /* this lane's two keys */
    const lane_rows R = rows_of<MODE>(g, f, k0);
    const int(&kj)[2] = R.i;
    [[maybe_unused]] const int(&lo)[2] = R.lo, (&hi)[2] = R.hi;
    [[maybe_unused]] const int64_t(&pst)[2] = R.pst;
    [[maybe_unused]] float bias[2] = {0.0f, 0.0f};
    if constexpr (MODE == MASKED) {
        const float *mrow = g.mask ? g.mask + (int64_t)b * g.Tk : nullptr;
        bias[0] = bias_as<T16>(mrow, kj[0], g.Tk);
        bias[1] = bias_as<T16>(mrow, kj[1], g.Tk);
    }
    const bool drop = MODE != PACKED && g.drop.p > 0.0f;
    for (int q0 = qbeg; q0 < qstop; q0 += BM) {
        __syncthreads(); /* every warp is done with the previous Qs, Gs, Ls, Ds */
        load_tile_as<T16>(Qs, f.q, g.ldq, q0, g.Tq, g.vec, g.xdt);
        load_tile_as<T16>(Gs, gd, g.C, q0, g.Tq, g.vec, g.gdt);
        for (int i = (int)threadIdx.x; i < BM; i += NT) {
            const bool ok = q0 + i < g.Tq;
            Ls[i] = ok ? L[(int64_t)bh * g.Tq + q0 + i] : 0.0f;
            Ds[i] = ok ? Dg[(int64_t)bh * g.Tq + q0 + i] : 0.0f;
        }
        __syncthreads();
        float p[8][4], pd[8][4];
        rows_by_rows<T16>(p, ka, Qs); /* S^T: the warp's keys against the tile's queries */
        uint32_t keep = 0xffffffffu;  /* dropout's draws, bit 4 j + e */
#pragma unroll
        for (int j = 0; j < 8; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int r = e >> 1, col = j * 8 + 2 * t + (e & 1), qq = q0 + col;
                const float x = prob_at<MODE>(g, qq, kj[r], p[j][e], Ls[col], bias[r], lo[r], hi[r]);
                p[j][e] = x;
                pd[j][e] = x;
                if (drop && x != 0.0f) {
                    if (kept<MODE>(g, bh, qq, kj[r], lo[r], hi[r], pst[r])) pd[j][e] = x * g.drop.ks;
                    else {
                        pd[j][e] = 0.0f;
                        keep &= ~(1u << (4 * j + e));
                    }
                }
            }
        probs_by_tile<T16>(dv, pd, Gs); /* dV += Pd^T dout */
        rows_by_rows<T16>(pd, va, Gs);  /* dP^T = V dout^T */
#pragma unroll
        for (int j = 0; j < 8; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int col = j * 8 + 2 * t + (e & 1);
                float dp = pd[j][e];
                if (drop) dp = keep >> (4 * j + e) & 1u ? dp * g.drop.ks : 0.0f;
                p[j][e] = p[j][e] * (dp - Ds[col]); /* dS^T */
            }
        probs_by_tile<T16>(dk, p, Qs); /* dK += dS^T Q */
    }
    if (dk_out) add_acc<T16>(dk_out, ddt, b * g.sk + hc, g.ldk, dk, k0 + w * WR, g.Tk, g.scale);
    if (dv_out) add_acc<T16>(dv_out, ddt, b * g.sk + hc, g.ldv, dv, k0 + w * WR, g.Tk, 1.0f);
}

/* kernel B: dQ of query block (heaviest first), over the key blocks the
 * forward visited */
template <typename T16, int MODE>
__global__ void __launch_bounds__(NT) dq_kernel(const void *__restrict__ dout, const float *__restrict__ L,
                                                const float *__restrict__ Dg, void *__restrict__ dq_out, int ddt,
                                                geom g) {
    extern __shared__ __align__(128) unsigned char sm[];
    if constexpr (MODE == VARLEN) {
        if (*g.bad) return; /* the error flag is raised */
    }
    T16 *Qs = (T16 *)sm, *Gs = (T16 *)(sm + H_TILE), *Ks = (T16 *)(sm + 2 * H_TILE), *Vs = (T16 *)(sm + 3 * H_TILE);
    [[maybe_unused]] float *Bs = (float *)(sm + 4 * H_TILE); /* MASKED: the key tile's biases */
    const frame f = frame_of(g);
    const int bh = f.bh, b = f.b, w = f.w, t = f.t;
    const int64_t hc = f.hc;
    const void *gd = elem(dout, (int64_t)b * g.Tq * g.C + hc, g.gdt);
    const int q0 = ((int)gridDim.y - 1 - (int)blockIdx.y) * BM; /* heaviest first */
    [[maybe_unused]] const float *mrow = MODE == MASKED && g.mask ? g.mask + (int64_t)b * g.Tk : nullptr;
    int kbeg, kstop;
    span_of<MODE>(g, q0, true, &kbeg, &kstop);

    uint32_t qa[D / 16][4], ga[D / 16][4];
    fixed_pair<T16>(qa, ga, Qs, Gs, f.q, g.ldq, g.xdt, gd, g.C, g.gdt, q0, g.Tq, g.vec, w);
    float dq[8][4];
    zero(dq);
    const lane_rows R = rows_of<MODE>(g, f, q0);
    const int(&qi)[2] = R.i;
    [[maybe_unused]] const int(&lo)[2] = R.lo, (&hi)[2] = R.hi;
    [[maybe_unused]] const int64_t(&pst)[2] = R.pst;
    float Li[2], Di[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        Li[r] = qi[r] < g.Tq ? L[(int64_t)bh * g.Tq + qi[r]] : 0.0f;
        Di[r] = qi[r] < g.Tq ? Dg[(int64_t)bh * g.Tq + qi[r]] : 0.0f;
    }
    const bool drop = MODE != PACKED && g.drop.p > 0.0f;
    for (int k0 = kbeg; k0 < kstop; k0 += BM) {
        __syncthreads(); /* every warp is done with the previous Ks, Vs (and Bs) */
        load_tile_as<T16>(Ks, f.k, g.ldk, k0, g.Tk, g.vec, g.xdt);
        load_tile_as<T16>(Vs, f.v, g.ldv, k0, g.Tk, g.vec, g.xdt);
        if constexpr (MODE == MASKED) {
            for (int i = (int)threadIdx.x; i < BM; i += NT) Bs[i] = bias_as<T16>(mrow, k0 + i, g.Tk);
        }
        __syncthreads();
        float s[8][4], dp[8][4];
        rows_by_rows<T16>(s, qa, Ks);  /* S = Q K^T */
        rows_by_rows<T16>(dp, ga, Vs); /* dP = dout V^T */
#pragma unroll
        for (int j = 0; j < 8; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int r = e >> 1, col = j * 8 + 2 * t + (e & 1), key = k0 + col;
                const float p =
                    prob_at<MODE>(g, qi[r], key, s[j][e], Li[r], MODE == MASKED ? Bs[col] : 0.0f, lo[r], hi[r]);
                float d = dp[j][e];
                if (drop && p != 0.0f) d = kept<MODE>(g, bh, qi[r], key, lo[r], hi[r], pst[r]) ? d * g.drop.ks : 0.0f;
                s[j][e] = p * (d - Di[r]); /* dS */
            }
        probs_by_tile<T16>(dq, s, Ks); /* dQ += dS K */
    }
    add_acc<T16>(dq_out, ddt, b * g.sq + hc, g.ldq, dq, q0 + w * WR, g.Tq, g.scale);
}

constexpr size_t FWD_BYTES = 3 * H_TILE;
constexpr size_t DKDV_BYTES = 4 * H_TILE + 2 * BM * 4;
constexpr size_t DQ_BYTES = 4 * H_TILE;

}  // namespace mma

bool aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

/* shared memory past a kernel's regions: MASKED's key biases (forward, dq) */
constexpr size_t extra_bytes(int MODE) { return MODE == MASKED ? BM * sizeof(float) : 0; }

const char *const fwd_name[3] = {"flash attention forward (tensor cores)",
                                  "flash attention forward (masked; tensor cores)",
                                  "flash attention forward (packed sequences; tensor cores)"};
const char *const dkdv_name[3] = {"flash attention backward (dk, dv; tensor cores)",
                                   "flash attention backward (dk, dv; masked; tensor cores)",
                                   "flash attention backward (dk, dv; packed sequences; tensor cores)"};
const char *const dq_name[3] = {"flash attention backward (dq; tensor cores)",
                                 "flash attention backward (dq; masked; tensor cores)",
                                 "flash attention backward (dq; packed sequences; tensor cores)"};

const char *const mma_fwd_name[3] = {"flash attention forward (mma.sync)",
                                      "flash attention forward (masked; mma.sync)",
                                      "flash attention forward (packed sequences; mma.sync)"};
const char *const mma_dkdv_name[3] = {"flash attention backward (dk, dv; mma.sync)",
                                       "flash attention backward (dk, dv; masked; mma.sync)",
                                       "flash attention backward (dk, dv; packed sequences; mma.sync)"};
const char *const mma_dq_name[3] = {"flash attention backward (dq; mma.sync)",
                                     "flash attention backward (dq; masked; mma.sync)",
                                     "flash attention backward (dq; packed sequences; mma.sync)"};

/* the PTX kernels unless UT_CUDA_ATTN=wmma */
bool use_mma() {
    const char *e = getenv("UT_CUDA_ATTN");
    return !(e && !strcmp(e, "wmma"));
}

/* ATTENTION's packed qkv (B, T, 3C) stored as xdt (0 float32, else 16-bit) */
geom geom_packed_as(const void *qkv, int xdt, int64_t T, int64_t C, int64_t NH) {
    geom g = geom_packed((const float *)qkv, T, C, NH);
    g.xdt = xdt;
    g.k = (const char *)qkv + C * (xdt ? 2 : 4);
    g.v = (const char *)qkv + 2 * C * (xdt ? 2 : 4);
    return g;
}

/* The mma.sync kernels, out stored as odt (0 float32, else T16) */
template <typename T16, int MODE>
void fwd_mma(void *out, int odt, float *out2, float *L, int64_t B, const geom &g) {
    dim3 grid((unsigned)(B * g.NH), (unsigned)((g.Tq + BM - 1) / BM));
    const size_t bytes = mma::FWD_BYTES + extra_bytes(MODE);
    utk::allow_smem(mma::fwd_kernel<T16, MODE>, bytes);
    mma::fwd_kernel<T16, MODE><<<grid, NT, bytes, utk::stream()>>>(out, odt, out2, L, g);
    ut_cuda_launched(mma_fwd_name[MODE]);
}

/* dq, dk, dv stored as ddt; either of dk, dv or dq may be NULL */
template <typename T16, int MODE>
void bwd_mma(void *dq, void *dk, void *dv, int ddt, const void *dout, const float *L, const float *Dg, int64_t B,
             const geom &g) {
    if (dk || dv) {
        utk::allow_smem(mma::dkdv_kernel<T16, MODE>, mma::DKDV_BYTES);
        dim3 grid((unsigned)(B * g.NH), (unsigned)((g.Tk + BM - 1) / BM));
        mma::dkdv_kernel<T16, MODE><<<grid, NT, mma::DKDV_BYTES, utk::stream()>>>(dout, L, Dg, dk, dv, ddt, g);
        ut_cuda_launched(mma_dkdv_name[MODE]);
    }
    if (dq) {
        const size_t bytes = mma::DQ_BYTES + extra_bytes(MODE);
        utk::allow_smem(mma::dq_kernel<T16, MODE>, bytes);
        dim3 grid((unsigned)(B * g.NH), (unsigned)((g.Tq + BM - 1) / BM));
        mma::dq_kernel<T16, MODE><<<grid, NT, bytes, utk::stream()>>>(dout, L, Dg, dq, ddt, g);
        ut_cuda_launched(mma_dq_name[MODE]);
    }
}

/* the mma.sync kernels in dt's 16-bit type (1 bf16, 2 fp16) */
template <int MODE>
void fwd_mma_dt(void *out, int odt, float *out2, float *L, int64_t B, const geom &g, int dt) {
    if (dt == 2) fwd_mma<__half, MODE>(out, odt, out2, L, B, g);
    else fwd_mma<__nv_bfloat16, MODE>(out, odt, out2, L, B, g);
}
template <int MODE>
void bwd_mma_dt(void *dq, void *dk, void *dv, int ddt, const void *dout, const float *L, const float *Dg, int64_t B,
                const geom &g, int dt) {
    if (dt == 2) bwd_mma<__half, MODE>(dq, dk, dv, ddt, dout, L, Dg, B, g);
    else bwd_mma<__nv_bfloat16, MODE>(dq, dk, dv, ddt, dout, L, Dg, B, g);
}

template <typename T16, int MODE>
void fwd(float *out, float *out2, float *L, int64_t B, const geom &g) {
    if (use_mma()) {
        fwd_mma<T16, MODE>(out, 0, out2, L, B, g);
        return;
    }
    dim3 grid((unsigned)(B * g.NH), (unsigned)((g.Tq + BM - 1) / BM));
    const size_t bytes = FWD_BYTES + extra_bytes(MODE);
    utk::allow_smem(fwd_kernel<T16, MODE>, bytes);
    fwd_kernel<T16, MODE><<<grid, NT, bytes, utk::stream()>>>(out, out2, L, g);
    ut_cuda_launched(fwd_name[MODE]);
}

template <typename T16, int MODE>
void bwd(float *dq, float *dk, float *dv, const float *dout, const float *L, const float *Dg, int64_t B,
         const geom &g) {
    if (use_mma()) {
        bwd_mma<T16, MODE>(dq, dk, dv, 0, dout, L, Dg, B, g);
        return;
    }
    if (dk || dv) {
        utk::allow_smem(dkdv_kernel<T16, MODE>, DKDV_BYTES);
        dim3 grid((unsigned)(B * g.NH), (unsigned)((g.Tk + BM - 1) / BM));
        dkdv_kernel<T16, MODE><<<grid, NT, DKDV_BYTES, utk::stream()>>>(dout, L, Dg, dk, dv, g);
        ut_cuda_launched(dkdv_name[MODE]);
    }
    if (dq) {
        const size_t bytes = DQ_BYTES + extra_bytes(MODE);
        utk::allow_smem(dq_kernel<T16, MODE>, bytes);
        dim3 grid((unsigned)(B * g.NH), (unsigned)((g.Tq + BM - 1) / BM));
        dq_kernel<T16, MODE><<<grid, NT, bytes, utk::stream()>>>(dout, L, Dg, dq, g);
        ut_cuda_launched(dq_name[MODE]);
    }
}

template <int MODE>
void fwd_dt(float *out, float *out2, float *L, int64_t B, const geom &g, int dt) {
    if (dt == 2) fwd<__half, MODE>(out, out2, L, B, g);
    else fwd<__nv_bfloat16, MODE>(out, out2, L, B, g);
}

template <int MODE>
void bwd_dt(float *dq, float *dk, float *dv, const float *dout, const float *L, const float *Dg, int64_t B,
            const geom &g, int dt) {
    if (dt == 2) bwd<__half, MODE>(dq, dk, dv, dout, L, Dg, B, g);
    else bwd<__nv_bfloat16, MODE>(dq, dk, dv, dout, L, Dg, B, g);
}

/* Whether B x NH pairs of Tq queries and Tk keys with head size 64 fit the
 * kernels on the current device (sm_80 or later); UT_CUDA_ATTN=fp32 or
 * unfused: never */
bool tc_fits(int64_t B, int64_t Tq, int64_t Tk, int64_t C, int64_t NH, int MODE) {
    const char *e = getenv("UT_CUDA_ATTN");
    if (e && (!strcmp(e, "fp32") || !strcmp(e, "unfused"))) return false;
    if (!sizes_fit(B, Tq, Tk, C, NH, D) || C / NH != D) return false;
    size_t need = FWD_BYTES > DKDV_BYTES ? FWD_BYTES : DKDV_BYTES;
    need = (need > DQ_BYTES ? need : DQ_BYTES) + extra_bytes(MODE);
    size_t have = device_smem(8); /* bf16 WMMA needs sm_80 */
    return have > 0 && need <= have;
}

}  // namespace

extern "C" bool ut_cuda_flash_attn_tc_ok(int64_t B, int64_t T, int64_t C, int64_t NH) {
    return tc_fits(B, T, T, C, NH, PACKED);
}

extern "C" bool ut_cuda_flash_attn_tc_masked_ok(int64_t B, int64_t Tq, int64_t Tk, int64_t C, int64_t NH) {
    return tc_fits(B, Tq, Tk, C, NH, MASKED);
}

extern "C" bool ut_cuda_flash_attn_tc_varlen_ok(int64_t N, int64_t S, int64_t C, int64_t NH) {
    return S >= 1 && S < N + 1 && tc_fits(1, N, N, C, NH, VARLEN);
}

extern "C" void ut_cuda_flash_attn_tc_fwd(float *out, float *out_copy, float *L, const float *qkv, int64_t B,
                                          int64_t T, int64_t C, int64_t NH, int dt) {
    if (B <= 0 || T <= 0) return;
    geom g = geom_packed(qkv, T, C, NH);
    g.vec = C % 4 == 0 && aligned16(qkv);
    fwd_dt<PACKED>(out, out_copy, L, B, g, dt);
}

extern "C" void ut_cuda_flash_attn_tc_bwd(float *dqkv, float *Dscratch, const float *dout, const float *out,
                                          const float *qkv, const float *L, int64_t B, int64_t T, int64_t C,
                                          int64_t NH, int dt) {
    if (B <= 0 || T <= 0) return;
    ut_cuda_flash_attn_rowdot(Dscratch, dout, out, B, T, C, NH);
    geom g = geom_packed(qkv, T, C, NH);
    g.vec = C % 4 == 0 && aligned16(qkv) && aligned16(dout);
    bwd_dt<PACKED>(dqkv, dqkv + C, dqkv + 2 * C, dout, L, Dscratch, B, g, dt);
}

extern "C" bool ut_cuda_flash_attn_tc_native(void) { return use_mma(); }

extern "C" void ut_cuda_flash_attn_tc_fwd16(void *out, int out_dt, float *out_copy, float *L, const void *qkv,
                                            int qkv_dt, int64_t B, int64_t T, int64_t C, int64_t NH, int dt) {
    if (B <= 0 || T <= 0) return;
    geom g = geom_packed_as(qkv, qkv_dt ? dt : 0, T, C, NH);
    g.vec = C % 4 == 0 && aligned16(qkv);
    fwd_mma_dt<PACKED>(out, out_dt ? dt : 0, out_copy, L, B, g, dt);
}

namespace {
/* Dg (B, NH, T) = each row's sum of dout * out per head; dout stored as
 * float32 (dout_dt 0) or in dt */
void rowdot_as(float *Dg, const void *dout, int dout_dt, const float *out, int64_t B, int64_t T, int64_t C,
               int64_t NH, int dt) {
    if (!dout_dt) {
        ut_cuda_flash_attn_rowdot(Dg, (const float *)dout, out, B, T, C, NH);
        return;
    }
    const int64_t rows = B * T * NH;
    if (dt == 2)
        rowdot_kernel<__half><<<utk::blocks_for(rows), utk::kThreads, 0, utk::stream()>>>(
            out, (const __half *)dout, Dg, rows, (int)T, (int)C, (int)NH, (int)(C / NH));
    else
        rowdot_kernel<__nv_bfloat16><<<utk::blocks_for(rows), utk::kThreads, 0, utk::stream()>>>(
            out, (const __nv_bfloat16 *)dout, Dg, rows, (int)T, (int)C, (int)NH, (int)(C / NH));
    ut_cuda_launched("flash attention backward (rowsum dout * out, 16-bit dout)");
}
}  // namespace

extern "C" void ut_cuda_flash_attn_tc_bwd16(void *dqkv, int dqkv_dt, float *Dscratch, const void *dout, int dout_dt,
                                            const float *out, const void *qkv, int qkv_dt, const float *L, int64_t B,
                                            int64_t T, int64_t C, int64_t NH, int dt) {
    if (B <= 0 || T <= 0) return;
    rowdot_as(Dscratch, dout, dout_dt, out, B, T, C, NH, dt);
    geom g = geom_packed_as(qkv, qkv_dt ? dt : 0, T, C, NH);
    g.gdt = dout_dt ? dt : 0;
    g.vec = C % 4 == 0 && aligned16(qkv) && aligned16(dout);
    const int ddt = dqkv_dt ? dt : 0;
    char *d = (char *)dqkv;
    const size_t es = ddt ? 2 : 4;
    bwd_mma_dt<PACKED>(d, d + C * es, d + 2 * C * es, ddt, dout, L, Dscratch, B, g, dt);
}

extern "C" void ut_cuda_flash_attn_tc_masked_fwd(float *out, float *out_copy, float *L, const float *q,
                                                 const float *k, const float *v, int64_t B, int64_t Tq, int64_t Tk,
                                                 int64_t C, int64_t NH, const ut_flash_masking *mk, int dt) {
    if (B <= 0 || Tq <= 0) return;
    geom g = geom_masked(q, k, v, Tq, Tk, C, NH, mk);
    g.vec = C % 4 == 0 && aligned16(q) && aligned16(k) && aligned16(v);
    if (mk->off) fwd_dt<VARLEN>(out, out_copy, L, B, g, dt);
    else fwd_dt<MASKED>(out, out_copy, L, B, g, dt);
}

extern "C" void ut_cuda_flash_attn_tc_masked_bwd(float *dq, float *dk, float *dv, float *Dscratch,
                                                 const float *dout, const float *out, const float *q, const float *k,
                                                 const float *v, const float *L, int64_t B, int64_t Tq, int64_t Tk,
                                                 int64_t C, int64_t NH, const ut_flash_masking *mk, int dt) {
    if (B <= 0 || Tq <= 0 || (!dq && !dk && !dv)) return;
    ut_cuda_flash_attn_rowdot(Dscratch, dout, out, B, Tq, C, NH);
    geom g = geom_masked(q, k, v, Tq, Tk, C, NH, mk);
    g.vec = C % 4 == 0 && aligned16(q) && aligned16(k) && aligned16(v) && aligned16(dout);
    if (mk->off) bwd_dt<VARLEN>(dq, dk, dv, dout, L, Dscratch, B, g, dt);
    else bwd_dt<MASKED>(dq, dk, dv, dout, L, Dscratch, B, g, dt);
}

extern "C" void ut_cuda_flash_attn_tc_masked_fwd16(void *out, int out_dt, float *out_copy, float *L, const void *q,
                                                   const void *k, const void *v, int x_dt, int64_t B, int64_t Tq,
                                                   int64_t Tk, int64_t C, int64_t NH, const ut_flash_masking *mk,
                                                   int dt) {
    if (B <= 0 || Tq <= 0) return;
    geom g = geom_masked(q, k, v, Tq, Tk, C, NH, mk);
    g.xdt = x_dt ? dt : 0;
    g.vec = C % 4 == 0 && aligned16(q) && aligned16(k) && aligned16(v);
    const int odt = out_dt ? dt : 0;
    if (mk->off) fwd_mma_dt<VARLEN>(out, odt, out_copy, L, B, g, dt);
    else fwd_mma_dt<MASKED>(out, odt, out_copy, L, B, g, dt);
}

extern "C" void ut_cuda_flash_attn_tc_masked_bwd16(void *dq, void *dk, void *dv, int d_dt, float *Dscratch,
                                                   const void *dout, int dout_dt, const float *out, const void *q,
                                                   const void *k, const void *v, int x_dt, const float *L, int64_t B,
                                                   int64_t Tq, int64_t Tk, int64_t C, int64_t NH,
                                                   const ut_flash_masking *mk, int dt) {
    if (B <= 0 || Tq <= 0 || (!dq && !dk && !dv)) return;
    rowdot_as(Dscratch, dout, dout_dt, out, B, Tq, C, NH, dt);
    geom g = geom_masked(q, k, v, Tq, Tk, C, NH, mk);
    g.xdt = x_dt ? dt : 0;
    g.gdt = dout_dt ? dt : 0;
    g.vec = C % 4 == 0 && aligned16(q) && aligned16(k) && aligned16(v) && aligned16(dout);
    const int ddt = d_dt ? dt : 0;
    if (mk->off) bwd_mma_dt<VARLEN>(dq, dk, dv, ddt, dout, L, Dscratch, B, g, dt);
    else bwd_mma_dt<MASKED>(dq, dk, dv, ddt, dout, L, Dscratch, B, g, dt);
}

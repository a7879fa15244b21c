/* What the fused attention kernels share (CUDA C++ only): the float32 forms
 * (flash_attention.cu) and the tensor-core forms (flash_attention_tc.cu) take
 * the same three kinds of attention, described by one geometry, with the
 * same masks, loop ranges and dropout draws. Its definitions have internal
 * linkage: each kernel file includes it once.
 * defines: BM, PACKED, MASKED, VARLEN, geom, key_bias, seq_of, seq_range,
 *          kept, span_of, widen, rowdot_kernel, geom_of, geom_packed, geom_masked, sizes_fit,
 *          device_smem. */
#ifndef UTRAIN_CUDA_FLASH_COMMON_CUH
#define UTRAIN_CUDA_FLASH_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "flash_attention.h"
#include "launch.cuh"
#include "../../core/philox.h"

namespace {

constexpr int BM = 64; /* queries (or keys) per tile */

/* The kernels' three forms: ATTENTION's packed causal qkv, ATTENTION_MASKED,
 * ATTENTION_VARLEN's packed sequences */
enum { PACKED = 0, MASKED = 1, VARLEN = 2 };

/* Where the rows live in global memory, how to copy them, and what masks the
 * scores. q, k, v: head 0 of batch entry 0, row strides ldq, ldk, ldv (the
 * gradients dq, dk, dv use the same layouts), batch strides sq (q) and sk
 * (k and v). out, dout, the output's copy: (B, Tq, C); L and D: (B, NH, Tq).
 * VARLEN: B = 1, Tq = Tk = N rows, sequence s the rows [off[s], off[s + 1]). */
struct geom {
    const void *q, *k, *v; /* float32, or (the mma.sync kernels, xdt) 16-bit */
    int64_t ldq, ldk, ldv, sq, sk;
    int Tq, Tk, C, NH, hs;
    float scale;
    bool vec; /* 16-byte copies (8-byte ones of 16-bit rows) */
    int xdt, gdt; /* the mma.sync kernels: q, k, v's and dout's storage (0 float32, 1 bf16, 2 fp16) */
    /* MASKED and VARLEN */
    const float *mask; /* MASKED: (B, Tk) added to every query's scores, or NULL */
    bool causal;       /* Tq == Tk; query i attends keys j <= i */
    ut_flash_drop drop;
    /* VARLEN */
    const int32_t *off;  /* S + 1 offsets */
    const int64_t *poff; /* S + 1: where each sequence's NH L x L blocks of P would start (dropout's draws) */
    const int *bad;      /* nonzero: the offsets are not valid, nothing is computed */
    int S;
};

/* MASKED: what the mask adds to key j's scores: its entry (0 without a
 * mask), -inf past Tk */
__device__ __forceinline__ float key_bias(const float *mrow, int j, int Tk) {
    return j < Tk ? (mrow ? mrow[j] : 0.0f) : -INFINITY;
}

/* VARLEN: the sequence s of packed row i (off[s] <= i < off[s + 1]) */
__device__ __forceinline__ int seq_of(const int32_t *off, int S, int i) {
    int lo = 0, hi = S;
    while (hi - lo > 1) {
        const int mid = (lo + hi) >> 1;
        if (off[mid] <= i) lo = mid;
        else hi = mid;
    }
    return lo;
}

/* VARLEN: the rows [*lo, *hi) of packed row i's sequence and where its
 * blocks of P start (*ps); the empty range for a row past N */
__device__ __forceinline__ void seq_range(const geom &g, int i, int *lo, int *hi, int64_t *ps) {
    if (i >= g.Tq) {
        *lo = *hi = 0;
        *ps = 0;
        return;
    }
    const int s = seq_of(g.off, g.S, i);
    *lo = g.off[s];
    *hi = g.off[s + 1];
    *ps = g.poff[s];
}

/* whether dropout keeps element (i, j) of pair bh's probabilities: the draw
 * the CPU's mask takes for it. MASKED: P (B, NH, Tq, Tk)
 * (ut_attention_masked_keep_mask); VARLEN: sequence [lo, hi) of rows whose
 * blocks start at ps, head bh (ut_attention_varlen_keep_mask) */
template <int MODE>
__device__ __forceinline__ bool kept(const geom &g, int bh, int i, int j, int lo, int hi, int64_t ps) {
    const ut_flash_drop &d = g.drop;
    uint64_t draw;
    if constexpr (MODE == VARLEN) {
        const int64_t L = hi - lo, e = ps + (bh * L + (i - lo)) * L + (j - lo);
        draw = d.all ? ut_varlen_draw(d.offset, e, ps, L * L, g.NH, d.all, d.c0)
                     : ut_dropout_draw(d.offset, e, 0, 0, 0);
    } else {
        const int64_t e = ((int64_t)bh * g.Tq + i) * g.Tk + j;
        draw = ut_dropout_draw(d.offset, e, d.all, d.cols, d.c0);
    }
    return ut_philox_keep(d.key, d.stream, draw, d.p);
}

/* The rows the other side's loop visits, [*beg, *stop) in tiles of 64 from
 * *beg, for a block of the rows [r0, r0 + 64): keys for a query tile
 * (fwd, dq), queries for a key tile (dkdv, keys = false) */
template <int MODE>
__device__ __forceinline__ void span_of(const geom &g, int r0, bool keys, int *beg, int *stop) {
    const int n = keys ? g.Tk : g.Tq;
    if constexpr (MODE == VARLEN) {
        const int last = (r0 + BM < g.Tq ? r0 + BM : g.Tq) - 1;
        *beg = keys || !g.causal ? g.off[seq_of(g.off, g.S, r0)] : r0;
        *stop = keys && g.causal ? last + 1 : g.off[seq_of(g.off, g.S, last) + 1];
        if (*g.bad) *beg = *stop = 0; /* nothing: the error flag is raised */
    } else if (MODE == MASKED && !g.causal) {
        *beg = 0;
        *stop = n;
    } else { /* causal, one length: keys up to the diagonal, queries from it */
        *beg = keys ? 0 : r0;
        *stop = keys ? r0 + 1 : n;
    }
}

/* dout's elements as float: float32 as they are, 16-bit widened (exact) */
__device__ __forceinline__ float widen(float v) { return v; }
__device__ __forceinline__ float widen(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float widen(__half v) { return __half2float(v); }

/* Dg (B, NH, T) = rowsum(dout * out) per head (out the forward's float32
 * values, dout stored as G); one thread per (b, t, h), summing in column
 * order with fmaf as mm_abt sums dp = dout . v: where out_i is one key's v
 * (a single attended key), D_i and dp then have the same bits and that
 * row's ds = p (dp - D) is exactly 0, as on the CPU. A 16-bit dout gives
 * the bits of its float32 copy. */
template <typename G>
__global__ void rowdot_kernel(const float *__restrict__ out, const G *__restrict__ dout, float *__restrict__ Dg,
                              int64_t rows, int T, int C, int NH, int hs) {
    UTK_GRID_STRIDE(r, rows) {
        const int64_t bt = r / NH;
        const int h = (int)(r % NH);
        const float *o = out + bt * C + (int64_t)h * hs;
        const G *gr = dout + bt * C + (int64_t)h * hs;
        float acc = 0.0f;
        for (int d = 0; d < hs; d++) acc = fmaf(o[d], widen(gr[d]), acc);
        const int64_t b = bt / T, t = bt % T;
        Dg[(b * NH + h) * T + t] = acc;
    }
}

inline geom geom_of(int64_t Tq, int64_t Tk, int64_t C, int64_t NH) {
    geom g = {};
    g.Tq = (int)Tq;
    g.Tk = (int)Tk;
    g.C = (int)C;
    g.NH = (int)NH;
    g.hs = (int)(C / NH);
    g.scale = 1.0f / sqrtf((float)g.hs);
    g.vec = false;
    return g;
}

/* ATTENTION's packed qkv (B, T, 3C): q, k, v of a row side by side */
inline geom geom_packed(const float *qkv, int64_t T, int64_t C, int64_t NH) {
    geom g = geom_of(T, T, C, NH);
    g.q = qkv;
    g.k = qkv + C;
    g.v = qkv + 2 * C;
    g.ldq = g.ldk = g.ldv = 3 * C;
    g.sq = g.sk = T * 3 * C;
    g.causal = true;
    return g;
}

/* ATTENTION_MASKED's q (B, Tq, C), k and v (B, Tk, C), or ATTENTION_VARLEN's
 * (N, C) (B = 1, Tq = Tk = N, mk->off set) */
inline geom geom_masked(const void *q, const void *k, const void *v, int64_t Tq, int64_t Tk, int64_t C, int64_t NH,
                 const ut_flash_masking *mk) {
    geom g = geom_of(Tq, Tk, C, NH);
    g.q = q;
    g.k = k;
    g.v = v;
    g.ldq = g.ldk = g.ldv = C;
    g.sq = Tq * C;
    g.sk = Tk * C;
    g.mask = mk->mask;
    g.causal = mk->causal;
    g.drop = mk->drop;
    g.off = mk->off;
    g.poff = mk->poff;
    g.bad = mk->bad;
    g.S = (int)mk->S;
    return g;
}

/* Whether B x NH pairs of Tq queries and Tk keys, C columns (NH heads of at
 * most max_hs), stay within the kernels' grids and indices */
inline bool sizes_fit(int64_t B, int64_t Tq, int64_t Tk, int64_t C, int64_t NH, int64_t max_hs) {
    if (B < 1 || Tq < 1 || Tk < 1 || NH < 1 || C % NH != 0 || C / NH > max_hs) return false;
    return (Tq + BM - 1) / BM <= 65535 && (Tk + BM - 1) / BM <= 65535 && B * NH <= 0x7fffffff &&
           3 * C <= 0x7fffffff && Tq <= 0x7fffffff && Tk <= 0x7fffffff && Tq * 3 * C <= INT64_MAX / B &&
           Tk * 3 * C <= INT64_MAX / B;
}

/* The current device's shared memory per block (opt-in) in bytes: 0 where
 * it cannot say or its compute capability's major is below min_major */
inline size_t device_smem(int min_major) {
    static int optin[64], major[64];
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) return 0;
    if (!optin[dev]) {
        int v = 0, m = 0;
        if (cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess ||
            cudaDeviceGetAttribute(&m, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess)
            return 0;
        optin[dev] = v > 0 ? v : -1;
        major[dev] = m;
    }
    return optin[dev] > 0 && major[dev] >= min_major ? (size_t)optin[dev] : 0;
}

}  // namespace

#endif

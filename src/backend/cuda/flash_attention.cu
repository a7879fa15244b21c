/* Fused ("flash") attention in float32, forward and backward
 * (flash_attention.h), in three forms of the same kernels (template MODE):
 *   PACKED: the causal self-attention of ATTENTION over packed qkv
 *     (semantics: src/backend/cpu/attention.c);
 *   MASKED: ATTENTION_MASKED's separate q, k, v with Tq != Tk, an additive
 *     key mask, an optional causal mask and dropout of the probabilities
 *     (semantics: src/backend/cpu/attention_masked.c);
 *   VARLEN: ATTENTION_VARLEN's packed sequences (src/backend/cpu/attention_varlen.c):
 *     one (N, C) batch, tiles of 64 rows that may hold several sequences;
 *     each tile's rows find their sequence in the offsets (a binary search,
 *     kept in shared memory), a block visits the other side's rows from the
 *     start of its first row's sequence to the end of its last's, and the
 *     pairs of different sequences are masked. The offsets never reach the
 *     host: a plan kernel checks them and raises the device error flag.
 * MASKED and VARLEN never store P or the keep mask: each keep decision is
 * the Philox draw the CPU makes for that element (src/core/philox.h),
 * computed again wherever it is needed; a row whose keys are all masked
 * (-inf) attends nowhere: its output is 0 and its L is +inf, so every
 * p = exp(s - L) recomputed from it is 0.
 *
 * Tiles of 64 queries x 64 keys. A head's q, k, v, dout rows are staged in
 * shared memory as 64 x D tiles (D = 32, 64 or 128: hs rounded up, the
 * columns past hs and the rows past T zero-filled), row stride D + 4 floats,
 * by cp.async (16-byte copies when every row and head offset is a multiple
 * of 4 floats and the pointers are 16-byte aligned, 4-byte copies otherwise),
 * issued one stage ahead so that the copies of the next tile overlap the
 * products of this one.
 * A block has NT = 128 threads (D = 128: 256) as a TY x 16 grid, TY = NT / 16:
 * thread (ty, tx) owns the RT = 64 / TY tile rows ty + TY r (r < RT) and, of a
 * 64 x 64 score tile, the columns tx + 16 c (c < 4), of a 64 x D result the
 * D / 16 columns ocol(tx, k). A row's 16 threads are 16 lanes of one warp;
 * row reductions are xor shuffles over them.
 *   forward: one block per (b, h, query block), heaviest blocks first; online
 *     softmax over the key blocks up to the diagonal, O in registers; writes O
 *     (and optionally a copy of it) and L = m + log(l).
 *   backward: D_i = rowsum(dout_i * out_i) (one thread per row); then kernel A,
 *     one block per (b, h, key block), loops over the query blocks from the
 *     diagonal to T accumulating dK and dV in registers; kernel B, one block per
 *     (b, h, query block), loops over the key blocks up to the diagonal
 *     accumulating dQ. Each gradient element is added by one thread after a
 *     fixed-order sum: no atomics, the same bits on every run.
 * Shared memory per block (D = 64): forward 68 KiB (3 blocks per H100 SM),
 * kernel A 102.5 KiB, kernel B 85 KiB (2 each); D = 128: 116, 166.5 and
 * 149 KiB (1 each), more than some devices allow (ut_cuda_flash_attn_ok).
 * defines: ut_cuda_flash_attn_ok, ut_cuda_flash_attn_fwd, ut_cuda_flash_attn_bwd. */
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda.h"
#include "flash_attention.h"
#include "flash_common.cuh"
#include "launch.cuh"

namespace {

constexpr int PLD = BM + 4;  /* row stride of the 64 x 64 score tiles in shared memory */

template <int D>
struct cfg {
    static constexpr int NT = D == 128 ? 256 : 128; /* threads per block */
    static constexpr int FWD_MINB = D == 128 ? 1 : 3; /* forward blocks per SM: <= 170 registers */
    static constexpr int TY = NT / 16;              /* thread rows */
    static constexpr int RT = BM / TY;              /* tile rows per thread */
    static constexpr int OC = D / 16;               /* result columns per thread */
    static constexpr int LD = D + 4;                /* row stride of the 64 x D tiles */
    static constexpr size_t tile = (size_t)BM * LD; /* floats of a 64 x D tile */
    static constexpr size_t ptile = (size_t)BM * PLD;
    static constexpr size_t fwd_bytes = (3 * tile + ptile) * sizeof(float);
    static constexpr size_t dkdv_bytes = (4 * tile + 2 * ptile + 2 * BM) * sizeof(float);
    static constexpr size_t dq_bytes = (4 * tile + ptile) * sizeof(float);
};

/* ---- cp.async (sm_80 and later): global -> shared without registers ---- */
#ifdef UT_CUDA_EMU /* the CUDA emulator's model of them (tests/emu/cuda_emu.h, async_copy) */
__device__ __forceinline__ void cp16(float *dst, const float *src, bool valid) {
    utemu::async_copy(dst, src, 16, valid ? 16 : 0);
}
__device__ __forceinline__ void cp4(float *dst, const float *src, bool valid) {
    utemu::async_copy(dst, src, 4, valid ? 4 : 0);
}
__device__ __forceinline__ void cp_commit() { utemu::async_commit(); }
template <int N>
__device__ __forceinline__ void cp_wait() {
    utemu::async_wait(N);
}
#else
__device__ __forceinline__ void cp16(float *dst, const float *src, bool valid) {
    unsigned s = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(src), "r"(valid ? 16 : 0)
                 : "memory");
}
__device__ __forceinline__ void cp4(float *dst, const float *src, bool valid) {
    unsigned s = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(s), "l"(src), "r"(valid ? 4 : 0)
                 : "memory");
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
/* waits until at most N of this thread's committed groups are still in flight */
template <int N>
__device__ __forceinline__ void cp_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
#endif

/* dst (64 x D, row stride D + 4) = rows r0 .. r0 + 63 of src (row stride ld),
 * columns < hs; zero past n rows or hs. Queued, not waited for. */
template <int D>
__device__ __forceinline__ void load_tile(float *dst, const float *src, int64_t ld, int r0, int n, const geom &g) {
    using K = cfg<D>;
    const int tid = (int)threadIdx.x;
    /* rolled loops: the copies are asynchronous, and unrolled ones would keep
     * every copy's address in registers across the callers' loops */
    if (g.vec) {
        constexpr int V4 = D / 4, RS = K::NT / V4;
        const int c = (tid % V4) * 4;
#pragma unroll 1
        for (int row = tid / V4; row < BM; row += RS) {
            const int r = r0 + row;
            const bool ok = r < n && c < g.hs;
            cp16(dst + row * K::LD + c, ok ? src + (int64_t)r * ld + c : src, ok);
        }
    } else {
        constexpr int RS = K::NT / D;
        const int c = tid % D;
#pragma unroll 1
        for (int row = tid / D; row < BM; row += RS) {
            const int r = r0 + row;
            const bool ok = r < n && c < g.hs;
            cp4(dst + row * K::LD + c, ok ? src + (int64_t)r * ld + c : src, ok);
        }
    }
}

/* dst (64) = src[r0 .. r0 + 63], zero past T; queued */
__device__ __forceinline__ void load_rows(float *dst, const float *src, int r0, int T) {
    int i = (int)threadIdx.x;
    if (i < BM) {
        bool ok = r0 + i < T;
        cp4(dst + i, ok ? src + r0 + i : src, ok);
    }
}

/* the result column of a thread's k-th result entry (k < D / 16): with 4 or
 * more per thread, runs of 4 at 64-column strides (conflict-free float4
 * reads of a tile row), else tx * OC + k */
template <int OC>
__device__ __forceinline__ int ocol(int tx, int k) {
    if constexpr (OC >= 4)
        return (k >> 2) * 64 + tx * 4 + (k & 3);
    else
        return tx * OC + k;
}

__device__ __forceinline__ float comp(const float4 &v, int i) {
    return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

/* s[r][c] = sum_k X[ty + TY r][k] Y[tx + 16 c][k] over k < D (64 x D tiles;
 * sums in k order) */
template <int D>
__device__ __forceinline__ void mm_abt(float (&s)[cfg<D>::RT][4], const float *X, const float *Y, int ty, int tx) {
    using K = cfg<D>;
#pragma unroll
    for (int r = 0; r < K::RT; r++)
#pragma unroll
        for (int c = 0; c < 4; c++) s[r][c] = 0.0f;
#pragma unroll 2
    for (int k = 0; k < D; k += 4) {
        float4 y[4];
#pragma unroll
        for (int c = 0; c < 4; c++) y[c] = *reinterpret_cast<const float4 *>(Y + (tx + 16 * c) * K::LD + k);
#pragma unroll
        for (int r = 0; r < K::RT; r++) {
            float4 x = *reinterpret_cast<const float4 *>(X + (ty + K::TY * r) * K::LD + k);
#pragma unroll
            for (int c = 0; c < 4; c++) {
                s[r][c] = fmaf(x.x, y[c].x, s[r][c]);
                s[r][c] = fmaf(x.y, y[c].y, s[r][c]);
                s[r][c] = fmaf(x.z, y[c].z, s[r][c]);
                s[r][c] = fmaf(x.w, y[c].w, s[r][c]);
            }
        }
    }
}

/* o[r][k] += sum_j P[ty + TY r][j] Z[j][ocol(tx, k)] over j < 64 (P a
 * 64 x 64 score tile, Z a 64 x D tile; sums in j order) */
template <int D>
__device__ __forceinline__ void mm_pz(float (&o)[cfg<D>::RT][cfg<D>::OC], const float *P, const float *Z, int ty,
                                      int tx) {
    using K = cfg<D>;
    constexpr int OC = K::OC;
#pragma unroll 2
    for (int j = 0; j < BM; j += 4) {
        float4 p[K::RT];
#pragma unroll
        for (int r = 0; r < K::RT; r++) p[r] = *reinterpret_cast<const float4 *>(P + (ty + K::TY * r) * PLD + j);
#pragma unroll
        for (int jj = 0; jj < 4; jj++) {
            const float *zr = Z + (j + jj) * K::LD;
            float z[OC];
            if constexpr (OC >= 4) {
#pragma unroll
                for (int h = 0; h < OC / 4; h++) {
                    float4 t = *reinterpret_cast<const float4 *>(zr + h * 64 + tx * 4);
                    z[4 * h] = t.x;
                    z[4 * h + 1] = t.y;
                    z[4 * h + 2] = t.z;
                    z[4 * h + 3] = t.w;
                }
            } else {
                float2 t = *reinterpret_cast<const float2 *>(zr + tx * 2);
                z[0] = t.x;
                z[1] = t.y;
            }
#pragma unroll
            for (int r = 0; r < K::RT; r++) {
                float pv = comp(p[r], jj);
#pragma unroll
                for (int k = 0; k < OC; k++) o[r][k] = fmaf(pv, z[k], o[r][k]);
            }
        }
    }
}

/* dst[ocol(tx, k)] = v[k] * mul (add: += ) for the columns < hs; dst a
 * 16-byte aligned row when g.vec */
template <int OC>
__device__ __forceinline__ void put_row(float *dst, const float (&v)[OC], float mul, int tx, const geom &g,
                                        bool add) {
    if constexpr (OC >= 4) {
        if (g.vec) {
#pragma unroll
            for (int h = 0; h < OC / 4; h++) {
                int c = h * 64 + tx * 4;
                if (c >= g.hs) continue;
                float4 *p = reinterpret_cast<float4 *>(dst + c);
                float4 w = make_float4(v[4 * h] * mul, v[4 * h + 1] * mul, v[4 * h + 2] * mul, v[4 * h + 3] * mul);
                if (add) {
                    float4 a = *p;
                    w.x += a.x;
                    w.y += a.y;
                    w.z += a.z;
                    w.w += a.w;
                }
                *p = w;
            }
            return;
        }
    }
#pragma unroll
    for (int k = 0; k < OC; k++) {
        int c = ocol<OC>(tx, k);
        if (c < g.hs) dst[c] = add ? dst[c] + v[k] * mul : v[k] * mul;
    }
}

__device__ __forceinline__ float row_max16(float v) {
#pragma unroll
    for (int o = 8; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
/* the same bits in all 16 lanes: each step adds the same two values */
__device__ __forceinline__ float row_sum16(float v) {
#pragma unroll
    for (int o = 8; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* ---- the masked and packed-sequence forms' pieces ---- */

/* VARLEN: a tile's 64 rows' sequences, in shared memory: row r0 + t's
 * sequence's rows [lo[t], hi[t]) and where its blocks of P start (poff);
 * rows past N get the empty range */
struct segs {
    int lo[BM], hi[BM];
    int64_t ps[BM];
};
__device__ __forceinline__ void load_segs(segs *sg, const geom &g, int r0) {
    const int t = (int)threadIdx.x, i = r0 + t;
    if (t < BM) {
        seq_range(g, i, &sg->lo[t], &sg->hi[t], &sg->ps[t]);
    }
}

/* ---- forward: grid (B NH, query blocks), heaviest (last) query block first ---- */
template <int D, int MODE>
__global__ void __launch_bounds__(cfg<D>::NT, cfg<D>::FWD_MINB)
    fwd_kernel(float *__restrict__ out, float *__restrict__ out2, float *__restrict__ Lg, geom g) {
    using K = cfg<D>;
    constexpr int RT = K::RT, OC = K::OC, TY = K::TY;
    extern __shared__ float4 smem4[];
    float *Qs = reinterpret_cast<float *>(smem4), *Ks = Qs + K::tile, *Vs = Ks + K::tile, *Ps = Vs + K::tile;
    /* VARLEN: the query rows' sequences; MASKED: the key tile's biases */
    [[maybe_unused]] segs *sg = reinterpret_cast<segs *>(Ps + K::ptile);
    [[maybe_unused]] float *Bs = Ps + K::ptile;
    const int tid = (int)threadIdx.x, tx = tid & 15, ty = tid >> 4;
    const int bh = (int)blockIdx.x, b = bh / g.NH, h = bh % g.NH;
    const int nqb = (g.Tq + BM - 1) / BM, qb = nqb - 1 - (int)blockIdx.y, i0 = qb * BM;
    int kbeg, kstop;
    span_of<MODE>(g, i0, true, &kbeg, &kstop);
    const int64_t hc = (int64_t)h * g.hs;
    const float *q = (const float *)g.q + b * g.sq + hc, *k = (const float *)g.k + b * g.sk + hc,
                *v = (const float *)g.v + b * g.sk + hc;
    [[maybe_unused]] const float *mrow = MODE == MASKED && g.mask ? g.mask + (int64_t)b * g.Tk : nullptr;
    if constexpr (MODE == VARLEN) load_segs(sg, g, i0);
    if constexpr (MODE == MASKED) { /* in shared memory, not registers: the forward has none to spare */
        if (tid < BM) Bs[tid] = key_bias(mrow, kbeg + tid, g.Tk);
    }

    load_tile<D>(Qs, q, g.ldq, i0, g.Tq, g);
    load_tile<D>(Ks, k, g.ldk, kbeg, g.Tk, g);
    cp_commit();
    load_tile<D>(Vs, v, g.ldv, kbeg, g.Tk, g);
    cp_commit();

    float o[RT][OC], m[RT], l[RT];
#pragma unroll
    for (int r = 0; r < RT; r++) {
        m[r] = -INFINITY;
        l[r] = 0.0f;
#pragma unroll
        for (int c = 0; c < OC; c++) o[r][c] = 0.0f;
    }
    for (int j0 = kbeg; j0 < kstop; j0 += BM) {
        const bool more = j0 + BM < kstop;
        cp_wait<1>(); /* Q and this K */
        __syncthreads();
        float s[RT][4];
        mm_abt<D>(s, Qs, Ks, ty, tx);
        __syncthreads(); /* Ks free */
        if (more) load_tile<D>(Ks, k, g.ldk, j0 + BM, g.Tk, g);
        cp_commit();
        if constexpr (MODE != PACKED) {
#pragma unroll
            for (int r = 0; r < RT; r++) {
                const int il = ty + TY * r, i = i0 + il;
                [[maybe_unused]] int lo = 0, hi = 0;
                if constexpr (MODE == VARLEN) {
                    lo = sg->lo[il];
                    hi = sg->hi[il];
                }
                float mx = -INFINITY;
#pragma unroll
                for (int c = 0; c < 4; c++) {
                    const int j = j0 + tx + 16 * c;
                    bool ok = !g.causal || j <= i;
                    if constexpr (MODE == VARLEN) ok = ok && j >= lo && j < hi;
                    if constexpr (MODE == MASKED) s[r][c] = ok ? s[r][c] * g.scale + Bs[tx + 16 * c] : -INFINITY;
                    else s[r][c] = ok ? s[r][c] * g.scale : -INFINITY;
                    mx = fmaxf(mx, s[r][c]);
                }
                const float mn = fmaxf(m[r], row_max16(mx));
                const float base = mn == -INFINITY ? 0.0f : mn; /* every key so far masked: exps of 0 */
                const float alpha = expf(m[r] - base);
                m[r] = mn;
                float ls = 0.0f;
#pragma unroll
                for (int c = 0; c < 4; c++) {
                    const int j = j0 + tx + 16 * c;
                    float p = expf(s[r][c] - base);
                    ls += p; /* the softmax's sum: before dropout */
                    if (g.drop.p > 0.0f && p != 0.0f)
                        p = kept<MODE>(g, bh, i, j, lo, hi, MODE == VARLEN ? sg->ps[il] : 0) ? p * g.drop.ks : 0.0f;
                    Ps[il * PLD + tx + 16 * c] = p;
                }
                l[r] = l[r] * alpha + ls;
#pragma unroll
                for (int c = 0; c < OC; c++) o[r][c] *= alpha;
            }
        } else {
#pragma unroll
            for (int r = 0; r < RT; r++) {
                const int il = ty + TY * r, i = i0 + il;
                float mx = -INFINITY;
#pragma unroll
                for (int c = 0; c < 4; c++) {
                    s[r][c] = j0 + tx + 16 * c <= i ? s[r][c] * g.scale : -INFINITY;
                    mx = fmaxf(mx, s[r][c]);
                }
                /* finite: key 0 <= i lies in the first block */
                const float mn = fmaxf(m[r], row_max16(mx));
                const float alpha = expf(m[r] - mn); /* 0 on the first block */
                m[r] = mn;
                float ls = 0.0f;
#pragma unroll
                for (int c = 0; c < 4; c++) {
                    float p = expf(s[r][c] - mn);
                    ls += p;
                    Ps[il * PLD + tx + 16 * c] = p;
                }
                l[r] = l[r] * alpha + ls;
#pragma unroll
                for (int c = 0; c < OC; c++) o[r][c] *= alpha;
            }
        }
        cp_wait<1>(); /* this V */
        __syncthreads();
        mm_pz<D>(o, Ps, Vs, ty, tx);
        __syncthreads(); /* Vs, Ps (and Bs) free */
        if (more) load_tile<D>(Vs, v, g.ldv, j0 + BM, g.Tk, g);
        cp_commit();
        if constexpr (MODE == MASKED) {
            if (more && tid < BM) Bs[tid] = key_bias(mrow, j0 + BM + tid, g.Tk);
        }
    }
    cp_wait<0>();
#pragma unroll
    for (int r = 0; r < RT; r++) {
        const float lt = row_sum16(l[r]);
        const int i = i0 + ty + TY * r;
        if (i < g.Tq) {
            /* a row whose keys are all masked attends nowhere: out 0, L = +inf */
            const bool any = MODE == PACKED || lt > 0.0f;
            const int64_t at = ((int64_t)b * g.Tq + i) * g.C + hc;
            put_row<OC>(out + at, o[r], any ? 1.0f / lt : 0.0f, tx, g, false);
            if (out2) put_row<OC>(out2 + at, o[r], any ? 1.0f / lt : 0.0f, tx, g, false);
            if (tx == 0) Lg[(int64_t)bh * g.Tq + i] = any ? m[r] + logf(lt) : INFINITY;
        }
    }
}

/* ---- backward ---- */

/* p and the scores' gradient ds of element (i, j) in the backward kernels, 0
 * where it is masked; pd: p after dropout (what multiplies dout into dv).
 * bias: the mask's entry for key j (MASKED); lo, hi, ps: the sequence of
 * the row whose segments the block holds (VARLEN) */
template <int MODE>
__device__ __forceinline__ void grad_at(const geom &g, int bh, int i, int j, float s, float dp, float Li, float Di,
                                        float bias, int lo, int hi, int64_t ps, float &pd, float &ds) {
    pd = ds = 0.0f;
    bool ok;
    if constexpr (MODE == PACKED) ok = j <= i && i < g.Tq;
    else if constexpr (MODE == MASKED) ok = i < g.Tq && j < g.Tk && (!g.causal || j <= i);
    else ok = i >= lo && i < hi && j >= lo && j < hi && (!g.causal || j <= i);
    if (!ok) return;
    float p;
    if constexpr (MODE == MASKED) p = expf(s * g.scale + bias - Li);
    else p = expf(s * g.scale - Li);
    pd = p;
    if (MODE != PACKED && g.drop.p > 0.0f) {
        const bool kp = kept<MODE>(g, bh, i, j, lo, hi, ps);
        pd = kp ? p * g.drop.ks : 0.0f;
        dp = kp ? dp * g.drop.ks : 0.0f;
    }
    ds = p * (dp - Di);
}

/* kernel A: dK, dV of key block blockIdx.y (lightest last), summed over the
 * query blocks from the diagonal (not causal: every query that sees these
 * keys) to the last. dk, dv: either may be NULL (not wanted) */
template <int D, int MODE>
__global__ void __launch_bounds__(cfg<D>::NT, 1)
    dkdv_kernel(const float *__restrict__ dout, const float *__restrict__ Lg, const float *__restrict__ Dg,
                float *dk_out, float *dv_out, geom g) {
    using K = cfg<D>;
    constexpr int RT = K::RT, OC = K::OC, TY = K::TY;
    extern __shared__ float4 smem4[];
    float *Ks = reinterpret_cast<float *>(smem4), *Vs = Ks + K::tile, *Qs = Vs + K::tile, *Gs = Qs + K::tile;
    float *Pt = Gs + K::tile, *St = Pt + K::ptile, *Ls = St + K::ptile, *Ds = Ls + BM;
    [[maybe_unused]] segs *sg = reinterpret_cast<segs *>(Ds + BM);
    const int tid = (int)threadIdx.x, tx = tid & 15, ty = tid >> 4;
    const int bh = (int)blockIdx.x, b = bh / g.NH, h = bh % g.NH;
    const int kb = (int)blockIdx.y, j0 = kb * BM;
    if constexpr (MODE == VARLEN) {
        if (*g.bad) return; /* the error flag is raised */
    }
    int qbeg, qstop;
    span_of<MODE>(g, j0, false, &qbeg, &qstop);
    const int64_t hc = (int64_t)h * g.hs;
    const float *q = (const float *)g.q + b * g.sq + hc, *k = (const float *)g.k + b * g.sk + hc,
                *v = (const float *)g.v + b * g.sk + hc;
    const float *gd = dout + (int64_t)b * g.Tq * g.C + hc;
    const float *Lr = Lg + (int64_t)bh * g.Tq, *Dr = Dg + (int64_t)bh * g.Tq;
    if constexpr (MODE == VARLEN) load_segs(sg, g, j0);

    load_tile<D>(Ks, k, g.ldk, j0, g.Tk, g);
    load_tile<D>(Vs, v, g.ldv, j0, g.Tk, g);
    load_tile<D>(Gs, gd, g.C, qbeg, g.Tq, g);
    load_rows(Ds, Dr, qbeg, g.Tq);
    cp_commit();
    load_tile<D>(Qs, q, g.ldq, qbeg, g.Tq, g);
    load_rows(Ls, Lr, qbeg, g.Tq);
    cp_commit();

    [[maybe_unused]] float kbias[MODE == MASKED ? RT : 1];
    if constexpr (MODE == MASKED) {
        const float *mrow = g.mask ? g.mask + (int64_t)b * g.Tk : nullptr;
#pragma unroll
        for (int r = 0; r < RT; r++) kbias[r] = key_bias(mrow, j0 + ty + TY * r, g.Tk);
    }
    float dk[RT][OC], dv[RT][OC];
#pragma unroll
    for (int r = 0; r < RT; r++)
#pragma unroll
        for (int c = 0; c < OC; c++) dk[r][c] = dv[r][c] = 0.0f;
    for (int i0 = qbeg; i0 < qstop; i0 += BM) {
        const bool more = i0 + BM < qstop;
        cp_wait<1>(); /* dout, D (and K, V) */
        __syncthreads();
        float dp[RT][4], s[RT][4];
        mm_abt<D>(dp, Vs, Gs, ty, tx); /* dp[r][c] = v_j . dout_i */
        cp_wait<0>();                  /* Q, L */
        __syncthreads();
        mm_abt<D>(s, Ks, Qs, ty, tx); /* s[r][c] = k_j . q_i */
#pragma unroll
        for (int r = 0; r < RT; r++) {
            const int jl = ty + TY * r, j = j0 + jl;
            [[maybe_unused]] int lo = 0, hi = 0;
            [[maybe_unused]] int64_t ps = 0;
            if constexpr (MODE == VARLEN) {
                lo = sg->lo[jl];
                hi = sg->hi[jl];
                ps = sg->ps[jl];
            }
#pragma unroll
            for (int c = 0; c < 4; c++) {
                const int il = tx + 16 * c, i = i0 + il;
                float pd, ds;
                grad_at<MODE>(g, bh, i, j, s[r][c], dp[r][c], Ls[il], Ds[il], MODE == MASKED ? kbias[r] : 0.0f,
                              lo, hi, ps, pd, ds);
                Pt[jl * PLD + il] = pd;
                St[jl * PLD + il] = ds;
            }
        }
        __syncthreads();
        mm_pz<D>(dv, Pt, Gs, ty, tx); /* dv_j += sum_i pd dout_i */
        __syncthreads();              /* Gs free */
        if (more) {
            load_tile<D>(Gs, gd, g.C, i0 + BM, g.Tq, g);
            load_rows(Ds, Dr, i0 + BM, g.Tq);
        }
        cp_commit();
        mm_pz<D>(dk, St, Qs, ty, tx); /* dk_j += sum_i ds q_i */
        __syncthreads();              /* Qs free */
        if (more) {
            load_tile<D>(Qs, q, g.ldq, i0 + BM, g.Tq, g);
            load_rows(Ls, Lr, i0 + BM, g.Tq);
        }
        cp_commit();
    }
    cp_wait<0>();
#pragma unroll
    for (int r = 0; r < RT; r++) {
        const int j = j0 + ty + TY * r;
        if (j < g.Tk) {
            if (dk_out) put_row<OC>(dk_out + b * g.sk + j * g.ldk + hc, dk[r], g.scale, tx, g, true);
            if (dv_out) put_row<OC>(dv_out + b * g.sk + j * g.ldv + hc, dv[r], 1.0f, tx, g, true);
        }
    }
}

/* kernel B: dQ of query block (heaviest first), summed over the key blocks
 * the forward visited */
template <int D, int MODE>
__global__ void __launch_bounds__(cfg<D>::NT, 1)
    dq_kernel(const float *__restrict__ dout, const float *__restrict__ Lg, const float *__restrict__ Dg,
              float *__restrict__ dq_out, geom g) {
    using K = cfg<D>;
    constexpr int RT = K::RT, OC = K::OC, TY = K::TY;
    extern __shared__ float4 smem4[];
    float *Qs = reinterpret_cast<float *>(smem4), *Gs = Qs + K::tile, *Ks = Gs + K::tile, *Vs = Ks + K::tile;
    float *Ss = Vs + K::tile;
    [[maybe_unused]] segs *sg = reinterpret_cast<segs *>(Ss + K::ptile);
    const int tid = (int)threadIdx.x, tx = tid & 15, ty = tid >> 4;
    const int bh = (int)blockIdx.x, b = bh / g.NH, h = bh % g.NH;
    const int nqb = (g.Tq + BM - 1) / BM, qb = nqb - 1 - (int)blockIdx.y, i0 = qb * BM;
    if constexpr (MODE == VARLEN) {
        if (*g.bad) return; /* the error flag is raised */
    }
    int kbeg, kstop;
    span_of<MODE>(g, i0, true, &kbeg, &kstop);
    const int64_t hc = (int64_t)h * g.hs;
    const float *q = (const float *)g.q + b * g.sq + hc, *k = (const float *)g.k + b * g.sk + hc,
                *v = (const float *)g.v + b * g.sk + hc;
    const float *gd = dout + (int64_t)b * g.Tq * g.C + hc;
    [[maybe_unused]] const float *mrow = MODE == MASKED && g.mask ? g.mask + (int64_t)b * g.Tk : nullptr;
    if constexpr (MODE == VARLEN) load_segs(sg, g, i0);

    load_tile<D>(Qs, q, g.ldq, i0, g.Tq, g);
    load_tile<D>(Gs, gd, g.C, i0, g.Tq, g);
    load_tile<D>(Vs, v, g.ldv, kbeg, g.Tk, g);
    cp_commit();
    load_tile<D>(Ks, k, g.ldk, kbeg, g.Tk, g);
    cp_commit();

    float Li[RT], Di[RT], dq[RT][OC];
#pragma unroll
    for (int r = 0; r < RT; r++) {
        const int i = i0 + ty + TY * r;
        Li[r] = i < g.Tq ? Lg[(int64_t)bh * g.Tq + i] : 0.0f;
        Di[r] = i < g.Tq ? Dg[(int64_t)bh * g.Tq + i] : 0.0f;
#pragma unroll
        for (int c = 0; c < OC; c++) dq[r][c] = 0.0f;
    }
    for (int j0 = kbeg; j0 < kstop; j0 += BM) {
        const bool more = j0 + BM < kstop;
        cp_wait<1>(); /* V (and Q, dout) */
        __syncthreads();
        float dp[RT][4], s[RT][4];
        mm_abt<D>(dp, Gs, Vs, ty, tx); /* dp[r][c] = dout_i . v_j */
        cp_wait<0>();                  /* K */
        __syncthreads();
        mm_abt<D>(s, Qs, Ks, ty, tx);
        [[maybe_unused]] float kbias[4];
        if constexpr (MODE == MASKED) {
#pragma unroll
            for (int c = 0; c < 4; c++) kbias[c] = key_bias(mrow, j0 + tx + 16 * c, g.Tk);
        }
#pragma unroll
        for (int r = 0; r < RT; r++) {
            const int il = ty + TY * r, i = i0 + il;
            [[maybe_unused]] int lo = 0, hi = 0;
            [[maybe_unused]] int64_t ps = 0;
            if constexpr (MODE == VARLEN) {
                lo = sg->lo[il];
                hi = sg->hi[il];
                ps = sg->ps[il];
            }
#pragma unroll
            for (int c = 0; c < 4; c++) {
                float pd, ds;
                grad_at<MODE>(g, bh, i, j0 + tx + 16 * c, s[r][c], dp[r][c], Li[r], Di[r],
                              MODE == MASKED ? kbias[c] : 0.0f, lo, hi, ps, pd, ds);
                Ss[il * PLD + tx + 16 * c] = ds;
            }
        }
        __syncthreads(); /* Ss written, Vs free */
        if (more) load_tile<D>(Vs, v, g.ldv, j0 + BM, g.Tk, g);
        cp_commit();
        mm_pz<D>(dq, Ss, Ks, ty, tx); /* dq_i += sum_j ds k_j */
        __syncthreads();              /* Ks, Ss free */
        if (more) load_tile<D>(Ks, k, g.ldk, j0 + BM, g.Tk, g);
        cp_commit();
    }
    cp_wait<0>();
#pragma unroll
    for (int r = 0; r < RT; r++) {
        const int i = i0 + ty + TY * r;
        if (i < g.Tq) put_row<OC>(dq_out + b * g.sq + i * g.ldq + hc, dq[r], g.scale, tx, g, true);
    }
}

/* VARLEN's plan, one block: bad = 0 when 0 = off[0] < off[1] < ... <
 * off[S] = N, else 1 and the error flag raised; poff[s] = NH * (the sum of
 * L^2 over the sequences before s) */
constexpr int PLAN_NT = 256;
__global__ void __launch_bounds__(PLAN_NT)
    plan_kernel(const int32_t *__restrict__ off, int S, int N, int NH, int64_t *__restrict__ poff, int *bad,
                int *err) {
    __shared__ int64_t part[PLAN_NT];
    __shared__ int anybad;
    const int t = (int)threadIdx.x, per = (S + PLAN_NT - 1) / PLAN_NT, s0 = t * per;
    const int s1 = s0 + per < S ? s0 + per : S;
    if (t == 0) anybad = off[0] != 0 || off[S] != N;
    __syncthreads();
    int64_t sum = 0;
    bool wrong = false;
    for (int s = s0; s < s1; s++) {
        const int64_t L = (int64_t)off[s + 1] - off[s];
        if (L < 1 || off[s + 1] > N) wrong = true;
        else sum += NH * L * L;
    }
    part[t] = sum;
    if (wrong) anybad = 1;
    __syncthreads();
    if (t == 0) {
        int64_t run = 0;
        for (int i = 0; i < PLAN_NT; i++) {
            const int64_t x = part[i];
            part[i] = run;
            run += x;
        }
        *bad = anybad;
        if (anybad && err) atomicCAS(err, 0, (int)UT_CUDA_ERR_VARLEN_OFFSETS);
    }
    __syncthreads();
    int64_t run = part[t];
    for (int s = s0; s < s1; s++) {
        poff[s] = run;
        const int64_t L = (int64_t)off[s + 1] - off[s];
        if (L >= 1 && off[s + 1] <= N) run += NH * L * L;
    }
    if (s1 == S && s0 < S) poff[S] = run;
}

cudaStream_t stream() { return (cudaStream_t)ut_cuda_stream(); }
using utk::allow_smem;

int dim_of(int64_t hs) { return hs <= 32 ? 32 : hs <= 64 ? 64 : 128; }

/* the most shared memory a kernel of D takes, extra bytes past its tiles */
size_t smem_need(int D, size_t extra) {
    auto most = [](size_t a, size_t b, size_t c) { return a > b ? (a > c ? a : c) : (b > c ? b : c); };
    if (D == 32) return most(cfg<32>::fwd_bytes, cfg<32>::dkdv_bytes, cfg<32>::dq_bytes) + extra;
    if (D == 64) return most(cfg<64>::fwd_bytes, cfg<64>::dkdv_bytes, cfg<64>::dq_bytes) + extra;
    return most(cfg<128>::fwd_bytes, cfg<128>::dkdv_bytes, cfg<128>::dq_bytes) + extra;
}
/* the shared memory past a kernel's tiles: VARLEN's segments, MASKED's key
 * biases (the forward's) */
constexpr size_t seg_bytes(int MODE) { return MODE == VARLEN ? sizeof(segs) : MODE == MASKED ? BM * sizeof(float) : 0; }

bool aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

/* Whether the kernels take B x NH pairs of Tq queries and Tk keys, C columns,
 * on the current device (UT_CUDA_ATTN=unfused: never) */
bool fits(int64_t B, int64_t Tq, int64_t Tk, int64_t C, int64_t NH, int MODE) {
    if (ut_cuda_flash_attn_unfused() || !sizes_fit(B, Tq, Tk, C, NH, 128)) return false;
    size_t have = device_smem(0);
    return have > 0 && smem_need(dim_of(C / NH), seg_bytes(MODE)) <= have;
}

const char *const fwd_name[3] = {"flash attention forward", "flash attention forward (masked)",
                                  "flash attention forward (packed sequences)"};
const char *const dkdv_name[3] = {"flash attention backward (dk, dv)", "flash attention backward (dk, dv; masked)",
                                   "flash attention backward (dk, dv; packed sequences)"};
const char *const dq_name[3] = {"flash attention backward (dq)", "flash attention backward (dq; masked)",
                                 "flash attention backward (dq; packed sequences)"};

template <int D, int MODE>
void fwd(float *out, float *out2, float *L, int64_t B, const geom &g) {
    using K = cfg<D>;
    const size_t bytes = K::fwd_bytes + seg_bytes(MODE);
    allow_smem(fwd_kernel<D, MODE>, bytes);
    dim3 grid((unsigned)(B * g.NH), (unsigned)((g.Tq + BM - 1) / BM));
    fwd_kernel<D, MODE><<<grid, K::NT, bytes, stream()>>>(out, out2, L, g);
    ut_cuda_launched(fwd_name[MODE]);
}

template <int D, int MODE>
void bwd(float *dq, float *dk, float *dv, const float *dout, const float *L, const float *Dg, int64_t B,
         const geom &g) {
    using K = cfg<D>;
    if (dk || dv) {
        const size_t bytes = K::dkdv_bytes + seg_bytes(MODE);
        dim3 grid((unsigned)(B * g.NH), (unsigned)((g.Tk + BM - 1) / BM));
        allow_smem(dkdv_kernel<D, MODE>, bytes);
        dkdv_kernel<D, MODE><<<grid, K::NT, bytes, stream()>>>(dout, L, Dg, dk, dv, g);
        ut_cuda_launched(dkdv_name[MODE]);
    }
    if (dq) {
        const size_t bytes = K::dq_bytes + seg_bytes(MODE);
        dim3 grid((unsigned)(B * g.NH), (unsigned)((g.Tq + BM - 1) / BM));
        allow_smem(dq_kernel<D, MODE>, bytes);
        dq_kernel<D, MODE><<<grid, K::NT, bytes, stream()>>>(dout, L, Dg, dq, g);
        ut_cuda_launched(dq_name[MODE]);
    }
}

template <int MODE>
void fwd_any(float *out, float *out2, float *L, int64_t B, const geom &g) {
    switch (dim_of(g.hs)) {
        case 32: fwd<32, MODE>(out, out2, L, B, g); break;
        case 64: fwd<64, MODE>(out, out2, L, B, g); break;
        default: fwd<128, MODE>(out, out2, L, B, g); break;
    }
}

template <int MODE>
void bwd_any(float *dq, float *dk, float *dv, const float *dout, const float *L, const float *Dg, int64_t B,
             const geom &g) {
    switch (dim_of(g.hs)) {
        case 32: bwd<32, MODE>(dq, dk, dv, dout, L, Dg, B, g); break;
        case 64: bwd<64, MODE>(dq, dk, dv, dout, L, Dg, B, g); break;
        default: bwd<128, MODE>(dq, dk, dv, dout, L, Dg, B, g); break;
    }
}

}  // namespace

extern "C" bool ut_cuda_flash_attn_unfused(void) {
    const char *e = getenv("UT_CUDA_ATTN");
    return e && !strcmp(e, "unfused");
}

extern "C" bool ut_cuda_flash_attn_ok(int64_t B, int64_t T, int64_t C, int64_t NH) {
    return fits(B, T, T, C, NH, PACKED);
}

extern "C" bool ut_cuda_flash_attn_masked_ok(int64_t B, int64_t Tq, int64_t Tk, int64_t C, int64_t NH) {
    return fits(B, Tq, Tk, C, NH, MASKED);
}

extern "C" bool ut_cuda_flash_attn_varlen_ok(int64_t N, int64_t S, int64_t C, int64_t NH) {
    return S >= 1 && S < N + 1 && fits(1, N, N, C, NH, VARLEN);
}

extern "C" void ut_cuda_flash_attn_varlen_plan(int64_t *poff, int *bad, const int32_t *off, int64_t S, int64_t N,
                                               int64_t NH) {
    plan_kernel<<<1, PLAN_NT, 0, stream()>>>(off, (int)S, (int)N, (int)NH, poff, bad, ut_cuda_error_flag());
    ut_cuda_launched("flash attention plan (packed sequences)");
}

extern "C" void ut_cuda_flash_attn_fwd(float *out, float *out_copy, float *L, const float *qkv, int64_t B, int64_t T,
                                       int64_t C, int64_t NH) {
    if (B <= 0 || T <= 0) return;
    geom g = geom_packed(qkv, T, C, NH);
    g.vec = C % 4 == 0 && g.hs % 4 == 0 && aligned16(qkv) && aligned16(out) && aligned16(out_copy);
    fwd_any<PACKED>(out, out_copy, L, B, g);
}

extern "C" void ut_cuda_flash_attn_rowdot(float *Dg, const float *dout, const float *out, int64_t B, int64_t T,
                                          int64_t C, int64_t NH) {
    int64_t rows = B * T * NH;
    if (rows <= 0) return;
    rowdot_kernel<float><<<utk::blocks_for(rows), utk::kThreads, 0, stream()>>>(out, dout, Dg, rows, (int)T, (int)C, (int)NH,
                                                                      (int)(C / NH));
    ut_cuda_launched("flash attention backward (rowsum dout * out)");
}

extern "C" void ut_cuda_flash_attn_bwd(float *dqkv, float *Dscratch, const float *dout, const float *out,
                                       const float *qkv, const float *L, int64_t B, int64_t T, int64_t C,
                                       int64_t NH) {
    if (B <= 0 || T <= 0) return;
    geom g = geom_packed(qkv, T, C, NH);
    g.vec = C % 4 == 0 && g.hs % 4 == 0 && aligned16(qkv) && aligned16(dout) && aligned16(dqkv);
    ut_cuda_flash_attn_rowdot(Dscratch, dout, out, B, T, C, NH);
    bwd_any<PACKED>(dqkv, dqkv + C, dqkv + 2 * C, dout, L, Dscratch, B, g);
}

extern "C" void ut_cuda_flash_attn_masked_fwd(float *out, float *out_copy, float *L, const float *q, const float *k,
                                              const float *v, int64_t B, int64_t Tq, int64_t Tk, int64_t C,
                                              int64_t NH, const ut_flash_masking *mk) {
    if (B <= 0 || Tq <= 0) return;
    geom g = geom_masked(q, k, v, Tq, Tk, C, NH, mk);
    g.vec = C % 4 == 0 && g.hs % 4 == 0 && aligned16(q) && aligned16(k) && aligned16(v) && aligned16(out) &&
            aligned16(out_copy);
    if (mk->off) fwd_any<VARLEN>(out, out_copy, L, B, g);
    else fwd_any<MASKED>(out, out_copy, L, B, g);
}

extern "C" void ut_cuda_flash_attn_masked_bwd(float *dq, float *dk, float *dv, float *Dscratch, const float *dout,
                                              const float *out, const float *q, const float *k, const float *v,
                                              const float *L, int64_t B, int64_t Tq, int64_t Tk, int64_t C,
                                              int64_t NH, const ut_flash_masking *mk) {
    if (B <= 0 || Tq <= 0 || (!dq && !dk && !dv)) return;
    geom g = geom_masked(q, k, v, Tq, Tk, C, NH, mk);
    g.vec = C % 4 == 0 && g.hs % 4 == 0 && aligned16(q) && aligned16(k) && aligned16(v) && aligned16(dout) &&
            aligned16(dq) && aligned16(dk) && aligned16(dv);
    ut_cuda_flash_attn_rowdot(Dscratch, dout, out, B, Tq, C, NH);
    if (mk->off) bwd_any<VARLEN>(dq, dk, dv, dout, L, Dscratch, B, g);
    else bwd_any<MASKED>(dq, dk, dv, dout, L, Dscratch, B, g);
}

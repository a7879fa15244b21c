/* Fused ("flash") attention in float32, forward and backward
 * (flash_attention.h): the causal self-attention of ATTENTION over packed qkv
 * (semantics: src/backend/cpu/attention.c) and, as a second form of the same
 * kernels (template flag MK), ATTENTION_MASKED's separate q, k, v with
 * Tq != Tk, an additive key mask, an optional causal mask and dropout of the
 * probabilities (semantics: src/backend/cpu/attention_masked.c). The masked
 * form never stores P or the keep mask: each keep decision is the Philox draw
 * the CPU makes for that element (src/core/philox.h), computed again wherever
 * it is needed; a row whose keys are all masked (-inf) attends nowhere: its
 * output is 0 and its L is +inf, so every p = exp(s - L) recomputed from it
 * is 0.
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
#include "launch.cuh"
#include "../../core/philox.h"

namespace {

constexpr int BM = 64;       /* queries (or keys) per tile */
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

/* Where the rows live in global memory, how to copy them, and (MK) what
 * masks the scores. q, k, v: head 0 of batch entry 0, row strides ldq, ldk,
 * ldv (the gradients dq, dk, dv use the same layouts), batch strides sq (q)
 * and sk (k and v). out, dout, the output's copy: (B, Tq, C); L and D:
 * (B, NH, Tq). */
struct geom {
    const float *q, *k, *v;
    int64_t ldq, ldk, ldv, sq, sk;
    int Tq, Tk, C, NH, hs;
    float scale;
    bool vec; /* 16-byte copies */
    /* MK only */
    const float *mask; /* (B, Tk) added to every query's scores, or NULL */
    bool causal;       /* Tq == Tk; query i attends keys j <= i */
    ut_flash_drop drop;
};

/* ---- cp.async (sm_80 and later): global -> shared without registers ---- */
#ifdef UT_CUDA_EMU /* the CUDA emulator (tests/emu): each copy done when issued, zeros where not valid */
__device__ __forceinline__ void cp16(float *dst, const float *src, bool valid) {
    for (int i = 0; i < 4; i++) dst[i] = valid ? src[i] : 0.0f;
}
__device__ __forceinline__ void cp4(float *dst, const float *src, bool valid) { *dst = valid ? *src : 0.0f; }
__device__ __forceinline__ void cp_commit() {}
template <int N>
__device__ __forceinline__ void cp_wait() {}
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

/* ---- the masked form's pieces (MK) ---- */

/* what the mask adds to key j's scores: its entry (0 without a mask), -inf
 * past Tk */
__device__ __forceinline__ float key_bias(const float *mrow, int j, int Tk) {
    return j < Tk ? (mrow ? mrow[j] : 0.0f) : -INFINITY;
}

/* whether dropout keeps element (i, j) of pair bh's P (B, NH, Tq, Tk): the
 * draw the CPU's mask takes for it (ut_attention_masked_keep_mask) */
__device__ __forceinline__ bool kept(const ut_flash_drop &d, int bh, int i, int j, const geom &g) {
    const int64_t e = ((int64_t)bh * g.Tq + i) * g.Tk + j;
    return ut_philox_keep(d.key, d.stream, ut_dropout_draw(d.offset, e, d.all, d.cols, d.c0), d.p);
}

/* ---- forward: grid (B NH, query blocks), heaviest (last) query block first ---- */
template <int D, bool MK>
__global__ void __launch_bounds__(cfg<D>::NT, cfg<D>::FWD_MINB)
    fwd_kernel(float *__restrict__ out, float *__restrict__ out2, float *__restrict__ Lg, geom g) {
    using K = cfg<D>;
    constexpr int RT = K::RT, OC = K::OC, TY = K::TY;
    extern __shared__ float4 smem4[];
    float *Qs = reinterpret_cast<float *>(smem4), *Ks = Qs + K::tile, *Vs = Ks + K::tile, *Ps = Vs + K::tile;
    const int tid = (int)threadIdx.x, tx = tid & 15, ty = tid >> 4;
    const int bh = (int)blockIdx.x, b = bh / g.NH, h = bh % g.NH;
    const int nqb = (g.Tq + BM - 1) / BM, qb = nqb - 1 - (int)blockIdx.y, i0 = qb * BM;
    const int kend = MK && !g.causal ? (g.Tk - 1) / BM : qb; /* the last key block */
    const int64_t hc = (int64_t)h * g.hs;
    const float *q = g.q + b * g.sq + hc, *k = g.k + b * g.sk + hc, *v = g.v + b * g.sk + hc;
    [[maybe_unused]] const float *mrow = MK && g.mask ? g.mask + (int64_t)b * g.Tk : nullptr;

    load_tile<D>(Qs, q, g.ldq, i0, g.Tq, g);
    load_tile<D>(Ks, k, g.ldk, 0, g.Tk, g);
    cp_commit();
    load_tile<D>(Vs, v, g.ldv, 0, g.Tk, g);
    cp_commit();

    float o[RT][OC], m[RT], l[RT];
#pragma unroll
    for (int r = 0; r < RT; r++) {
        m[r] = -INFINITY;
        l[r] = 0.0f;
#pragma unroll
        for (int c = 0; c < OC; c++) o[r][c] = 0.0f;
    }
    for (int kb = 0; kb <= kend; kb++) {
        const int j0 = kb * BM;
        cp_wait<1>(); /* Q and this K */
        __syncthreads();
        float s[RT][4];
        mm_abt<D>(s, Qs, Ks, ty, tx);
        __syncthreads(); /* Ks free */
        if (kb < kend) load_tile<D>(Ks, k, g.ldk, j0 + BM, g.Tk, g);
        cp_commit();
        if constexpr (MK) {
            float kbias[4];
#pragma unroll
            for (int c = 0; c < 4; c++) kbias[c] = key_bias(mrow, j0 + tx + 16 * c, g.Tk);
#pragma unroll
            for (int r = 0; r < RT; r++) {
                const int il = ty + TY * r, i = i0 + il;
                float mx = -INFINITY;
#pragma unroll
                for (int c = 0; c < 4; c++) {
                    s[r][c] = !g.causal || j0 + tx + 16 * c <= i ? s[r][c] * g.scale + kbias[c] : -INFINITY;
                    mx = fmaxf(mx, s[r][c]);
                }
                const float mn = fmaxf(m[r], row_max16(mx));
                const float base = mn == -INFINITY ? 0.0f : mn; /* every key so far masked: exps of 0 */
                const float alpha = expf(m[r] - base);
                m[r] = mn;
                float ls = 0.0f;
#pragma unroll
                for (int c = 0; c < 4; c++) {
                    float p = expf(s[r][c] - base);
                    ls += p; /* the softmax's sum: before dropout */
                    if (g.drop.p > 0.0f)
                        p = i < g.Tq && kept(g.drop, bh, i, j0 + tx + 16 * c, g) ? p * g.drop.ks : 0.0f;
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
        __syncthreads(); /* Vs, Ps free */
        if (kb < kend) load_tile<D>(Vs, v, g.ldv, j0 + BM, g.Tk, g);
        cp_commit();
    }
    cp_wait<0>();
#pragma unroll
    for (int r = 0; r < RT; r++) {
        const float lt = row_sum16(l[r]);
        const int i = i0 + ty + TY * r;
        if (i < g.Tq) {
            /* MK: a row whose keys are all masked attends nowhere: out 0, L = +inf */
            const bool any = !MK || lt > 0.0f;
            const int64_t at = ((int64_t)b * g.Tq + i) * g.C + hc;
            put_row<OC>(out + at, o[r], any ? 1.0f / lt : 0.0f, tx, g, false);
            if (out2) put_row<OC>(out2 + at, o[r], any ? 1.0f / lt : 0.0f, tx, g, false);
            if (tx == 0) Lg[(int64_t)bh * g.Tq + i] = any ? m[r] + logf(lt) : INFINITY;
        }
    }
}

/* ---- backward ---- */

/* Dg (B, NH, T) = rowsum(dout * out) per head; one thread per (b, t, h),
 * summing in column order with fmaf as mm_abt sums dp = dout . v: where
 * out_i is one key's v (a single attended key), D_i and dp then have the
 * same bits and that row's ds = p (dp - D) is exactly 0, as on the CPU */
__global__ void dot_kernel(const float *__restrict__ out, const float *__restrict__ dout, float *__restrict__ Dg,
                           int64_t rows, int T, int C, int NH, int hs) {
    UTK_GRID_STRIDE(r, rows) {
        const int64_t bt = r / NH;
        const int h = (int)(r % NH);
        const float *o = out + bt * C + (int64_t)h * hs, *gr = dout + bt * C + (int64_t)h * hs;
        float acc = 0.0f;
        for (int d = 0; d < hs; d++) acc = fmaf(o[d], gr[d], acc);
        const int64_t b = bt / T, t = bt % T;
        Dg[(b * NH + h) * T + t] = acc;
    }
}

/* kernel A: dK, dV of key block blockIdx.y (lightest last), summed over the
 * query blocks from the diagonal (MK without causal: the first) to Tq.
 * dk, dv: either may be NULL (not wanted) */
template <int D, bool MK>
__global__ void __launch_bounds__(cfg<D>::NT)
    dkdv_kernel(const float *__restrict__ dout, const float *__restrict__ Lg, const float *__restrict__ Dg,
                float *dk_out, float *dv_out, geom g) {
    using K = cfg<D>;
    constexpr int RT = K::RT, OC = K::OC, TY = K::TY;
    extern __shared__ float4 smem4[];
    float *Ks = reinterpret_cast<float *>(smem4), *Vs = Ks + K::tile, *Qs = Vs + K::tile, *Gs = Qs + K::tile;
    float *Pt = Gs + K::tile, *St = Pt + K::ptile, *Ls = St + K::ptile, *Ds = Ls + BM;
    const int tid = (int)threadIdx.x, tx = tid & 15, ty = tid >> 4;
    const int bh = (int)blockIdx.x, b = bh / g.NH, h = bh % g.NH;
    const int nqb = (g.Tq + BM - 1) / BM, kb = (int)blockIdx.y, j0 = kb * BM;
    const int qfirst = MK && !g.causal ? 0 : kb, f0 = qfirst * BM; /* the first query block */
    const int64_t hc = (int64_t)h * g.hs;
    const float *q = g.q + b * g.sq + hc, *k = g.k + b * g.sk + hc, *v = g.v + b * g.sk + hc;
    const float *gd = dout + (int64_t)b * g.Tq * g.C + hc;
    const float *Lr = Lg + (int64_t)bh * g.Tq, *Dr = Dg + (int64_t)bh * g.Tq;

    load_tile<D>(Ks, k, g.ldk, j0, g.Tk, g);
    load_tile<D>(Vs, v, g.ldv, j0, g.Tk, g);
    load_tile<D>(Gs, gd, g.C, f0, g.Tq, g);
    load_rows(Ds, Dr, f0, g.Tq);
    cp_commit();
    load_tile<D>(Qs, q, g.ldq, f0, g.Tq, g);
    load_rows(Ls, Lr, f0, g.Tq);
    cp_commit();

    [[maybe_unused]] float kbias[MK ? RT : 1];
    if constexpr (MK) {
        const float *mrow = g.mask ? g.mask + (int64_t)b * g.Tk : nullptr;
#pragma unroll
        for (int r = 0; r < RT; r++) kbias[r] = key_bias(mrow, j0 + ty + TY * r, g.Tk);
    }
    float dk[RT][OC], dv[RT][OC];
#pragma unroll
    for (int r = 0; r < RT; r++)
#pragma unroll
        for (int c = 0; c < OC; c++) dk[r][c] = dv[r][c] = 0.0f;
    for (int qb = qfirst; qb < nqb; qb++) {
        const int i0 = qb * BM;
        const bool more = qb + 1 < nqb;
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
#pragma unroll
            for (int c = 0; c < 4; c++) {
                const int il = tx + 16 * c, i = i0 + il;
                float p = 0.0f, pd = 0.0f, ds = 0.0f;
                if constexpr (MK) {
                    if (i < g.Tq && j < g.Tk && (!g.causal || i >= j)) {
                        p = expf(s[r][c] * g.scale + kbias[r] - Ls[il]);
                        float dpd = dp[r][c];
                        pd = p;
                        if (g.drop.p > 0.0f) {
                            const bool kp = kept(g.drop, bh, i, j, g);
                            pd = kp ? p * g.drop.ks : 0.0f;
                            dpd = kp ? dpd * g.drop.ks : 0.0f;
                        }
                        ds = p * (dpd - Ds[il]);
                    }
                } else if (i >= j && i < g.Tq) {
                    p = pd = expf(s[r][c] * g.scale - Ls[il]);
                    ds = p * (dp[r][c] - Ds[il]);
                }
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

/* kernel B: dQ of query block (heaviest first), summed over the key blocks up
 * to the diagonal (MK without causal: all of them) */
template <int D, bool MK>
__global__ void __launch_bounds__(cfg<D>::NT)
    dq_kernel(const float *__restrict__ dout, const float *__restrict__ Lg, const float *__restrict__ Dg,
              float *__restrict__ dq_out, geom g) {
    using K = cfg<D>;
    constexpr int RT = K::RT, OC = K::OC, TY = K::TY;
    extern __shared__ float4 smem4[];
    float *Qs = reinterpret_cast<float *>(smem4), *Gs = Qs + K::tile, *Ks = Gs + K::tile, *Vs = Ks + K::tile;
    float *Ss = Vs + K::tile;
    const int tid = (int)threadIdx.x, tx = tid & 15, ty = tid >> 4;
    const int bh = (int)blockIdx.x, b = bh / g.NH, h = bh % g.NH;
    const int nqb = (g.Tq + BM - 1) / BM, qb = nqb - 1 - (int)blockIdx.y, i0 = qb * BM;
    const int kend = MK && !g.causal ? (g.Tk - 1) / BM : qb; /* the last key block */
    const int64_t hc = (int64_t)h * g.hs;
    const float *q = g.q + b * g.sq + hc, *k = g.k + b * g.sk + hc, *v = g.v + b * g.sk + hc;
    const float *gd = dout + (int64_t)b * g.Tq * g.C + hc;
    [[maybe_unused]] const float *mrow = MK && g.mask ? g.mask + (int64_t)b * g.Tk : nullptr;

    load_tile<D>(Qs, q, g.ldq, i0, g.Tq, g);
    load_tile<D>(Gs, gd, g.C, i0, g.Tq, g);
    load_tile<D>(Vs, v, g.ldv, 0, g.Tk, g);
    cp_commit();
    load_tile<D>(Ks, k, g.ldk, 0, g.Tk, g);
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
    for (int kb = 0; kb <= kend; kb++) {
        const int j0 = kb * BM;
        cp_wait<1>(); /* V (and Q, dout) */
        __syncthreads();
        float dp[RT][4], s[RT][4];
        mm_abt<D>(dp, Gs, Vs, ty, tx); /* dp[r][c] = dout_i . v_j */
        cp_wait<0>();                  /* K */
        __syncthreads();
        mm_abt<D>(s, Qs, Ks, ty, tx);
        [[maybe_unused]] float kbias[4];
        if constexpr (MK) {
#pragma unroll
            for (int c = 0; c < 4; c++) kbias[c] = key_bias(mrow, j0 + tx + 16 * c, g.Tk);
        }
#pragma unroll
        for (int r = 0; r < RT; r++) {
            const int il = ty + TY * r, i = i0 + il;
#pragma unroll
            for (int c = 0; c < 4; c++) {
                const int j = j0 + tx + 16 * c;
                float ds = 0.0f;
                if constexpr (MK) {
                    if (i < g.Tq && j < g.Tk && (!g.causal || j <= i)) {
                        float dpd = dp[r][c];
                        if (g.drop.p > 0.0f) dpd = kept(g.drop, bh, i, j, g) ? dpd * g.drop.ks : 0.0f;
                        ds = expf(s[r][c] * g.scale + kbias[c] - Li[r]) * (dpd - Di[r]);
                    }
                } else if (j <= i && i < g.Tq) {
                    ds = expf(s[r][c] * g.scale - Li[r]) * (dp[r][c] - Di[r]);
                }
                Ss[il * PLD + tx + 16 * c] = ds;
            }
        }
        __syncthreads(); /* Ss written, Vs free */
        if (kb < kend) load_tile<D>(Vs, v, g.ldv, j0 + BM, g.Tk, g);
        cp_commit();
        mm_pz<D>(dq, Ss, Ks, ty, tx); /* dq_i += sum_j ds k_j */
        __syncthreads();              /* Ks, Ss free */
        if (kb < kend) load_tile<D>(Ks, k, g.ldk, j0 + BM, g.Tk, g);
        cp_commit();
    }
    cp_wait<0>();
#pragma unroll
    for (int r = 0; r < RT; r++) {
        const int i = i0 + ty + TY * r;
        if (i < g.Tq) put_row<OC>(dq_out + b * g.sq + i * g.ldq + hc, dq[r], g.scale, tx, g, true);
    }
}

cudaStream_t stream() { return (cudaStream_t)ut_cuda_stream(); }
using utk::allow_smem;

int dim_of(int64_t hs) { return hs <= 32 ? 32 : hs <= 64 ? 64 : 128; }

size_t smem_need(int D) {
    auto most = [](size_t a, size_t b, size_t c) { return a > b ? (a > c ? a : c) : (b > c ? b : c); };
    if (D == 32) return most(cfg<32>::fwd_bytes, cfg<32>::dkdv_bytes, cfg<32>::dq_bytes);
    if (D == 64) return most(cfg<64>::fwd_bytes, cfg<64>::dkdv_bytes, cfg<64>::dq_bytes);
    return most(cfg<128>::fwd_bytes, cfg<128>::dkdv_bytes, cfg<128>::dq_bytes);
}

bool aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

/* Whether the kernels take B x NH pairs of Tq queries and Tk keys, C columns,
 * on the current device (UT_CUDA_ATTN=unfused: never) */
bool fits(int64_t B, int64_t Tq, int64_t Tk, int64_t C, int64_t NH) {
    if (ut_cuda_flash_attn_unfused()) return false;
    if (B < 1 || Tq < 1 || Tk < 1 || NH < 1 || C % NH != 0) return false;
    int64_t hs = C / NH;
    if (hs > 128 || (Tq + BM - 1) / BM > 65535 || (Tk + BM - 1) / BM > 65535 || B * NH > 0x7fffffff ||
        3 * C > 0x7fffffff || Tq * 3 * C > INT64_MAX / B || Tk * 3 * C > INT64_MAX / B || Tq > 0x7fffffff ||
        Tk > 0x7fffffff)
        return false;
    static int optin[64];
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) return false;
    if (dev < 0 || dev >= 64) return false;
    if (!optin[dev]) {
        int v = 0;
        if (cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess) return false;
        optin[dev] = v > 0 ? v : -1;
    }
    return optin[dev] > 0 && smem_need(dim_of(hs)) <= (size_t)optin[dev];
}

geom geom_of(int64_t Tq, int64_t Tk, int64_t C, int64_t NH) {
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
geom geom_packed(const float *qkv, int64_t T, int64_t C, int64_t NH) {
    geom g = geom_of(T, T, C, NH);
    g.q = qkv;
    g.k = qkv + C;
    g.v = qkv + 2 * C;
    g.ldq = g.ldk = g.ldv = 3 * C;
    g.sq = g.sk = T * 3 * C;
    g.causal = true;
    return g;
}

/* ATTENTION_MASKED's q (B, Tq, C), k and v (B, Tk, C) */
geom geom_masked(const float *q, const float *k, const float *v, int64_t Tq, int64_t Tk, int64_t C, int64_t NH,
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
    return g;
}

template <int D, bool MK>
void fwd(float *out, float *out2, float *L, int64_t B, const geom &g) {
    using K = cfg<D>;
    allow_smem(fwd_kernel<D, MK>, K::fwd_bytes);
    dim3 grid((unsigned)(B * g.NH), (unsigned)((g.Tq + BM - 1) / BM));
    fwd_kernel<D, MK><<<grid, K::NT, K::fwd_bytes, stream()>>>(out, out2, L, g);
    ut_cuda_launched(MK ? "flash attention forward (masked)" : "flash attention forward");
}

template <int D, bool MK>
void bwd(float *dq, float *dk, float *dv, const float *dout, const float *L, const float *Dg, int64_t B,
         const geom &g) {
    using K = cfg<D>;
    if (dk || dv) {
        dim3 grid((unsigned)(B * g.NH), (unsigned)((g.Tk + BM - 1) / BM));
        allow_smem(dkdv_kernel<D, MK>, K::dkdv_bytes);
        dkdv_kernel<D, MK><<<grid, K::NT, K::dkdv_bytes, stream()>>>(dout, L, Dg, dk, dv, g);
        ut_cuda_launched(MK ? "flash attention backward (dk, dv; masked)" : "flash attention backward (dk, dv)");
    }
    if (dq) {
        dim3 grid((unsigned)(B * g.NH), (unsigned)((g.Tq + BM - 1) / BM));
        allow_smem(dq_kernel<D, MK>, K::dq_bytes);
        dq_kernel<D, MK><<<grid, K::NT, K::dq_bytes, stream()>>>(dout, L, Dg, dq, g);
        ut_cuda_launched(MK ? "flash attention backward (dq; masked)" : "flash attention backward (dq)");
    }
}

template <bool MK>
void fwd_any(float *out, float *out2, float *L, int64_t B, const geom &g) {
    switch (dim_of(g.hs)) {
        case 32: fwd<32, MK>(out, out2, L, B, g); break;
        case 64: fwd<64, MK>(out, out2, L, B, g); break;
        default: fwd<128, MK>(out, out2, L, B, g); break;
    }
}

template <bool MK>
void bwd_any(float *dq, float *dk, float *dv, const float *dout, const float *L, const float *Dg, int64_t B,
             const geom &g) {
    switch (dim_of(g.hs)) {
        case 32: bwd<32, MK>(dq, dk, dv, dout, L, Dg, B, g); break;
        case 64: bwd<64, MK>(dq, dk, dv, dout, L, Dg, B, g); break;
        default: bwd<128, MK>(dq, dk, dv, dout, L, Dg, B, g); break;
    }
}

}  // namespace

extern "C" bool ut_cuda_flash_attn_unfused(void) {
    const char *e = getenv("UT_CUDA_ATTN");
    return e && !strcmp(e, "unfused");
}

extern "C" bool ut_cuda_flash_attn_ok(int64_t B, int64_t T, int64_t C, int64_t NH) { return fits(B, T, T, C, NH); }

extern "C" bool ut_cuda_flash_attn_masked_ok(int64_t B, int64_t Tq, int64_t Tk, int64_t C, int64_t NH) {
    return fits(B, Tq, Tk, C, NH);
}

extern "C" void ut_cuda_flash_attn_fwd(float *out, float *out_copy, float *L, const float *qkv, int64_t B, int64_t T,
                                       int64_t C, int64_t NH) {
    if (B <= 0 || T <= 0) return;
    geom g = geom_packed(qkv, T, C, NH);
    g.vec = C % 4 == 0 && g.hs % 4 == 0 && aligned16(qkv) && aligned16(out) && aligned16(out_copy);
    fwd_any<false>(out, out_copy, L, B, g);
}

extern "C" void ut_cuda_flash_attn_rowdot(float *Dg, const float *dout, const float *out, int64_t B, int64_t T,
                                          int64_t C, int64_t NH) {
    int64_t rows = B * T * NH;
    if (rows <= 0) return;
    dot_kernel<<<utk::blocks_for(rows), utk::kThreads, 0, stream()>>>(out, dout, Dg, rows, (int)T, (int)C, (int)NH,
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
    bwd_any<false>(dqkv, dqkv + C, dqkv + 2 * C, dout, L, Dscratch, B, g);
}

extern "C" void ut_cuda_flash_attn_masked_fwd(float *out, float *out_copy, float *L, const float *q, const float *k,
                                              const float *v, int64_t B, int64_t Tq, int64_t Tk, int64_t C,
                                              int64_t NH, const ut_flash_masking *mk) {
    if (B <= 0 || Tq <= 0) return;
    geom g = geom_masked(q, k, v, Tq, Tk, C, NH, mk);
    g.vec = C % 4 == 0 && g.hs % 4 == 0 && aligned16(q) && aligned16(k) && aligned16(v) && aligned16(out) &&
            aligned16(out_copy);
    fwd_any<true>(out, out_copy, L, B, g);
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
    bwd_any<true>(dq, dk, dv, dout, L, Dscratch, B, g);
}

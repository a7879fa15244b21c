/* CUDA kernels of the broadcasting binary ops ADD and MUL: the forward
 * (out = a + b, a * b with b broadcast to a's shape), a's gradient for MUL
 * (da += g * b) and the reduction of b's gradient over the positions b is
 * broadcast to. That reduction is deterministic: every element of b's
 * gradient is summed by one thread or one block in an order fixed by the
 * shapes alone (partial sums per chunk of positions, then the chunks in
 * order), never with atomics.
 * Each tensor comes with its dtype code (ew.h); the kernels are compiled
 * twice, ALL32 for the all-float32 case (plain loads) and once for any mix
 * of float32 and 16-bit storage (widened as read, rounded once as
 * written). */
#include <cuda_runtime.h>
#include <stdint.h>

#include "cuda.h"
#include "launch.cuh"
#include "ew.h"

namespace {

using utk::blocks_for;
using utk::kThreads;

/* element i of p (dtype dt; ALL32: float32) as float, and stored */
template <bool ALL32>
__device__ __forceinline__ float ld(const void *p, int dt, int64_t i) {
    return ALL32 ? ((const float *)p)[i] : utk_load_f32(p, dt, i);
}
template <bool ALL32>
__device__ __forceinline__ void st(void *p, int dt, int64_t i, float v) {
    if (ALL32) ((float *)p)[i] = v;
    else utk_store_f32(p, dt, i, v);
}


/* ---- forward and a's gradient ---- */

/* The output's shape (innermost last) with b's strides in it, after dropping
 * size-1 dims and merging a dim into the one outside it where b's strides
 * allow (bs[k-1] == bs[k] * ne[k]; broadcast dims, stride 0, always merge). */
struct Bcast {
    int nd;
    int64_t ne[4], bs[4];
};

Bcast bcast_of(const int64_t *n4, const int64_t *s4) {
    Bcast d;
    d.nd = 0;
    for (int k = 0; k < 4; k++) {
        if (n4[k] == 1) continue;
        if (d.nd > 0 && d.bs[d.nd - 1] == s4[k] * n4[k]) {
            d.ne[d.nd - 1] *= n4[k];
            d.bs[d.nd - 1] = s4[k];
        } else {
            d.ne[d.nd] = n4[k];
            d.bs[d.nd] = s4[k];
            d.nd++;
        }
    }
    if (d.nd == 0) {
        d.nd = 1;
        d.ne[0] = 1;
        d.bs[0] = 0;
    }
    return d;
}

/* b's offset for the output position i */
template <typename I>
__device__ __forceinline__ I b_offset(const Bcast &d, I i) {
    I off = 0;
#pragma unroll
    for (int k = 3; k > 0; k--) {
        if (k < d.nd) {
            I e = (I)d.ne[k];
            off += (i % e) * (I)d.bs[k];
            i /= e;
        }
    }
    return off + i * (I)d.bs[0];
}

enum { MODE_ADD = 0, MODE_MUL = 1, MODE_MUL_ACC = 2 };

/* MODE_ADD: out = a + b; MODE_MUL: out = a * b; MODE_MUL_ACC: out += a * b
 * (a is then the incoming gradient); b read at its broadcast offset */
/* VEC (vec_ok): four outputs a thread at a time (launch.cuh, utk_load4),
 * then the tail one by one */
__device__ __forceinline__ float4 combine4(int mode, float4 x, float4 y, float4 o) {
    if (mode == MODE_ADD)
        return make_float4(__fadd_rn(x.x, y.x), __fadd_rn(x.y, y.y), __fadd_rn(x.z, y.z), __fadd_rn(x.w, y.w));
    if (mode == MODE_MUL)
        return make_float4(__fmul_rn(x.x, y.x), __fmul_rn(x.y, y.y), __fmul_rn(x.z, y.z), __fmul_rn(x.w, y.w));
    return make_float4(__fadd_rn(o.x, __fmul_rn(x.x, y.x)), __fadd_rn(o.y, __fmul_rn(x.y, y.y)),
                       __fadd_rn(o.z, __fmul_rn(x.z, y.z)), __fadd_rn(o.w, __fmul_rn(x.w, y.w)));
}

template <typename I, int MODE, bool ALL32, bool VEC>
__global__ void binary_kernel(void *__restrict__ out, int odt, const void *__restrict__ a, int adt,
                              const void *__restrict__ b, int bdt, Bcast d, I n) {
    utk_ew_loop<VEC, I>(
        n,
        [&](I v) {
            float4 x = utk_load4(a, adt, (int64_t)v), y = utk_load4(b, bdt, (int64_t)(b_offset<I>(d, 4 * v) / 4));
            float4 o = MODE == MODE_MUL_ACC ? utk_load4(out, odt, (int64_t)v) : x;
            utk_store4(out, odt, (int64_t)v, combine4(MODE, x, y, o));
        },
        [&](I i) {
            float y = ld<ALL32>(b, bdt, (int64_t)b_offset<I>(d, i)), x = ld<ALL32>(a, adt, (int64_t)i);
            if (MODE == MODE_ADD) st<ALL32>(out, odt, (int64_t)i, __fadd_rn(x, y));
            else if (MODE == MODE_MUL) st<ALL32>(out, odt, (int64_t)i, __fmul_rn(x, y));
            else st<ALL32>(out, odt, (int64_t)i, __fadd_rn(ld<ALL32>(out, odt, (int64_t)i), __fmul_rn(x, y)));
        });
}

/* Whether four consecutive outputs (from a multiple of 4) read four
 * consecutive elements of b, aligned: b's innermost dim is contiguous
 * (stride 1) and, unless it is the only one, a multiple of 4 long, with
 * the other strides multiples of 4; and every pointer is aligned for four
 * at a time. */
bool vec_ok(const Bcast &d, const void *out, int odt, const void *a, int adt, const void *b, int bdt) {
    if (d.bs[d.nd - 1] != 1 || (d.nd > 1 && d.ne[d.nd - 1] % 4)) return false; /* one dim: b as the output */
    for (int k = 0; k < d.nd - 1; k++)
        if (d.bs[k] % 4) return false;
    return utk_vec4_ok(out, odt) && utk_vec4_ok(a, adt) && utk_vec4_ok(b, bdt);
}

template <int MODE, bool ALL32, bool VEC>
void binary_launch_v(void *out, int odt, const void *a, int adt, const void *b, int bdt, const Bcast &d,
                     int64_t n, bool narrow) {
    cudaStream_t s = (cudaStream_t)ut_cuda_stream();
    unsigned blocks = blocks_for(VEC ? (n + 3) / 4 : n);
    if (narrow)
        binary_kernel<uint32_t, MODE, ALL32, VEC><<<blocks, kThreads, 0, s>>>(out, odt, a, adt, b, bdt, d, (uint32_t)n);
    else
        binary_kernel<int64_t, MODE, ALL32, VEC><<<blocks, kThreads, 0, s>>>(out, odt, a, adt, b, bdt, d, n);
}

template <int MODE, bool ALL32>
void binary_launch_t(void *out, int odt, const void *a, int adt, const void *b, int bdt, const Bcast &d,
                     int64_t n, bool narrow) {
    if (vec_ok(d, out, odt, a, adt, b, bdt)) binary_launch_v<MODE, ALL32, true>(out, odt, a, adt, b, bdt, d, n, narrow);
    else binary_launch_v<MODE, ALL32, false>(out, odt, a, adt, b, bdt, d, n, narrow);
}

template <int MODE>
void binary_launch(void *out, int odt, const void *a, int adt, const void *b, int bdt, const int64_t *n4,
                   const int64_t *s4, const char *what) {
    int64_t n = n4[0] * n4[1] * n4[2] * n4[3];
    if (n <= 0) return;
    Bcast d = bcast_of(n4, s4);
    int64_t span = 0;
    for (int k = 0; k < d.nd; k++) span += (d.ne[k] - 1) * d.bs[k];
    bool narrow = n < (int64_t(1) << 31) && span < (int64_t(1) << 31);
    if (odt == 0 && adt == 0 && bdt == 0) binary_launch_t<MODE, true>(out, odt, a, adt, b, bdt, d, n, narrow);
    else binary_launch_t<MODE, false>(out, odt, a, adt, b, bdt, d, n, narrow);
    ut_cuda_launched(what);
}

/* ---- b's gradient: db[j] += sum over broadcast positions of g * other ----
 * The output's dims split into kept dims (b has them: b's element j is a
 * position in them, b being contiguous) and broadcast dims (b has size 1 or
 * lacks them: position r in them). Output offset = kept_off(j) + bc_off(r). */
struct Reduce {
    int64_t nb, R;           /* b's elements; broadcast positions per element */
    int nk, nr;              /* kept / broadcast dims (at least 1 each) */
    int64_t kn[4], ko[4];    /* kept dims: sizes and output strides */
    int64_t rn[4], ro[4];    /* broadcast dims: sizes and output strides */
    bool rows;               /* a block per element (else a thread per element) */
    int64_t nchunk, clen;    /* r in chunks of clen; nchunk > 1: partial sums, then a final pass */
};

/* Appends dim (n, output stride os) to a list, merging it into the last one
 * when contiguous with it (the output is contiguous, so a kept dim following
 * a kept dim is also contiguous in b). */
void push_dim(int &nd, int64_t *ne, int64_t *os, int64_t n, int64_t o) {
    if (nd > 0 && os[nd - 1] == o * n) {
        ne[nd - 1] *= n;
        os[nd - 1] = o;
    } else {
        ne[nd] = n;
        os[nd] = o;
        nd++;
    }
}

void pad_dims(int &nd, int64_t *ne, int64_t *os) {
    if (nd == 0) {
        nd = 1;
        ne[0] = 1;
        os[0] = 0;
    }
}

int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

Reduce plan_of(const int64_t *n4, const int64_t *s4) {
    Reduce p;
    p.nk = p.nr = 0;
    p.nb = p.R = 1;
    p.rows = false;
    int64_t os = 1;
    int last = -1; /* kind of the innermost dim of size > 1: 0 kept, 1 broadcast */
    int64_t o4[4];
    for (int k = 3; k >= 0; k--) {
        o4[k] = os;
        os *= n4[k];
    }
    for (int k = 0; k < 4; k++) {
        if (n4[k] == 1) continue;
        if (s4[k] == 0) {
            push_dim(p.nr, p.rn, p.ro, n4[k], o4[k]);
            p.R *= n4[k];
            last = 1;
        } else {
            push_dim(p.nk, p.kn, p.ko, n4[k], o4[k]);
            p.nb *= n4[k];
            last = 0;
        }
    }
    pad_dims(p.nk, p.kn, p.ko);
    pad_dims(p.nr, p.rn, p.ro);
    /* Which kernel reads memory in order: with a broadcast dim innermost, a
     * block per element whose threads walk it (unless it is short and there
     * are many elements: then a thread per element); with a kept dim
     * innermost, a thread per element, adjacent threads on adjacent elements
     * (unless there are fewer than a warp of them). */
    if (last == 1) p.rows = p.rn[p.nr - 1] >= 32 || p.nb < 65536;
    else p.rows = p.nb < 32;
    if (p.rows) {
        /* a block of kThreads per (element, chunk): chunks of >= 2048
         * positions, about 2048 blocks in all */
        int64_t c = cdiv(p.R, 2048), want = cdiv(2048, p.nb);
        p.nchunk = c < want ? c : want;
    } else {
        /* a thread per (element, chunk): chunks of >= 16 positions, about
         * 2^18 threads in all, at most 1024 chunks */
        int64_t c = cdiv(p.R, 16), want = cdiv(int64_t(1) << 18, p.nb);
        p.nchunk = c < want ? c : want;
        if (p.nchunk > 1024) p.nchunk = 1024;
    }
    if (p.nchunk < 1) p.nchunk = 1;
    if (p.nchunk > 65535) p.nchunk = 65535;
    p.clen = cdiv(p.R, p.nchunk);
    p.nchunk = cdiv(p.R, p.clen);
    return p;
}

/* offset of position i of the dims (ne, os), nd of them */
__device__ __forceinline__ int64_t dims_offset(int nd, const int64_t *ne, const int64_t *os,
                                               int64_t i) {
    int64_t off = 0;
#pragma unroll
    for (int k = 3; k > 0; k--) {
        if (k < nd) {
            off += (i % ne[k]) * os[k];
            i /= ne[k];
        }
    }
    return off + i * os[0];
}

/* the sum of v over a block of kThreads threads, in a fixed order; valid in thread 0 */
__device__ float block_sum(float v) {
    __shared__ float warp_sums[kThreads / 32];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = __fadd_rn(v, __shfl_down_sync(0xffffffffu, v, o));
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    if (lane == 0) warp_sums[w] = v;
    __syncthreads();
    if (w == 0) {
        v = lane < kThreads / 32 ? warp_sums[lane] : 0.0f;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) v = __fadd_rn(v, __shfl_down_sync(0xffffffffu, v, o));
    }
    return v;
}

/* Kept innermost: thread j (of b's elements) sums positions
 * [chunk * clen, min(R, (chunk + 1) * clen)) in order, chunk = blockIdx.y;
 * adjacent threads read adjacent memory. One chunk: db[j] += the sum;
 * otherwise part[chunk * nb + j] = it. */
template <bool OTHER, bool ALL32>
__global__ void reduce_cols_kernel(void *__restrict__ db, int dbt, float *__restrict__ part,
                                   const void *__restrict__ g, int gdt, const void *__restrict__ other,
                                   int odt, Reduce p) {
    int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= p.nb) return;
    int64_t base = dims_offset(p.nk, p.kn, p.ko, j);
    int64_t r0 = (int64_t)blockIdx.y * p.clen, r1 = r0 + p.clen < p.R ? r0 + p.clen : p.R;
    float acc = 0.0f;
    for (int64_t r = r0; r < r1; r++) {
        int64_t o = base + dims_offset(p.nr, p.rn, p.ro, r);
        float gv = ld<ALL32>(g, gdt, o);
        acc = __fadd_rn(acc, OTHER ? __fmul_rn(gv, ld<ALL32>(other, odt, o)) : gv);
    }
    if (p.nchunk == 1) st<ALL32>(db, dbt, j, __fadd_rn(ld<ALL32>(db, dbt, j), acc));
    else part[blockIdx.y * p.nb + j] = acc;
}

/* Broadcast innermost: block (j = blockIdx.x, chunk = blockIdx.y) sums the
 * chunk's positions, thread t taking r0 + t, r0 + t + kThreads, ... (adjacent
 * threads read adjacent memory), then a fixed tree over the block. */
template <bool OTHER, bool ALL32>
__global__ void __launch_bounds__(kThreads)
    reduce_rows_kernel(void *__restrict__ db, int dbt, float *__restrict__ part, const void *__restrict__ g,
                       int gdt, const void *__restrict__ other, int odt, Reduce p) {
    int64_t j = blockIdx.x;
    int64_t base = dims_offset(p.nk, p.kn, p.ko, j);
    int64_t r0 = (int64_t)blockIdx.y * p.clen, r1 = r0 + p.clen < p.R ? r0 + p.clen : p.R;
    float acc = 0.0f;
    for (int64_t r = r0 + threadIdx.x; r < r1; r += kThreads) {
        int64_t o = base + dims_offset(p.nr, p.rn, p.ro, r);
        float gv = ld<ALL32>(g, gdt, o);
        acc = __fadd_rn(acc, OTHER ? __fmul_rn(gv, ld<ALL32>(other, odt, o)) : gv);
    }
    acc = block_sum(acc);
    if (threadIdx.x == 0) {
        if (p.nchunk == 1) st<ALL32>(db, dbt, j, __fadd_rn(ld<ALL32>(db, dbt, j), acc));
        else part[blockIdx.y * p.nb + j] = acc;
    }
}

/* db[j] += part[0 * nb + j] + part[1 * nb + j] + ... (chunks in order) */
__global__ void reduce_final_kernel(void *__restrict__ db, int dbt, const float *__restrict__ part, int64_t nb,
                                    int64_t nchunk) {
    int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= nb) return;
    float acc = 0.0f;
    for (int64_t c = 0; c < nchunk; c++) acc = __fadd_rn(acc, part[c * nb + j]);
    utk_store_f32(db, dbt, j, __fadd_rn(utk_load_f32(db, dbt, j), acc));
}

/* db (n) += g (n) * other (n), or g alone when other is NULL: b not
 * broadcast; VEC: four at a time, then the tail */
template <bool ALL32, bool VEC>
__global__ void reduce_flat_kernel(void *__restrict__ db, int dbt, const void *__restrict__ g, int gdt,
                                   const void *__restrict__ other, int odt, int64_t n) {
    utk_ew_loop<VEC>(
        n,
        [&](int64_t v) {
            float4 x = utk_load4(g, gdt, v), o = utk_load4(db, dbt, v);
            if (other) x = combine4(MODE_MUL, x, utk_load4(other, odt, v), x);
            utk_store4(db, dbt, v, combine4(MODE_ADD, o, x, o));
        },
        [&](int64_t i) {
            float gv = ld<ALL32>(g, gdt, i);
            st<ALL32>(db, dbt, i, __fadd_rn(ld<ALL32>(db, dbt, i), other ? __fmul_rn(gv, ld<ALL32>(other, odt, i)) : gv));
        });
}

/* dst (n) += src (n), some of them 16-bit (acc false: dst = 0 + src, dst
 * not read); VEC: four at a time, then the tail */
template <bool VEC>
__global__ void acc_dt_kernel(void *__restrict__ dst, int ddt, const void *__restrict__ src, int sdt, int64_t n,
                              bool acc) {
    utk_ew_loop<VEC>(
        n,
        [&](int64_t v) {
            float4 o = acc ? utk_load4(dst, ddt, v) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            utk_store4(dst, ddt, v, combine4(MODE_ADD, o, utk_load4(src, sdt, v), o));
        },
        [&](int64_t i) {
            utk_store_f32(dst, ddt, i, __fadd_rn(acc ? utk_load_f32(dst, ddt, i) : 0.0f, utk_load_f32(src, sdt, i)));
        });
}

template <bool ALL32>
void reduce_launch(void *db, int dbt, const void *g, int gdt, const void *other, int odt, const Reduce &p,
                   float *part, cudaStream_t s) {
    if (p.rows) {
        dim3 grid((unsigned)p.nb, (unsigned)p.nchunk);
        if (other) reduce_rows_kernel<true, ALL32><<<grid, kThreads, 0, s>>>(db, dbt, part, g, gdt, other, odt, p);
        else reduce_rows_kernel<false, ALL32><<<grid, kThreads, 0, s>>>(db, dbt, part, g, gdt, other, odt, p);
        ut_cuda_launched("bcast_reduce_rows");
    } else {
        dim3 grid((unsigned)cdiv(p.nb, kThreads), (unsigned)p.nchunk);
        if (other) reduce_cols_kernel<true, ALL32><<<grid, kThreads, 0, s>>>(db, dbt, part, g, gdt, other, odt, p);
        else reduce_cols_kernel<false, ALL32><<<grid, kThreads, 0, s>>>(db, dbt, part, g, gdt, other, odt, p);
        ut_cuda_launched("bcast_reduce_cols");
    }
}

} // namespace

extern "C" void ut_cuda_binary_fwd(int op, void *out, int odt, const void *a, int adt, const void *b, int bdt,
                                   const int64_t *n4, const int64_t *s4) {
    if (op == UT_CUDA_BIN_ADD) binary_launch<MODE_ADD>(out, odt, a, adt, b, bdt, n4, s4, "add_fwd");
    else binary_launch<MODE_MUL>(out, odt, a, adt, b, bdt, n4, s4, "mul_fwd");
}

extern "C" void ut_cuda_mul_bwd_a(void *da, int dadt, const void *g, int gdt, const void *b, int bdt,
                                  const int64_t *n4, const int64_t *s4) {
    binary_launch<MODE_MUL_ACC>(da, dadt, g, gdt, b, bdt, n4, s4, "mul_bwd_a");
}

static void acc_dt(void *dst, int ddt, const void *src, int sdt, int64_t n, bool acc) {
    if (n <= 0) return;
    cudaStream_t s = (cudaStream_t)ut_cuda_stream();
    if (utk_vec4_ok(dst, ddt) && utk_vec4_ok(src, sdt))
        acc_dt_kernel<true><<<blocks_for((n + 3) / 4), kThreads, 0, s>>>(dst, ddt, src, sdt, n, acc);
    else
        acc_dt_kernel<false><<<blocks_for(n), kThreads, 0, s>>>(dst, ddt, src, sdt, n, acc);
    ut_cuda_launched(acc ? "acc_dt" : "put_dt");
}

extern "C" void ut_cuda_acc_dt(void *dst, int ddt, const void *src, int sdt, int64_t n) {
    if (ddt == 0 && sdt == 0) {
        ut_cuda_acc((float *)dst, (const float *)src, n);
        return;
    }
    acc_dt(dst, ddt, src, sdt, n, true);
}

extern "C" void ut_cuda_put_dt(void *dst, int ddt, const void *src, int sdt, int64_t n) {
    acc_dt(dst, ddt, src, sdt, n, false);
}

extern "C" size_t ut_cuda_bcast_reduce_scratch(const int64_t *n4, const int64_t *s4) {
    int64_t n = n4[0] * n4[1] * n4[2] * n4[3];
    if (n <= 0) return 0;
    Reduce p = plan_of(n4, s4);
    if (p.R == 1 || p.nchunk == 1) return 0;
    return (size_t)(p.nchunk * p.nb) * sizeof(float);
}

extern "C" void ut_cuda_bcast_reduce(void *db, int dbt, const void *g, int gdt, const void *other, int odt,
                                     const int64_t *n4, const int64_t *s4, void *scratch) {
    int64_t n = n4[0] * n4[1] * n4[2] * n4[3];
    if (n <= 0) return;
    cudaStream_t s = (cudaStream_t)ut_cuda_stream();
    Reduce p = plan_of(n4, s4);
    bool all32 = dbt == 0 && gdt == 0 && (!other || odt == 0);
    if (p.R == 1) { /* b has the output's elements: the CPU's flat path */
        bool vec = utk_vec4_ok(db, dbt) && utk_vec4_ok(g, gdt) && (!other || utk_vec4_ok(other, odt));
        unsigned blocks = blocks_for(vec ? (n + 3) / 4 : n);
        if (vec && all32) reduce_flat_kernel<true, true><<<blocks, kThreads, 0, s>>>(db, dbt, g, gdt, other, odt, n);
        else if (vec) reduce_flat_kernel<false, true><<<blocks, kThreads, 0, s>>>(db, dbt, g, gdt, other, odt, n);
        else if (all32) reduce_flat_kernel<true, false><<<blocks, kThreads, 0, s>>>(db, dbt, g, gdt, other, odt, n);
        else reduce_flat_kernel<false, false><<<blocks, kThreads, 0, s>>>(db, dbt, g, gdt, other, odt, n);
        ut_cuda_launched("bcast_reduce_flat");
        return;
    }
    float *part = (float *)scratch;
    if (all32) reduce_launch<true>(db, dbt, g, gdt, other, odt, p, part, s);
    else reduce_launch<false>(db, dbt, g, gdt, other, odt, p, part, s);
    if (p.nchunk > 1) {
        reduce_final_kernel<<<(unsigned)cdiv(p.nb, kThreads), kThreads, 0, s>>>(db, dbt, part, p.nb, p.nchunk);
        ut_cuda_launched("bcast_reduce_final");
    }
}

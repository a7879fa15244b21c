/* A CUDA emulator for testing kernels without a GPU (C++17, host only).
 *
 * The CUDA backend's kernel files (the .cu files of src/backend/cuda) are compiled by
 * the host compiler against the headers in tests/emu/shim (cuda_runtime.h,
 * cuda_bf16.h, cuda_fp16.h, mma.h: each includes this one) after
 * tests/emu/prep.pl has rewritten their launches (k<<<grid, block, smem,
 * stream>>>(args) becomes utemu::launch(k, grid, block, smem, args)) and
 * their dynamic shared memory. Then a launch runs the grid's blocks one
 * after another, each block's threads as fibers (ucontext) on one host
 * thread: a thread runs until it reaches a barrier (__syncthreads,
 * __syncwarp, or a shuffle, which is a write, a warp barrier, a read and
 * another warp barrier), and a barrier opens when every live thread of its
 * block or warp has reached one. What it checks besides the results:
 *   - barriers: a warp or block whose threads wait at barriers that cannot
 *     all open (a barrier inside a branch only some threads take) stops the
 *     run, naming the kernel and block (deadlock on a GPU);
 *   - WMMA: fragments are whole 16 x 16 tiles in every lane (mma_sync
 *     computes the product in float, every lane the same), and
 *     load_matrix_sync / store_matrix_sync check what the hardware requires:
 *     a 32-byte aligned pointer and a leading dimension that is a multiple
 *     of 16 bytes;
 *   - mma.sync.m16n8k16 and ldmatrix.x4 (the PTX the attention kernels
 *     write): each lane's registers hold the elements the PTX ISA's fragment
 *     layouts give them, so a kernel that puts an element in the wrong lane
 *     or register gets wrong products here as on a GPU; ldmatrix's row
 *     addresses must be 16-byte aligned;
 *   - dynamic shared memory is a heap buffer of exactly the launch's size
 *     (so AddressSanitizer builds see overruns), filled with NaN bytes at
 *     each block's start (so a read before a write shows);
 *   - grid and block limits (blocks of at most 1024 threads, gridDim.y and
 *     .z at most 65535) and shared memory past the launch's request;
 *   - dynamic shared memory past 48 KiB that cudaFuncSetAttribute did not
 *     allow for that kernel first, and blocks larger than a kernel's
 *     __launch_bounds__ (the GPU refuses either launch);
 *   - cp.async's alignment, and copies that land as late as the wait for
 *     their group in some blocks and as early as their issue in others
 *     (async_copy below);
 *   - races: blocks and threads run in orders that vary from launch to
 *     launch and block to block (cuda_emu.cpp, thread_order), so a read
 *     that no barrier orders after another thread's write (or a block's
 *     read of another block's output) gives values that differ from block
 *     to block, and the tests' comparisons fail; so does warp-synchronous
 *     code that leans on lanes running in step without __syncwarp.
 *     UT_EMU_ORDER=fixed runs everything in index order;
 *   - shuffles, __syncwarp and WMMA operations in warps that are not whole
 *     (lanes exited, or a block size that leaves the last warp short).
 * What it does not model: timing, registers and static shared memory (what
 * ptxas reports), and atomics beyond what is below. */
#ifndef UTRAIN_CUDA_EMU_H
#define UTRAIN_CUDA_EMU_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <functional>
#include <type_traits>

#include "cuda_runtime_emu.h"

/* ---- the language: qualifiers become nothing (or plain C++) ---- */
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static
#define __align__(n) alignas(n)

/* ---- built-in types and variables ---- */
struct uint3 {
    unsigned x, y, z;
};
struct dim3 {
    unsigned x, y, z;
    dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
struct alignas(16) float4 {
    float x, y, z, w;
};
static inline float4 make_float4(float x, float y, float z, float w) { return float4{x, y, z, w}; }
struct alignas(8) float2 {
    float x, y;
};
static inline float2 make_float2(float x, float y) { return float2{x, y}; }
struct alignas(8) uint2 {
    unsigned x, y;
};
struct alignas(16) uint4 {
    unsigned x, y, z, w;
};
struct alignas(4) uchar4 {
    unsigned char x, y, z, w;
};
static inline uchar4 make_uchar4(unsigned char x, unsigned char y, unsigned char z, unsigned char w) {
    return uchar4{x, y, z, w};
}

namespace utemu {

struct thread_state {
    uint3 tid;
    int wait;          /* 0 running, 1 at a warp barrier, 2 at a block barrier */
    bool done;
    const char *whole; /* at a warp barrier that needs the whole warp: for what */
};

/* the emulator's state for the block running now */
uint3 &block_idx();
dim3 &grid_dim();
dim3 &block_dim();
thread_state &current();
void barrier(int kind); /* 1 warp, 2 block */
/* A warp barrier for a warp-wide operation (what: a shuffle, __syncwarp, a
 * WMMA operation) that needs the whole warp: where it opens in a warp that
 * is not whole (lanes that have exited, or a block whose size leaves the
 * last warp short), the program stops. The full mask the backend's code
 * passes names every lane, and on a GPU naming a lane that cannot take
 * part is undefined (a hang or garbage). */
void barrier_whole(const char *what);
void *dyn_smem();
[[noreturn]] __attribute__((format(printf, 1, 2))) void die(const char *fmt, ...);
uint64_t *shuffle_slots(); /* one per thread of the block */
float *warp_tile();        /* 256 floats per warp of the block: WMMA products */

inline long long grid_x(dim3 d) { return d.x; }
inline unsigned grid_y(dim3 d) { return d.y; }
inline unsigned grid_z(dim3 d) { return d.z; }
template <typename I>
inline long long grid_x(I n) {
    return (long long)n;
}
template <typename I>
inline unsigned grid_y(I) {
    return 1;
}
template <typename I>
inline unsigned grid_z(I) {
    return 1;
}

/* UT_EMU_LAUNCHES=1: the program counts what it queues on the emulated GPU
 * (kernels by name, cuBLASLt products, copies and sets) and prints the
 * counts to stderr at its exit: how many launches a training step makes,
 * the work a GPU's launch overhead grows with, seen without a GPU. */
void tally(const char *what);

/* what a launch runs: body() once per thread of each block */
void run_grid(const char *name, dim3 grid, dim3 block, size_t smem, const std::function<void()> &body);

/* A kernel's dynamic shared memory beyond the default 48 KiB is refused on
 * a GPU unless cudaFuncSetAttribute(kernel,
 * cudaFuncAttributeMaxDynamicSharedMemorySize, n) allowed at least that
 * much first: set_smem_limit records it, check_smem_limit stops a launch
 * past it, naming the kernel. */
/* stops a kernel launched with more threads a block than its
 * __launch_bounds__ allow (prep.pl puts the call first in its body) */
void check_bounds(long max_threads, const char *kernel);
void set_smem_limit(const void *kernel, int bytes);
void check_smem_limit(const char *name, const void *kernel, size_t smem);

/* cp.async (sm_80 and later) as the hardware runs it: a copy of n bytes
 * from global src to shared dst (the first src_n of them read, the rest
 * zero), aligned to n, lands some time between its issue and the issuing
 * thread's wait for its group. Blocks differ in when (cuda_emu.cpp,
 * async_lazy): some land each copy as it is issued, the others only at the
 * wait, so that a thread reading a tile before its wait (or another
 * thread's tile before the barrier after their waits) reads what was there
 * before in some blocks, and one copying into a tile others still read
 * overwrites it early in others. async_commit closes the thread's open
 * group; async_wait(pending) lands every committed group but the pending
 * most recent ones. */
void async_copy(void *dst, const void *src, size_t n, size_t src_n);
void async_commit();
void async_wait(int pending);

/* a launch's configuration, <<<grid, block[, smem[, stream]]>>> */
struct config {
    dim3 grid, block;
    size_t smem;
};
template <typename G, typename B>
inline config make_config(G grid, B block, size_t smem = 0, const void *stream = nullptr) {
    (void)stream;
    return config{dim3((unsigned)grid_x(grid), grid_y(grid), grid_z(grid)), dim3((unsigned)grid_x(block),
                  grid_y(block), grid_z(block)), smem};
}

/* k<<<cfg>>>(args) as tests/emu/prep.pl writes it */
template <typename K, typename... A>
void launch(const char *name, K kernel, config c, A... args) {
    check_smem_limit(name, (const void *)kernel, c.smem);
    run_grid(name, c.grid, c.block, c.smem, [=]() { kernel(args...); });
}

} // namespace utemu

#define threadIdx (utemu::current().tid)
#define blockIdx (utemu::block_idx())
#define gridDim (utemu::grid_dim())
#define blockDim (utemu::block_dim())

inline void __syncthreads() { utemu::barrier(2); }
inline void __syncwarp(unsigned mask = 0xffffffffu) {
    if (mask == 0xffffffffu) utemu::barrier_whole("__syncwarp");
    else utemu::barrier(1);
}

/* lane l of the warp gets v of lane src(l) */
template <typename T>
inline T utemu_shuffle(T v, int (*src)(int lane, int arg), int arg) {
    static_assert(sizeof(T) <= sizeof(uint64_t), "32- and 64-bit shuffles");
    uint64_t *slots = utemu::shuffle_slots();
    const unsigned t = threadIdx.x + threadIdx.y * blockDim.x;
    const unsigned warp0 = t & ~31u;
    const int lane = (int)(t & 31u);
    memcpy(&slots[t], &v, sizeof(T));
    utemu::barrier_whole("a __shfl_*_sync with the full mask");
    int s = src(lane, arg);
    T r;
    memcpy(&r, &slots[warp0 + (unsigned)(s >= 0 && s < 32 ? s : lane)], sizeof(T));
    utemu::barrier(1);
    return r;
}
inline int utemu_src_xor(int lane, int o) { return lane ^ o; }
inline int utemu_src_down(int lane, int o) { return lane + o; }
inline int utemu_src_up(int lane, int o) { return lane - o; }
inline int utemu_src_idx(int lane, int o) { return (void)lane, o & 31; }
/* __shfl_xor_sync, __shfl_down_sync, __shfl_up_sync, __shfl_sync (the mask unused: whole warps) */
#define UTEMU_SHUFFLE(name, src)                                 \
    template <typename T>                                        \
    inline T name(unsigned mask, T v, int o) {                   \
        return (void)mask, utemu_shuffle(v, src, o);             \
    }
UTEMU_SHUFFLE(__shfl_xor_sync, utemu_src_xor)
UTEMU_SHUFFLE(__shfl_down_sync, utemu_src_down)
UTEMU_SHUFFLE(__shfl_up_sync, utemu_src_up)
UTEMU_SHUFFLE(__shfl_sync, utemu_src_idx)
#undef UTEMU_SHUFFLE

/* ---- arithmetic intrinsics (rounded to nearest: the host's float arithmetic) ---- */
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
inline float __expf(float x) { return expf(x); }
inline float __fsqrt_rn(float x) { return sqrtf(x); }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline double __dsqrt_rn(double x) { return sqrt(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline unsigned __float_as_uint(float f) {
    unsigned u;
    memcpy(&u, &f, 4);
    return u;
}
inline float __uint_as_float(unsigned u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
inline int __float_as_int(float f) { return (int)__float_as_uint(f); }
inline float __int_as_float(int i) { return __uint_as_float((unsigned)i); }
inline float __logf(float x) { return logf(x); }
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline int atomicCAS(int *p, int cmp, int v) {
    int old = *p;
    if (old == cmp) *p = v;
    return old;
}
inline float atomicAdd(float *p, float v) {
    float old = *p;
    *p = old + v;
    return old;
}

/* ---- 16-bit floating point storage ---- */
struct __nv_bfloat16 {
    uint16_t bits;
};
struct __half {
    uint16_t bits;
};
inline float __bfloat162float(__nv_bfloat16 h) {
    uint32_t u = (uint32_t)h.bits << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
inline __nv_bfloat16 __float2bfloat16_rn(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    __nv_bfloat16 h;
    if ((u & 0x7fffffffu) > 0x7f800000u) h.bits = (uint16_t)((u >> 16) | 0x40u); /* NaN stays NaN */
    else h.bits = (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    return h;
}
inline float __half2float(__half h) {
    uint32_t s = (uint32_t)(h.bits >> 15) << 31, e = (h.bits >> 10) & 0x1fu, m = h.bits & 0x3ffu, u;
    if (e == 0x1f) u = s | 0x7f800000u | (m << 13);
    else if (e) u = s | ((e + 112u) << 23) | (m << 13);
    else if (!m) u = s;
    else { /* subnormal: m 2^-24 */
        float f = ldexpf((float)m, -24);
        memcpy(&u, &f, 4);
        u |= s;
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}
inline __half __float2half_rn(float f) {
    __half h;
    uint32_t u;
    memcpy(&u, &f, 4);
    uint16_t s = (uint16_t)((u >> 16) & 0x8000u);
    float a = fabsf(f);
    if (a != a) h.bits = (uint16_t)(s | 0x7e00u);
    else if (a >= 65520.0f) h.bits = (uint16_t)(s | 0x7c00u); /* rounds to infinity */
    else if (a < 6.103515625e-05f) { /* subnormal or zero: multiples of 2^-24, nearest even */
        h.bits = (uint16_t)(s | (uint16_t)lrintf(a * 16777216.0f));
    } else {
        uint32_t ua;
        memcpy(&ua, &a, 4);
        uint32_t e = (ua >> 23) - 112u, m = ua & 0x7fffffu;
        uint32_t v = (e << 10) | (m >> 13), rest = m & 0x1fffu;
        if (rest > 0x1000u || (rest == 0x1000u && (v & 1u))) v++;
        h.bits = (uint16_t)(s | v);
    }
    return h;
}

inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.bits; }
inline unsigned short __half_as_ushort(__half h) { return h.bits; }
inline __half __ushort_as_half(unsigned short u) { return __half{u}; }
inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short u) { return __nv_bfloat16{u}; }

/* x rounded to TF32 (10 mantissa bits, nearest even), as the tensor cores
 * read float32 operands (the emulated cuBLASLt and cuDNN) */
inline float utemu_tf32(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7f800000u) == 0x7f800000u) return x;
    u = (u + 0xfffu + ((u >> 13) & 1u)) & ~0x1fffu;
    memcpy(&x, &u, 4);
    return x;
}

/* ---- the warp-level matrix instructions the attention kernels write in
 * PTX (flash_attention_mma.cuh), with the fragment layouts of the PTX ISA's
 * "Matrix Fragments for mma.m16n8k16" and "ldmatrix". A lane's registers go
 * through the warp's staging tile (a warp barrier), each lane computes its
 * own results from the whole matrices, and a second barrier frees the tile.
 * groupID g = lane / 4, t = lane % 4; a 32-bit register holds two 16-bit
 * elements, the lower-numbered column (or row, for B) in its low half. ---- */
namespace utemu {
inline float utemu_h16(uint32_t r, int hi, bool f16) {
    const uint16_t h = (uint16_t)(hi ? r >> 16 : r & 0xffffu);
    if (f16) {
        __half x;
        memcpy(&x, &h, 2);
        return __half2float(x);
    }
    const uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
/* mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}.{bf16,f16}.f32 d, a, b, d:
 * A 16 x 16 (a0: row g, cols 2t, 2t+1; a1: row g+8; a2: row g, cols 2t+8,
 * 2t+9; a3: row g+8, cols 2t+8, 2t+9), B 16 x 8 (b0: rows 2t, 2t+1 of column
 * g; b1: rows 2t+8, 2t+9), C and D 16 x 8 float (d0, d1: row g, columns 2t,
 * 2t+1; d2, d3: row g+8) */
inline void mma_m16n8k16(float d[4], const uint32_t a[4], const uint32_t b[2], bool f16) {
    uint32_t *st = (uint32_t *)warp_tile(); /* 6 registers a lane */
    const int lane = (int)(threadIdx.x & 31u);
    for (int i = 0; i < 4; i++) st[lane * 6 + i] = a[i];
    st[lane * 6 + 4] = b[0];
    st[lane * 6 + 5] = b[1];
    barrier_whole("mma.sync.m16n8k16");
    const int g = lane >> 2, t = lane & 3;
    for (int i = 0; i < 4; i++) {
        const int r = g + (i >= 2 ? 8 : 0), n = 2 * t + (i & 1);
        float s = d[i];
        for (int k = 0; k < 16; k++) {
            const int al = (r & 7) * 4 + (k & 7) / 2, ar = (r >= 8 ? 1 : 0) + (k >= 8 ? 2 : 0);
            const int bl = n * 4 + (k & 7) / 2, br = k >= 8 ? 1 : 0;
            s += utemu_h16(st[al * 6 + ar], k & 1, f16) * utemu_h16(st[bl * 6 + 4 + br], k & 1, f16);
        }
        d[i] = s;
    }
    barrier(1);
}
/* ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16 r, [p]: lanes 8 i to
 * 8 i + 7 give the addresses of matrix i's eight rows (8 elements, 16-byte
 * aligned); r[i] of lane l holds row l / 4, columns 2 (l % 4) and + 1 of
 * matrix i, or with .trans rows 2 (l % 4) and + 1 of column l / 4 */
inline void ldmatrix_x4(uint32_t r[4], const void *p, bool trans) {
    if ((uintptr_t)p % 16) die("ldmatrix: a row address %p not 16-byte aligned", p);
    uint64_t *slots = shuffle_slots();
    const unsigned tid = threadIdx.x + threadIdx.y * blockDim.x, warp0 = tid & ~31u;
    const int lane = (int)(tid & 31u);
    slots[tid] = (uint64_t)(uintptr_t)p;
    barrier_whole("ldmatrix");
    for (int i = 0; i < 4; i++) {
        uint16_t e[2];
        for (int j = 0; j < 2; j++) {
            const int row = trans ? 2 * (lane & 3) + j : lane >> 2, col = trans ? lane >> 2 : 2 * (lane & 3) + j;
            const uint16_t *rp = (const uint16_t *)(uintptr_t)slots[warp0 + (unsigned)(8 * i + row)];
            e[j] = rp[col];
        }
        r[i] = (uint32_t)e[0] | (uint32_t)e[1] << 16;
    }
    barrier(1);
}
} // namespace utemu

/* ---- WMMA (mma.h): whole tiles in every lane; loads and stores are warp
 * barriers, as the hardware's collective operations are in effect ---- */
namespace nvcuda {
namespace wmma {
struct row_major {};
struct col_major {};
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
enum layout_t { mem_row_major, mem_col_major };

template <typename Use, int M, int N, int K, typename T, typename Layout = void>
struct fragment {
    static constexpr int rows = M, cols = N;
    float x[16 * 16];
    static constexpr int num_elements = 16 * 16;
};

inline float utemu_val(float v) { return v; }
inline float utemu_val(__nv_bfloat16 v) { return __bfloat162float(v); }
inline float utemu_val(__half v) { return __half2float(v); }

/* checks a tile's pointer and stride, then waits for the warp: the WMMA
 * loads and stores are collective (every lane of a warp takes part, in
 * step), so no lane stores a tile before every lane has loaded the tiles
 * that the warp's previous loads read */
void utemu_check_tile(const void *p, unsigned ldm, size_t elem, const char *what);

template <typename Use, typename T, typename L>
inline void load_matrix_sync(fragment<Use, 16, 16, 16, T, L> &f, const T *p, unsigned ldm) {
    utemu_check_tile(p, ldm, sizeof(T), "load_matrix_sync");
    const bool row = std::is_same<L, row_major>::value;
    for (int r = 0; r < 16; r++)
        for (int c = 0; c < 16; c++) f.x[r * 16 + c] = utemu_val(row ? p[r * ldm + c] : p[c * ldm + r]);
}
inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float> &f, const float *p, unsigned ldm,
                             layout_t l) {
    utemu_check_tile(p, ldm, sizeof(float), "load_matrix_sync (accumulator)");
    for (int r = 0; r < 16; r++)
        for (int c = 0; c < 16; c++) f.x[r * 16 + c] = l == mem_row_major ? p[r * ldm + c] : p[c * ldm + r];
}
inline void store_matrix_sync(float *p, const fragment<accumulator, 16, 16, 16, float> &f, unsigned ldm,
                              layout_t l) {
    utemu_check_tile(p, ldm, sizeof(float), "store_matrix_sync");
    for (int r = 0; r < 16; r++)
        for (int c = 0; c < 16; c++) (l == mem_row_major ? p[r * ldm + c] : p[c * ldm + r]) = f.x[r * 16 + c];
}
template <typename Use, typename T, typename L>
inline void fill_fragment(fragment<Use, 16, 16, 16, T, L> &f, float v) {
    for (int i = 0; i < 256; i++) f.x[i] = v;
}
template <typename T, typename LA, typename LB>
inline void mma_sync(fragment<accumulator, 16, 16, 16, float> &d, const fragment<matrix_a, 16, 16, 16, T, LA> &a,
                     const fragment<matrix_b, 16, 16, 16, T, LB> &b,
                     const fragment<accumulator, 16, 16, 16, float> &c) {
    /* every lane holds the same tiles: lane 0 computes, the others copy */
    utemu::barrier_whole("mma_sync");
    float *out = utemu::warp_tile();
    if ((threadIdx.x & 31u) == 0)
        for (int r = 0; r < 16; r++)
            for (int n = 0; n < 16; n++) {
                float s = c.x[r * 16 + n];
                for (int k = 0; k < 16; k++) s += a.x[r * 16 + k] * b.x[k * 16 + n];
                out[r * 16 + n] = s;
            }
    utemu::barrier(1);
    memcpy(d.x, out, sizeof d.x);
}
} // namespace wmma
} // namespace nvcuda

/* ---- the runtime API (cuda_runtime_emu.h) as the kernel files call it ---- */
template <typename F>
inline cudaError_t cudaFuncSetAttribute(F *kernel, cudaFuncAttribute a, int v) {
    if (a == cudaFuncAttributeMaxDynamicSharedMemorySize) {
        if (v < 0 || v > 232448) return cudaErrorInvalidValue;
        utemu::set_smem_limit((const void *)kernel, v);
    }
    return cudaSuccess;
}
template <typename T>
inline cudaError_t cudaMalloc(T **p, size_t n) {
    return cudaMalloc((void **)p, n);
}

#endif

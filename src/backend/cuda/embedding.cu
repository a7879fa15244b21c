/* CUDA kernels of the embedding lookup (launchers declared in embedding.h).
 * Forward copies table rows, a block per output row. Backward is
 * deterministic without float atomics: the positions are sorted by id
 * (CUB's radix sort, stable, so each id's positions stay in increasing
 * order), then for each run of equal ids one block per column chunk starts
 * from the table gradient's row and adds the run's output gradients in
 * position order: the CPU's order of additions, so the same bits. */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#include <cub/device/device_radix_sort.cuh>

#include "cuda.h"
#include "embedding.h"

#define EMB_FWD_THREADS 128
#define EMB_BWD_COLS 128 /* columns (threads) per block of the backward sums */

static cudaStream_t stream() { return (cudaStream_t)ut_cuda_stream(); }

/* ---- forward: out[n] = table[idx[n]]; an id outside [0, V) gives a zero row
 * and raises the error flag. VEC4: rows copied as float4 (C % 4 == 0 and
 * both bases 16-byte aligned). ---- */
template <bool VEC4>
__global__ void embedding_fwd_k(float *__restrict__ out, const int32_t *__restrict__ idx,
                                const float *__restrict__ table, int64_t V, int64_t C, int64_t off,
                                int64_t vocab, int *err) {
    int64_t n = blockIdx.x;
    int64_t raw = idx[n], id = raw - off;
    if ((raw < 0 || raw >= vocab) && err && threadIdx.x == 0) atomicCAS(err, 0, (int)UT_CUDA_ERR_EMBEDDING_INDEX);
    bool ok = raw >= 0 && raw < vocab && id >= 0 && id < V; /* else: bad, or another part's: a zero row */
    if (VEC4) {
        float4 *o = (float4 *)(out + n * C);
        const float4 *s = (const float4 *)(table + (ok ? id : 0) * C);
        float4 z = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        for (int64_t c = threadIdx.x; c < C / 4; c += blockDim.x) o[c] = ok ? s[c] : z;
    } else {
        float *o = out + n * C;
        const float *s = table + (ok ? id : 0) * C;
        for (int64_t c = threadIdx.x; c < C; c += blockDim.x) o[c] = ok ? s[c] : 0.0f;
    }
}

/* ---- backward ---- */
/* keys[n] = idx[n], or V for an id that takes no gradient (the padding row,
 * out of range): those sort last and are skipped; pos[n] = n */
__global__ void embedding_keys_k(unsigned *__restrict__ keys, int32_t *__restrict__ pos,
                                 const int32_t *__restrict__ idx, int64_t N, int64_t V,
                                 int64_t pad, int64_t off) {
    int64_t n = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= N) return;
    int64_t id = (int64_t)idx[n] - off;
    keys[n] = (id >= 0 && id < V && idx[n] != pad) ? (unsigned)id : (unsigned)V;
    pos[n] = (int32_t)n;
}

/* Block (blockIdx.x = i, blockIdx.y = column chunk): if sorted position i
 * starts a run of id r < V, dtable[r, c] = dtable[r, c] + dout[pos[i], c] +
 * dout[pos[i + 1], c] + ... over the run, left to right. */
__global__ void embedding_bwd_runs_k(float *__restrict__ dtable, const float *__restrict__ dout,
                                     const unsigned *__restrict__ keys,
                                     const int32_t *__restrict__ pos, int64_t N, int64_t V,
                                     int64_t C) {
    int64_t i = blockIdx.x;
    unsigned r = keys[i];
    if ((int64_t)r >= V || (i > 0 && keys[i - 1] == r)) return;
    int64_t c = (int64_t)blockIdx.y * EMB_BWD_COLS + threadIdx.x;
    if (c >= C) return;
    /* the run's end: the first sorted key > r (keys are sorted) */
    int64_t lo = i + 1, hi = N;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (keys[mid] > r) hi = mid;
        else lo = mid + 1;
    }
    float *d = dtable + (int64_t)r * C + c;
    float acc = *d;
#pragma unroll 8
    for (int64_t k = i; k < lo; k++) acc += dout[(int64_t)pos[k] * C + c];
    *d = acc;
}

/* ---- scratch layout of the backward: keys and positions, in and sorted,
 * then CUB's temporary storage; each part 256-byte aligned ---- */
struct EmbScratch {
    unsigned *keys_in, *keys_out;
    int32_t *pos_in, *pos_out;
    void *temp;
    size_t temp_bytes, total;
};

static size_t align256(size_t n) { return (n + 255) & ~(size_t)255; }

static int key_bits(int64_t V) { /* bits that hold every key in [0, V] */
    int bits = 1;
    while (bits < 32 && ((int64_t)1 << bits) <= V) bits++;
    return bits;
}

static EmbScratch emb_scratch(void *base, int64_t N, int64_t V) {
    EmbScratch s;
    size_t arr = align256((size_t)N * 4);
    s.temp_bytes = 0;
    cudaError_t e = cub::DeviceRadixSort::SortPairs(nullptr, s.temp_bytes, (const unsigned *)nullptr,
                                                    (unsigned *)nullptr, (const int32_t *)nullptr,
                                                    (int32_t *)nullptr, (int)N, 0, key_bits(V),
                                                    stream());
    if (e != cudaSuccess) {
        fprintf(stderr, "utrain: embedding backward: sort size query failed: %s\n",
                cudaGetErrorString(e));
        abort();
    }
    char *p = (char *)base;
    s.keys_in = (unsigned *)p;
    s.keys_out = (unsigned *)(p + arr);
    s.pos_in = (int32_t *)(p + 2 * arr);
    s.pos_out = (int32_t *)(p + 3 * arr);
    s.temp = p + 4 * arr;
    s.total = 4 * arr + align256(s.temp_bytes);
    return s;
}

/* ---- launchers ---- */
extern "C" void ut_cuda_embedding_fwd(float *out, const int32_t *idx, const float *table,
                                      int64_t N, int64_t V, int64_t C, int64_t off, int64_t vocab, int *err) {
    if (N <= 0 || C <= 0) return;
    bool vec4 = C % 4 == 0 && ((uintptr_t)out & 15) == 0 && ((uintptr_t)table & 15) == 0;
    if (vec4)
        embedding_fwd_k<true><<<(unsigned)N, EMB_FWD_THREADS, 0, stream()>>>(out, idx, table, V, C, off, vocab,
                                                                             err);
    else
        embedding_fwd_k<false><<<(unsigned)N, EMB_FWD_THREADS, 0, stream()>>>(out, idx, table, V, C, off,
                                                                              vocab, err);
    ut_cuda_launched("embedding_fwd");
}

extern "C" size_t ut_cuda_embedding_bwd_scratch_bytes(int64_t N, int64_t V) {
    if (N <= 0) return 256;
    return emb_scratch(nullptr, N, V).total;
}

extern "C" void ut_cuda_embedding_bwd(float *dtable, const float *dout, const int32_t *idx,
                                      int64_t N, int64_t V, int64_t C, int64_t pad, int64_t off,
                                      void *scratch) {
    if (N <= 0 || C <= 0 || V <= 0) return;
    EmbScratch s = emb_scratch(scratch, N, V);
    embedding_keys_k<<<(unsigned)((N + 255) / 256), 256, 0, stream()>>>(s.keys_in, s.pos_in, idx,
                                                                        N, V, pad, off);
    ut_cuda_launched("embedding_bwd_keys");
    cudaError_t e = cub::DeviceRadixSort::SortPairs(s.temp, s.temp_bytes, s.keys_in, s.keys_out,
                                                    s.pos_in, s.pos_out, (int)N, 0, key_bits(V),
                                                    stream());
    if (e != cudaSuccess) {
        fprintf(stderr, "utrain: embedding backward: sort failed: %s\n", cudaGetErrorString(e));
        abort();
    }
    ut_cuda_launched("embedding_bwd_sort");
    dim3 grid((unsigned)N, (unsigned)((C + EMB_BWD_COLS - 1) / EMB_BWD_COLS));
    embedding_bwd_runs_k<<<grid, EMB_BWD_COLS, 0, stream()>>>(dtable, dout, s.keys_out, s.pos_out,
                                                              N, V, C);
    ut_cuda_launched("embedding_bwd_runs");
}

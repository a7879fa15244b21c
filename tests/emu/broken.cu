/* Kernels that break the rules of a GPU, for test_emu_kernels to prove that
 * the CUDA emulator (cuda_emu.h) sees each break where a GPU would misbehave
 * or refuse: a race inside a block, a race between blocks, a barrier only
 * some threads reach, dynamic shared memory past 48 KiB without the
 * kernel's attribute, a block larger than the kernel's __launch_bounds__,
 * a cp.async tile read before its wait, a misaligned cp.async, and
 * full-mask shuffles in warps that are not whole. Built for the emulator only (never by nvcc), after
 * tests/emu/prep.pl as the backend's kernel files are.
 * defines: utemu_broken_race, utemu_broken_block_race, utemu_broken_barrier,
 *          utemu_broken_smem, utemu_broken_async, utemu_broken_async_align,
 *          utemu_broken_bounds, utemu_broken_partial_warp. */
#include <cuda_runtime.h>

#define RACE_NT 64

/* Each thread writes its slot of shared memory and reads its neighbour's;
 * without the barrier between, what it reads depends on whether the
 * neighbour has run yet. */
__global__ void race_k(float *out, int sync) {
    extern __shared__ float sh[];
    unsigned t = threadIdx.x;
    sh[t] = (float)t;
    if (sync) __syncthreads();
    out[blockIdx.x * RACE_NT + t] = sh[(t + 1) % RACE_NT];
}

/* Block b reads what block b - 1 writes: blocks run in no fixed order. */
__global__ void block_race_k(int *cell, int *out) {
    unsigned b = blockIdx.x;
    if (threadIdx.x == 0) {
        cell[b] = (int)b + 1;
        out[b] = b ? cell[b - 1] : 1;
    }
}

/* half of a warp waits at the block's barrier, the other half at the
 * warp's: neither can open (on a GPU, a hang or undefined behaviour) */
__global__ void half_barrier_k(int *out) {
    if (threadIdx.x < 16) __syncthreads();
    else __syncwarp();
    out[threadIdx.x] = 1;
}

__global__ void big_smem_k(float *out) {
    extern __shared__ float sh[];
    sh[threadIdx.x] = 1.0f;
    __syncthreads();
    out[threadIdx.x] = sh[31 - threadIdx.x];
}

/* Each thread copies src[t] into shared memory by cp.async and reads its
 * neighbour's copy: right with the wait and a barrier before the read,
 * wrong without (the copies may not have landed). */
__global__ void async_k(float *out, const float *src, int wait) {
    extern __shared__ float sh[];
    unsigned t = threadIdx.x;
    utemu::async_copy(sh + t, src + t, 4, 4);
    utemu::async_commit();
    if (wait) {
        utemu::async_wait(0);
        __syncthreads();
    }
    out[blockIdx.x * RACE_NT + t] = sh[(t + 1) % RACE_NT];
}

/* a 16-byte cp.async from an address 4 bytes past a 16-byte boundary */
__global__ void async_misaligned_k(const float *src) {
    extern __shared__ float sh[];
    utemu::async_copy(sh, src + 1, 16, 16);
    utemu::async_commit();
    utemu::async_wait(0);
}

/* a warp sum by shuffles after the odd lanes have left (or in a block of
 * threads that leaves the last warp short) */
__global__ void partial_warp_k(float *out, int exit_odd) {
    if (exit_odd && (threadIdx.x & 1)) return;
    float v = 1.0f;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    out[threadIdx.x] = v;
}

/* at most 64 threads a block */
__global__ void __launch_bounds__(RACE_NT) bounded_k(int *out) { out[threadIdx.x] = (int)threadIdx.x; }

extern "C" {

/* partial_warp_k on one block of threads threads, the odd lanes leaving
 * first or not (out: threads floats) */
void utemu_broken_partial_warp(float *out, int threads, int exit_odd) { partial_warp_k<<<1, threads>>>(out, exit_odd); }

/* bounded_k on a block of threads threads (at most 64 allowed; out: that many ints) */
void utemu_broken_bounds(int *out, int threads) { bounded_k<<<1, threads>>>(out); }

/* out (blocks x 64) = src[(t + 1) % 64] per thread t, the copies waited
 * for or not; src: 64 floats */
void utemu_broken_async(float *out, const float *src, int blocks, int wait) {
    async_k<<<blocks, RACE_NT, RACE_NT * sizeof(float)>>>(out, src, wait);
}

/* a misaligned cp.async: the emulator stops the program; src: 16-byte aligned, 8 floats */
void utemu_broken_async_align(const float *src) { async_misaligned_k<<<1, 1, 64>>>(src); }

/* out (blocks x 64): each thread's neighbour's index, read with or without
 * the barrier (values where it ran first, NaN where it did not) */
void utemu_broken_race(float *out, int blocks, int sync) {
    race_k<<<blocks, RACE_NT, RACE_NT * sizeof(float)>>>(out, sync);
}

/* out (blocks): block b's view of block b - 1's cell (b, or 0 where b - 1
 * had not run); cell: blocks ints, zeroed by the caller */
void utemu_broken_block_race(int *cell, int *out, int blocks) {
    block_race_k<<<blocks, 32>>>(cell, out);
}

/* a block of 32 threads, half of which wait at the block's barrier and
 * half at the warp's: the emulator stops the program */
void utemu_broken_barrier(int *out) { half_barrier_k<<<1, 32>>>(out); }

/* 64 KiB of dynamic shared memory, allowed first when allow is set (else
 * the emulator stops the program, as a GPU refuses the launch); out: 32 floats */
void utemu_broken_smem(float *out, int allow) {
    const int bytes = 64 << 10;
    if (allow) cudaFuncSetAttribute(big_smem_k, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
    big_smem_k<<<1, 32, bytes>>>(out);
}
}

/* Declarations shared by the CUDA backend's files.
 *
 * The backend is two layers. The op glue, ut_<stem>_fwd_cuda /
 * ut_<stem>_bwd_cuda, is C (the .c files here, compiled with the library's C
 * flags): it reads an op's parameters and saved buffers through
 * src/ops/params.h, takes device scratch from the context's device arena
 * (ut_ctx_dalloc) and calls launchers. The launchers and kernels are CUDA C++
 * (the .cu files, compiled by nvcc): they take plain device pointers and sizes,
 * queue work on the compute stream (ut_cuda_stream) and never synchronise.
 * Each group of ops declares its launchers in its own header (ew.h,
 * softmax.h, ...); this one holds what every file shares.
 * defines: ut_ops_cuda, ut_<op>_fwd_cuda / ut_<op>_bwd_cuda, ut_cuda_stream,
 *          ut_cuda_launched, ut_cuda_malloc, ut_cuda_sgemm. */
#ifndef UTRAIN_CUDA_H
#define UTRAIN_CUDA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The compute stream every kernel and copy of this process runs on (a
 * cudaStream_t; created on the backend's first use). */
void *ut_cuda_stream(void);

/* After each kernel launch: aborts, naming what was launched and CUDA's
 * error, if the launch failed (a bad configuration is a bug, not bad data). */
void ut_cuda_launched(const char *what);

/* bytes of device memory (cudaMalloc) for what (a phrase for the message:
 * "the cuBLASLt workspace"). A GPU out of memory ends the run with exit
 * status 1 and what to change (ut_fail_exit), never returns NULL. */
void *ut_cuda_malloc(size_t bytes, const char *what);

/* Row-major float32 products through cuBLASLt, for b < batch:
 *   C[b] (m x n, row stride ldc) = alpha * opA(A[b]) * opB(B[b]) + beta * C[b]
 * opA(A) is m x k: A stored m x k (row stride lda), or with transA k x m.
 * opB(B) is k x n: B stored k x n (row stride ldb), or with transB n x k.
 * sA, sB, sC: element strides between batch entries (0: one matrix shared by
 * every entry; sC must not be 0 when batch > 1). Exact float32 arithmetic
 * (no TF32) unless ut_cuda_set_tf32(true). beta 1 accumulates into C. */
void ut_cuda_sgemm(bool transA, bool transB, int64_t m, int64_t n, int64_t k, float alpha,
                   const float *A, int64_t lda, int64_t sA, const float *B, int64_t ldb,
                   int64_t sB, float beta, float *C, int64_t ldc, int64_t sC, int64_t batch);
void ut_cuda_set_tf32(bool on);
/* The selected GPU's dense peak FLOP/s for products of kind (ut_peak_kind,
 * backend.h), and in what the device and the figure's source; 0 when not
 * known (peak.c). ut_cuda_peak_of: the same from a device's name, compute
 * capability, multiprocessors and boost clock (kHz), for tests. */
double ut_cuda_peak_flops(int kind, char *what, size_t n);
double ut_cuda_peak_of(const char *name, int major, int minor, int sms, int clock_khz, int kind, char *what,
                       size_t n);
/* whether TF32 products are on (ut_cuda_set_tf32, UT_CUDA_TF32=1) */
bool ut_cuda_tf32(void);
/* The same product (one matrix, no batch) on 16-bit operands stored in dt
 * (UT_BF16 or UT_F16), float32 C, float32 accumulation. */
void ut_cuda_gemm16(bool transA, bool transB, int64_t m, int64_t n, int64_t k, float alpha, const void *A,
                    int64_t lda, const void *B, int64_t ldb, float beta, float *C, int64_t ldc, int dt);
/* The same with the result in dt too, written by cuBLASLt: D = alpha
 * opA(A) opB(B) + beta D (+ bias, float32, one value per column of the
 * row-major m x n result), in float32, rounded once (with beta 1 Hopper's
 * kernels round the product to dt before adding D, as PyTorch's 16-bit
 * gradient accumulation does: tests/gpu/test_cuda_gemm.c). false (nothing queued)
 * when cuBLASLt has no algorithm for it or UT_CUDA_LT_FUSED=0: the caller
 * takes the float32 result and rounds it itself. */
bool ut_cuda_gemm16_out(bool transA, bool transB, int64_t m, int64_t n, int64_t k, float alpha, const void *A,
                        int64_t lda, const void *B, int64_t ldb, float beta, void *D, int64_t ldd, int dt,
                        const float *bias);
/* D (dt) = gelu(opA(A) opB(B) + bias) through cuBLASLt's GELU epilogue (beta
 * 0; bias float32 or NULL), and with aux the product before GELU there too
 * (dt, leading dimension ldd: a multiple of 8, as cuBLASLt asks); linear's
 * fused GELU (matmul.c). false (nothing queued) where cuBLASLt has no
 * algorithm for it or UT_CUDA_LT_FUSED=0. */
bool ut_cuda_gemm16_gelu(bool transA, bool transB, int64_t m, int64_t n, int64_t k, const void *A, int64_t lda,
                         const void *B, int64_t ldb, void *D, int64_t ldd, int dt, const float *bias, void *aux);
/* The products queued until the next call run under autocast dtype dt
 * (t->autocast: UT_BF16 or UT_F16; UT_F32 ends it): their operands are
 * float32 values rounded to dt (src/core/autocast.c), so 16-bit copies of
 * them are exact, and the products run on the 16-bit tensor cores with
 * float32 accumulation and output. The op table's thunks (table.c) set it
 * from t->autocast before every kernel. */
void ut_cuda_gemm_rounded(int dt);
/* the dtype ut_cuda_gemm_rounded set (0: none) */
int ut_cuda_gemm_rounding(void);

/* The device error flag (an int of device memory, 0 = none): a kernel that
 * finds bad data (an id or target out of range) writes its UT_CUDA_ERR_*
 * code there with atomicCAS (the first one stays), treats the element as
 * ignored, and goes on; the backend's data_error reads and clears it at the
 * next point where the host reads results (docs/gpu.md). */
int *ut_cuda_error_flag(void);

/* Copies n bytes from host to device memory on the compute stream, ordered
 * after the work queued before it (the host buffer may be reused at once). */
void ut_cuda_upload(void *dst, const void *host, size_t n);

#ifdef __cplusplus
}
#endif

/* ---- the C op glue (not seen by nvcc) ---- */
#if !defined(__CUDACC__) && !defined(__cplusplus) /* not for nvcc, nor the kernels built for tests/emu */
#include "../backend.h"
#include "internal.h"

extern const ut_op_vtable ut_ops_cuda[UT_OP_COUNT];
extern const ut_backend ut_backend_cuda;

#define UT_OP(E, stem, props)                         \
    void ut_##stem##_fwd_cuda(ut_tensor *t, const ut_kctx *k);   \
    void ut_##stem##_bwd_cuda(ut_tensor *t, const ut_kctx *k);
#define UT_OP_ANY(E, stem, props)
#include "ops.def"
#undef UT_OP_ANY
#undef UT_OP

#endif

#endif

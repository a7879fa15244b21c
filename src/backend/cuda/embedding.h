/* Launchers of the CUDA embedding kernels (src/backend/cuda/embedding.cu),
 * shared by the C glue (embedding.c) and the kernels. idx: N int32 ids;
 * table: V rows of C floats; out, dout: N rows of C (contiguous device
 * memory). Launchers queue work on the compute stream and return at once.
 * defines: UT_CUDA_ERR_EMBEDDING_INDEX, ut_cuda_embedding_fwd,
 *          ut_cuda_embedding_bwd, ut_cuda_embedding_bwd_scratch_bytes. */
#ifndef UTRAIN_CUDA_EMBEDDING_H
#define UTRAIN_CUDA_EMBEDDING_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The code the forward writes into a device error flag (int, 0 = no error;
 * the first writer wins) for an id outside [0, V); that output row is 0. */
enum { UT_CUDA_ERR_EMBEDDING_INDEX = 1 };

/* out (N, C) = table rows idx (N) - off; an id in [0, vocab) outside
 * [off, off + V) (another part's, ut_embedding_part) gives a zero row, one
 * outside [0, vocab) a zero row and the error; err (may be NULL): device
 * error flag */
void ut_cuda_embedding_fwd(float *out, const int32_t *idx, const float *table, int64_t N,
                           int64_t V, int64_t C, int64_t off, int64_t vocab, int *err);

/* Bytes of device scratch ut_cuda_embedding_bwd needs (a stable sort of the
 * positions by id). */
size_t ut_cuda_embedding_bwd_scratch_bytes(int64_t N, int64_t V);

/* dtable (V, C) += dout (N, C) scattered to rows idx (N) - off, except row
 * pad (-1: none) and ids outside [off, off + V), which take nothing. Deterministic, no
 * float atomics: each row starts from its value and adds its positions'
 * gradients in increasing position order, as the CPU does (the same bits).
 * scratch: ut_cuda_embedding_bwd_scratch_bytes(N, V) bytes. */
void ut_cuda_embedding_bwd(float *dtable, const float *dout, const int32_t *idx, int64_t N,
                           int64_t V, int64_t C, int64_t pad, int64_t off, void *scratch);

#ifdef __cplusplus
}
#endif

#endif

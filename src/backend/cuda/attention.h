/* Launchers of the CUDA attention kernels (attention.cu), shared by the op
 * glue of ATTENTION (attention.c), ATTENTION_MASKED (attention_masked.c) and
 * ATTENTION_VARLEN (attention_varlen.c), and the glue's own helper for the
 * per-(batch, head) matrix products (defined in attention.c).
 * The matrix products run through ut_cuda_sgemm; the kernels here work on the
 * rows of the probabilities P: the softmax, its backward and the dropout.
 * defines: ut_attn_rows, ut_attn_mat, ut_cuda_attn_softmax_fwd,
 *          ut_cuda_attn_softmax_bwd, ut_cuda_attn_drop, ut_cuda_attn_offsets_to_host,
 *          ut_cuda_attn_gemm, ut_cuda_attn_copies, ut_cuda_attn_qkv_alike,
 *          ut_cuda_cudnn_attn_default. */
#ifndef UTRAIN_CUDA_ATTENTION_H
#define UTRAIN_CUDA_ATTENTION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Where the rows of P lie and which of their entries are valid.
 * Uniform rows (off == NULL): rows rows of Tk floats each, row r at P + r * Tk,
 * its query index i = r % Tq, its batch entry r / (NH * Tq).
 * Varlen rows (off != NULL): the S sequences of off (S + 1 int32, device),
 * sequence s of length L = off[s + 1] - off[s] holds NH blocks of L x L floats
 * from poff[s] (S + 1 int64, device), head-major; rows = NH * off[S], row r of
 * sequence s (NH * off[s] <= r < NH * off[s + 1]) is head h, query i of
 * local = r - NH * off[s] = h * L + i.
 * causal: row i's entries j > i are outside the softmax (probability 0). */
typedef struct {
    int64_t rows;
    int64_t Tq, Tk, NH;   /* varlen: Tq unused, Tk the longest sequence (sizes the blocks) */
    const float *mask;    /* uniform rows only: (B, Tk) additive key mask, or NULL */
    const int32_t *off;   /* varlen: the offsets, or NULL for uniform rows */
    const int64_t *poff;  /* varlen: where each sequence's blocks start in P */
    int64_t S;            /* varlen: sequences */
    float scale;          /* the scores are scale * P (+ mask) */
    int causal;
} ut_attn_rows;

/* In place on every row: P = softmax(scale * P + mask) over the row's valid
 * entries, 0 on the others. A row whose valid scores are all -inf gets all 0
 * (it attends nowhere) rather than NaN. */
void ut_cuda_attn_softmax_fwd(float *P, ut_attn_rows g);

/* In place on every row, G holding the probabilities' gradient: with keep
 * (same layout as P; NULL: no dropout) G = G * keep * ks first, then
 * G = P * (G - sum_j P G) over the whole row: the scores' gradient. */
void ut_cuda_attn_softmax_bwd(float *G, const float *P, const uint8_t *keep, float ks, ut_attn_rows g);

/* dst (n) = keep ? P * ks : 0 (dropout of the probabilities; dst may be P) */
void ut_cuda_attn_drop(float *dst, const float *P, const uint8_t *keep, float ks, int64_t n);

/* host (n int32) = dev (n int32, device memory): a copy on the compute stream
 * after the work queued before it, then a wait for it (synchronous). */
void ut_cuda_attn_offsets_to_host(int32_t *host, const int32_t *dev, int64_t n);

/* ---- C helper of the glue (attention.c) ---- */

/* One operand of a product over a (batch, head) grid of pairs: pair (b, h)'s
 * matrix starts at p + b * sb + h * sh, row stride ld (elements). */
typedef struct {
    const float *p;
    int64_t ld, sb, sh;
} ut_attn_mat;

/* For every pair b < nb, h < nh:
 *   C[b,h] = alpha * opA(A[b,h]) opB(B[b,h]) + beta * C[b,h]
 * with ut_cuda_sgemm's conventions (m x n result, inner k), C[b,h] at
 * c + b * csb + h * csh with row stride ldc. One batched product per entry of
 * the smaller of nb and nh. */
void ut_cuda_attn_gemm(bool transA, bool transB, int64_t m, int64_t n, int64_t k, float alpha, ut_attn_mat A,
                       ut_attn_mat B, float beta, float *c, int64_t ldc, int64_t csb, int64_t csh, int64_t nb,
                       int64_t nh);

/* The glue's choice between the tensors as stored and float32 copies (the
 * op table gives the attention ops UT_KCAP_NATIVE_16; attention.c):
 * whether core would have made float32 copies around t without it */
struct ut_tensor;
bool ut_cuda_attn_copies(const struct ut_tensor *t);
/* whether t runs under 16-bit autocast with its output stored in that type
 * and q, k, v (sources 0 to 2) are three different tensors stored alike,
 * all in that type or all float32 (ATTENTION_MASKED, ATTENTION_VARLEN) */
bool ut_cuda_attn_qkv_alike(const struct ut_tensor *t);

/* Whether causal attention in training takes cuDNN's fused attention by
 * default here (attention.c): this build has the cuDNN frontend and cuDNN
 * opens; false with why in why. */
bool ut_cuda_cudnn_attn_default(char *why, size_t n);

#ifdef __cplusplus
}
#endif

#endif

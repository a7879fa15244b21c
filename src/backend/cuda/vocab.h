/* Launchers of the vocabulary-parallel cross-entropy's kernels
 * (src/backend/cuda/vocab.cu), shared by the glue (vocab.c) and the
 * kernels; the CPU kernels' semantics (src/backend/cpu/vocab.c). Device
 * memory; work queued on the compute stream.
 * defines: UT_CUDA_ERR_VOCAB_TARGET, ut_cuda_vocab_*. */
#ifndef UTRAIN_CUDA_VOCAB_H
#define UTRAIN_CUDA_VOCAB_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The device error flag's code for a target outside [0, vocab) that is not
 * ignore_index (that row counts as ignored). */
enum { UT_CUDA_ERR_VOCAB_TARGET = 4 };

/* out (N, P, 2) = 0, except out[n, r] = (logsumexp of x[n] (Vp), x[n, t - v0]
 * when the target t lies in [v0, v0 + Vp), else 0) */
void ut_cuda_vocab_partials_fwd(float *out, const float *x, const int32_t *tg, int64_t N, int64_t Vp, int64_t v0,
                                int64_t vocab, int64_t r, int64_t P, int ignore, int *err);
/* dx[n, j] += g[n, r, 0] * exp(x[n, j] - out[n, r, 0]) + g[n, r, 1] * (j == t - v0) */
void ut_cuda_vocab_partials_bwd(float *dx, const float *g, const float *out, const float *x, const int32_t *tg,
                                int64_t N, int64_t Vp, int64_t v0, int64_t r, int64_t P, int ignore);
/* out[0] = mean over counted rows of logsumexp_r p[n, r, 0] - sum_r p[n, r, 1];
 * rowloss: N doubles of scratch; count (device, 1): the counted rows */
void ut_cuda_vocab_ce_fwd(float *out, int64_t *count, double *rowloss, const float *p, const int32_t *tg, int64_t N,
                          int64_t P, int64_t vocab, int ignore, int *err);
/* dp[n, r, 0] += g * exp(p[n, r, 0] - LSE_n), dp[n, r, 1] -= g, g = dloss[0] / count[0] */
void ut_cuda_vocab_ce_bwd(float *dp, const float *p, const int32_t *tg, const float *dloss, const int64_t *count,
                          int64_t N, int64_t P, int64_t vocab, int ignore);

#ifdef __cplusplus
}
#endif
#endif

/* Launchers of the CUDA softmax family (src/backend/cuda/softmax.cu):
 * softmax, log_softmax, and the classification losses cross_entropy and
 * nll_loss. Inputs are N rows of V floats (contiguous device memory); every
 * launcher queues its kernels on the compute stream and returns at once.
 * Shared by the C glue (softmax.c) and the kernels (softmax.cu).
 * defines: UT_CUDA_ERR_* codes of the losses, ut_cuda_softmax_*,
 *          ut_cuda_log_softmax_*, ut_cuda_cross_entropy_*, ut_cuda_nll_loss_*,
 *          ut_cuda_loss_mean. */
#ifndef UTRAIN_CUDA_SOFTMAX_H
#define UTRAIN_CUDA_SOFTMAX_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Codes the losses write into a device error flag (int, 0 = no error; the
 * first writer wins) when a target is neither ignore_index nor in [0, V).
 * Such a row counts as ignored: loss 0, gradient 0. */
enum { UT_CUDA_ERR_CROSS_ENTROPY_TARGET = 2, UT_CUDA_ERR_NLL_LOSS_TARGET = 3 };

/* y (N, V) = exp(x - max) / sum(exp(x - max)) per row */
void ut_cuda_softmax_fwd(float *y, const float *x, int64_t N, int64_t V);
/* dx (N, V) += y * (dy - sum(dy * y)) per row; y the forward result */
void ut_cuda_softmax_bwd(float *dx, const float *dy, const float *y, int64_t N, int64_t V);
/* y (N, V) = (x - max) - log(sum(exp(x - max))) per row */
void ut_cuda_log_softmax_fwd(float *y, const float *x, int64_t N, int64_t V);
/* dx (N, V) += dy - exp(y) * sum(dy) per row; y the forward result */
void ut_cuda_log_softmax_bwd(float *dx, const float *dy, const float *y, int64_t N, int64_t V);

/* cross_entropy rows: rowloss (N, double) = logsumexp(logits[n]) -
 * logits[n, targets[n]] (0 for an ignored or bad target); with label
 * smoothing eps > 0, (1 - eps) that + eps (logsumexp - mean(logits[n])),
 * as torch's label_smoothing. When row_max and
 * inv_sum (N each) are not NULL, saves each counted row's max and 1 / sum of
 * exp(logits - max) for backward. err (may be NULL): device error flag. The
 * logits are stored in dt (0 float32, 1 bf16, 2 fp16, as ut_dtype) and read
 * widened to float; their rows are ld elements apart (ld >= V; V for a
 * contiguous (N, V)). */
void ut_cuda_cross_entropy_fwd(double *rowloss, float *row_max, float *inv_sum,
                               const void *logits, int dt, const int32_t *targets, int ignore_index,
                               float eps, int64_t N, int64_t V, int64_t ld, int *err);
/* dlogits (N, V) from the forward's row_max and inv_sum and the logits
 * themselves (read once; the exps are recomputed, the same values as the
 * forward's): g = dloss[0] / count[0]; a counted row gets
 * exp(x - max) * inv * g - onehot(target) * g (label smoothing: - g eps / V
 * - onehot(target) g (1 - eps)), an ignored (or bad) row 0.
 * overwrite != 0: dlogits = that (dlogits need not be initialised);
 * overwrite == 0: dlogits += that. dlogits is stored in the logits' dt:
 * 16-bit values are widened, added to in float and rounded once. Both have
 * rows ld elements apart (columns V to ld are left as they are), and
 * dlogits may be the logits themselves (overwrite: the gradient written
 * over them, each element read before it is written). */
void ut_cuda_cross_entropy_bwd(void *dlogits, int overwrite, const void *logits, int dt,
                               const float *row_max, const float *inv_sum, const int32_t *targets,
                               int ignore_index, float eps, const float *dloss, const int64_t *count,
                               int64_t N, int64_t V, int64_t ld);

/* nll_loss rows: rowloss (N, double) = -logp[n, targets[n]] (0 for an
 * ignored or bad target; label smoothing eps > 0: (1 - eps) that - eps
 * mean(logp[n])). err as above. */
void ut_cuda_nll_loss_fwd(double *rowloss, const float *logp, const int32_t *targets,
                          int ignore_index, float eps, int64_t N, int64_t V, int *err);
/* dlogp[n, targets[n]] -= dloss[0] / count[0] for counted rows (label
 * smoothing: dloss[0] / count[0] eps / V from the whole row first, and
 * (1 - eps) times it from the target) */
void ut_cuda_nll_loss_bwd(float *dlogp, const int32_t *targets, int ignore_index, float eps,
                          const float *dloss, const int64_t *count, int64_t N, int64_t V);

/* The losses' mean (one block, fixed order): count = the number of targets
 * (N) that are neither ignore_index nor outside [0, V); out[0] =
 * sum(rowloss) / count in double, rounded to float (0 when count is 0).
 * count (device, 1) may be NULL. */
void ut_cuda_loss_mean(float *out, int64_t *count, const double *rowloss, const int32_t *targets,
                       int ignore_index, int64_t N, int64_t V);

#ifdef __cplusplus
}
#endif

#endif

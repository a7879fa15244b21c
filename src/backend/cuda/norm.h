/* Launchers of the CUDA layernorm and rms_norm kernels (src/backend/cuda/norm.cu),
 * shared by the C glue (norm.c) and the kernels. x, out, gradients: N rows of C
 * floats (contiguous device memory); w, b: C. Launchers queue work on the
 * compute stream and return at once.
 * defines: ut_cuda_layernorm_fwd, ut_cuda_layernorm_bwd,
 *          ut_cuda_layernorm_bwd_scratch_bytes, ut_cuda_rms_norm_fwd,
 *          ut_cuda_rms_norm_bwd, ut_cuda_rms_norm_bwd_scratch_bytes. */
#ifndef UTRAIN_CUDA_NORM_H
#define UTRAIN_CUDA_NORM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* out (N, C) = (x - mean) * rstd * w + b per row, with mean and rstd =
 * 1 / sqrt(biased variance + eps) saved (N each) */
void ut_cuda_layernorm_fwd(void *out, int odt, float *mean, float *rstd, const void *x, int xdt,
                           const float *w, const float *b, int64_t N, int64_t C, float eps);

/* Bytes of device scratch ut_cuda_layernorm_bwd needs when dw or db is
 * asked for (per-chunk column partial sums). */
size_t ut_cuda_layernorm_bwd_scratch_bytes(int64_t N, int64_t C);

/* dx (N, C) += rstd * (dn - mean(dn) - xhat * mean(dn * xhat)) with dn = dy * w,
 * xhat = (x - mean) * rstd (dx_acc false: dx is written, not read: 0 + that);
 * dw (C) += sum_n dy * xhat; db (C) += sum_n dy.
 * Any of dx, dw, db may be NULL; scratch (ut_cuda_layernorm_bwd_scratch_bytes)
 * is needed only with dw or db. The column sums run in a fixed order. */
void ut_cuda_layernorm_bwd(void *dx, bool dx_acc, float *dw, float *db, void *scratch, const void *dy, int odt,
                           const void *x, int xdt, const float *w, const float *mean, const float *rstd,
                           int64_t N, int64_t C);

/* out (N, C) = x * rstd * w per row, with rstd = 1 / sqrt(mean(x^2) + eps)
 * saved (N) */
void ut_cuda_rms_norm_fwd(float *out, float *rstd, const float *x, const float *w, int64_t N, int64_t C,
                          float eps);

/* Bytes of device scratch ut_cuda_rms_norm_bwd needs when dw is asked for
 * (per-chunk column partial sums). */
size_t ut_cuda_rms_norm_bwd_scratch_bytes(int64_t N, int64_t C);

/* dx (N, C) += rstd * (dn - xhat * mean(dn * xhat)) with dn = dy * w,
 * xhat = x * rstd; dw (C) += sum_n dy * xhat. Either of dx, dw may be NULL;
 * scratch (ut_cuda_rms_norm_bwd_scratch_bytes) is needed only with dw. The
 * column sums run in a fixed order. */
void ut_cuda_rms_norm_bwd(float *dx, float *dw, void *scratch, const float *dy, const float *x,
                          const float *w, const float *rstd, int64_t N, int64_t C);

#ifdef __cplusplus
}
#endif

#endif

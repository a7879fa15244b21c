/* Launchers of the CUDA elementwise, view, broadcasting and reduction
 * kernels (view.cu, binary.cu, unary.cu, reduce.cu), called by the op glue of
 * RESHAPE, PERMUTE, SLICE, CONTIGUOUS (view.c), ADD, MUL (binary.c), SCALE,
 * RELU, GELU, GELU_ERF, TANH, SIGMOID, DROPOUT, UNIFORM_NOISE (unary.c), SUM, MEAN and MSE
 * (reduce.c). Every pointer is device memory, every size an element count;
 * shapes and strides are host arrays. The launchers queue work on the compute
 * stream and return at once; n == 0 queues nothing. Results do not depend on
 * the run: every sum has a fixed order decided by the sizes alone.
 * defines: ut_cuda_strided_gather_f32, ut_cuda_strided_gather_i32,
 *          ut_cuda_strided_add, ut_cuda_acc, ut_cuda_acc_dt, ut_cuda_binary_fwd,
 *          ut_cuda_mul_bwd_a, ut_cuda_bcast_reduce_scratch, ut_cuda_bcast_reduce,
 *          ut_cuda_{scale,relu,gelu,gelu_erf,tanh,sigmoid,dropout}_{fwd,bwd}, ut_cuda_dropout_mask,
 *          ut_cuda_varlen_dropout_mask, ut_cuda_uniform_noise_fwd,
 *          ut_cuda_sum_scratch, ut_cuda_sum, ut_cuda_spread, ut_cuda_mse_fwd,
 *          ut_cuda_mse_bwd. */
#ifndef UTRAIN_CUDA_EW_H
#define UTRAIN_CUDA_EW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- views (view.cu); ndim <= 4, ne the view's shape, st strides in elements ---- */
/* dst (contiguous, shape ne) = src read at strides st */
void ut_cuda_strided_gather_f32(float *dst, const float *src, int ndim, const int64_t *ne,
                                const int64_t *st);
void ut_cuda_strided_gather_i32(int32_t *dst, const int32_t *src, int ndim, const int64_t *ne,
                                const int64_t *st);
/* dst at strides st += src (contiguous, shape ne); the strides must map
 * distinct positions to distinct elements */
void ut_cuda_strided_add(float *dst, const float *src, int ndim, const int64_t *ne,
                         const int64_t *st);
/* dst (n) += src (n) */
void ut_cuda_acc(float *dst, const float *src, int64_t n);

/* ---- broadcasting binary ops (binary.cu). n4: the output's shape padded to
 * 4 dims; s4: b's strides in that frame (0 where b broadcasts). Every
 * tensor is taken as stored, its dtype code after it (ut_dtype: 0 float32,
 * 1 bf16, 2 fp16): values widened as read, computed in float, rounded once
 * as written; a 16-bit gradient is read, added to and rounded back. ---- */
enum { UT_CUDA_BIN_ADD = 0, UT_CUDA_BIN_MUL = 1 };
/* out = a + b or a * b, b broadcast */
void ut_cuda_binary_fwd(int op, void *out, int odt, const void *a, int adt, const void *b, int bdt,
                        const int64_t *n4, const int64_t *s4);
/* da += g * b, b broadcast */
void ut_cuda_mul_bwd_a(void *da, int dadt, const void *g, int gdt, const void *b, int bdt, const int64_t *n4,
                       const int64_t *s4);
/* dst (n) += src (n), each as stored */
void ut_cuda_acc_dt(void *dst, int ddt, const void *src, int sdt, int64_t n);
/* dst (n) = 0 + src (n) in dst's dtype, dst not read: the bits ut_cuda_acc_dt
 * gives into zeros (a gradient written whole, backend.h's UT_KCAP_FRESH_GRAD) */
void ut_cuda_put_dt(void *dst, int ddt, const void *src, int sdt, int64_t n);
/* Device scratch bytes that ut_cuda_bcast_reduce needs for these sizes (0: none). */
size_t ut_cuda_bcast_reduce_scratch(const int64_t *n4, const int64_t *s4);
/* db (b's elements, contiguous) += the sum over the broadcast positions of
 * g * other (other NULL: g alone); g and other have the output's shape; the
 * sums in float32, added to db and rounded once.
 * scratch: ut_cuda_bcast_reduce_scratch bytes (may be NULL when that is 0). */
void ut_cuda_bcast_reduce(void *db, int dbt, const void *g, int gdt, const void *other, int odt,
                          const int64_t *n4, const int64_t *s4, void *scratch);

/* ---- elementwise unary ops (unary.cu), flat over n; the backwards add into
 * dx, or with acc false write it (0 + the term: dx is not read; a gradient
 * written whole, backend.h's UT_KCAP_FRESH_GRAD) ---- */
void ut_cuda_scale_fwd(float *out, const float *x, float s, int64_t n);     /* out = s x */
void ut_cuda_scale_bwd(float *dx, const float *dy, float s, int64_t n, bool acc); /* dx += s dy */
void ut_cuda_relu_fwd(float *out, const float *x, int64_t n);
void ut_cuda_relu_bwd(float *dx, const float *dy, const float *x, int64_t n, bool acc);
/* the gelus take each buffer in its storage dtype (dt*: 0 float32, 1 bf16, 2
 * fp16, as ut_dtype): widened to float, results rounded to nearest even */
void ut_cuda_gelu_fwd(void *out, int dto, const void *x, int dtx, int64_t n); /* tanh form */
void ut_cuda_gelu_bwd(void *dx, int dtd, const void *dy, int dtg, const void *x, int dtx, int64_t n, bool acc);
void ut_cuda_gelu_erf_fwd(void *out, int dto, const void *x, int dtx, int64_t n); /* exact (erf) */
void ut_cuda_gelu_erf_bwd(void *dx, int dtd, const void *dy, int dtg, const void *x, int dtx, int64_t n,
                          bool acc);
void ut_cuda_tanh_fwd(float *out, const float *x, int64_t n);
void ut_cuda_tanh_bwd(float *dx, const float *dy, const float *y, int64_t n, bool acc);    /* y = tanh x */
void ut_cuda_sigmoid_fwd(float *out, const float *x, int64_t n);
void ut_cuda_sigmoid_bwd(float *dx, const float *dy, const float *y, int64_t n, bool acc); /* y = sigmoid x */
/* out = keep ? x * scale : 0 and dx += keep ? dy * scale : 0; keep (n bytes,
 * 1 = kept); each buffer in its storage dtype, as the gelus' */
void ut_cuda_dropout_fwd(void *out, int dto, const void *x, int dtx, const uint8_t *keep, float scale, int64_t n);
/* keep (n) = dropout's mask drawn on the device, the draws ut_dropout_keep_mask
 * makes on the host for the generator (key, stream, offset) and a tensor
 * of `cols` columns at column c0 of rows `all` wide (all 0: the whole
 * rows), drop probability p (src/core/philox.h) */
void ut_cuda_dropout_mask(uint8_t *keep, int64_t n, uint64_t key, uint64_t stream, uint64_t offset, int64_t all,
                          int64_t cols, int64_t c0, float p);
/* keep (n) = packed attention's dropout mask for NH of NHall heads from head
 * h0, sequence s's blocks from poff[s] (S + 1 offsets, device memory) */
void ut_cuda_varlen_dropout_mask(uint8_t *keep, int64_t n, const int64_t *poff, int64_t S, int64_t NH, int64_t NHall,
                                 int64_t h0, uint64_t key, uint64_t stream, uint64_t offset, float p);
void ut_cuda_dropout_bwd(void *dx, int dtd, const void *dy, int dtg, const uint8_t *keep, float scale, int64_t n,
                         bool acc);
/* out = x + mag * (2u - 1), u element e's draw offset + e of (key, stream) as a
 * uniform in [0, 1) (ut_philox_uniforms' values) */
void ut_cuda_uniform_noise_fwd(float *out, const float *x, int64_t n, uint64_t key, uint64_t stream,
                               uint64_t offset, float mag);

/* ---- reductions to a scalar (reduce.cu), double accumulation ---- */
/* Device scratch bytes that ut_cuda_sum and ut_cuda_mse_fwd need for n elements. */
size_t ut_cuda_sum_scratch(int64_t n);
/* out[0] = sum of x (n), or with mean that sum / n (0 when n == 0) */
void ut_cuda_sum(float *out, const float *x, int64_t n, bool mean, void *scratch);
/* dx (n) += g[0], or with mean g[0] / n (g a device scalar) */
void ut_cuda_spread(float *dx, const float *g, int64_t n, bool mean);
/* out[0] = mean of (a - b)^2 over n (0 when n == 0) */
void ut_cuda_mse_fwd(float *out, const float *a, const float *b, int64_t n, void *scratch);
/* with d = (2 g[0] / n) (a - b): da += d, db -= d; da or db may be NULL */
void ut_cuda_mse_bwd(float *da, float *db, const float *a, const float *b, const float *g,
                     int64_t n);

#ifdef __cplusplus
}
#endif

#endif

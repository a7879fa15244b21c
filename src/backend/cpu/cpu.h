/* Declarations shared by the CPU backend's files.
 * defines: ut_ops_cpu, ut_<op>_fwd_cpu / ut_<op>_bwd_cpu (one pair per line of
 *          src/core/ops.def), ut_cpu_* memory, flat-math and optimizer functions. */
#ifndef UTRAIN_CPU_H
#define UTRAIN_CPU_H

#include "../backend.h"
#include "internal.h"

extern const ut_op_vtable ut_ops_cpu[UT_OP_COUNT];

#define UT_OP(E, stem, props)                        \
    void ut_##stem##_fwd_cpu(ut_tensor *t, const ut_kctx *k);   \
    void ut_##stem##_bwd_cpu(ut_tensor *t, const ut_kctx *k);
#define UT_OP_ANY(E, stem, props)
#include "ops.def"
#undef UT_OP_ANY
#undef UT_OP

/* Strided loops (view.c): dst (contiguous, shape ne) = src read with strides
 * st; dst read with strides st += src (contiguous, shape ne). */
void ut_strided_gather(float *dst, const float *src, int ndim, const int64_t *ne, const int64_t *st);
void ut_strided_add(float *dst, const float *src, int ndim, const int64_t *ne, const int64_t *st);

void *ut_cpu_alloc(size_t bytes);
void ut_cpu_free(void *p);
void *ut_cpu_pages_alloc(size_t bytes);
void ut_cpu_pages_release(void *base, size_t off, size_t len);
void ut_cpu_pages_free(void *p, size_t bytes);
size_t ut_cpu_pages_resident(const void *base, size_t bytes);
void ut_cpu_memset(void *p, int v, size_t bytes);
void ut_cpu_copy(void *dst, const void *src, size_t bytes, ut_copy_kind kind);
double ut_cpu_sum_sq(const float *x, int64_t n);
void ut_cpu_sum_sq_to(double *dst, const float *x, int64_t n);
void ut_cpu_scale(float *x, int64_t n, float s);
void ut_cpu_accumulate(float *dst, float *const *src, int nsrc, int64_t n, bool zero_src);
void ut_cpu_adamw_update(float *restrict p, float *restrict g, float *restrict m,
                         float *restrict v, int64_t n, float decay_mul, float gmul, const ut_optim_consts *k,
                         bool zero);
/* Storage conversions (convert.c): arrays, single values (the references the
 * vector paths are tested against), any pair of F32/BF16/F16, and rounding
 * float32 to the values a 16-bit type holds (dst may equal src). */
void ut_f32_to_bf16_cpu(uint16_t *restrict dst, const float *restrict src, int64_t n);
void ut_bf16_to_f32_cpu(float *restrict dst, const uint16_t *restrict src, int64_t n);
void ut_f32_to_f16_cpu(uint16_t *dst, const float *src, int64_t n);
void ut_f16_to_f32_cpu(float *dst, const uint16_t *src, int64_t n);
uint16_t ut_f32_to_bf16_scalar(float f);
float ut_bf16_to_f32_scalar(uint16_t h);
uint16_t ut_f32_to_f16_scalar(float f);
float ut_f16_to_f32_scalar(uint16_t h);
void ut_cpu_convert(void *dst, ut_dtype to, const void *src, ut_dtype from, int64_t n);
void ut_cpu_round(float *dst, const float *src, int64_t n, ut_dtype dt);
/* ut_cpu_convert on the calling thread only (no parallel region): for a row
 * inside a kernel's own parallel loop. */
void ut_cpu_convert_run(void *dst, ut_dtype to, const void *src, ut_dtype from, int64_t n);
/* dst (rows, cols; row stride dst_ld elements of to) = src (row stride src_ld
 * elements of from) converted: a block of rows or columns of a matrix. */
void ut_cpu_convert_rows(void *dst, ut_dtype to, int64_t dst_ld, const void *src, ut_dtype from,
                         int64_t src_ld, int64_t rows, int64_t cols);
/* gelu, tanh form (unary.c): out = gelu(inp); dinp (+)= dout * gelu'(inp)
 * (acc false: 0 + that is written). Also linear's fused GELU (matmul.c). */
void ut_gelu_forward_cpu(float *out, const float *inp, int64_t N);
void ut_gelu_backward_cpu(float *dinp, const float *dout, const float *inp, int64_t N, bool acc);
/* cross-entropy over logits in a buffer of the op's own, gradient written
 * over them (softmax.c; ut_linear_cross_entropy's kernels in matmul.c):
 * the targets counted (a bad one fails the op, -1), the mean loss with mx,
 * inv saved when grad (16-bit dt: row max and 1 / sum; float32: the exps
 * replace the logits and only inv is kept), then the gradient times gscale
 * written over the buffer. */
int64_t ut_ce_buf_count_cpu(const ut_tensor *targets, int64_t V, int ignore, const ut_kctx *k);
float ut_ce_buf_fwd_cpu(void *buf, ut_dtype dt, float *mx, float *inv, const int32_t *targets, int ignore,
                        float eps, int64_t N, int64_t V, int64_t count, bool grad, const ut_kctx *k);
void ut_ce_buf_bwd_cpu(void *buf, ut_dtype dt, const float *mx, const float *inv, const int32_t *targets,
                       int ignore, float eps, float gscale, int64_t N, int64_t V, const ut_kctx *k);
/* Blocks of a linear's 16-bit output (matmul.c): rows per block (a multiple
 * of 48; default 192) for outputs whose float32 is above min_bytes (default
 * 16 MiB). Tests set small values to exercise the blocked path. */
void ut_cpu_lowp_block_set(int64_t rows, int64_t min_bytes);
void ut_cpu_lion_update(float *restrict p, float *restrict g, float *restrict m, int64_t n, float decay_mul,
                        float gmul, const ut_optim_consts *k, bool zero);
void ut_cpu_sgd_update(float *restrict p, float *restrict g, float *restrict buf, int64_t n,
                       float wd, float gmul, const ut_optim_consts *k, bool zero);
void ut_cpu_optim_step(const ut_optim_buffers *b, const ut_optim_consts *k, bool zero);
void ut_cpu_adafactor_step(const ut_optim_buffers *b, const ut_optim_consts *k, bool zero);
void ut_cpu_step_scalars(float *dst, const double *sq, double max_norm, float scale);

#endif

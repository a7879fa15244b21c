/* Launchers of the CUDA backend's conversions and flat-buffer math (flat.cu).
 * All pointers are device memory; work is queued on the compute stream. */
#ifndef UTRAIN_CUDA_FLAT_H
#define UTRAIN_CUDA_FLAT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* dtype codes as ut_dtype: 0 F32, 1 BF16, 2 F16 */
void utk_convert(void *dst, int to, const void *src, int from, int64_t n);
void utk_round(float *dst, const float *src, int64_t n, int dt);
/* sum of x[i]^2 in double, in blocks fixed by n alone and added in order:
 * the same bits every run (synchronises: the result is read back) */
double utk_sum_sq(const float *x, int64_t n);
void utk_sum_sq_to(double *out, const float *x, int64_t n);
void utk_scale(float *x, int64_t n, float s);
/* dst[i] += src[i]; zero_src: also src[i] = 0 */
void utk_add_into(float *dst, float *src, int64_t n, bool zero_src);
/* The optimizer steps; sc: the step's device scalars (multiplier, skip
 * flag; NULL: none); p16: 16-bit copies of the parameters written in the
 * same pass (NULL: none), p16_dt 1 BF16 or 2 F16 */
void utk_adamw(float *p, float *g, float *m, float *v, int64_t n, float decay_mul, float one_m_b1,
               float beta2, float one_m_b2, float step_size, float inv_bc2_sqrt, float eps, bool zero,
               const float *sc, void *p16, int p16_dt);
void utk_lion(float *p, float *g, float *m, int64_t n, float decay_mul, float beta1, float one_m_b1, float beta2,
              float one_m_b2, float lr, bool zero, const float *sc, void *p16, int p16_dt);
/* Adafactor's step over every parameter of an optimizer (adafactor.cu):
 * each one's buffers (p, g; st its second moment; m its first, NULL:
 * none; p16 its 16-bit copy, NULL: none) and shape (rows x cols matrices;
 * 0, 0: a vector, in blocks of block elements), and whether it decays
 * (by wd). Six launches in all; the first step of a parameter list makes
 * and uploads its table (kept for the next steps). */
typedef struct {
    float *p;
    const float *g;
    float *st, *m;
    void *p16;
    int64_t numel, rows, cols;
    bool decay;
} utk_af_param;
void utk_adafactor(const utk_af_param *params, int n, int64_t block, const float *sc, float lr, float eps1,
                   float eps2, float clip, float rho, float one_m_rho, float beta1, float one_m_b1, float wd,
                   bool scale_parameter, int p16_dt);
void utk_sgd(float *p, float *g, float *buf, int64_t n, float wd, float lr, float momentum,
             float one_m_damp, bool use_momentum, bool first, bool nesterov, bool zero, const float *sc,
             void *p16, int p16_dt);
/* dst[0..1] = the step's scalars from *sq (backend.h, step_scalars) */
void utk_step_scalars(float *dst, const double *sq, double max_norm, float scale);
/* out (rows, cols; rows ld apart) = bias (cols) repeated on every row */
void utk_rows_fill(float *out, int64_t ld, const float *bias, int64_t rows, int64_t cols);
/* dst (rows, cols; rows ldd apart, stored in ddt) = src (rows lds apart,
 * stored in sdt), rounded to nearest even (dtypes 0 F32, 1 BF16, 2 F16; a
 * copy where they match) */
void utk_rows_convert(void *dst, int ddt, int64_t ldd, const void *src, int sdt, int64_t lds, int64_t rows,
                      int64_t cols);
/* dst (rows_out, ldd; contiguous rows) = src (rows, cols; rows lds apart)
 * converted as utk_rows_convert, and zero in the columns from cols and the
 * rows from rows: the zero-padded copies of matmul.c */
void utk_rows_pad(void *dst, int ddt, int64_t ldd, const void *src, int sdt, int64_t lds, int64_t rows,
                  int64_t cols, int64_t rows_out);
/* db (cols) += column sums of g (rows, cols, stored in g_dt: 0 F32, 1 BF16,
 * 2 F16), each summed in fixed row blocks added in order */
void utk_col_sum_add(float *db, const void *g, int g_dt, int64_t rows, int64_t cols);
/* The column sums' partial-sum buffer's bound in bytes (0: the default,
 * 64 MiB); a test's way to make parts of many rows at small sizes. */
void utk_col_parts_cap(size_t bytes);
/* dx (rows, cols) = 0 + dy gelu'(x) (the tanh form's, as the gelu kernel's
 * backward), all three 16-bit in dt (1 BF16, 2 F16), and db (cols) += its
 * column sums (as utk_col_sum_add over dx) in the same pass: linear's fused
 * GELU. false (nothing queued) unless dt is 16-bit, cols a multiple of 8
 * and the three 16-byte aligned. */
bool utk_gelu_bwd_col_sum(void *dx, const void *dy, const void *x, int dt, float *db, int64_t rows, int64_t cols);
/* out (rows, cols, contiguous) stored in dt = tmp (rows ldt apart) + bias
 * (bias NULL: none), rounded to nearest even: a product's output */
void utk_bias_round(void *out, int dt, const float *tmp, int64_t ldt, const float *bias, int64_t rows,
                    int64_t cols);
/* dst (n, stored in dt) = dst + add, rounded: adding into a 16-bit gradient */
void utk_add_round(void *dst, int dt, const float *add, int64_t n);

#ifdef __cplusplus
}
#endif
#endif

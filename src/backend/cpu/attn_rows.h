/* Row loops shared by the attention kernels (attention_masked.c,
 * attention_varlen.c): attention dropout on a row of probabilities and the
 * softmax's backward on a row.
 * defines: ut_attn_drop_row, ut_attn_softmax_grad_row (static inline) */
#ifndef UTRAIN_ATTN_ROWS_H
#define UTRAIN_ATTN_ROWS_H

#include <stdint.h>

/* d (n) = p * keep * ks (d may be p) */
static inline void ut_attn_drop_row(float *d, const float *p, const uint8_t *keep, float ks, int64_t n) {
#pragma omp simd
    for (int64_t j = 0; j < n; j++) d[j] = keep[j] ? p[j] * ks : 0.0f;
}

/* r (n) = the scores' gradient from r = the probabilities' gradient and the
 * probabilities p of one row: p * (r - sum(p * r)) */
static inline void ut_attn_softmax_grad_row(float *r, const float *p, int64_t n) {
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int64_t j = 0; j < n; j++) s += p[j] * r[j];
#pragma omp simd
    for (int64_t j = 0; j < n; j++) r[j] = p[j] * (r[j] - s);
}

#endif

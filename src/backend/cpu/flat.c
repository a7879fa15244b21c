/* CPU flat-buffer math: the gradient's sum of squares (for the global norm),
 * in-place scaling and summing buffers, used by clipping and the distributed
 * strategies. */
#include "cpu.h"

/* The sum is taken in blocks whose size depends only on n (at most
 * NORM_BLOCKS of them, none under NORM_MIN_BLOCK elements) and the block sums
 * are added in order, so every thread count gives the same bits. */
#define NORM_BLOCKS 1024
#define NORM_MIN_BLOCK 16384
#define PAR_MIN_ELEMS 32768

static double block_sum_sq(const float *g, int64_t n) {
    double s = 0.0;
#pragma omp simd reduction(+ : s)
    for (int64_t i = 0; i < n; i++) s += (double)g[i] * (double)g[i];
    return s;
}

double ut_cpu_sum_sq(const float *g, int64_t n) {
    if (n <= 0) return 0.0;
    int64_t bs = (n + NORM_BLOCKS - 1) / NORM_BLOCKS;
    if (bs < NORM_MIN_BLOCK) bs = NORM_MIN_BLOCK;
    int64_t nb = (n + bs - 1) / bs;
    double part[NORM_BLOCKS];
#pragma omp parallel for schedule(static) if (nb > 1)
    for (int64_t b = 0; b < nb; b++) {
        int64_t s = b * bs, len = n - s < bs ? n - s : bs;
        part[b] = block_sum_sq(g + s, len);
    }
    double total = 0.0;
    for (int64_t b = 0; b < nb; b++) total += part[b];
    return total;
}

void ut_cpu_sum_sq_to(double *dst, const float *x, int64_t n) { *dst = ut_cpu_sum_sq(x, n); }

void ut_cpu_scale(float *g, int64_t n, float s) {
#pragma omp parallel for simd schedule(static) if (n >= PAR_MIN_ELEMS)
    for (int64_t i = 0; i < n; i++) g[i] *= s;
}

/* Each element's sum is taken in source order, so threads change nothing. */
void ut_cpu_accumulate(float *dst, float *const *src, int nsrc, int64_t n, bool zero_src) {
#pragma omp parallel for schedule(static) if (n >= PAR_MIN_ELEMS)
    for (int64_t i = 0; i < n; i++) {
        float s = dst[i];
        for (int k = 0; k < nsrc; k++) {
            s += src[k][i];
            if (zero_src) src[k][i] = 0.0f;
        }
        dst[i] = s;
    }
}

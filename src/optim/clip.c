/* Gradient norm and clipping (torch.nn.utils.clip_grad_norm_, 2-norm). */
#include "utrain/optim.h"

#include <math.h>

/* The norm is summed in blocks whose size depends only on n (at most
 * NORM_BLOCKS of them, none under NORM_MIN_BLOCK elements) and the block sums
 * are added in order, so every thread count gives the same bits. */
#define NORM_BLOCKS 1024
#define NORM_MIN_BLOCK 16384
#define PAR_MIN_ELEMS 32768

static double sum_sq(const float *g, int64_t n) {
    double s = 0.0;
#pragma omp simd reduction(+ : s)
    for (int64_t i = 0; i < n; i++) s += (double)g[i] * (double)g[i];
    return s;
}

double ut_grad_norm_sq(const float *g, int64_t n) {
    if (n <= 0) return 0.0;
    int64_t bs = (n + NORM_BLOCKS - 1) / NORM_BLOCKS;
    if (bs < NORM_MIN_BLOCK) bs = NORM_MIN_BLOCK;
    int64_t nb = (n + bs - 1) / bs;
    double part[NORM_BLOCKS];
#pragma omp parallel for schedule(static) if (nb > 1)
    for (int64_t b = 0; b < nb; b++) {
        int64_t s = b * bs, len = n - s < bs ? n - s : bs;
        part[b] = sum_sq(g + s, len);
    }
    double total = 0.0;
    for (int64_t b = 0; b < nb; b++) total += part[b];
    return total;
}

void ut_grad_scale(float *g, int64_t n, float s) {
#pragma omp parallel for simd schedule(static) if (n >= PAR_MIN_ELEMS)
    for (int64_t i = 0; i < n; i++) g[i] *= s;
}

float ut_clip_grad_norm(float *g, int64_t n, float max_norm) {
    double norm = sqrt(ut_grad_norm_sq(g, n));
    double coef = (double)max_norm / (norm + 1e-6);
    /* Not `coef < 1`: a NaN norm must make the gradient NaN, as torch's
     * clamp(coef, max=1) does, instead of passing silently. */
    if (!(coef >= 1.0)) ut_grad_scale(g, n, (float)coef);
    return (float)norm;
}

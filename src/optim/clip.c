/* Gradient norm and clipping (torch.nn.utils.clip_grad_norm_, 2-norm). */
#include "utrain/optim.h"

#include "../backend/backend.h"

#include <math.h>

/* The flat buffers' backend's flat math (its sum is blocked so that every
 * thread count gives the same bits). */
double ut_grad_norm_sq(const float *g, int64_t n) { return ut_flat_backend()->sum_sq(g, n); }

void ut_grad_scale(float *g, int64_t n, float s) { ut_flat_backend()->scale(g, n, s); }

float ut_clip_grad_norm(float *g, int64_t n, float max_norm) {
    double norm = sqrt(ut_grad_norm_sq(g, n));
    double coef = (double)max_norm / (norm + 1e-6);
    /* Not `coef < 1`: a NaN norm must make the gradient NaN, as torch's
     * clamp(coef, max=1) does, instead of passing silently. */
    if (!(coef >= 1.0)) ut_grad_scale(g, n, (float)coef);
    return (float)norm;
}

/* Gradient norm and clipping (torch.nn.utils.clip_grad_norm_, 2-norm). */
#include "utrain/optim.h"

#include "../backend/backend.h"

#include <math.h>

/* The device's flat math (its sum is blocked so that every thread count
 * gives the same bits). */
double ut_grad_norm_sq(ut_device dev, const float *g, int64_t n) { return ut_backend_get(dev)->sum_sq(g, n); }

void ut_grad_scale(ut_device dev, float *g, int64_t n, float s) { ut_backend_get(dev)->scale(g, n, s); }

float ut_clip_grad_norm(ut_device dev, float *g, int64_t n, float max_norm) {
    double norm = sqrt(ut_grad_norm_sq(dev, g, n));
    double coef = (double)max_norm / (norm + 1e-6);
    /* Not `coef < 1`: a NaN norm must make the gradient NaN, as torch's
     * clamp(coef, max=1) does, instead of passing silently. */
    if (!(coef >= 1.0)) ut_grad_scale(dev, g, n, (float)coef);
    return (float)norm;
}

void ut_grad_step_scalars(ut_device dev, float *dst, const double *sq, double max_norm, float scale) {
    ut_step_scalars(ut_backend_get(dev), dst, sq, max_norm, scale);
}

bool ut_grad_step_rule(double scaled_norm, double max_norm, float scale, float *coef, double *norm) {
    return ut_step_scalars_rule(scaled_norm, max_norm, scale, coef, norm);
}

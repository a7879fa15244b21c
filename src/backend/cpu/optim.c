/* CPU optimizer updates over one run of a flat buffer: AdamW and SGD with the
 * operation order of torch's single-tensor implementations (src/optim splits
 * the shard into runs and threads and computes the step's scalars). */
#include <math.h>

#include "cpu.h"

/* zero: also store g[i] = 0 once it is read, saving the separate pass over
 * the gradients that zeroing them afterwards would cost. The branch is
 * loop-invariant: GCC unswitches it and vectorizes both copies. The bias
 * correction sqrt(1-beta2^t) is applied as a multiplication by its reciprocal
 * (torch divides; the difference is within the last bit of denom). */
void ut_cpu_adamw_update(float *restrict p, float *restrict g, float *restrict m,
                         float *restrict v, int64_t n, float decay_mul, const ut_optim_consts *k,
                         bool zero) {
    const float one_m_b1 = k->one_m_b1, beta2 = k->beta2, one_m_b2 = k->one_m_b2;
    const float step_size = k->step_size, inv_bc2_sqrt = k->inv_bc2_sqrt, eps = k->eps;
#pragma omp simd
    for (int64_t i = 0; i < n; i++) {
        float gi = g[i];
        float mi = m[i] + one_m_b1 * (gi - m[i]);
        float vi = v[i] * beta2 + one_m_b2 * gi * gi;
        m[i] = mi;
        v[i] = vi;
        if (zero) g[i] = 0.0f;
        float denom = sqrtf(vi) * inv_bc2_sqrt + eps;
        p[i] = p[i] * decay_mul - step_size * mi / denom;
    }
}

void ut_cpu_sgd_update(float *restrict p, float *restrict g, float *restrict buf, int64_t n,
                       float wd, const ut_optim_consts *k, bool zero) {
    const float lr = k->lr, mom = k->momentum, one_m_damp = k->one_m_damp;
    if (!k->use_momentum) {
#pragma omp simd
        for (int64_t i = 0; i < n; i++) {
            p[i] = p[i] - lr * (g[i] + wd * p[i]);
            if (zero) g[i] = 0.0f;
        }
        return;
    }
    /* Loop-invariant branches: GCC unswitches them and vectorizes each copy. */
#pragma omp simd
    for (int64_t i = 0; i < n; i++) {
        float d = g[i] + wd * p[i];
        if (zero) g[i] = 0.0f;
        float b = k->first ? d : buf[i] * mom + one_m_damp * d;
        buf[i] = b;
        d = k->nesterov ? d + mom * b : b;
        p[i] = p[i] - lr * d;
    }
}

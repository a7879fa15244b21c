/* The CPU optimizer step: AdamW, Lion and SGD with the operation order of torch's
 * single-tensor implementations, over the runs src/optim hands over (it
 * computes the step's scalars), split over OpenMP threads here. */
#include <math.h>
#include <omp.h>
#include <stdint.h>

#include "cpu.h"

/* zero: also store g[i] = 0 once it is read, saving the separate pass over
 * the gradients that zeroing them afterwards would cost. The branch is
 * loop-invariant: GCC unswitches it and vectorizes both copies. The bias
 * correction sqrt(1-beta2^t) is applied as a multiplication by its reciprocal
 * (torch divides; the difference is within the last bit of denom). */
void ut_cpu_adamw_update(float *restrict p, float *restrict g, float *restrict m,
                         float *restrict v, int64_t n, float decay_mul, float gmul, const ut_optim_consts *k,
                         bool zero) {
    const float one_m_b1 = k->one_m_b1, beta2 = k->beta2, one_m_b2 = k->one_m_b2;
    const float step_size = k->step_size, inv_bc2_sqrt = k->inv_bc2_sqrt, eps = k->eps;
#pragma omp simd
    for (int64_t i = 0; i < n; i++) {
        float gi = g[i] * gmul; /* exact when gmul is 1 */
        float mi = m[i] + one_m_b1 * (gi - m[i]);
        float vi = v[i] * beta2 + one_m_b2 * gi * gi;
        m[i] = mi;
        v[i] = vi;
        if (zero) g[i] = 0.0f;
        float denom = sqrtf(vi) * inv_bc2_sqrt + eps;
        p[i] = p[i] * decay_mul - step_size * mi / denom;
    }
}

/* Lion, in lion-pytorch's order: the interpolation beta1*m + (1-beta1)*g
 * decides the step's sign, then m moves towards g by beta2. sign(0) is 0 and
 * a NaN stays NaN, as torch's sgn. */
void ut_cpu_lion_update(float *restrict p, float *restrict g, float *restrict m, int64_t n, float decay_mul,
                        float gmul, const ut_optim_consts *k, bool zero) {
    const float beta1 = k->beta1, one_m_b1 = k->one_m_b1, beta2 = k->beta2, one_m_b2 = k->one_m_b2, lr = k->lr;
#pragma omp simd
    for (int64_t i = 0; i < n; i++) {
        float gi = g[i] * gmul;
        float c = m[i] * beta1 + one_m_b1 * gi;
        /* sign(c): 0 stays 0, NaN stays NaN (written as selects: they vectorize) */
        float s = (c > 0.0f ? 1.0f : 0.0f) - (c < 0.0f ? 1.0f : 0.0f);
        s = c == c ? s : c;
        p[i] = p[i] * decay_mul - lr * s;
        m[i] = m[i] * beta2 + one_m_b2 * gi;
        if (zero) g[i] = 0.0f;
    }
}

void ut_cpu_sgd_update(float *restrict p, float *restrict g, float *restrict buf, int64_t n,
                       float wd, float gmul, const ut_optim_consts *k, bool zero) {
    const float lr = k->lr, mom = k->momentum, one_m_damp = k->one_m_damp;
    if (!k->use_momentum) {
#pragma omp simd
        for (int64_t i = 0; i < n; i++) {
            p[i] = p[i] - lr * (g[i] * gmul + wd * p[i]);
            if (zero) g[i] = 0.0f;
        }
        return;
    }
    /* Loop-invariant branches: GCC unswitches them and vectorizes each copy. */
#pragma omp simd
    for (int64_t i = 0; i < n; i++) {
        float d = g[i] * gmul + wd * p[i];
        if (zero) g[i] = 0.0f;
        float b = k->first ? d : buf[i] * mom + one_m_damp * d;
        buf[i] = b;
        d = k->nesterov ? d + mom * b : b;
        p[i] = p[i] - lr * d;
    }
}

/* Below this many elements a step runs on one thread: waking the team costs
 * more than the update. */
#define PAR_MIN_ELEMS 32768

/* Elements per block when 16-bit copies are written: the block's updated
 * parameters are converted while they are still in the core's cache. */
#define P16_BLOCK 4096

/* One run's stretch [s, e): the update (unless skipped), then the 16-bit copies. */
static void update_stretch(const ut_optim_buffers *o, const ut_optim_consts *k, int64_t s, int64_t e, bool decay,
                           float gmul, bool skip, bool zero) {
    for (int64_t b = s; b < e;) {
        int64_t be = o->p16 && e - b > P16_BLOCK ? b + P16_BLOCK : e;
        float *p = o->params + (b - o->pbase), *g = o->grads + (b - o->gbase);
        int64_t off = b - o->lo;
        if (skip) {
            if (zero) ut_cpu_memset(g, 0, (size_t)(be - b) * sizeof(float));
        } else if (k->lion) {
            ut_cpu_lion_update(p, g, o->state[0] + off, be - b, decay ? k->decay_mul : 1.0f, gmul, k, zero);
        } else if (k->adamw) {
            ut_cpu_adamw_update(p, g, o->state[0] + off, o->state[1] + off, be - b, decay ? k->decay_mul : 1.0f,
                                gmul, k, zero);
        } else {
            ut_cpu_sgd_update(p, g, o->nstate ? o->state[0] + off : NULL, be - b, decay ? k->wd : 0.0f, gmul, k,
                              zero);
        }
        if (o->p16)
            ut_cpu_convert_run((uint16_t *)o->p16 + (b - o->pbase), o->p16_dtype, p, UT_F32, be - b);
        b = be;
    }
}

/* Updates [a, b), which lies inside [lo, hi), run by run; with zero, also
 * zeroes grads[a, b), padding between runs included. */
static void update_range(const ut_optim_buffers *o, const ut_optim_consts *k, int64_t a, int64_t b, float gmul,
                         bool skip, bool zero) {
    int64_t done = a; /* grads[a, done) are zero (when zero is set) */
    for (int r = 0; r < o->nruns; r++) {
        int64_t s = o->runs[r].begin > a ? o->runs[r].begin : a;
        int64_t e = o->runs[r].end < b ? o->runs[r].end : b;
        if (s >= e) continue;
        if (zero && done < s) ut_cpu_memset(o->grads + (done - o->gbase), 0, (size_t)(s - done) * sizeof(float));
        update_stretch(o, k, s, e, o->runs[r].decay, gmul, skip, zero);
        done = e;
    }
    if (zero && done < b) ut_cpu_memset(o->grads + (done - o->gbase), 0, (size_t)(b - done) * sizeof(float));
}

/* Start of thread t's part of n elements among nt threads, on a 16-float
 * (cache line) boundary so threads never write the same line. */
static int64_t part_start(int64_t n, int t, int nt) {
    if (t >= nt) return n;
    int64_t s = n * t / nt / 16 * 16;
    return s < n ? s : n;
}

/* Elementwise, so the result does not depend on the split. */
void ut_cpu_optim_step(const ut_optim_buffers *o, const ut_optim_consts *k, bool zero) {
    if (k->adafactor) { /* per parameter, not per element (adafactor.c) */
        ut_cpu_adafactor_step(o, k, zero);
        return;
    }
    int64_t n = o->hi - o->lo;
    float gmul = o->scalars ? o->scalars[0] : 1.0f;
    bool skip = o->scalars && o->scalars[1] != 0.0f;
#pragma omp parallel if (n >= PAR_MIN_ELEMS)
    {
        int t = omp_get_thread_num(), nt = omp_get_num_threads();
        update_range(o, k, o->lo + part_start(n, t, nt), o->lo + part_start(n, t + 1, nt), gmul, skip, zero);
    }
}

void ut_cpu_step_scalars(float *dst, const double *sq, double max_norm, float scale) {
    double norm;
    dst[1] = ut_step_scalars_rule(sqrt(*sq), max_norm, scale, &dst[0], &norm) ? 1.0f : 0.0f;
}

/* Regression loss: mse = mean((a - b)^2) over all elements, a and b the same
 * shape, -> scalar (1). The sum runs over fixed blocks in parallel, one double
 * per block, then adds the blocks serially: the result does not depend on the
 * thread count. */
#include "cpu.h"

#define MSE_BLOCK 8192

/* blocksum (ceil(N / MSE_BLOCK)) = sum of (a - b)^2 over each block of a, b (N) */
void ut_mse_forward_cpu(double *blocksum, const float *a, const float *b, int64_t N) {
    int64_t nblk = (N + MSE_BLOCK - 1) / MSE_BLOCK;
#pragma omp parallel for schedule(static)
    for (int64_t k = 0; k < nblk; k++) {
        int64_t lo = k * MSE_BLOCK, hi = lo + MSE_BLOCK < N ? lo + MSE_BLOCK : N;
        double s = 0.0;
#pragma omp simd reduction(+ : s)
        for (int64_t i = lo; i < hi; i++) {
            double d = (double)a[i] - (double)b[i];
            s += d * d;
        }
        blocksum[k] = s;
    }
}

/* da (N) += 2 (a - b) g / N and db (N) -= the same, g = dloss; da or db may be NULL */
void ut_mse_backward_cpu(float *da, float *db, const float *a, const float *b, float dloss,
                         int64_t N) {
    float k = 2.0f * dloss / (float)N;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < N; i++) {
        float d = k * (a[i] - b[i]);
        if (da) da[i] += d;
        if (db) db[i] -= d;
    }
}

void ut_mse_fwd_cpu(ut_tensor *t, UT_KCTX) {
    int64_t N = ut_nelem(t->src[0]), nblk = (N + MSE_BLOCK - 1) / MSE_BLOCK;
    double *blocksum = ut_kalloc(k, (size_t)(nblk ? nblk : 1) * sizeof(double));
    ut_mse_forward_cpu(blocksum, ut_f32(t->src[0]), ut_f32(t->src[1]), N);
    double s = 0.0;
    for (int64_t k = 0; k < nblk; k++) s += blocksum[k];
    ut_f32(t)[0] = N ? (float)(s / (double)N) : 0.0f;
}

void ut_mse_bwd_cpu(ut_tensor *t, UT_KCTX) {
    ut_tensor *a = t->src[0], *b = t->src[1];
    int64_t N = ut_nelem(a);
    if (!N || (!a->requires_grad && !b->requires_grad)) return;
    ut_mse_backward_cpu(a->requires_grad ? a->grad : NULL, b->requires_grad ? b->grad : NULL,
                        ut_f32(a), ut_f32(b), t->grad[0], N);
}

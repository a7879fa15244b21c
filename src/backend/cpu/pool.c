/* 2-D max pooling as torch.nn.functional.max_pool2d (no padding, dilation 1,
 * floor mode). Saves the argmax of each output within its input plane
 * (int32, ut_max_pool2d_argmax). Parameters: ut_max_pool2d_kernel, ut_max_pool2d_stride. */
#include <math.h>

#include "cpu.h"
#include "../../ops/params.h"

/* One output row of a 2x2 stride-2 pool: x0 and the row below it hold the
 * windows, base is x0's index in its plane. The general path's rule applied
 * to the four elements in its order (the first element starts the max: the
 * general path takes it whatever its value), as selects so that the ow loop
 * vectorises; v != v is isnan. */
static void max_pool_2x2_row(float *restrict out, int32_t *restrict arg, const float *x0,
                             int64_t W, int64_t OW, int32_t base) {
    const float *x1 = x0 + W;
    int32_t w = (int32_t)W;
#pragma omp simd
    for (int64_t ow = 0; ow < OW; ow++) {
        float v1 = x0[2 * ow + 1], v2 = x1[2 * ow], v3 = x1[2 * ow + 1];
        float m = x0[2 * ow];
        int32_t at = 0;
        bool t = v1 > m || v1 != v1;
        m = t ? v1 : m;
        at = t ? 1 : at;
        t = v2 > m || v2 != v2;
        m = t ? v2 : m;
        at = t ? w : at;
        t = v3 > m || v3 != v3;
        m = t ? v3 : m;
        at = t ? w + 1 : at;
        out[ow] = m;
        arg[ow] = base + 2 * (int32_t)ow + at;
    }
}

/* out, arg (BC, OH, OW) = max and its index (ih * W + iw) over each k x k window of
 * x (BC, H, W). Ties go to the first max in row-major window order and a NaN wins,
 * as in torch. */
void ut_max_pool2d_forward_cpu(float *out, int32_t *arg, const float *x, int64_t BC, int64_t H,
                               int64_t W, int64_t k, int64_t s) {
    int64_t OH = (H - k) / s + 1, OW = (W - k) / s + 1;
    if (k == 2 && s == 2) {
#pragma omp parallel for collapse(2) schedule(static)
        for (int64_t p = 0; p < BC; p++)
            for (int64_t oh = 0; oh < OH; oh++)
                max_pool_2x2_row(out + (p * OH + oh) * OW, arg + (p * OH + oh) * OW,
                                 x + (p * H + 2 * oh) * W, W, OW, (int32_t)(2 * oh * W));
        return;
    }
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t p = 0; p < BC; p++)
        for (int64_t oh = 0; oh < OH; oh++) {
            const float *xp = x + p * H * W;
            for (int64_t ow = 0; ow < OW; ow++) {
                int64_t best = oh * s * W + ow * s;
                float m = -INFINITY;
                for (int64_t kh = 0; kh < k; kh++)
                    for (int64_t kw = 0; kw < k; kw++) {
                        int64_t i = (oh * s + kh) * W + ow * s + kw;
                        if (xp[i] > m || isnan(xp[i])) {
                            m = xp[i];
                            best = i;
                        }
                    }
                out[(p * OH + oh) * OW + ow] = m;
                arg[(p * OH + oh) * OW + ow] = (int32_t)best;
            }
        }
}

/* dx (BC, H, W) += dout (BC, OH, OW) routed to the saved argmax. One thread per
 * plane: overlapping windows (s < k) may share an input element. */
void ut_max_pool2d_backward_cpu(float *dx, const float *dout, const int32_t *arg, int64_t BC,
                                int64_t H, int64_t W, int64_t OHW) {
#pragma omp parallel for schedule(static)
    for (int64_t p = 0; p < BC; p++)
        for (int64_t o = 0; o < OHW; o++) dx[p * H * W + arg[p * OHW + o]] += dout[p * OHW + o];
}

void ut_max_pool2d_fwd_cpu(ut_tensor *t, UT_KCTX) {
    ut_tensor *x = t->src[0];
    ut_max_pool2d_set_argmax(t, ut_kalloc(k, (size_t)ut_nelem(t) * sizeof(int32_t)));
    ut_max_pool2d_forward_cpu(ut_f32(t), ut_max_pool2d_argmax(t), ut_f32(x), x->ne[0] * x->ne[1],
                              x->ne[2], x->ne[3], ut_max_pool2d_kernel(t), ut_max_pool2d_stride(t));
}

void ut_max_pool2d_bwd_cpu(ut_tensor *t, UT_KCTX) {
    ut_tensor *x = t->src[0];
    if (x->requires_grad)
        ut_max_pool2d_backward_cpu(x->grad, t->grad, ut_max_pool2d_argmax(t), x->ne[0] * x->ne[1],
                                   x->ne[2], x->ne[3], t->ne[2] * t->ne[3]);
}

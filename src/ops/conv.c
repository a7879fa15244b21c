/* 2-D convolution as torch.nn.functional.conv2d (groups 1, dilation 1). On
 * the CPU: Winograd F(2x2, 3x3) for 3x3 stride-1 layers of 8 channels or
 * more, else im2col per image and one sgemm per image, parallel over the
 * batch with a column buffer per thread (OpenBLAS single-threaded inside).
 * Parameters: ut_conv2d_stride, ut_conv2d_padding (src/ops/params.h).
 * Kernels: src/backend/cpu/conv.c. */

#include "internal.h"
#include "params.h"

bool ut_conv2d_out_hw(const ut_tensor *t, int64_t hw[2]) {
    if (!t || t->op != UT_OP_CONV2D) return false;
    const ut_tensor *x = t->src[0], *w = t->src[1];
    int64_t S = ut_conv2d_stride(t), P = ut_conv2d_padding(t);
    hw[0] = (x->ne[2] + 2 * P - w->ne[2]) / S + 1;
    hw[1] = (x->ne[3] + 2 * P - w->ne[3]) / S + 1;
    return true;
}

const char *ut_conv2d_path(const ut_tensor *t) {
    int64_t hw[2];
    if (!ut_conv2d_out_hw(t, hw)) return NULL;
    const ut_backend *be = ut_backend_get(t->device);
    const ut_tensor *x = t->src[0], *w = t->src[1];
    if (!be || !be->conv2d_path) return "the device's convolution";
    return be->conv2d_path(x->ne[1], w->ne[0], w->ne[2], w->ne[3], ut_conv2d_stride(t), ut_conv2d_padding(t), hw[0],
                           hw[1]);
}

static ut_tensor *conv2d_new(ut_ctx *ctx, ut_tensor *x, ut_tensor *w, ut_tensor *b, int stride, int padding,
                             bool relu, bool pool) {
    ut_tensor *src[3] = {x, w, b};
    int ns = b ? 3 : 2;
    if (!ut_op_check(ctx, "conv2d", ns, src, 0)) return NULL;
    if (x->ndim != 4 || w->ndim != 4 || (b && (b->ndim != 1 || b->ne[0] != w->ne[0]))) {
        ut_op_error(ctx, "conv2d", ns, src,
                    "expected x (B, C, H, W), weight (OC, C, KH, KW), bias (OC)");
        return NULL;
    }
    if (w->ne[1] != x->ne[1] || x->ne[1] < 1) {
        ut_op_error(ctx, "conv2d", ns, src,
                    ut_fmt("x has %lld channels, weight expects %lld", (long long)x->ne[1],
                           (long long)w->ne[1]));
        return NULL;
    }
    if (stride < 1 || padding < 0) {
        ut_op_error(ctx, "conv2d", ns, src,
                    ut_fmt("stride %d must be >= 1 and padding %d >= 0", stride, padding));
        return NULL;
    }
    int64_t Hp = x->ne[2] + 2 * (int64_t)padding, Wp = x->ne[3] + 2 * (int64_t)padding;
    if (Hp < w->ne[2] || Wp < w->ne[3] || w->ne[2] < 1 || w->ne[3] < 1) {
        ut_op_error(ctx, "conv2d", ns, src,
                    ut_fmt("kernel larger than the padded input (padding %d)", padding));
        return NULL;
    }
    src[0] = ut_contiguous(ctx, x);
    src[1] = ut_contiguous(ctx, w);
    if (b) src[2] = ut_contiguous(ctx, b);
    int64_t ne[4] = {x->ne[0], w->ne[0], (Hp - w->ne[2]) / stride + 1,
                     (Wp - w->ne[3]) / stride + 1};
    if (pool) ne[2] /= 2, ne[3] /= 2; /* 2x2 windows, stride 2, floor mode */
    ut_tensor *t = ut_op_new(ctx, UT_OP_CONV2D, UT_F32, 4, ne, ns, src);
    if (!t) return NULL;
    ut_conv2d_set_stride(t, stride);
    ut_conv2d_set_padding(t, padding);
    ut_conv2d_set_fused_relu(t, relu);
    ut_conv2d_set_fused_pool(t, pool ? 2 : 0);
    return ut_op_run(t);
}

ut_tensor *ut_conv2d(ut_ctx *ctx, ut_tensor *x, ut_tensor *w, ut_tensor *b, int stride, int padding) {
    return conv2d_new(ctx, x, w, b, stride, padding, false, false);
}

/* Fused where the device's kernels take it, in float32 only: under autocast
 * the output is stored in 16 bits, and the backward mask reads the output
 * (the two ops give the same values: ReLU is exact). */
static bool fuses(ut_ctx *ctx, const ut_tensor *x) {
    const ut_backend *be = x ? ut_backend_get(x->device) : NULL;
    return be && be->conv2d_relu && ctx->autocast == UT_F32;
}

ut_tensor *ut_conv2d_relu(ut_ctx *ctx, ut_tensor *x, ut_tensor *w, ut_tensor *b, int stride, int padding) {
    if (fuses(ctx, x)) return conv2d_new(ctx, x, w, b, stride, padding, true, false);
    return ut_relu(ctx, conv2d_new(ctx, x, w, b, stride, padding, false, false));
}

/* Fused where ut_conv2d_relu is and the convolution's output has a whole
 * 2x2 window (max_pool2d refuses smaller inputs: the two ops say so). */
ut_tensor *ut_conv2d_relu_maxpool2(ut_ctx *ctx, ut_tensor *x, ut_tensor *w, ut_tensor *b, int stride, int padding) {
    bool big = x && w && x->ndim == 4 && w->ndim == 4 && stride >= 1 && padding >= 0 &&
               (x->ne[2] + 2 * (int64_t)padding - w->ne[2]) / stride + 1 >= 2 &&
               (x->ne[3] + 2 * (int64_t)padding - w->ne[3]) / stride + 1 >= 2 &&
               x->ne[2] + 2 * (int64_t)padding >= w->ne[2] && x->ne[3] + 2 * (int64_t)padding >= w->ne[3];
    if (big && fuses(ctx, x)) return conv2d_new(ctx, x, w, b, stride, padding, true, true);
    return ut_max_pool2d(ctx, ut_conv2d_relu(ctx, x, w, b, stride, padding), 2, 2);
}

/* CUDA glue of CONV2D, 2-D convolution as torch.nn.functional.conv2d (groups 1,
 * dilation 1; semantics: src/backend/cpu/conv.c).
 * Each pass (forward, dx, dw) goes to cuDNN where it takes it (cudnn.c:
 * deterministic, exact algorithms; UT_CUDA_CONV=im2col keeps it out), and
 * otherwise to utrain's own kernels: im2col over a chunk of
 * images, then one ut_cuda_sgemm batched over the chunk's images. Chunks keep
 * the column buffer and the weight gradient's per-image partials under
 * CONV_CHUNK_BYTES. A 1x1 convolution with stride 1 and no padding uses the
 * input itself as its columns.
 * Deterministic gradients: dx gathers its column entries (col2im, no
 * atomics); dw sums per-image products in image order (ut_cuda_sum_parts_add,
 * chunk after chunk); db folds each channel in a fixed order. */

#include "cuda.h"
#include "conv.h"
#include "cudnn_conv.h"
#include "../../ops/params.h"

#define CONV_CHUNK_BYTES ((size_t)256 << 20)

static ut_cuda_conv_shape shape_of(const ut_tensor *t) {
    const ut_tensor *x = t->src[0], *w = t->src[1];
    return (ut_cuda_conv_shape){.B = x->ne[0], .C = x->ne[1], .H = x->ne[2], .W = x->ne[3],
                                .OC = w->ne[0], .KH = w->ne[2], .KW = w->ne[3],
                                .S = ut_conv2d_stride(t), .P = ut_conv2d_padding(t), .OH = t->ne[2], .OW = t->ne[3]};
}

/* true when im2col(x) is x itself: (C, H*W) per image */
static bool direct(const ut_cuda_conv_shape *d) { return d->KH == 1 && d->KW == 1 && d->S == 1 && d->P == 0; }

/* images per chunk for per_image floats of scratch per image: 1 to B */
static int64_t chunk_images(int64_t B, int64_t per_image) {
    if (per_image <= 0) return B;
    int64_t n = (int64_t)(CONV_CHUNK_BYTES / sizeof(float)) / per_image;
    return n < 1 ? 1 : n > B ? B : n;
}

/* out (B, OC, OH*OW) = w (OC, K) @ im2col(x[b]) (+ bias), K = C*KH*KW */
void ut_conv2d_fwd_cuda(ut_tensor *t, UT_KCTX) {
    ut_cuda_conv_shape d = shape_of(t);
    ut_tensor *bt = t->src[2];
    const float *x = t->src[0]->data, *w = t->src[1]->data, *bias = bt ? bt->data : NULL;
    float *out = t->data;
    int64_t K = d.C * d.KH * d.KW, OHW = d.OH * d.OW, xs = d.C * d.H * d.W, os = d.OC * OHW;
    if (bias) ut_cuda_conv_bias_fill(out, bias, d.B, d.OC, OHW);
    if (ut_cuda_cudnn_conv(UT_CUDNN_FWD, &d, x, w, out, bias ? 1.0f : 0.0f, k)) return;
    bool dir = direct(&d);
    int64_t nimg = dir ? d.B : chunk_images(d.B, K * OHW);
    float *col = dir ? NULL : ut_kalloc(k, (size_t)(nimg * K * OHW) * sizeof(float));
    for (int64_t n0 = 0; n0 < d.B; n0 += nimg) {
        int64_t n = d.B - n0 < nimg ? d.B - n0 : nimg;
        const float *cols = x + n0 * xs;
        if (!dir) {
            ut_cuda_im2col(col, cols, n, &d);
            cols = col;
        }
        ut_cuda_sgemm(false, false, d.OC, OHW, K, 1.0f, w, K, 0, cols, OHW, K * OHW, bias ? 1.0f : 0.0f,
                      out + n0 * os, OHW, os, n);
    }
}

/* dx += col2im(w^T @ dout[b]); dw += sum_b dout[b] @ im2col(x[b])^T;
 * db += the sum over images and pixels of dout (each when asked for) */
void ut_conv2d_bwd_cuda(ut_tensor *t, UT_KCTX) {
    ut_tensor *xt = t->src[0], *wt = t->src[1], *bt = t->src[2];
    ut_cuda_conv_shape d = shape_of(t);
    float *dx = xt->requires_grad ? xt->grad : NULL, *dw = wt->requires_grad ? wt->grad : NULL;
    float *db = bt && bt->requires_grad ? bt->grad : NULL;
    const float *x = xt->data, *w = wt->data, *g = t->grad;
    int64_t K = d.C * d.KH * d.KW, OHW = d.OH * d.OW, xs = d.C * d.H * d.W, os = d.OC * OHW;
    if (db) ut_cuda_conv_bias_grad(db, g, d.B, d.OC, OHW);
    if (dw && ut_cuda_cudnn_conv(UT_CUDNN_BWD_FILTER, &d, x, g, dw, 1.0f, k)) dw = NULL;
    if (dx && ut_cuda_cudnn_conv(UT_CUDNN_BWD_DATA, &d, w, g, dx, 1.0f, k)) dx = NULL;
    if (!dx && !dw) return;
    bool dir = direct(&d);
    int64_t nimg = chunk_images(d.B, (dir ? 0 : K * OHW) + (dw ? d.OC * K : 0));
    float *col = dir ? NULL : ut_kalloc(k, (size_t)(nimg * K * OHW) * sizeof(float));
    float *part = dw ? ut_kalloc(k, (size_t)(nimg * d.OC * K) * sizeof(float)) : NULL;
    for (int64_t n0 = 0; n0 < d.B; n0 += nimg) {
        int64_t n = d.B - n0 < nimg ? d.B - n0 : nimg;
        const float *gn = g + n0 * os;
        if (dw) {
            /* part[i] (OC x K) = dout[i] (OC x OHW) @ col[i]^T, then dw += their sum in image order */
            const float *cols = x + n0 * xs;
            if (!dir) {
                ut_cuda_im2col(col, cols, n, &d);
                cols = col;
            }
            ut_cuda_sgemm(false, true, d.OC, K, OHW, 1.0f, gn, OHW, os, cols, OHW, K * OHW, 0.0f, part, K, d.OC * K,
                          n);
            ut_cuda_sum_parts_add(dw, part, n, d.OC * K);
        }
        if (dx) {
            /* dcol[i] (K x OHW) = w^T (K x OC) @ dout[i]; the direct case adds it into dx at once. The
             * column buffer is reused: the stream orders this after the weight gradient's reads. */
            if (dir) {
                ut_cuda_sgemm(true, false, K, OHW, d.OC, 1.0f, w, K, 0, gn, OHW, os, 1.0f, dx + n0 * xs, OHW, xs, n);
            } else {
                ut_cuda_sgemm(true, false, K, OHW, d.OC, 1.0f, w, K, 0, gn, OHW, os, 0.0f, col, OHW, K * OHW, n);
                ut_cuda_col2im_add(dx + n0 * xs, col, n, &d);
            }
        }
    }
}

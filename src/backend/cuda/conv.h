/* Launchers of the CUDA kernels of CONV2D (conv.cu, glue conv.c) and
 * MAX_POOL2D (pool.cu, glue pool.c), on plain NCHW / OIHW float32.
 * The convolution's products are ut_cuda_sgemm calls made by the glue over
 * im2col columns; the kernels here move data in and out of the columns and
 * reduce the bias and weight gradients in a fixed order (no atomics).
 * defines: ut_cuda_conv_shape, ut_cuda_im2col, ut_cuda_col2im_add,
 *          ut_cuda_conv_bias_fill, ut_cuda_conv_bias_grad, ut_cuda_sum_parts_add,
 *          ut_cuda_max_pool2d_fwd, ut_cuda_max_pool2d_bwd. */
#ifndef UTRAIN_CUDA_CONV_H
#define UTRAIN_CUDA_CONV_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int64_t B, C, H, W;  /* input */
    int64_t OC, KH, KW;  /* weight (OC, C, KH, KW) */
    int64_t S, P;        /* stride, padding */
    int64_t OH, OW;      /* output */
} ut_cuda_conv_shape;

/* col (n, C*KH*KW, OH*OW) = the columns of n images x (n, C, H, W): row
 * (c, kh, kw), column (oh, ow) holds x[c, oh S - P + kh, ow S - P + kw], 0
 * where that is padding. */
void ut_cuda_im2col(float *col, const float *x, int64_t n, const ut_cuda_conv_shape *d);

/* dx (n, C, H, W) += col2im(dcol (n, C*KH*KW, OH*OW)), the adjoint of
 * im2col: each dx element gathers its terms in (kh, kw) order. */
void ut_cuda_col2im_add(float *dx, const float *dcol, int64_t n, const ut_cuda_conv_shape *d);

/* out (n, OC, HW) = b[oc] in every pixel */
void ut_cuda_conv_bias_fill(float *out, const float *b, int64_t n, int64_t OC, int64_t HW);

/* db (OC) += the sum over images and pixels of dout (B, OC, HW), in a fixed
 * order */
void ut_cuda_conv_bias_grad(float *db, const float *dout, int64_t B, int64_t OC, int64_t HW);

/* dst (m) += part[0] + part[1] + ... + part[n - 1] (n rows of m floats),
 * summed in that order */
void ut_cuda_sum_parts_add(float *dst, const float *part, int64_t n, int64_t m);

/* out, arg (BC, OH, OW) = max and its index ih * W + iw within its plane over
 * each k x k window (stride s, no padding, floor mode) of x (BC, H, W). Ties
 * go to the first max in row-major window order and a NaN wins, as in torch. */
void ut_cuda_max_pool2d_fwd(float *out, int32_t *arg, const float *x, int64_t BC, int64_t H, int64_t W, int64_t k,
                            int64_t s);

/* dx (BC, H, W) += dout (BC, OH, OW) routed to the saved argmax: each dx
 * element gathers the outputs whose window holds it, in output order. */
void ut_cuda_max_pool2d_bwd(float *dx, const float *dout, const int32_t *arg, int64_t BC, int64_t H, int64_t W,
                            int64_t k, int64_t s);

#ifdef __cplusplus
}
#endif

#endif
